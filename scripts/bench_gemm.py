#!/usr/bin/env python
"""GEMM benchmark: every CPU matmul candidate, ext's pick, NumPy and stock TVM, in one run.

For each shape MxNxK the model is ``relu(x @ W + b)`` with W a constant (GEMV
shapes, M == 1, use ``x @ W + b``). Prints GFLOPS and time ratios to NumPy
(``np.maximum(a @ b + bias, 0)``), measured interleaved in the same process.

    python scripts/bench_gemm.py                      # default shapes
    python scripts/bench_gemm.py --shapes 512x512x512 --plot gemm.png --json out.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (sets TVM_NUM_THREADS before tvm runs anything parallel)
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from ext import cli  # noqa: E402
from ext.bench import gflops, interleaved  # noqa: E402
from ext.models.gemm import dense  # noqa: E402
from ext.runner import CompiledCandidate  # noqa: E402
from ext.strategies import REGISTRY  # noqa: E402

DEFAULT_SHAPES = [(1024, 1024, 1024), (1, 4096, 4096), (128, 768, 3072), (64, 64, 64), (777, 333, 1000)]
#: stock TVM's default CPU pipeline runs at ~0.6 GFLOPS here; skip it past this estimate
STOCK_LIMIT_S = 10.0
STOCK_GFLOPS_ESTIMATE = 0.6


def bench_shape(M, N, K, target, rounds, stock, libraries=True):
    gemv = M == 1
    act, bias = (None, True) if gemv else ("relu", True)
    mod, params = dense(M, N, K, activation=act, bias=bias)
    x = np.random.default_rng(1).standard_normal((M, K)).astype("float32")
    w, b = params["w"], params["b"]
    expect = x @ w + b if gemv else np.maximum(x @ w + b, 0)
    dev = ext.target.target_kind(target).device(0)

    t0 = time.perf_counter()
    ex = ext.build(mod, target, libraries=libraries)
    build_s = time.perf_counter() - t0
    report = ext.last_report()
    chosen = report.decisions[0].name
    vm = relax.VirtualMachine(ex, dev)
    xt = tvm.runtime.tensor(x, dev)
    got = vm["main"](xt).numpy()
    err = float(np.abs(got - expect).max())

    contenders = {
        "numpy": (lambda: x @ w + b) if gemv else (lambda: np.maximum(x @ w + b, 0)),
        "ext": lambda: vm["main"](xt),
    }
    wl = report.decisions[0].workload
    for cand in REGISTRY.for_op("matmul", target):
        if getattr(cand, "library", None) and not libraries:
            continue
        if cand.applies(wl, target):
            try:
                cc = CompiledCandidate(cand, wl, cand.default_config(wl, target), target)
            except Exception as exc:  # e.g. a candidate kind the runner cannot run alone
                print(f"  {cand.name}: not measured alone ({type(exc).__name__}: {exc})")
                continue
            args = cc.prepare([x, w, b])
            out = tvm.runtime.empty((M, N), "float32", dev)
            fn = cc.kernel["kernel"]
            contenders[cand.name] = (lambda fn=fn, args=args, out=out: fn(*args, out))
    flops = 2.0 * M * N * K
    stock_note = ""
    if stock and flops / (STOCK_GFLOPS_ESTIMATE * 1e9) <= STOCK_LIMIT_S:
        sex = relax.build(mod, target)
        svm = relax.VirtualMachine(sex, dev)
        contenders["stock_tvm"] = lambda: svm["main"](xt)
    elif stock:
        stock_note = "skipped (estimated > 10 s)"
    res = interleaved(contenders, "numpy", rounds=rounds)
    return {"shape": f"{M}x{N}x{K}", "chosen": chosen, "source": report.decisions[0].source,
            "max_abs_err": err, "build_s": build_s, "stock_note": stock_note,
            "results": {k: dict(v, gflops=gflops(flops, v["median_s"])) for k, v in res.items()}}


def print_table(rows):
    names = []
    for r in rows:
        for k in r["results"]:
            if k not in names:
                names.append(k)
    print("\n| shape | ext pick | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for r in rows:
        cells = []
        for n in names:
            v = r["results"].get(n)
            cells.append("-" if v is None else f"{v['median_s'] * 1e3:.3f} ms, {v['gflops']:.0f} GF, {v['ratio']:.2f}x")
        print(f"| {r['shape']} | {r['chosen']} | " + " | ".join(cells) + " |")
    print("\n(ms per call, GFLOPS, time ratio to NumPy measured in the same rounds; lower ratio is faster)")


def plot(rows, path):
    plt = cli.pyplot()
    names = sorted({k for r in rows for k in r["results"]})
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar([j + i * width for j in range(len(rows))],
               [r["results"].get(n, {}).get("gflops", 0) for r in rows], width, label=n)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], [r["shape"] for r in rows])
    ax.set_ylabel("GFLOPS")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", type=cli.parse_shape, default=DEFAULT_SHAPES, metavar="MxNxK",
                    help="GEMM shapes (default: %s)" % " ".join(map(cli.format_shape, DEFAULT_SHAPES)))
    cli.common_args(ap, rounds=7, threads=True, plot=True)
    ap.add_argument("--no-stock", action="store_true", help="skip stock TVM")
    ap.add_argument("--no-libraries", action="store_true", help="ext's own kernels only (no vendor libraries)")
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: run scripts/bench_cuda.py's GEMM section on these shapes (needs a GPU)")
    args = ap.parse_args(argv)
    if args.target == "cuda":
        from bench_cuda import main as cuda_main

        extra = ["--json", args.json] if args.json else []
        return cuda_main(["--sections", "gemm", "--gemm-shapes", *map(cli.format_shape, args.shapes)] + extra
                         + (["--no-stock"] if args.no_stock else []))
    threads = cli.apply_threads(args)
    target = ext.target.cpu()
    print(f"target: {ext.target.describe(target)}; numpy threads via OpenBLAS; TVM_NUM_THREADS={threads}")
    rows = []
    for M, N, K in args.shapes:
        row = bench_shape(M, N, K, target, args.rounds, not args.no_stock, libraries=not args.no_libraries)
        print(f"{row['shape']}: ext picked {row['chosen']} ({row['source']}), max abs err {row['max_abs_err']:.2e}, "
              f"build {row['build_s']:.1f} s {row['stock_note']}", flush=True)
        rows.append(row)
    print_table(rows)
    cli.write_json(args.json, rows)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
