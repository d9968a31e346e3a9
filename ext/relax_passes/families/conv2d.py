"""The conv2d anchor: ``relax.nn.conv2d(x, w)`` and its workload.

Any static 4-D conv2d is matched, whatever its layouts: candidates decline
the ones they cannot run (with the reason in the report) and the composite
goes back to stock lowering. A ``scale`` (the squeeze-and-excitation gate) varies along the
batch and channel axes, ``(N, C, 1, 1)``. The bias of a conv is a tensor that varies along
the output's channel axis only, e.g. ``(1, C, 1, 1)`` or ``(C, 1, 1)`` for
NCHW and ``(C,)`` for NHWC, so ``channel_axis`` is read from the anchor's
``out_layout``. A blocked conv (``data_layout = out_layout = "NCHW{b}c"``, from
``BlockChannels``) has 5-D activations and its per-channel tensors are ``(1, C/b, 1, 1, b)``.

Workload: ``shapes = [x, w, *extras]`` in their own layouts; attrs
``strides``, ``padding`` (top, left, bottom, right), ``dilation``, ``groups``,
``data_layout``, ``kernel_layout``, ``out_shape`` and ``w_const`` (the weight
is a compile-time constant, so its transforms are folded away).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ...workload import Workload, channel_block
from . import Composite, Family, dtype, register_family, static_shape


def _anchor():
    x, w = wildcard(), wildcard()
    anchor = is_op("relax.nn.conv2d")(x, w)
    return anchor, {"anchor": anchor, "x": x, "w": w}


def _rank(expr, rank: int) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and ty.shape is not None and len(ty.shape) == rank


def _check(variant: str, ann: dict) -> bool:
    a = ann["anchor"].attrs
    rank_in = 5 if channel_block(a.data_layout) else 4  # NCHW{b}c: (N, C/b, H, W, b)
    rank_out = 5 if channel_block(a.out_layout or a.data_layout) else 4
    return _rank(ann["x"], rank_in) and _rank(ann["w"], 4) and _rank(ann["anchor"], rank_out)


def _channel_axis(anchor):
    attrs = anchor.attrs
    layout = str(attrs.out_layout or attrs.data_layout)
    if channel_block(layout):
        return (1, 4)  # a per-channel tensor of a blocked output: (1, C/b, 1, 1, b)
    return layout.index("C") if "C" in layout and len(layout) == 4 else 1


def _batch_axis(anchor) -> int:
    attrs = anchor.attrs
    layout = str(attrs.out_layout or attrs.data_layout)
    return layout.index("N") if "N" in layout and len(layout) == 4 else 0


def _extract(comp: Composite):
    conv = next(c for c in comp.calls if c.op.name == "relax.nn.conv2d")
    a = conv.attrs
    data, out = str(a.data_layout), str(a.out_layout)
    if out != data and not (channel_block(out) or channel_block(data)):
        return None
    x, w = comp.outer(conv.args[0]), comp.outer(conv.args[1])
    extras = comp.extras()
    body = comp.func.body.body if hasattr(comp.func.body, "body") else comp.func.body
    attrs = {"strides": tuple(int(s) for s in a.strides), "padding": tuple(int(p) for p in a.padding),
             "dilation": tuple(int(d) for d in a.dilation), "groups": int(a.groups),
             "data_layout": str(a.data_layout), "kernel_layout": str(a.kernel_layout),
             "out_shape": static_shape(conv), "w_const": isinstance(w, tvm.ir.expr.Constant)}
    if out != data:  # a blocked conv at a region's edge (BlockChannels); absent otherwise (log keys)
        attrs["out_layout"] = out
    wl = Workload("conv2d", [static_shape(x), static_shape(w)] + [static_shape(e) for e in extras],
                  [dtype(x), dtype(w)] + [dtype(e) for e in extras], dtype(body), attrs=attrs,
                  epilogue=comp.epilogue)
    return wl, [x, w] + extras, None


register_family(Family("conv2d", [("plain", _anchor)], _check, _extract, channel_axis=_channel_axis,
                       scale_axis=_batch_axis, covers="4-D input, weight and output"))
