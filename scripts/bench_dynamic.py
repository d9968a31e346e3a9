#!/usr/bin/env python
"""Symbolic shapes against static builds: one executable for every size vs one per size.

Rows (``--models``):

* ``resnet50``: the built-in ResNet-50 imported with a symbolic batch (``torch.export.Dim``,
  1..64), run at each ``--batches`` size, against the same model imported at that batch;
* ``bert``: transformers' ``BertModel(BertConfig())`` (12 layers, 768 wide, random weights;
  output ``last_hidden_state``) imported with a symbolic sequence (2..512), run at each
  ``--seqs`` length, against the static import at that length;
* ``resnet50_hw``: the built-in ResNet-50 with a symbolic image height and width (33..1024),
  run at each ``--sizes`` side (square images, batch 1), against the static import at that size;
* ``--hw-zoo NAME ...``: zoo CNNs (``scripts/zoo.py`` names) exported to ONNX with a dynamic
  height and width (``dynamic_axes``; ``torch.export`` specializes many of them) and imported
  with ``from_onnx``, run at each ``--sizes`` side against the static ONNX import at that size.

Per row ext's symbolic and static executables run interleaved (median of ``--rounds``,
ratio per round: symbolic / static), after checking that their outputs agree (max relative
difference printed). The symbolic build's selection report is summarized: how many
decisions went to a ``*_dyn`` candidate and which shape buckets it dispatches.

    python scripts/bench_dynamic.py --rounds 5
    python scripts/bench_dynamic.py --models bert --seqs 32 128 384 --json dyn.json
    python scripts/bench_dynamic.py --models resnet50_hw --sizes 224 320
    python scripts/bench_dynamic.py --models --hw-zoo mobilenet_v2 efficientnet_b0 --sizes 224
    python scripts/bench_dynamic.py --quick     # small widths: the whole path quickly
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (first: sets TVM_NUM_THREADS)
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from ext import cli  # noqa: E402
from ext.bench import interleaved, output_errors  # noqa: E402
from ext.frontend import from_torch  # noqa: E402


def _bert(quick: bool):
    import torch
    import transformers as tf

    from ext.models.transformer import last_hidden_state

    torch.manual_seed(0)
    kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              vocab_size=997) if quick else {}
    cfg = tf.BertConfig(**kw)
    cfg._attn_implementation = "eager"
    return last_hidden_state(tf.BertModel(cfg, add_pooling_layer=False).eval()), cfg.vocab_size


def _runner(mod):
    vm = relax.VirtualMachine(ext.build(mod, ext.target.cpu()), tvm.cpu())
    report = ext.last_report()
    return vm, report


def _onnx_module(net, x, axes):
    """``net`` exported to ONNX (opset 17; ``axes``: the input's dynamic axes) and imported."""
    import io

    import onnx
    import torch

    from ext.frontend import from_onnx

    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, input_names=["x"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": axes} if axes else None)
    return from_onnx(onnx.load_from_string(buf.getvalue()))


def _dyn_summary(report) -> str:
    names = [d.name for d in report.decisions]
    dyn = sorted({n for n in names if n.endswith("_dyn")})
    return f"{sum(n.endswith('_dyn') for n in names)}/{len(names)} decisions dynamic ({', '.join(dyn) or 'none'})"


def _row(label, dyn_vm, static_vm, x, rounds) -> dict:
    arg = tvm.runtime.tensor(x)
    a, b = dyn_vm["main"](arg).numpy(), static_vm["main"](arg).numpy()
    err = output_errors(a, b)["max_rel"]
    res = interleaved({"static": lambda: static_vm["main"](arg), "symbolic": lambda: dyn_vm["main"](arg)},
                      "static", rounds=rounds, min_seconds=0.3)
    return {"row": label, "static_ms": res["static"]["median_s"] * 1e3,
            "symbolic_ms": res["symbolic"]["median_s"] * 1e3, "ratio": res["symbolic"]["ratio"], "max_rel": err}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.common_args(ap, rounds=5, threads=True, quick="small widths, two rounds: the whole path quickly")
    ap.add_argument("--models", nargs="*", default=["resnet50", "bert"], choices=["resnet50", "bert", "resnet50_hw"])
    ap.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    ap.add_argument("--seqs", nargs="*", type=int, default=[32, 128, 384])
    ap.add_argument("--sizes", nargs="*", type=int, default=[224, 320], help="image sides for resnet50_hw, --hw-zoo")
    ap.add_argument("--hw-zoo", nargs="*", default=[], metavar="NAME",
                    help="zoo CNNs with a symbolic image size, through ONNX")
    args = ap.parse_args(argv)
    threads = cli.apply_threads(args, torch=True)
    import torch

    from ext.models import torch_model

    rounds = 2 if args.quick else args.rounds
    print(f"threads={threads} rounds={rounds} ({ext.target.describe(ext.target.cpu())})", flush=True)
    rows = []
    print("| model | shape | static ms | symbolic ms | symbolic/static | max rel diff |\n|---|---|---|---|---|---|",
          flush=True)

    def show(name, r):
        r["model"] = name
        rows.append(r)
        print(f"| {name} | {r['row']} | {r['static_ms']:.2f} | {r['symbolic_ms']:.2f} | {r['ratio']:.3f} | "
              f"{r['max_rel']:.1e} |", flush=True)

    if "resnet50" in args.models:
        net, _ = torch_model("resnet50", small=args.quick)
        x = torch_model("resnet50", small=args.quick, batch=2)[1][0]  # batch 1 would specialize the symbol
        n = torch.export.Dim("n", min=1, max=64)
        dyn_vm, report = _runner(from_torch(net, (x,), dynamic_shapes={"x": {0: n}}))
        print(f"resnet50 symbolic batch: {_dyn_summary(report)}", flush=True)
        for b in args.batches:
            xb = torch.randn(b, *x.shape[1:], generator=torch.Generator().manual_seed(b))
            static_vm, _ = _runner(from_torch(net, (xb,)))
            show("ResNet-50", _row(f"batch {b}", dyn_vm, static_vm, xb.numpy(), rounds))
    if "resnet50_hw" in args.models:
        net, (x,) = torch_model("resnet50", small=args.quick)
        # at least 33: a 1x1 final map would be a case torch.export specializes apart
        h, w = torch.export.Dim("h", min=33, max=1024), torch.export.Dim("w", min=33, max=1024)
        dyn_vm, report = _runner(from_torch(net, (x,), dynamic_shapes={"x": {2: h, 3: w}}))
        print(f"resnet50 symbolic image size: {_dyn_summary(report)}", flush=True)
        for side in args.sizes:
            xs = torch.randn(1, x.shape[1], side, side, generator=torch.Generator().manual_seed(side))
            static_vm, _ = _runner(from_torch(net, (xs,)))
            show("ResNet-50", _row(f"{side}x{side}", dyn_vm, static_vm, xs.numpy(), rounds))
    for name in args.hw_zoo:
        from ext.models.zoo import zoo_model

        net, (x,) = zoo_model(name, quick=args.quick)
        dyn_vm, report = _runner(_onnx_module(net, x, {0: "n", 2: "h", 3: "w"}))
        print(f"{name} symbolic image size: {_dyn_summary(report)}", flush=True)
        for side in args.sizes:
            xs = torch.randn(1, x.shape[1], side, side, generator=torch.Generator().manual_seed(side))
            static_vm, _ = _runner(_onnx_module(net, xs, None))
            show(name, _row(f"{side}x{side}", dyn_vm, static_vm, xs.numpy(), rounds))
    if "bert" in args.models:
        net, vocab = _bert(args.quick)
        s = torch.export.Dim("s", min=2, max=512)
        ids = torch.randint(0, vocab, (1, 16))
        dyn_vm, report = _runner(from_torch(net, (ids,), dynamic_shapes={"ids": {1: s}}))
        print(f"bert symbolic sequence: {_dyn_summary(report)}", flush=True)
        for length in args.seqs:
            ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(length))
            static_vm, _ = _runner(from_torch(net, (ids,)))
            show("BERT-base", _row(f"seq {length}", dyn_vm, static_vm, ids.numpy(), rounds))
    cli.write_json(args.json, {"threads": threads, "rows": rows})


if __name__ == "__main__":
    main()
