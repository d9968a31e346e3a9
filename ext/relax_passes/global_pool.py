"""A pool whose one window covers the whole image is a reduction over H and W.

``nn.AvgPool2d(k)`` with ``k`` at least the image (EfficientNet's head in ``transformers``:
``AvgPool2d(1280, ceil_mode=True)`` on a 7x7 or 10x10 map; older nets' ``AvgPool2d(7)``) is a
global mean, and a max pool of the same shape a global max. Written as pools, they run the
stock lowering (the pool candidates decline ``ceil_mode`` averages), which loops over the
whole ``k x k`` window with a bounds test per tap: 4.4 ms for EfficientNet-B0's head at 300x300
(0.24 ms at 224x224), a third of the model. As ``mean``/``max`` over the spatial axes they run
the reduction kernels, and ``BlockChannels`` keeps a spatial ``mean`` inside its regions.

Exact when the padding is zero: the one window then holds every pixel and nothing else, so
the average divides by ``H * W`` whether or not padding would be counted, and a max (ext's
reduction keeps NaN, ``topi_kernels/reduce.py``) sees the same elements. Padded or dilated
pools, and any with more than one output pixel, are left alone.
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .mutate import static_dims

#: pool op -> the reduction over its window
REDUCE = {"relax.nn.avg_pool2d": relax.op.mean, "relax.nn.max_pool2d": relax.op.max}
#: data layout -> (H axis, W axis)
_SPATIAL = {"NCHW": (2, 3), "NHWC": (1, 2)}


def global_window_axes(call: relax.Call):
    """The spatial axes of a 2-D pool whose single window covers its whole unpadded input, or None."""
    a = call.attrs
    layout = str(a.layout)
    if layout not in _SPATIAL or str(a.out_layout) != layout:
        return None
    x_shape, out_shape = static_dims(call.args[0]), static_dims(call)
    if x_shape is None or out_shape is None:
        return None
    h_ax, w_ax = _SPATIAL[layout]
    kh, kw = (int(v) for v in a.pool_size)
    dh, dw = (int(v) for v in a.dilation)
    if any(int(p) for p in a.padding) or (out_shape[h_ax], out_shape[w_ax]) != (1, 1):
        return None
    H, W = x_shape[h_ax], x_shape[w_ax]
    # the window's taps reach rows 0 .. (kh-1)*dh: all of them only when undilated (or one row)
    covers = (kh >= H and (dh == 1 or H == 1)) and (kw >= W and (dw == 1 or W == 1))
    return [h_ax, w_ax] if covers else None


def _rewrite(orig: relax.Expr, call: relax.Call) -> relax.Expr:
    """``orig`` (what the matcher hands back: the call, or a variable bound to it) as a reduction."""
    axes = global_window_axes(call)
    if axes is None:
        return orig
    return REDUCE[call.op.name](call.args[0], axis=axes, keepdims=True)


@relax.transform.function_pass(opt_level=0, name="ext.GlobalPoolToReduce")
class GlobalPoolToReduce:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        for op in REDUCE:
            pool = is_op(op)(wildcard())
            func = rewrite_call(pool, lambda orig, m, pool=pool: _rewrite(orig, m[pool]), func)
        return func


__all__ = ["GlobalPoolToReduce", "global_window_axes"]
