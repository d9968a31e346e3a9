"""``relax.nn.max_pool3d`` as two 2-D max pools, so ext's pool kernels serve it: ``MaxPool3dToPool2d``.

No ext candidate computes a 3-D pool; the stock lowering keeps the running max with ``>``,
which skips a NaN (a 3-D CNN fed a NaN answered with numbers) and is unscheduled. A max pool is
separable: ``max_pool3d(x)`` (NCDHW, static shapes) is a 2-D max pool over (H, W) of every
frame (``x`` read as ``(N, C*D, H, W)``), then a 2-D max pool of kernel ``(KD, 1)`` over
(D, OH*OW) (``(N, C, D, OH*OW)``): the same windows, padding, strides, dilation and
``ceil_mode`` per axis, and the pool kernels' NaN-propagating max. An average pool is left as
it is (its divisor counts the padding per 3-D window).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .mutate import static_dims


def _rewrite(call, matches, x):
    a = call.attrs
    xs, out = static_dims(matches[x]), static_dims(call)
    if None in (xs, out) or str(a.layout) != "NCDHW" or (a.out_layout and str(a.out_layout) != "NCDHW"):
        return call
    (kd, kh, kw), (sd, sh, sw), (dd, dh, dw) = (tuple(int(v) for v in t) for t in (a.pool_size, a.strides, a.dilation))
    front, top, left, back, bottom, right = (int(p) for p in a.padding)
    n, c, d, h, w = xs
    od, oh, ow = out[2:]
    ceil = bool(a.ceil_mode)
    frames = relax.op.nn.max_pool2d(relax.op.reshape(matches[x], (n, c * d, h, w)), (kh, kw), (sh, sw),
                                    (top, left, bottom, right), (dh, dw), ceil_mode=ceil)
    depth = relax.op.nn.max_pool2d(relax.op.reshape(frames, (n, c, d, oh * ow)), (kd, 1), (sd, 1),
                                   (front, 0, back, 0), (dd, 1), ceil_mode=ceil)
    return relax.op.reshape(depth, (n, c, od, oh, ow))


def MaxPool3dToPool2d() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: max_pool3d as two 2-D max pools (module doc)."""
    x = wildcard()
    pattern = is_op("relax.nn.max_pool3d")(x)
    return relax.transform.function_pass(
        lambda func, _mod, _ctx: rewrite_call(pattern, lambda call, m: _rewrite(call, m, x), func),
        opt_level=0, name="ext.MaxPool3dToPool2d")


__all__ = ["MaxPool3dToPool2d"]
