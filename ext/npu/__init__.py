"""A simulated systolic-array NPU: target row, instruction set, simulator, kernels, report.

``ext.target.npu(...)`` is the target; ``isa`` the instructions (Gemmini-like), ``sim`` the
simulator (exact float32 numerics, cycle and traffic counts), ``kernels`` GEMM and conv2d
lowered to instruction streams, ``report`` per-layer and model totals of a build. Kept
light on import: ``ext.target`` imports ``ext.npu.target`` while it is itself loading.
"""
from __future__ import annotations


def __getattr__(name):
    import importlib

    if name in ("isa", "sim", "kernels", "summary", "target", "runtime"):
        return importlib.import_module(f".{name}", __name__)
    if name in ("report", "Summary"):
        return getattr(importlib.import_module(".summary", __name__), name)
    if name in ("counters", "reset_counters", "SimMeasurer"):
        return getattr(importlib.import_module(".runtime", __name__), name)
    raise AttributeError(f"module 'ext.npu' has no attribute {name!r}")
