"""The attention anchor: ``matmul(softmax(matmul(q, k^T) [* scale] [+ mask]), v)`` (CPU).

Matched as importers emit it after ``Canonicalize`` (3-D operands with the heads folded into the
batch from ``from_torch``; 4-D ``(batch, heads, ...)`` ones from ``from_onnx``, viewed as 3-D):
the key transpose may be a ``permute_dims`` of the last two axes inside the match (then the
kernel reads the keys as ``(B, N, d)``), another ``permute_dims`` (run first, as before) or a
tensor already ``(B, d, N)``; the scores may be reshaped to
4-D and back around the scale, mask and softmax; the scale is a one-element constant
(multiply or divide); the mask an additive tensor whose leading axes are those of the scores
up to some axis and 1 after it (``(1, 1, 1, N)`` padding masks, ``(batch, 1, 1, N)`` per
sequence, ``(1, H, M, N)`` relative-position biases, ``(1, 1, M, N)`` causal masks).

Fused only for ``MIN_KEYS <= N <= MAX_KEYS`` keys and value widths of whole 8-lane vectors
(why: at the constants). Workload ``attention``: shapes ``[q (B, M, d), k (B, N, d) or
(B, d, N), v (B, N, dv)]`` plus
``mask (G, Mm, Nn)`` when there is one; attrs ``k_layout`` (``"nk"``/``"kn"``), ``scale``
(None: no scale op), ``scale_op`` and ``out_shape``. The family only runs on CPU targets (see
``FuseEpilogues``): elsewhere the matmuls and the softmax keep their own families.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ...workload import Workload
from ..elemwise_math import constant_scalar
from . import Composite, Family, dtype, register_family, static_shape

#: longest key sequence fused: a task keeps two rows of scores per query row on its stack
MAX_KEYS = 16384
#: shortest key sequence fused. Below it a head's scores (at most 64 x 64 floats, 16 KB) stay in
#: L1 between the separate kernels, and the fused kernel's padded key panels cost more than
#: that saves: Swin-T's 49-key windows took 1.48 ms fused against 1.15 ms as matmul + softmax
#: + matmul (in the model, per-kernel profile); SegFormer's 64-key stage 0.35 against 0.41 ms.
MIN_KEYS = 64
#: the value width must be whole 8-lane vectors: the second product's register tile is built of
#: power-of-two vectors dividing it, so a 30- or 36-wide head (MobileViT) would run 2- or
#: 4-lane vectors (0.69 ms fused against 0.35 ms separate for MobileViT-XS's 30-wide heads)
VALUE_ALIGN = 8


def _attention():
    q, k, kt, v, mask, c = wildcard(), wildcard(), wildcard(), wildcard(), wildcard(), is_const()
    perm = is_op("relax.permute_dims")(k)
    qk = is_op("relax.matmul")(q, perm | kt)
    s4 = is_op("relax.reshape")(qk, wildcard())
    s = s4 | qk
    scaled = is_op("relax.multiply")(s, c) | is_op("relax.multiply")(c, s) | is_op("relax.divide")(s, c)
    s = scaled | s
    s = is_op("relax.add")(s, mask) | is_op("relax.add")(mask, s) | s
    sm = is_op("relax.nn.softmax")(s)
    p3 = is_op("relax.reshape")(sm, wildcard())
    anchor = is_op("relax.matmul")(p3 | sm, v)
    return anchor, {"anchor": anchor, "q": q, "k": k, "kt": kt, "perm": perm, "qk": qk, "s4": s4, "scale": c,
                    "mask": mask, "sm": sm, "p3": p3, "v": v}


def _static(expr) -> tuple | None:
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    shape = static_shape(expr)
    return shape if all(isinstance(d, int) for d in shape) else None


def mask_groups(mask_shape, lead: tuple, M: int, N: int) -> tuple | None:
    """``(G, Mm, Nn)`` of an additive mask against scores with leading axes ``lead`` (product B)
    and rows ``(M, N)``: the mask's leading axes (left-padded with 1) equal ``lead`` up to some
    axis and are 1 after it, so batch ``b`` reads mask group ``b // (B / G)``. None otherwise."""
    rank = len(lead) + 2
    if len(mask_shape) > rank:
        return None
    full = (1,) * (rank - len(mask_shape)) + tuple(mask_shape)
    *ml, Mm, Nn = full
    if Mm not in (1, M) or Nn not in (1, N):
        return None
    g = 0
    while g < len(ml) and ml[g] == lead[g]:
        g += 1
    if any(d != 1 for d in ml[g:]):
        return None
    return math.prod(lead[:g]), Mm, Nn


def compress_mask(mask: np.ndarray) -> np.ndarray | None:
    """A constant ``(G, Mm, Nn)`` mask with the axes along which it does not vary cut to one
    (a padding mask built per query row, a bias equal for every head); None when it is all
    zeros: adding it changes nothing softmax can see (only ``-0.0`` to ``+0.0``). DINOv2 adds
    a zero ``(730, 730)`` mask at 384x384, which the kernel otherwise read for every head."""
    if not mask.any():
        return None
    for axis in range(3):
        first = np.take(mask, [0], axis=axis)
        if mask.shape[axis] > 1 and np.array_equal(mask, np.broadcast_to(first, mask.shape), equal_nan=True):
            mask = first
    return np.ascontiguousarray(mask)


def _swaps_last_two(perm) -> bool:
    axes, rank = perm.attrs.axes, len(perm.ty.shape)
    return axes is not None and [int(a) for a in axes] == list(range(rank - 2)) + [rank - 1, rank - 2]


def _check(variant: str, ann: dict) -> bool:
    shapes = {n: _static(ann[n]) for n in ("q", "qk", "anchor", "v")}
    if any(s is None or len(s) < 3 or len(s) != len(shapes["q"]) for s in shapes.values()):
        return False
    rank, lead = len(shapes["q"]), shapes["q"][:-2]  # batch axes (ONNX keeps (batch, heads))
    if any(s[:-2] != lead for s in shapes.values()):
        return False
    (M, d), N, dv = shapes["q"][-2:], shapes["qk"][-1], shapes["anchor"][-1]
    B = math.prod(lead)
    if shapes["qk"][-2] != M or shapes["v"][-2:] != (N, dv) or shapes["anchor"][-2] != M:
        return False
    if not MIN_KEYS <= N <= MAX_KEYS or dv % VALUE_ALIGN:
        return False
    if _static(ann["perm"] if "perm" in ann else ann["kt"]) != lead + (d, N):
        return False
    if any(dtype(ann[n]) != "float32" for n in ("q", "v", "anchor", "k" if "perm" in ann else "kt")):
        return False
    scores = _static(ann["sm"])
    if scores is None or scores[-2:] != (M, N) or math.prod(scores[:-2]) != B:
        return False
    if int(ann["sm"].attrs.axis) not in (-1, len(scores) - 1):
        return False
    if "p3" in ann and _static(ann["p3"]) != lead + (M, N):
        return False
    if "scale" in ann and constant_scalar(ann["scale"]) is None:
        return False
    if "mask" in ann:
        ms = _static(ann["mask"])
        if ms is None or dtype(ann["mask"]) != "float32" or mask_groups(ms, scores[:-2], M, N) is None:
            return False
    return True


def _extract(comp: Composite):
    calls = comp.calls
    matmuls = [c for c in calls if c.op.name == "relax.matmul"]
    qk, pv = matmuls[0], matmuls[-1]
    sm = next(c for c in calls if c.op.name == "relax.nn.softmax")
    q, v = comp.outer(qk.args[0]), comp.outer(pv.args[1])
    kt = comp.value(qk.args[1])
    if not (isinstance(kt, relax.Call) and kt.op.name == "relax.permute_dims"):
        k, layout = comp.outer(qk.args[1]), "kn"
    elif _swaps_last_two(kt):
        k, layout = comp.outer(kt.args[0]), "nk"
    else:  # another permutation (ONNX: (batch, N, heads, d) -> (batch, heads, d, N)): done first
        k, layout = relax.op.permute_dims(comp.outer(kt.args[0]), kt.attrs.axes), "kn"
    scale, scale_op = None, "multiply"
    scaling = next((c for c in calls if c.op.name in ("relax.multiply", "relax.divide")), None)
    if scaling is not None:
        scale_op = scaling.op.name.split(".")[-1]
        const = next(comp.outer(a) for a in scaling.args if comp.outer(a) is not None
                     and constant_scalar(comp.outer(a)) is not None)
        scale = constant_scalar(const)
    lead, (M, d), (N, dv) = static_shape(q)[:-2], static_shape(q)[-2:], static_shape(v)[-2:]
    B = math.prod(lead)
    shapes = [(B, M, d), (B, N, d) if layout == "nk" else (B, d, N), (B, N, dv)]
    args = [x if len(lead) == 1 else relax.op.reshape(x, shape) for x, shape in zip((q, k, v), shapes)]
    add = next((c for c in calls if c.op.name == "relax.add"), None)
    if add is not None:
        mask = next(comp.outer(a) for a in add.args if comp.outer(a) is not None)  # the other is the scores
        groups = mask_groups(static_shape(mask), static_shape(sm.args[0])[:-2], M, N)
        if isinstance(mask, tvm.ir.expr.Constant) and hasattr(mask.value, "numpy"):
            mask = compress_mask(mask.value.numpy().reshape(groups))
            if mask is not None:
                args.append(relax.const(mask))
                shapes.append(mask.shape)
        else:
            args.append(relax.op.reshape(mask, groups))
            shapes.append(groups)
    attrs = {"k_layout": layout, "scale": scale, "scale_op": scale_op, "out_shape": (B, M, dv)}
    wl = Workload("attention", shapes, [dtype(q)] * 3 + (["float32"] if len(args) > 3 else []),  # checked equal
                  dtype(q), attrs=attrs)
    out_shape = lead + (M, dv)
    return wl, args, None if len(lead) == 1 else (lambda y: relax.op.reshape(y, out_shape))


register_family(Family("attention", [("sdpa", _attention)], _check, _extract, chains=False, cpu_only=True,
                       covers="float32 q, k, v of static shapes and equal batch axes, a constant scale and a mask shared "
                              "along trailing batch axes"))
