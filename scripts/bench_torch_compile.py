#!/usr/bin/env python
"""``torch.compile(model, backend="ext")`` against ``ext.build`` of the exported model and
PyTorch eager, in one run.

For each zoo model (``--models``, default ResNet-18 and BERT-base; ``--quick`` for the small
configs): the first compiled call's seconds (dynamo tracing + ext builds), how many graphs
dynamo handed over and how many ran in PyTorch, the per-call times interleaved (median of
``--rounds``, ratios per round against the direct build), and the largest error against eager.
``--inductor`` adds PyTorch's own compiler (it needs a C++ compiler).

    python scripts/bench_torch_compile.py --rounds 5
    python scripts/bench_torch_compile.py --models mobilenet_v2 gpt2 --rounds 7 --json compile.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (first: sets TVM_NUM_THREADS)
import ext.dynamo  # noqa: E402
from ext import cli  # noqa: E402
from ext.bench import interleaved  # noqa: E402
from ext.models.zoo import ZOO, zoo_model  # noqa: E402


def row(name: str, rounds: int, quick: bool, inductor: bool) -> dict:
    import torch

    model, inputs = zoo_model(name, quick=quick)
    with torch.no_grad():
        ref = model(*inputs)
        start = time.perf_counter()
        direct = ext.Model(ext.build(ext.frontend.from_torch(model, inputs), verbose=False))
        build_s = time.perf_counter() - start
        torch._dynamo.reset()
        backend = ext.dynamo.make_backend(verbose=False)
        compiled = torch.compile(model, backend=backend)
        start = time.perf_counter()
        got = compiled(*inputs)
        first_s = time.perf_counter() - start
        args = [ext.dynamo.to_tvm(x) for x in inputs]
        contenders = {"ext.build": lambda: direct(*args), "torch.compile(ext)": lambda: compiled(*inputs),
                      "eager": lambda: model(*inputs)}
        if inductor:
            fast = torch.compile(model)
            fast(*inputs)
            contenders["torch.compile(inductor)"] = lambda: fast(*inputs)
        res = interleaved(contenders, "ext.build", rounds=rounds, min_seconds=0.2)
    err = float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
    out = {"model": name, "build_s": build_s, "first_call_s": first_s, "graphs": len(backend.graphs),
           "in_pytorch": sum(g.eager_reason is not None for g in backend.graphs), "max_rel": err}
    for k, v in res.items():
        out[f"{k} ms"] = v["median_s"] * 1e3
        out[f"{k} / ext.build"] = v["ratio"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["resnet18", "bert_base"], choices=list(ZOO), metavar="NAME")
    p.add_argument("--rounds", type=cli.count(1), default=5)
    p.add_argument("--quick", action="store_true", help="the zoo's small configs")
    p.add_argument("--inductor", action="store_true", help="also time torch.compile's default backend")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    rows = [row(m, args.rounds, args.quick, args.inductor) for m in args.models]
    keys = [k for k in rows[0] if k != "model"]
    print("| model | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for r in rows:
        cells = [f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        print(f"| {r['model']} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
