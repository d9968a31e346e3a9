"""Merge narrow conv groups in pairs into one vector-wide group (CPU): ``MergeNarrowGroups``.

A grouped conv whose groups hold half a vector of input channels (8 on AVX-512:
RegNet-Y's group width, ResNeXt-50's second stage) runs the blocked kernel on
half-width vectors. Two neighbouring groups side by side are one group of a whole
vector with a block-diagonal weight (zeros where a channel of one reads the other),
which is twice the multiply-adds on full vectors and, blocked, joins the channels'
region (``BlockChannels``). Measured with the direct kernel alone (2 threads):
208 channels at 14x14, 26 groups 64 us, merged into 13 33 us; 256 at 28x28 242
against 137 us; 48 at 112x112 676 against 424 us. Quarter-vector groups (4 channels,
four merged) lost (406 against 455 us at 128x56x56), so only pairs are merged.

Applies to ``conv2d`` (NCHW / OIHW, static shapes, a constant weight) with ``groups``
even, group input width ``lanes / 2`` and channels in whole vectors; the weight is
re-laid out at compile time, the output is the same (the added products are exact zeros).
One difference: a NaN or infinity in one group's input reaches its merged neighbour's
outputs at the same pixels (``0 x NaN``); in RegNet and ResNeXt a dense 1x1 conv follows
and mixes every channel of those pixels anyway, as Winograd spreads one over its tile.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .mutate import static_dims


def merged_weight(w: np.ndarray, groups: int, k: int = 2) -> np.ndarray:
    """``(O, k * Cg, KH, KW)`` block-diagonal weight of ``groups // k`` groups from ``(O, Cg, KH, KW)``:
    output channel ``o`` of original group ``g`` reads its own ``Cg`` channels, at offset
    ``(g % k) * Cg`` inside the merged group, and zeros from its neighbours'."""
    O, cg = w.shape[:2]
    og = O // groups
    out = np.zeros((O, k * cg) + w.shape[2:], w.dtype)
    for part in range(k):
        rows = (np.arange(O) // og) % k == part
        out[rows, part * cg:(part + 1) * cg] = w[rows]
    return out


#: most groups merged into one: four quarter-vector groups lost alone (above) and measured even
#: in ResNeXt-50 32x4d end to end (0.976x of unmerged, as two: noise), so pairs only
MAX_MERGE = 2


def _rewrite(call, matches, x, w, lanes: int):
    a = call.attrs
    xs, ws = static_dims(matches[x]), static_dims(matches[w])
    groups = int(a.groups)
    k = lanes // ws[1] if ws is not None and ws[1] > 1 and lanes % ws[1] == 0 else 0
    if (xs is None or len(xs) != 4 or (str(a.data_layout), str(a.kernel_layout)) != ("NCHW", "OIHW")
            or not 2 <= k <= MAX_MERGE or groups % k or xs[1] % lanes or ws[0] % groups
            or str(matches[w].ty.dtype) != "float32"):
        return call
    weight = relax.const(merged_weight(matches[w].value.numpy(), groups, k))
    return relax.op.nn.conv2d(matches[x], weight, strides=a.strides, padding=a.padding, dilation=a.dilation,
                              groups=groups // k, data_layout="NCHW", kernel_layout="OIHW",
                              out_layout=str(a.out_layout), out_dtype=a.out_dtype)


def MergeNarrowGroups(lanes: int) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: half-vector conv groups merged in pairs (``lanes``: f32 vector width)."""
    x, w = wildcard(), is_const()
    pattern = is_op("relax.nn.conv2d")(x, w)
    return relax.transform.function_pass(
        lambda func, _mod, _ctx: rewrite_call(pattern, lambda call, m: _rewrite(call, m, x, w, lanes), func),
        opt_level=0, name="ext.MergeNarrowGroups")
