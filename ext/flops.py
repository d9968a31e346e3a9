"""FLOP counts per op family (multiply-add counts 2); used for GFLOPS and task weights."""
from __future__ import annotations

from .workload import Workload, conv_dims, numel


def _matmul(wl: Workload) -> float:
    return 2.0 * numel(wl.attr("out_shape") or _matmul_out(wl)) * wl.shapes[0][-1]


def _matmul_out(wl: Workload):
    a, b = wl.shapes[0], wl.shapes[1]
    n = b[-2] if wl.attr("transpose_b") else b[-1]
    batch = _broadcast(a[:-2], b[:-2])
    return tuple(batch) + (a[-2] if len(a) > 1 else 1, n)


def _broadcast(x, y):
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
    return tuple(max(p, q) for p, q in zip(x, y))


def _conv2d(wl: Workload) -> float:
    out = wl.attr("out_shape")
    d = conv_dims(wl)
    cin_per_group = d["C"] // wl.attr("groups", 1)
    return 2.0 * numel(out) * cin_per_group * d["KH"] * d["KW"] if out else 0.0


_FORMULAS = {"matmul": _matmul, "conv2d": _conv2d}


def count(wl: Workload) -> float:
    if not wl.is_static:
        return float("nan")
    f = _FORMULAS.get(wl.op)
    anchor = f(wl) if f else float(sum(numel(s) for s in wl.shapes))
    out = wl.attr("out_shape")
    return anchor + (len(wl.epilogue) * numel(out) if out else 0.0)


def matmul_out_shape(wl: Workload) -> tuple:
    return _matmul_out(wl)


__all__ = ["count", "matmul_out_shape"]
