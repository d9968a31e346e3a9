"""Fold an explicit zero pad of the spatial axes into the conv2d that reads it.

Importers of TensorFlow-style models (MobileNet and EfficientNet in
``transformers``, "same" padding with stride 2) write ``conv2d(pad(x))``; the
pad then runs as its own stock-lowered kernel over the whole activation (7% of
MobileNetV2's time) and hides the conv's real padding from the candidates.
conv2d's ``padding`` attribute (top, left, bottom, right) takes any amounts, so
``conv2d(pad(x, h: (a, b), w: (c, d)), padding=p)`` is ``conv2d(x, padding=p +
(a, c, b, d))``. Only constant-zero pads of the H and W axes (NCHW or NHWC) with
non-negative widths fold; the pad itself stays for any other user (dead-code
elimination drops it when none is left).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.analysis import remove_all_unused
from tvm.relax.dpl import is_op, rewrite_call, wildcard


def _spatial_pads(pad_attrs, layout: str) -> tuple | None:
    """(top, left, bottom, right) added by a pad call, or None if it is not a foldable zero pad."""
    if str(pad_attrs.pad_mode) != "constant" or float(pad_attrs.pad_value) != 0.0:
        return None
    widths = [int(v) for v in pad_attrs.pad_width]
    if len(widths) != 2 * len(layout) or min(widths) < 0:
        return None
    pads = {axis: (widths[2 * i], widths[2 * i + 1]) for i, axis in enumerate(layout)}
    if any(pads[a] != (0, 0) for a in layout if a not in "HW"):
        return None
    (top, bottom), (left, right) = pads["H"], pads["W"]
    return top, left, bottom, right


def _rewrite(call, matches, x, pad, w):
    attrs = call.attrs
    layout = str(attrs.data_layout)
    if sorted(layout) != sorted("NCHW"):
        return call
    extra = _spatial_pads(matches[pad].attrs, layout)
    if extra is None:
        return call
    padding = [int(p) + e for p, e in zip(attrs.padding, extra)]
    return relax.op.nn.conv2d(matches[x], matches[w], strides=attrs.strides, padding=padding,
                              dilation=attrs.dilation, groups=attrs.groups, data_layout=layout,
                              kernel_layout=str(attrs.kernel_layout), out_layout=str(attrs.out_layout),
                              out_dtype=attrs.out_dtype)


@tvm.transform.module_pass(opt_level=0, name="ext.FoldPadIntoConv")
class FoldPadIntoConv:
    """Module pass: ``conv2d(pad(x))`` -> ``conv2d(x)`` with the pad in ``padding``."""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        x, w = wildcard(), wildcard()
        pad = is_op("relax.nn.pad")(x)
        pattern = is_op("relax.nn.conv2d")(pad, w)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                new = rewrite_call(pattern, lambda call, m: _rewrite(call, m, x, pad, w), func)
                if not new.same_as(func):
                    mod[gv] = remove_all_unused(new)
        return mod
