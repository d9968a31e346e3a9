#!/usr/bin/env python
"""ext demo: compile a fused GEMM model (relu(x @ W + b), W constant) with ext.build,
print the selection report, and time it next to NumPy and stock TVM's default pipeline.

    python scripts/demo.py                 # 1024 x 1024 x 1024
    python scripts/demo.py --shape 128x768x3072 --report report.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (first: sets TVM_NUM_THREADS)
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from ext import cli  # noqa: E402
from ext.bench import interleaved  # noqa: E402
from ext.models.gemm import dense, numpy_reference  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=cli.parse_shape, default=(1024, 1024, 1024), metavar="MxNxK",
                    help="GEMM shape (default 1024x1024x1024)")
    cli.common_args(ap, rounds=7, threads=True, json=False)
    ap.add_argument("--report", default=None, help="write the selection report JSON here")
    ap.add_argument("--no-stock", action="store_true", help="skip stock TVM (slow: unscheduled loops)")
    args = ap.parse_args(argv)
    M, N, K = args.shape
    cli.apply_threads(args)
    target = ext.target.cpu()
    print(f"target: {ext.target.describe(target)}")
    mod, params = dense(M, N, K)
    t0 = time.perf_counter()
    ex = ext.build(mod, target, report=args.report)
    print(f"ext.build: {time.perf_counter() - t0:.2f} s\n")
    print(ext.last_report().table(), "\n")

    dev = tvm.cpu()
    x = np.random.default_rng(0).standard_normal((M, K)).astype("float32")
    xt = tvm.runtime.tensor(x, dev)
    vm = relax.VirtualMachine(ex, dev)
    err = float(np.abs(vm["main"](xt).numpy() - numpy_reference(x, params)).max())
    w, b = params["w"], params["b"]
    res = interleaved({"numpy": lambda: np.maximum(x @ w + b, 0), "ext": lambda: vm["main"](xt)}, "numpy",
                      rounds=args.rounds)
    flops = 2.0 * M * N * K
    print(f"max abs error vs NumPy: {err:.2e}")
    for name, r in res.items():
        print(f"{name:>6}: {r['median_s'] * 1e3:8.3f} ms  {flops / r['median_s'] / 1e9:7.1f} GFLOPS  "
              f"{r['ratio']:.2f}x NumPy's time")
    if not args.no_stock:
        sex = relax.build(mod, target)  # stock default pipeline, untuned
        svm = relax.VirtualMachine(sex, dev)
        svm["main"](xt)
        t0 = time.perf_counter()
        svm["main"](xt)
        stock = time.perf_counter() - t0
        print(f" stock: {stock * 1e3:8.1f} ms  (stock TVM default pipeline, untuned, one call): "
              f"ext is {stock / res['ext']['median_s']:.0f}x faster")


if __name__ == "__main__":
    main()
