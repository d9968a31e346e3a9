"""Merge ``clip(clip(x, a, b), c, d)`` into one ``clip(x, max(a, c), min(b, d))``.

PyTorch's export writes ReLU6 inside hardswish/hardsigmoid as two clips,
``clip(clip(x + 3, 0, inf), -inf, 6)``; one clip is one epilogue step (``clip:0:6``) and
leaves ``FuseEpilogues`` a single form of hardswish and hardsigmoid to match. Exact when the
two ranges overlap (the composition clamps to their intersection; NaN stays NaN in both);
disjoint ranges are left alone.
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .elemwise_math import prim_float


def _merge(orig, m, inner, x):
    inner_call = m[inner]
    bounds = [prim_float(e) for e in (inner_call.args[1], inner_call.args[2], orig.args[1], orig.args[2])]
    if None in bounds:
        return orig
    a, b, c, d = bounds
    lo, hi = max(a, c), min(b, d)
    if lo > hi:  # disjoint ranges: the composition is a constant, not a clip of the intersection
        return orig
    return relax.op.clip(m[x], lo, hi)


@relax.transform.function_pass(opt_level=0, name="ext.MergeClips")
class MergeClips:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        x = wildcard()
        inner = is_op("relax.clip")(x, wildcard(), wildcard())
        outer = is_op("relax.clip")(inner, wildcard(), wildcard())
        return rewrite_call(outer, lambda o, m: _merge(o, m, inner, x), func)


__all__ = ["MergeClips"]
