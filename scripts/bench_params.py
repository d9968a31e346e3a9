#!/usr/bin/env python
"""Weights as run-time parameters against weights bound as constants, in one run.

Models (``--models``, default ResNet-18 and the BERT-base encoder layer): the same PyTorch
module imported twice, with weights bound (``ext.frontend.from_torch``) and kept as
parameters (``keep_params_as_input=True``: built once, ``ext.Model.set_params`` runs the
lifted weight transforms once); per-call times interleaved, ratio params/bound per round.

GEMV rows (``--gemv``, default 1x4096x4096 and 1x2048x1000, ``MxNxK``): ``x @ W + b`` with a
run-time ``W`` (a function parameter, PyTorch's ``(N, K)`` layout as ``nn.Linear`` stores it)
against NumPy (``x @ W.T + b``, OpenBLAS) and the same graph with ``W`` constant.

    python scripts/bench_params.py --rounds 9
    python scripts/bench_params.py --models resnet18 --gemv 1x2048x1000 --rounds 5 --json params.json
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
from ext.models import TORCH_MODELS, torch_model  # noqa: E402


def model_row(name: str, rounds: int) -> dict:
    import torch

    model, inputs = torch_model(name)
    target = ext.target.cpu()
    bound = relax.VirtualMachine(ext.build(from_torch(model, inputs), target), tvm.cpu())
    mod, weights = from_torch(model, inputs, keep_params_as_input=True)
    net = ext.Model(ext.build(mod, target))
    net.set_params(weights)
    args = [tvm.runtime.tensor(x.numpy()) for x in inputs]
    with torch.no_grad():
        ref = model(*inputs).numpy()
    err = output_errors(net(*inputs).numpy(), ref)["max_rel"]
    res = interleaved({"bound": lambda: bound["main"](*args), "params": lambda: net(*args)}, "bound",
                      rounds=rounds, min_seconds=0.2)
    return {"row": name, "bound_ms": res["bound"]["median_s"] * 1e3, "params_ms": res["params"]["median_s"] * 1e3,
            "ratio": res["params"]["ratio"], "max_rel": err}


def _linear(M: int, N: int, K: int, w=None):
    """``main(x[, W]) = x @ W.T + b``; ``W`` a parameter when ``w`` is None, else a constant."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((M, K), "float32"))
    params = [x]
    if w is None:
        wv = relax.Var("W", relax.TensorType((N, K), "float32"))
        params.append(wv)
    else:
        wv = relax.const(w)
    bias = np.random.default_rng(1).uniform(-1, 1, (N,)).astype("float32")
    b = relax.const(bias)
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(wv)), b))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), bias


def gemv_row(shape, rounds: int) -> dict:
    M, N, K = shape
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (M, K)).astype("float32")
    w = rng.uniform(-1, 1, (N, K)).astype("float32")
    target = ext.target.cpu()
    mod, b = _linear(M, N, K)
    run = relax.VirtualMachine(ext.build(mod, target), tvm.cpu())
    pick = ext.last_report().find("matmul")[0].name
    const = relax.VirtualMachine(ext.build(_linear(M, N, K, w)[0], target), tvm.cpu())
    tx, tw = tvm.runtime.tensor(x), tvm.runtime.tensor(w)
    err = output_errors(run["main"](tx, tw).numpy(), x.astype("float64") @ w.T.astype("float64") + b)["max_rel"]
    res = interleaved({"numpy": lambda: x @ w.T + b, "ext": lambda: run["main"](tx, tw),
                       "ext_const_w": lambda: const["main"](tx)}, "numpy", rounds=rounds, min_seconds=0.1)
    return {"row": f"gemv {cli.format_shape(shape)} run-time W", "pick": pick,
            "numpy_ms": res["numpy"]["median_s"] * 1e3, "ext_ms": res["ext"]["median_s"] * 1e3,
            "const_ms": res["ext_const_w"]["median_s"] * 1e3, "ratio": res["ext"]["ratio"], "max_rel": err}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.common_args(ap, rounds=7, threads=True)
    ap.add_argument("--models", nargs="*", default=["resnet18", "encoder"], choices=TORCH_MODELS)
    ap.add_argument("--gemv", nargs="*", type=cli.parse_shape, default=[(1, 4096, 4096), (1, 2048, 1000)])
    args = ap.parse_args(argv)
    threads = cli.apply_threads(args, torch=True)
    print(f"threads={threads} rounds={args.rounds} ({ext.target.describe(ext.target.cpu())})")
    rows = []
    print("| row | bound ms | params ms | params/bound | err |\n|---|---|---|---|---|")
    for name in args.models:
        r = model_row(name, args.rounds)
        rows.append(r)
        print(f"| {r['row']} | {r['bound_ms']:.3f} | {r['params_ms']:.3f} | {r['ratio']:.3f} | {r['max_rel']:.1e} |",
              flush=True)
    print("\n| row | ext pick | NumPy ms | ext ms | ext, W constant ms | ext/NumPy | err |\n|---|---|---|---|---|---|---|")
    for shape in args.gemv:
        r = gemv_row(shape, args.rounds)
        rows.append(r)
        print(f"| {r['row']} | {r['pick']} | {r['numpy_ms']:.3f} | {r['ext_ms']:.3f} | {r['const_ms']:.3f} | "
              f"{r['ratio']:.2f} | {r['max_rel']:.1e} |", flush=True)
    cli.write_json(args.json, {"threads": threads, "rows": rows})


if __name__ == "__main__":
    main()
