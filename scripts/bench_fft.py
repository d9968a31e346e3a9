"""Sweep conv2d kernel sizes: every applicable CPU conv2d candidate timed, against ext's pick.

Rows (issue 17): dense 64 -> 64 channels and depthwise 128 channels at 56x56, batch 1,
stride 1, padding k//2, bias + relu fused, kernels 3, 5, 7, 11, 15, 31. Each candidate runs
with its default config (``ext.runner.CompiledCandidate``: the kernel alone, constant-weight
transforms done once beforehand, as the pipeline folds them); times are medians over
``--rounds`` interleaved rounds (``ext.bench``), with the 0.2-0.8 quantile spread. The pick is
``ext``'s Selector without a tuning log; ``ok`` says whether the pick is the fastest measured
candidate (within ``--slack``, 5%). A candidate whose own estimate exceeds ``--max-seconds``
(the direct kernels at 31x31: ~50 GFLOP) is skipped and listed as such; when that is the pick,
the row cannot confirm it.

    flock /tmp/ext-bench.lock .venv/bin/python scripts/bench_fft.py
    .venv/bin/python scripts/bench_fft.py --quick --rounds 1      # small shapes: checks the script runs
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402,F401  (sets TVM_NUM_THREADS; --threads overrides it before any parallel call)
from ext import bench, cli  # noqa: E402

KERNELS = (3, 5, 7, 11, 15, 31)
#: (label, C, O, size, groups) per sweep; --quick shrinks them
SWEEPS = [("dense 64->64 56x56", 64, 64, 56, 1), ("depthwise 128 56x56", 128, 128, 56, 128)]
QUICK_SWEEPS = [("dense 8->8 13x13", 8, 8, 13, 1), ("depthwise 16 13x13", 16, 16, 13, 16)]
QUICK_KERNELS = (3, 7)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.common_args(p, rounds=5, threads=True, quick="small shapes and kernels 3 and 7: checks that the script runs")
    p.add_argument("--kernels", type=cli.count(1), nargs="+", default=None, help=f"kernel sizes (default {KERNELS})")
    p.add_argument("--max-seconds", type=float, default=0.5,
                   help="skip a candidate whose estimated time per call exceeds this (default 0.5 s)")
    p.add_argument("--slack", type=float, default=0.05, help="the pick counts as fastest within this fraction")
    p.add_argument("--number", type=cli.count(1), default=5, help="calls per timing burst")
    return p.parse_args()


def conv_workload(C: int, O: int, size: int, k: int, groups: int):
    """The sweep's conv2d workload (NCHW/OIHW, stride 1, padding k//2, bias + relu)."""
    from ext.workload import Workload

    p = k // 2
    out = (1, O, size + 2 * p - k + 1, size + 2 * p - k + 1)
    shapes = [(1, C, size, size), (O, C // groups, k, k), (1, O, 1, 1)]
    attrs = dict(strides=(1, 1), padding=(p,) * 4, dilation=(1, 1), groups=groups, data_layout="NCHW",
                 kernel_layout="OIHW", out_shape=out, w_const=True)
    return Workload("conv2d", shapes, ["float32"] * 3, "float32", attrs=attrs, epilogue=("bias", "relu"))


def time_row(wl, target, args) -> dict:
    """``{candidate: {"median_ms", "p20_ms", "p80_ms"} | {"skipped": why}}`` and the pick."""
    from ext.runner import CompiledCandidate, random_inputs
    from ext.strategies import REGISTRY, Selector

    decision = Selector(target).choose(wl)
    xs = random_inputs(wl, seed=0)
    row, timers = {}, {}
    for cand in REGISTRY.for_op("conv2d", target):
        if cand.library is not None or cand.needs_python or not cand.applies(wl, target):
            continue
        est = cand.estimated(wl, target)
        if est is not None and est > args.max_seconds:
            row[cand.name] = {"skipped": f"estimated {est:.2f} s > --max-seconds {args.max_seconds}"}
            continue
        try:
            cc = CompiledCandidate(cand, wl, cand.default_config(wl, target), target)
        except Exception as err:  # noqa: BLE001 - report and go on
            row[cand.name] = {"skipped": f"build failed: {type(err).__name__}: {err}"[:200]}
            continue
        tm = cc.timer(xs, number=args.number, repeat=1)
        # the kernel times its own ``--number`` calls (TVM's time_evaluator: no Python per call)
        timers[cand.name] = bench.Contender(timer=lambda n, tm=tm: tm(), number=args.number)
    if timers:
        stats = bench.summarize(bench.rounds(timers, args.rounds, settle=0.1), next(iter(timers)), busy=None)
        for name, st in stats.items():
            row[name] = {"median_ms": st["median_s"] * 1e3, "p20_ms": st["q20_s"] * 1e3, "p80_ms": st["q80_s"] * 1e3}
    return {"pick": decision.name, "why": decision.reason, "candidates": row}


def verdict(row: dict, slack: float) -> str:
    timed = {n: r["median_ms"] for n, r in row["candidates"].items() if "median_ms" in r}
    if row["pick"] not in timed:
        return "pick not timed"
    best = min(timed.values())
    return "ok" if timed[row["pick"]] <= best * (1 + slack) else "NOT fastest"


def main():
    args = parse_args()
    threads = cli.apply_threads(args)
    target = ext.target.cpu()
    sweeps = QUICK_SWEEPS if args.quick else SWEEPS
    kernels = args.kernels or (QUICK_KERNELS if args.quick else KERNELS)
    print(f"threads={threads} rounds={args.rounds} ({ext.target.describe(target)})")
    results = []
    for label, C, O, size, groups in sweeps:
        for k in kernels:
            wl = conv_workload(C, O, size, k, groups)
            row = dict(time_row(wl, target, args), sweep=label, kernel=k)
            row["verdict"] = verdict(row, args.slack)
            results.append(row)
            timed = {n: r for n, r in row["candidates"].items() if "median_ms" in r}
            best = min(timed, key=lambda n: timed[n]["median_ms"]) if timed else None
            print(f"{label} k={k}: pick {row['pick']} ({row['verdict']}; {row['why']})", flush=True)
            for name, r in row["candidates"].items():
                mark = " *" if name == best else ""
                if "median_ms" in r:
                    print(f"    {name:22s} {r['median_ms']:9.3f} ms  [{r['p20_ms']:.3f}, {r['p80_ms']:.3f}]{mark}")
                else:
                    print(f"    {name:22s} skipped: {r['skipped']}")
            others = [r["median_ms"] for n, r in timed.items() if n != "conv2d.fft"]
            if "conv2d.fft" in timed and others:
                speedup = min(others) / timed["conv2d.fft"]["median_ms"]
                print(f"    fft speed-up over the best other candidate: {speedup:.2f}x")
    bad = [f"{r['sweep']} k={r['kernel']}" for r in results if r["verdict"] != "ok"]
    print(f"pick fastest (within {args.slack:.0%}) in {len(results) - len(bad)}/{len(results)} rows"
          + (f"; not in: {', '.join(bad)}" if bad else ""))
    cli.write_json(args.json, {"threads": threads, "results": results})


if __name__ == "__main__":
    main()
