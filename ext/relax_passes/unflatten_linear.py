"""Undo importers' row flattening around linear layers so epilogues can fuse.

PyTorch import writes ``linear(x3d)`` as ``reshape(add(matmul(reshape(x3d, (B*S, K)), W), b), (B, S, N))``;
the reshape between the matmul and its activation / residual add hides them from
epilogue fusion. This pass rewrites the sandwich to ``add(matmul(x3d, W), b)``
(Relax matmul broadcasts over leading dims; ``families/matmul.py`` flattens the
rows again, for free, inside the kernel call).

Applies only when the inner reshape merges exactly the leading dims of ``x`` and
the outer reshape restores them (last dims unchanged).
"""
from __future__ import annotations

import math

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm.sym import Analyzer

from .lifted import rewrite_lifted


def _static(shape):
    if shape is None or any(not hasattr(d, "value") for d in shape):
        return None
    return [int(d.value) for d in shape]


def _rewrite(orig, m, x, w, b, flat):
    xs, flat_s, out_s = _static(m[x].ty.shape), _static(m[flat].ty.shape), _static(orig.ty.shape)
    ws = _static(m[w].ty.shape)
    if None in (xs, flat_s, out_s, ws) or len(xs) < 3 or len(flat_s) != 2 or len(ws) != 2:
        return orig
    if flat_s != [math.prod(xs[:-1]), xs[-1]] or out_s[:-1] != xs[:-1]:
        return orig
    y = relax.op.matmul(m[x], m[w])
    if b is not None and b in m:
        bs = _static(m[b].ty.shape)
        if bs is None or math.prod(bs) != out_s[-1] or (len(bs) > 1 and bs[-1] != out_s[-1]):
            return orig
        y = relax.op.add(y, m[b])
    return y


def _dims(shape):
    """The dims of a shape as PrimExprs (symbolic ones included); None when unknown."""
    return None if shape is None or not hasattr(shape, "__len__") else list(shape)


def _same(a, b) -> bool:
    """Two dim lists provably equal (``1 + n`` and ``n + 1`` are)."""
    if a is None or b is None or len(a) != len(b):
        return False
    ana = Analyzer()
    return all(ana.can_prove_equal(x, y) for x, y in zip(a, b))


def _drop_noop_broadcast(orig, m, t):
    """``broadcast_to(t, shape)`` with ``shape == t.shape`` is ``t``."""
    return m[t] if _same(_dims(m[t].ty.shape), _dims(orig.ty.shape)) else orig


def _swap_squeeze_permute(orig, m, t, perm):
    """``reshape(permute_dims(t, p), s)`` that only drops leading unit dims becomes
    ``permute_dims(reshape(t, ...), p')``, so a transposed batch-matmul operand stays visible
    (symbolic dims too: the decode step's ``k^T`` over a past of any length)."""
    ts, out = _dims(m[t].ty.shape), _dims(orig.ty.shape)
    axes = m[perm].attrs.axes
    if ts is None or out is None or axes is None:
        return orig
    axes = [int(a) for a in axes]
    drop = len(ts) - len(out)
    ana = Analyzer()
    if drop <= 0 or any(axes[i] != i or not ana.can_prove_equal(ts[i], 1) for i in range(drop)):
        return orig
    if not _same([ts[a] for a in axes][drop:], out):
        return orig
    squeezed = relax.op.reshape(m[t], ts[drop:])
    return relax.op.permute_dims(squeezed, [a - drop for a in axes[drop:]])


def _unflatten(func):
    t, shape = wildcard(), wildcard()
    func = rewrite_call(is_op("relax.broadcast_to")(t, shape), lambda o, m: _drop_noop_broadcast(o, m, t), func)
    perm = is_op("relax.permute_dims")(t)
    func = rewrite_call(is_op("relax.reshape")(perm, shape), lambda o, m: _swap_squeeze_permute(o, m, t, perm), func)
    x, w, b, s1, s2 = wildcard(), wildcard(), wildcard(), wildcard(), wildcard()
    flat = is_op("relax.reshape")(x, s1)
    mm = is_op("relax.matmul")(flat, w)
    with_bias = is_op("relax.add")(mm, b)
    func = rewrite_call(is_op("relax.reshape")(with_bias, s2), lambda o, m: _rewrite(o, m, x, w, b, flat), func)
    return rewrite_call(is_op("relax.reshape")(mm, s2), lambda o, m: _rewrite(o, m, x, w, None, flat), func)


@relax.transform.function_pass(opt_level=0, name="ext.UnflattenLinear")
class UnflattenLinear:
    def transform_function(self, func, mod, ctx):
        return rewrite_lifted(func, _unflatten) if isinstance(func, relax.Function) else func


__all__ = ["UnflattenLinear"]
