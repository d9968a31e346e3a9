#!/usr/bin/env python
"""How good is the cost model on GEMM shapes it has never seen?

1. Tune a few training shapes (``--train``) into ``--train-log``.
2. Measure the whole space of each held-out shape (``--heldout``) into a
   separate ``--heldout-log`` (the model never sees it).
3. Train the model on the training log only, let the Selector pick
   (candidate, config) for each held-out shape (source ``model``), then time
   that pick, the sweep's best point and the untuned ``plevel`` pick again,
   interleaved (``--rounds``), and report pick / best.

    python scripts/eval_cost_model.py                 # default shapes, ~5 minutes
    python scripts/eval_cost_model.py --train-trials 20 --heldout 300x500x700

Both logs resume: a rerun only measures what is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402

from ext import cli  # noqa: E402
from ext.strategies import REGISTRY  # noqa: E402
from ext.strategies.registry import config_to_dict  # noqa: E402
from ext.strategies.select import Selector  # noqa: E402
from ext.tuning import CostModel, LocalMeasurer, Settings, TuningLog  # noqa: E402
from ext.workload import Workload  # noqa: E402

TRAIN = [(256, 256, 256), (512, 512, 512), (128, 768, 768), (384, 1024, 256), (1024, 256, 512), (64, 512, 1024)]
HELDOUT = [(320, 640, 448), (768, 384, 384), (192, 1024, 512), (96, 256, 768)]


def gemm(shape: tuple[int, int, int]) -> Workload:
    """The biased relu GEMM workload of ``(M, N, K)``."""
    M, N, K = shape
    return Workload("matmul", [(M, K), (K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=("bias", "relu"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", nargs="+", type=cli.parse_shape, default=TRAIN, metavar="MxNxK",
                   help="training GEMM shapes")
    p.add_argument("--heldout", nargs="+", type=cli.parse_shape, default=HELDOUT, metavar="MxNxK",
                   help="held-out GEMM shapes")
    p.add_argument("--train-trials", type=cli.count(1), default=30, help="trials per training shape")
    p.add_argument("--train-log", default="costmodel_train.jsonl")
    p.add_argument("--heldout-log", default="costmodel_heldout.jsonl")
    cli.common_args(p, rounds=3, json=False, rounds_help="interleaved re-measurement rounds of the picks")
    args = p.parse_args(argv)
    target = ext.target.cpu()
    train, held = [gemm(s) for s in args.train], [gemm(s) for s in args.heldout]
    if {w.key for w in train} & {w.key for w in held}:
        raise SystemExit("a held-out shape is also a training shape")
    print(f"tuning {len(train)} training shapes, {args.train_trials} trials each -> {args.train_log}", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        have = [r.workload for r in TuningLog(args.train_log).split(target, warn=False)[0]]
    for wl in train:  # a rerun tops each shape up to --train-trials, no more
        missing = args.train_trials - have.count(wl.key)
        if missing > 0:
            ext.tune(wl, target, log=args.train_log, trials=missing)
    print(f"measuring the whole space of {len(held)} held-out shapes -> {args.heldout_log}", flush=True)
    ext.tune(held, target, log=args.heldout_log)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train_recs, _ = TuningLog(args.train_log).split(target)
        held_recs, _ = TuningLog(args.heldout_log).split(target)
    model = CostModel().fit(train_recs, target)
    print(f"model trained on {model.n_train} ok records of {len({r.workload for r in train_recs})} shapes")
    times = {r.key: r.seconds for r in held_recs if r.status == "ok"}
    rows, ratios, plevel_ratios = [], [], []
    measurer = LocalMeasurer(settings=Settings(repeat=5, min_repeat_ms=25))
    try:
        for wl in held:
            mine = {k: t for k, t in times.items() if k[0] == wl.key}
            if not mine:
                print(f"{wl.key}: nothing measured")
                continue
            best_key = min(mine, key=mine.get)
            picks = {"best": (best_key[1], json.loads(best_key[2]), "log")}
            for name, sel in (("model", Selector(target, model=model)), ("plevel", Selector(target))):
                d = sel.choose(wl)
                picks[name] = (d.name, config_to_dict(d.config), d.source)
            # the sweep ran over minutes of changing load: time the three points again, interleaved
            again = {n: float("inf") for n in picks}
            for _ in range(args.rounds):
                for n, (cand, cfg, _) in picks.items():
                    res = measurer.measure(wl, REGISTRY.get(cand), cfg, target)
                    if res.status == "ok":
                        again[n] = min(again[n], res.seconds)
            best = min(again.values())  # a pick can beat the sweep's best when the sweep was noisy
            tm, tp = again["model"], again["plevel"]
            ratios.append(tm / best)
            plevel_ratios.append(tp / best)
            rows.append((f"{wl.shapes[0][0]}x{wl.shapes[1][1]}x{wl.shapes[0][1]}", picks["model"][2],
                         picks["model"][0], ",".join(f"{k}={v}" for k, v in picks["model"][1].items()),
                         f"{best * 1e3:.3f}", f"{tm * 1e3:.3f}", f"{tm / best:.3f}", f"{tp / best:.3f}"))
    finally:
        measurer.close()
    head = ("shape", "source", "model pick", "config", "best ms", "pick ms", "pick/best", "plevel/best")
    w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(c.ljust(x) for c, x in zip(r, w)))
    if ratios:
        print(f"mean model pick / best measured: {statistics.mean(ratios):.3f} over {len(ratios)} held-out shapes "
              f"(untuned plevel pick: {statistics.mean(plevel_ratios):.3f}); times: best of {args.rounds} "
              "interleaved re-measurements of the sweep's best point, the model pick and the plevel pick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
