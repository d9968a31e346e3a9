#!/usr/bin/env python
"""Compare ext against stock TVM, PyTorch and onnxruntime on real models, in one run.

For each model: build and time stock TVM (default pipeline, untuned), optionally stock
TVM + MetaSchedule (--ms-trials N), ext untuned, ext with a tuning log (--tuning-log),
PyTorch eager and onnxruntime; check every output against PyTorch; every contender uses
the same thread count. Prints a markdown table (median latency over the interleaved rounds and
the fastest round, ratios to PyTorch and onnxruntime, compile time, max abs/rel error) and writes
results.json and a PNG bar chart to --out. Both statistics are shown because this 2-vCPU VM has a
slow state lasting seconds in which ext's memory-heavy kernels run up to 2x slower (see README).

    python scripts/compare_stock.py                          # ResNet-18 + BERT-base encoder layer
    python scripts/compare_stock.py --models resnet50 --profile
    python scripts/compare_stock.py --models encoder --ms-trials 64 --tuning-log tune.jsonl
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (first: sets TVM_NUM_THREADS)
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from ext import cli  # noqa: E402
from ext.bench import burst, interleaved, onnxruntime_session  # noqa: E402
from ext.bench import output_errors as errors  # noqa: E402
from ext.cli import log  # noqa: E402
from ext.frontend import from_torch  # noqa: E402
from ext.models import TORCH_MODELS, torch_model  # noqa: E402

#: one stock-TVM call is timed once when it is this slow or slower (it has no schedule)
SLOW_S = 1.0


def time_once_or_burst(fn) -> float:
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first >= SLOW_S:
        return first
    return burst(fn, min_seconds=0.3)


def build_tvm(name, builder):
    t0 = time.perf_counter()
    ex = builder()
    return ex, time.perf_counter() - t0


def run_model(name, args, threads):
    import torch

    model, inputs = torch_model(name, batch=args.batch)
    x = inputs[0].numpy()
    with torch.no_grad():
        ref = model(*inputs).numpy()
    target = ext.target.cpu()
    dev = tvm.cpu()
    xt = tvm.runtime.tensor(x, dev)
    rows, fns = {}, {}

    log(f"{name}: importing (torch.export)")
    mod = from_torch(model, inputs)

    def add_tvm(label, builder, timed_with_others=True):
        log(f"{name}: building {label}")
        ex, secs = build_tvm(label, builder)
        vm = relax.VirtualMachine(ex, dev)
        out = vm["main"](xt).numpy()
        rows[label] = {"compile_s": secs, **errors(out, ref)}
        fn = lambda: vm["main"](xt)  # noqa: E731
        if timed_with_others:
            fns[label] = fn
        else:
            log(f"{name}: timing {label} (slow: no schedule)")
            rows[label]["latency_s"] = time_once_or_burst(fn)
        return vm

    if not args.no_stock:
        add_tvm("stock TVM", lambda: relax.build(mod, target), timed_with_others=False)
    if args.ms_trials:
        add_tvm(f"stock TVM + MetaSchedule ({args.ms_trials} trials)",
                lambda: metaschedule_build(mod, target, args.ms_trials, args.out), timed_with_others=False)
    ext_vm = add_tvm("ext", lambda: ext.build(mod, target, report=os.path.join(args.out, f"{name}_report.json")))
    report = ext.last_report()
    if args.tuning_log:
        add_tvm("ext (tuned)", lambda: ext.build(mod, target, tuning_log=args.tuning_log))

    log(f"{name}: PyTorch eager and onnxruntime")
    with torch.no_grad():
        fns["PyTorch"] = lambda: model(*inputs)
    rows["PyTorch"] = {"compile_s": 0.0, "max_abs": 0.0, "max_rel": 0.0}
    ort_run, ort_s = onnxruntime_session(model, inputs, threads)
    rows["onnxruntime"] = {"compile_s": ort_s, **errors(ort_run(), ref)}
    fns["onnxruntime"] = ort_run

    log(f"{name}: timing {', '.join(fns)} interleaved ({args.rounds} rounds)")
    with torch.no_grad():
        res = interleaved(fns, "PyTorch", rounds=args.rounds, min_seconds=0.2)
    for label, r in res.items():
        rows[label]["latency_s"], rows[label]["best_s"] = r["median_s"], r["best_s"]
    torch_s = rows["PyTorch"]["latency_s"]
    for label, r in rows.items():
        r["ratio_to_pytorch"] = r["latency_s"] / torch_s
        r["ratio_interleaved"] = res.get(label, {}).get("ratio")
    result = {"model": name, "batch": args.batch, "threads": threads, "rows": rows,
              "report": report.to_json()}
    if args.profile:
        from ext.profile import format_rows, profile

        prof = profile(ext_vm, [xt])
        result["profile"] = prof
        print(f"\n### where ext's time goes: {name}\n\n{format_rows(prof)}\n")
    return result


def metaschedule_build(mod, target, trials, out_dir):
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.s_tir import meta_schedule as ms

    work = os.path.join(out_dir, "ms_work")
    with target:
        lowered = tvm.transform.Sequential(cpu.legalize_passes(target))(mod)
    db = ms.relax_integration.tune_relax(lowered, {}, target, work, max_trials_global=trials,
                                         num_trials_per_iter=min(trials, 32))
    return ms.relax_integration.compile_relax(db, mod, target, params=None)


def print_table(results):
    for res in results:
        print(f"\n### {res['model']} (batch {res['batch']}, {res['threads']} threads)\n")
        ort = res["rows"].get("onnxruntime", {})
        print("| contender | latency (ms) | best round (ms) | vs PyTorch | vs onnxruntime (median / best) "
              "| compile (s) | max abs err | max rel err |")
        print("|---|---|---|---|---|---|---|---|")
        for label, r in res["rows"].items():
            best = r.get("best_s", r["latency_s"])
            vs_ort = (f"{r['latency_s'] / ort['latency_s']:.2f}x / {best / ort.get('best_s', ort['latency_s']):.2f}x"
                      if "latency_s" in ort else "-")
            print(f"| {label} | {r['latency_s'] * 1e3:.2f} | {best * 1e3:.2f} | {r['ratio_to_pytorch']:.2f}x | {vs_ort} "
                  f"| {r['compile_s']:.1f} | {r['max_abs']:.1e} | {r['max_rel']:.1e} |")


def plot(results, path):
    plt = cli.pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        labels = list(res["rows"])
        ax.barh(labels, [res["rows"][k]["latency_s"] * 1e3 for k in labels])
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_title(f"{res['model']} batch {res['batch']}")
    fig.tight_layout()
    fig.savefig(path)
    log(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet18", "encoder"], choices=TORCH_MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tuning-log", help="also build ext with this tuning log")
    ap.add_argument("--ms-trials", type=int, default=0, help="also tune stock TVM with MetaSchedule (N trials)")
    ap.add_argument("--no-stock", action="store_true", help="skip stock TVM (slow: no CPU schedule)")
    cli.common_args(ap, rounds=7, threads=True, json=False)
    ap.add_argument("--profile", action="store_true", help="print where ext's time goes, per kernel")
    ap.add_argument("--out", default="out/compare", help="directory for results.json, chart and reports")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    threads = cli.apply_threads(args, torch=True)
    log(f"target: {ext.target.describe(ext.target.cpu())}; PyTorch, onnxruntime and TVM all use {threads} threads")
    results = [run_model(name, args, threads) for name in args.models]
    print_table(results)
    cli.write_json(os.path.join(args.out, "results.json"), results)
    plot(results, os.path.join(args.out, "compare.png"))


if __name__ == "__main__":
    main()
