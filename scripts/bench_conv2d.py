"""Benchmark ext's conv2d kernels on ResNet layers against PyTorch and stock TVM.

For each layer (NCHW, fp32, conv + bias + relu fused in ext; PyTorch times
``F.conv2d(x, w, bias)`` without the relu): every applicable ext candidate
with its default config, ext's pick (a one-conv Relax module with constant
weights through the untuned ``ext.build``), ``torch.nn.functional.conv2d``
and, with ``--stock``, stock TVM's default pipeline (untuned). Times are
medians over ``--rounds`` alternating rounds (ext pick, then PyTorch, in the
same process); ratios are per round, and ``ratio`` is their median over the
rounds where PyTorch ran within 25% of its best (on a shared machine other
work slows both sides at random); ``best`` is the lowest round ratio.

Run under the shared lock on a shared machine::

    flock /tmp/ext-bench.lock .venv/bin/python scripts/bench_conv2d.py
    .venv/bin/python scripts/bench_conv2d.py --model resnet50 --batch 2 --candidates --plot conv.png
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402,F401  (sets TVM_NUM_THREADS; --threads overrides it before any parallel call)
from ext import bench, cli  # noqa: E402

# (name, C, H, O, K, stride, pad)
RESNET18 = [
    ("r18.conv1 7x7/2", 3, 224, 64, 7, 2, 3),
    ("r18.3x3 56x56x64", 64, 56, 64, 3, 1, 1),
    ("r18.3x3 28x28x128", 128, 28, 128, 3, 1, 1),
    ("r18.3x3 14x14x256", 256, 14, 256, 3, 1, 1),
    ("r18.3x3 7x7x512", 512, 7, 512, 3, 1, 1),
    ("r18.3x3/2 56->28x128", 64, 56, 128, 3, 2, 1),
    ("r18.3x3/2 28->14x256", 128, 28, 256, 3, 2, 1),
    ("r18.3x3/2 14->7x512", 256, 14, 512, 3, 2, 1),
    ("r18.1x1/2 56->28x128", 64, 56, 128, 1, 2, 0),
    ("r18.1x1/2 28->14x256", 128, 28, 256, 1, 2, 0),
    ("r18.1x1/2 14->7x512", 256, 14, 512, 1, 2, 0),
]
RESNET50 = [
    ("r50.1x1 56x56 64->256", 64, 56, 256, 1, 1, 0),
    ("r50.1x1 56x56 256->64", 256, 56, 64, 1, 1, 0),
    ("r50.3x3 28x28x128", 128, 28, 128, 3, 1, 1),
    ("r50.1x1 28x28 512->128", 512, 28, 128, 1, 1, 0),
    ("r50.1x1 14x14 1024->256", 1024, 14, 256, 1, 1, 0),
    ("r50.3x3 7x7x512", 512, 7, 512, 3, 1, 1),
    ("r50.1x1 7x7 512->2048", 512, 7, 2048, 1, 1, 0),
]
# MobileNetV2 (groups as an 8th field; depthwise: groups == C == O)
MOBILENET = [
    ("mv2.dw3x3 112x112x32", 32, 112, 32, 3, 1, 1, 32),
    ("mv2.dw3x3 56x56x144", 144, 56, 144, 3, 1, 1, 144),
    ("mv2.dw3x3/2 112->56x96", 96, 112, 96, 3, 2, 1, 96),
    ("mv2.dw3x3 28x28x192", 192, 28, 192, 3, 1, 1, 192),
    ("mv2.dw3x3 14x14x576", 576, 14, 576, 3, 1, 1, 576),
    ("mv2.1x1 112x112 16->96", 16, 112, 96, 1, 1, 0),
    ("mv2.1x1 56x56 96->24", 96, 56, 24, 1, 1, 0),
    ("mv2.1x1 56x56 24->144", 24, 56, 144, 1, 1, 0),
    ("mv2.1x1 28x28 32->192", 32, 28, 192, 1, 1, 0),
    ("mv2.1x1 14x14 384->64", 384, 14, 64, 1, 1, 0),
]
# 3-channel stems: one input channel block of 3, the largest planes of their models
STEMS = [
    ("stem.resnet 7x7/2 3->64", 3, 224, 64, 7, 2, 3),
    ("stem.squeezenet 3x3/2 3->64", 3, 224, 64, 3, 2, 0),
    ("stem.mobilenet 3x3/2 3->32", 3, 224, 32, 3, 2, 1),
    ("stem.efficientnet 3x3/2 3->32", 3, 224, 32, 3, 2, 1),
    ("stem.mobilenetv3 3x3/2 3->16", 3, 224, 16, 3, 2, 1),
]
MODELS = {"resnet18": RESNET18, "stems": STEMS, "resnet50": RESNET50, "mobilenet": MOBILENET,
          "small": RESNET18[1:2] + RESNET18[8:9]}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=[*MODELS, "all"], default="resnet18")
    p.add_argument("--batch", type=cli.count(1), default=1)
    cli.common_args(p, rounds=7, threads=True, plot=True, rounds_help="alternating measurement rounds")
    p.add_argument("--number", type=cli.count(1), default=10, help="runs per timing burst")
    p.add_argument("--cpu-time", action="store_true",
                   help="with --threads 1: time by this thread's CPU time (robust on a shared machine)")
    p.add_argument("--settle", type=float, default=0.3,
                   help="seconds to idle before each burst: PyTorch's OpenMP threads spin ~200 ms after a call "
                        "and would take the second core from TVM's threads (and vice versa)")
    p.add_argument("--candidates", action="store_true", help="also time every applicable candidate")
    p.add_argument("--stock", action="store_true", help="also time stock TVM's default pipeline (slow)")
    p.add_argument("--layers", default="", help="comma-separated substrings selecting layers")
    return p.parse_args()


def vm_call(ex, x):
    """One VM call of the built layer on ``x`` (a callable for ``ext.bench``)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    arg = tvm.runtime.tensor(x)
    main = vm["main"]
    return lambda: main(arg)


def torch_call(x, w, b, stride, pad, groups=1):
    import torch

    X, W, B = (torch.from_numpy(a) for a in (x, w, b))
    return lambda: torch.nn.functional.conv2d(X, W, B, stride, pad, 1, groups)


def main():
    args = parse_args()
    threads = cli.apply_threads(args, torch=True)  # before any parallel TVM call
    import numpy as np
    import tvm
    from tvm import relax

    from ext.models.conv import conv_bias_relu
    from ext.runner import CompiledCandidate
    from ext.strategies import REGISTRY

    if args.cpu_time and threads != 1:
        raise SystemExit("--cpu-time needs --threads 1 (kernels must run on the calling thread)")
    # the clock of the timing bursts: wall time, or with --cpu-time this thread's CPU time (single-thread
    # runs: both TVM's and PyTorch's one-thread kernels run on the calling thread, and time spent
    # preempted by other processes on a shared machine is not counted)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    target = ext.target.cpu()
    layers = RESNET18 + RESNET50 + MOBILENET + STEMS if args.model == "all" else MODELS[args.model]
    if args.layers:
        layers = [lay for lay in layers if any(s in lay[0] for s in args.layers.split(","))]
    rng = np.random.default_rng(0)
    results = []
    print(f"threads={threads} batch={args.batch} rounds={args.rounds} clock={'thread CPU' if args.cpu_time else 'wall'}"
          f" ({ext.target.describe(target)})")
    print(f"{'layer':24s} {'pick':22s} {'ext ms':>8s} {'torch ms':>8s} {'ratio':>6s} {'best':>6s}  why")
    for name, C, H, O, K, s, p, *rest in layers:
        g = rest[0] if rest else 1
        N = args.batch
        x = rng.uniform(-1, 1, (N, C, H, H)).astype("float32")
        w = rng.uniform(-1, 1, (O, C // g, K, K)).astype("float32") / math.sqrt(C // g * K * K)
        b = rng.uniform(-1, 1, (O,)).astype("float32")
        ex = ext.build(conv_bias_relu(x.shape, w, b, (s, s), (p, p), g), target)
        dec = ext.last_report().find("conv2d")[0]
        why = next((a.reason for a in dec.alternatives if a.status == "unsuited" and "Winograd" in a.reason), "")
        why = why or dec.reason
        calls = {"ext": vm_call(ex, x), "torch": torch_call(x, w, b, s, p, g)}
        for fn in calls.values():  # warm-up burst
            bench.burst(fn, number=args.number, clock=clock)
        times = bench.rounds(calls, args.rounds, settle=args.settle, number=args.number, clock=clock)
        # ratio over the rounds where PyTorch ran within 25% of its best: other work on the cores slows
        # both at random; times are medians over all rounds
        st = bench.summarize(times, "torch", busy=1.25, keep_half=False)
        row = {"layer": name, "pick": dec.name, "config": dec.to_json()["config"],
               "ext_ms": st["ext"]["median_all_s"] * 1e3, "torch_ms": st["torch"]["median_all_s"] * 1e3,
               "ratio": st["ext"]["ratio"], "best_ratio": st["ext"]["best_ratio"],
               "all_rounds_ratio": st["ext"]["ratio_all"],
               "why": why, "candidates": {}}
        if args.candidates:
            wl = dec.workload
            xs = [x, w, b.reshape(1, -1, 1, 1)]
            for cand in REGISTRY.for_op("conv2d"):
                if not cand.applies(wl, target) or cand.needs_python:
                    continue
                try:
                    tm = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).timer(
                        xs, number=args.number, repeat=3)
                    row["candidates"][cand.name] = tm() * 1e3
                except Exception as err:  # noqa: BLE001 - report and go on
                    row["candidates"][cand.name] = f"failed: {type(err).__name__}"
        if args.stock:
            stock = relax.build(conv_bias_relu(x.shape, w, b, (s, s), (p, p), g), tvm.target.Target(target))
            row["stock_ms"] = bench.burst(vm_call(stock, x), number=1, clock=clock) * 1e3
        results.append(row)
        print(f"{name:24s} {dec.name:22s} {row['ext_ms']:8.3f} {row['torch_ms']:8.3f} {row['ratio']:6.2f} "
              f"{row['best_ratio']:6.2f}  {why}", flush=True)
        for cname, ms in row["candidates"].items():
            print(f"{'':24s}   {cname:22s} {ms if isinstance(ms, str) else f'{ms:8.3f}'}")
        if "stock_ms" in row:
            print(f"{'':24s}   {'stock TVM untuned':22s} {row['stock_ms']:8.3f}")
    s1 = [r["ratio"] for r in results if "3x3 " in r["layer"] and "/2" not in r["layer"]]
    if s1:
        print(f"geometric mean ratio, 3x3 stride-1 layers: {math.exp(sum(map(math.log, s1)) / len(s1)):.2f}")
    cli.write_json(args.json, {"threads": threads, "batch": args.batch, "results": results})
    if args.plot:
        plt = cli.pyplot()
        fig, ax = plt.subplots(figsize=(10, 4))
        ax.bar(range(len(results)), [r["ratio"] for r in results])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(results)), [r["layer"] for r in results], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("ext time / PyTorch time")
        fig.tight_layout()
        fig.savefig(args.plot)


if __name__ == "__main__":
    main()
