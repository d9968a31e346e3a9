"""Build ResNet-18 and the BERT-base encoder layer for the simulated NPU and check them.

For each model: ``ext.build(model, ext.target.npu(rows, cols, dataflow))``, one run on
random input, the largest error relative to PyTorch's largest output magnitude (must be
<= 1e-4), then ``ext.npu.report()``: where each op ran, simulated cycles and utilization
per layer and for the model; the cycles the packed functions counted while running must
equal the report's.

Run: ``python scripts/npu_models.py [--models resnet18 encoder] [--array 16] [--dataflow auto]``
(builds take seconds; one ResNet-18 run simulates ~150k instructions, a few seconds).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _model(name: str):
    import torch

    from ext.models.resnet import resnet18
    from ext.models.transformer import encoder_layer

    torch.manual_seed(0)
    if name == "resnet18":
        return resnet18(), torch.randn(1, 3, 224, 224)
    if name == "encoder":
        return encoder_layer().eval(), torch.randn(1, 128, 768)
    raise ValueError(f"unknown model {name!r} (resnet18, encoder)")


def check(name: str, target) -> bool:
    import numpy as np
    import torch

    import ext
    from ext.testing import run_relax

    net, x = _model(name)
    mod = ext.frontend.from_torch(net, (x,))
    t0 = time.perf_counter()
    ex = ext.build(mod, target, cache=False, verbose=False)
    build_s = time.perf_counter() - t0
    summary = ext.npu.report()
    ext.npu.reset_counters()
    t0 = time.perf_counter()
    got = run_relax(ex, x.numpy())
    run_s = time.perf_counter() - t0
    with torch.no_grad():
        want = net(x).numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    counted = sum(stats.cycles for _, stats in ext.npu.counters().values())
    print(summary.table())
    ok = err <= 1e-4 and counted == summary.cycles
    print(f"{name}: build {build_s:.1f} s, simulated run {run_s:.1f} s wall; error {err:.2e} of the largest "
          f"output (limit 1e-4); cycles counted at run time {counted} == report {summary.cycles}: "
          f"{counted == summary.cycles} -> {'OK' if ok else 'FAIL'}\n")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "encoder"])
    ap.add_argument("--array", type=int, default=16, help="rows = cols of the array")
    ap.add_argument("--dataflow", default="auto", choices=["auto", "ws", "os"])
    args = ap.parse_args(argv)
    import ext

    target = ext.target.npu(args.array, args.array, args.dataflow)
    return 0 if all([check(m, target) for m in args.models]) else 1


if __name__ == "__main__":
    sys.exit(main())
