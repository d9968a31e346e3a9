"""The conv2d anchor: ``relax.nn.conv2d(x, w)`` and its workload.

Any static 4-D conv2d is matched, whatever its layouts: candidates decline
the ones they cannot run (with the reason in the report) and the composite
goes back to stock lowering. A ``scale`` (the squeeze-and-excitation gate) varies along the
batch and channel axes, ``(N, C, 1, 1)``. The bias of a conv is a tensor that varies along
the output's channel axis only, e.g. ``(1, C, 1, 1)`` or ``(C, 1, 1)`` for
NCHW and ``(C,)`` for NHWC, so ``channel_axis`` is read from the anchor's
``out_layout``.

Workload: ``shapes = [x, w, *extras]`` in their own layouts; attrs
``strides``, ``padding`` (top, left, bottom, right), ``dilation``, ``groups``,
``data_layout``, ``kernel_layout``, ``out_shape`` and ``w_const`` (the weight
is a compile-time constant, so its transforms are folded away).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ...workload import Workload
from . import Composite, Family, dtype, register_family, static_shape


def _anchor():
    x, w = wildcard(), wildcard()
    anchor = is_op("relax.nn.conv2d")(x, w)
    return anchor, {"anchor": anchor, "x": x, "w": w}


def _is_4d(expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and ty.shape is not None and len(ty.shape) == 4


def _check(variant: str, ann: dict) -> bool:
    return _is_4d(ann["x"]) and _is_4d(ann["w"]) and _is_4d(ann["anchor"])


def _channel_axis(anchor) -> int:
    attrs = anchor.attrs
    layout = str(attrs.out_layout or attrs.data_layout)
    return layout.index("C") if "C" in layout and len(layout) == 4 else 1


def _batch_axis(anchor) -> int:
    attrs = anchor.attrs
    layout = str(attrs.out_layout or attrs.data_layout)
    return layout.index("N") if "N" in layout and len(layout) == 4 else 0


def _extract(comp: Composite):
    conv = next(c for c in comp.calls if c.op.name == "relax.nn.conv2d")
    a = conv.attrs
    if str(a.out_layout) != str(a.data_layout):
        return None
    x, w = comp.outer(conv.args[0]), comp.outer(conv.args[1])
    extras = comp.extras()
    body = comp.func.body.body if hasattr(comp.func.body, "body") else comp.func.body
    attrs = {"strides": tuple(int(s) for s in a.strides), "padding": tuple(int(p) for p in a.padding),
             "dilation": tuple(int(d) for d in a.dilation), "groups": int(a.groups),
             "data_layout": str(a.data_layout), "kernel_layout": str(a.kernel_layout),
             "out_shape": static_shape(conv), "w_const": isinstance(w, tvm.ir.expr.Constant)}
    wl = Workload("conv2d", [static_shape(x), static_shape(w)] + [static_shape(e) for e in extras],
                  [dtype(x), dtype(w)] + [dtype(e) for e in extras], dtype(body), attrs=attrs,
                  epilogue=comp.epilogue)
    return wl, [x, w] + extras, None


register_family(Family("conv2d", [("plain", _anchor)], _check, _extract, channel_axis=_channel_axis,
                       scale_axis=_batch_axis, covers="4-D input, weight and output"))
