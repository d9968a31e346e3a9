#!/usr/bin/env python
"""Build every model of the zoo (ext/models/zoo.py) with ext and compare it with PyTorch and onnxruntime.

Why: a broad set of real architectures shows which ops and patterns ext does not yet
handle (import, build or accuracy failures) and where its speed stands against
onnxruntime, model by model.

Each model runs in its own subprocess with a time limit (``--timeout``), so a stuck or
crashing build is one row with its error, not the end of the run. In the subprocess: import
through torch.export (``ext.frontend.from_torch``; ``--frontend onnx``: the ONNX file
onnxruntime runs, through ``ext.frontend.from_onnx``), ``ext.build`` for the host CPU, check the
output against PyTorch (max abs error relative to PyTorch's largest magnitude; tolerance
1e-4), then time ext, PyTorch eager and onnxruntime interleaved (``ext.bench.interleaved``,
all on ``TVM_NUM_THREADS`` threads). Prints a table and the geometric mean of ext/ORT
(median over rounds of the per-round ratio).

    python scripts/zoo.py --quick --rounds 0              # small configs, correctness only
    python scripts/zoo.py --models resnet50 bert_base --rounds 9 --json zoo.json --plot zoo.png
    python scripts/zoo.py --models segformer_b0 --rounds 3 --profile 15   # where each spends its time
    python scripts/zoo.py --models mobilenet_v2 bert_base --frontend onnx  # ext from the ONNX file
    python scripts/zoo.py --models resnet50 efficientnet_b0 --size 320 --batch 2   # other input sizes
    python scripts/zoo.py --extra --rounds 5      # 74 more full-size architectures (ext/models/zoo_extra.py, user_nets.py)

``--profile N`` adds, per model, ext's per-kernel profile (``ext.profile``: the N slowest
kernels and the time per candidate) and onnxruntime's per-op-type times from its own profiler.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

#: max abs error relative to the largest magnitude of PyTorch's output
TOLERANCE = 1e-4


# ----------------------------------------------------------------------------- one model (subprocess)


def run_one(name: str, quick: bool, rounds: int, profile: int = 0, frontend: str = "torch", batch: int = 1,
            size: int | None = None) -> dict:
    """Import, build, check and time one model; errors become the row's ``error`` with its stage.
    ``frontend="onnx"``: ext imports the ONNX file onnxruntime runs (``from_onnx``) instead of
    the PyTorch module (``from_torch``)."""
    # build s is a compile time, not a cache hit; ext's async cache store also raced the VM (crashes)
    os.environ.setdefault("EXT_CACHE", "0")
    import ext  # first: sets TVM_NUM_THREADS
    import torch
    import tvm
    from tvm import relax

    from ext.bench import interleaved, onnx_export, onnxruntime_session, output_errors
    from ext.cli import apply_threads
    from ext.frontend import from_onnx, from_torch
    from ext.models.zoo import zoo_model

    threads = apply_threads(torch=True)  # TVM_NUM_THREADS, as the parent set it
    row: dict = {"model": name, "quick": quick, "threads": threads, "frontend": frontend, "batch": batch, "size": size}
    stage = "construct"
    try:
        model, inputs = zoo_model(name, quick=quick, batch=batch, size=size)
        row["input"] = "x".join(str(d) for d in inputs[0].shape)
        row["params"] = sum(p.numel() for p in model.parameters())
        with torch.no_grad():
            ref = model(*inputs).numpy()
        stage = "import"
        t0 = time.perf_counter()
        if frontend == "onnx":
            import onnx

            mod = from_onnx(onnx.load_from_string(onnx_export(model, inputs)))
        else:
            mod = from_torch(model, inputs)
        row["import_s"] = time.perf_counter() - t0
        stage = "build"
        t0 = time.perf_counter()
        ex = ext.build(mod, ext.target.cpu())
        row["build_s"] = time.perf_counter() - t0
        stage = "run"
        vm = relax.VirtualMachine(ex, tvm.cpu())
        args = [tvm.runtime.tensor(x.numpy(), tvm.cpu()) for x in inputs]
        got = vm["main"](*args).numpy()
        if got.shape != ref.shape:
            raise ValueError(f"ext output shape {got.shape} != PyTorch's {ref.shape}")
        row.update(output_errors(got, ref))
        row["ok"] = row["max_rel"] <= TOLERANCE
        fns = {"ext": lambda: vm["main"](*args)}
        with torch.no_grad():
            fns["PyTorch"] = lambda: model(*inputs)
        stage = "onnxruntime"
        try:
            ort_run, _ = onnxruntime_session(model, inputs, threads)
            row["ort_max_rel"] = output_errors(ort_run(), ref)["max_rel"]
            fns["onnxruntime"] = ort_run
        except Exception as err:  # ext's row stays valid without the ORT column
            row["ort_error"] = _one_line(err)
        if rounds > 0:
            stage = "timing"
            reference = "onnxruntime" if "onnxruntime" in fns else "PyTorch"
            with torch.no_grad():
                res = interleaved(fns, reference, rounds=rounds, min_seconds=0.2)
            for label, r in res.items():
                row[f"{label}_ms"], row[f"{label}_best_ms"] = r["median_s"] * 1e3, r["best_s"] * 1e3
            if reference == "onnxruntime":
                row["ext_vs_ort"] = res["ext"]["ratio"]
        if profile > 0:
            stage = "profile"
            row["profile"] = _profiles(vm, args, model, inputs, threads, "onnxruntime" in fns)
    except Exception as err:
        row["error"] = f"{stage}: {_one_line(err)}"
    return row


def _profiles(vm, args, model, inputs, threads: int, with_ort: bool) -> dict:
    """ext's per-kernel rows and per-candidate totals; onnxruntime's per-op-type rows."""
    from collections import defaultdict

    from ext.bench import onnxruntime_op_profile
    from ext.profile import profile

    rows = profile(vm, args, runs=10)
    per_cand = defaultdict(float)
    for r in rows:
        per_cand[r["candidate"]] += r["ms"]
    out = {"ext_kernels": rows, "ext_candidates": dict(sorted(per_cand.items(), key=lambda kv: -kv[1]))}
    if with_ort:
        out["ort_ops"] = onnxruntime_op_profile(model, inputs, threads)
    return out


def print_profile(row: dict, limit: int) -> None:
    from ext.profile import format_rows

    prof = row.get("profile")
    if not prof:
        return
    ext_total = sum(r["ms"] for r in prof["ext_kernels"])
    calls = sum(r["calls"] for r in prof["ext_kernels"])
    print(f"\n### {row['model']}: ext {ext_total:.2f} ms in {calls:.0f} calls (instrumented)")
    print(", ".join(f"{c} {ms:.2f}" for c, ms in prof["ext_candidates"].items()))
    print(format_rows(prof["ext_kernels"], limit))
    if prof.get("ort_ops"):
        ort_total = sum(r["ms"] for r in prof["ort_ops"])
        print(f"onnxruntime {ort_total:.2f} ms: " + ", ".join(
            f"{r['op']} x{r['nodes']} {r['ms']:.2f}" for r in prof["ort_ops"][:limit]))


def _one_line(err: BaseException, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[-1] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- driver


def run_isolated(name: str, args) -> dict:
    """``run_one`` in a subprocess in its own process group, killed after ``args.timeout`` seconds."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--worker-out", out.name,
               "--rounds", str(args.rounds), "--profile", str(args.profile), "--frontend", args.frontend,
               "--batch", str(args.batch)] + (["--size", str(args.size)] if args.size else []) + \
            (["--quick"] if args.quick else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"model": name, "error": f"timeout: no result after {args.timeout:.0f} s"}
        text = out.read()
    if text:
        return json.loads(text)
    tail = [ln for ln in output.splitlines() if ln.strip()][-1:] or ["(no output)"]
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
    return {"model": name, "error": f"crashed ({how}): {tail[0][:300]}"}


def _fmt(row: dict, key: str, spec: str) -> str:
    return format(row[key], spec) if key in row else "-"


def _params(n) -> str:
    return "-" if n is None else f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def print_table(rows: list[dict]) -> None:
    print("\n| model | params | build s | ext ms | PyTorch ms | ORT ms | ext/ORT | err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = _fmt(r, "max_rel", ".1e") + ("" if r.get("ok", True) else " (> tol)")
        name = r["model"] + (f" {r['input']}" if "input" in r and (r.get("size") or r.get("batch", 1) != 1) else "")
        print(f"| {name} | {_params(r.get('params'))} | {_fmt(r, 'build_s', '.1f')} | {_fmt(r, 'ext_ms', '.2f')} "
              f"| {_fmt(r, 'PyTorch_ms', '.2f')} | {_fmt(r, 'onnxruntime_ms', '.2f')} | {_fmt(r, 'ext_vs_ort', '.2f')} "
              f"| {err} |")
    problems = [r for r in rows if "error" in r or "ort_error" in r or not r.get("ok", True)]
    if problems:
        print("\nproblems:")
        for r in problems:
            what = r.get("error") or r.get("ort_error") or f"max rel error {r['max_rel']:.1e} > {TOLERANCE:g}"
            print(f"  {r['model']}: {what}")


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows: list[dict]) -> str:
    ratios = [r["ext_vs_ort"] for r in rows if "ext_vs_ort" in r]
    ok = sum(1 for r in rows if r.get("ok"))
    line = f"{ok}/{len(rows)} models built and matched PyTorch within {TOLERANCE:g}"
    if ratios:
        line += f"; geomean ext/ORT over {len(ratios)} models: {geomean(ratios):.2f}x"
    return line


def plot(rows: list[dict], path: str) -> None:
    from ext.cli import log, pyplot

    plt = pyplot()
    timed = [r for r in rows if "ext_vs_ort" in r]
    if not timed:
        log("no model was timed against onnxruntime: no chart")
        return
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(timed) + 1.5))
    ax.barh([r["model"] for r in timed], [r["ext_vs_ort"] for r in timed])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ext time / onnxruntime time (median per-round ratio; < 1: ext faster)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path)
    log(f"wrote {path}")


def main(argv=None) -> int:
    import ext  # sets TVM_NUM_THREADS (--threads overrides it below), which the workers inherit
    from ext import cli
    from ext.cli import log
    from ext.models.zoo import ZOO, names

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=None, metavar="NAME",
                    help=f"zoo models (default: all): {', '.join(names())}")
    ap.add_argument("--extra", action="store_true",
                    help="the extra full-size architectures instead (ext/models/zoo_extra.py): "
                         + ", ".join(names(extra=True)))
    cli.common_args(ap, rounds=7, min_rounds=0, threads=True, plot=True, quick="small configs (the test suite's)",
                    rounds_help="interleaved timing rounds (0: correctness only)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model before it is killed")
    ap.add_argument("--profile", type=cli.count(0), default=0, metavar="N",
                    help="print each model's N slowest ext kernels and onnxruntime's per-op times (0: off)")
    ap.add_argument("--frontend", choices=("torch", "onnx"), default="torch",
                    help="ext imports the PyTorch module (from_torch) or the ONNX file onnxruntime runs (from_onnx)")
    ap.add_argument("--batch", type=cli.count(1), default=1, help="images / sequences per call (default 1)")
    ap.add_argument("--size", type=cli.count(1), default=None, metavar="N",
                    help="another input size than each model's own: image side, sequence length or audio length")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.models is None:
        args.models = names(extra=args.extra)
    unknown = [m for m in args.models if m not in ZOO]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
    if not args.timeout > 0:
        ap.error(f"--timeout must be > 0 seconds, got {args.timeout}")

    if args.worker:
        row = run_one(args.worker, args.quick, args.rounds, args.profile, args.frontend, args.batch, args.size)
        with open(args.worker_out, "w") as f:
            json.dump(row, f)
        return 0

    cli.apply_threads(args)

    log(f"target: {ext.target.describe(ext.target.cpu())}; ext (from {args.frontend}), PyTorch and onnxruntime on "
        f"{os.environ['TVM_NUM_THREADS']} threads; {'quick' if args.quick else 'full-size'} configs"
        + (f", batch {args.batch}" if args.batch != 1 else "") + (f", input size {args.size}" if args.size else ""))
    rows = []
    for name in args.models:
        log(f"{name}: running (limit {args.timeout:.0f} s)")
        row = run_isolated(name, args)
        status = row.get("error") or (f"err {row['max_rel']:.1e}" + ("" if row.get("ok") else " > tolerance"))
        log(f"{name}: {status}")
        rows.append(row)
    print_table(rows)
    print(f"\n{summary(rows)}")
    for row in rows:
        print_profile(row, args.profile)
    if cli.write_json(args.json, {"quick": args.quick, "rounds": args.rounds, "threads": int(os.environ["TVM_NUM_THREADS"]),
                                  "tolerance": TOLERANCE, "rows": rows}):
        log(f"wrote {args.json}")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
