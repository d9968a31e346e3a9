"""The attention anchor: ``matmul(softmax(matmul(q, k^T) [* scale] [+ mask]), v)`` (CPU).

Matched as importers emit it after ``Canonicalize`` (3-D operands with the heads folded into the
batch from ``from_torch``; 4-D ``(batch, heads, ...)`` ones from ``from_onnx``, viewed as 3-D):
the key transpose may be a ``permute_dims`` of the last two axes inside the match (then the
kernel reads the keys as ``(B, N, d)``), another ``permute_dims`` (run first, as before) or a
tensor already ``(B, d, N)``; the scores may be reshaped to
4-D and back around the scale, mask and softmax; the scale is a one-element constant
(multiply or divide); then optionally a ``where(cond, scores, fill)`` (or ``where(cond, fill,
scores)``, a ``masked_fill``: GPT-Neo's causal mask) with a constant fill, and up to two additive
masks (T5: a position bias, then the padding mask; summed into one before the kernel). Each mask
and condition's leading axes are those of the scores up to some axis and 1 after it (``(1, 1,
1, N)`` padding masks, ``(batch, 1, 1, N)`` per sequence, ``(1, H, M, N)`` relative-position
biases, ``(1, 1, M, N)`` causal masks).

Fused only for ``MIN_KEYS <= N <= MAX_KEYS`` keys and value widths of whole 8-lane vectors
(why: at the constants). Workload ``attention``: shapes ``[q (B, M, d), k (B, N, d) or
(B, d, N), v (B, N, dv)]`` plus
``mask (G, Mm, Nn)`` when there is one, then the condition as a float32 ``keep`` tensor of the
same form (attr ``fill``) when there is one; attrs ``k_layout`` (``"nk"``/``"kn"``), ``scale``
(None: no scale op), ``scale_op`` and ``out_shape``. The family only runs on CPU targets (see
``FuseEpilogues``): elsewhere the matmuls and the softmax keep their own families.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from ...host_cpu import cpu_info
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
#: vector registers the CPU needs for the fused kernel to pay: with AVX2's 16 its register tiles
#: are too small (2 query rows), and the separate kernels ran 0.87-0.99x its time on an AVX2 Zen 4
#: guest (whole models, interleaved: DeiT-S 0.87, Whisper-tiny encoder 0.92, DINOv2-S and ViT-B
#: 0.99); 32 (AVX-512): fused, as measured above
MIN_VECTOR_REGISTERS = 32


def fuses_on(target) -> bool:
    return cpu_info(target).vector_registers >= MIN_VECTOR_REGISTERS


def _attention():
    q, k, kt, v, c = wildcard(), wildcard(), wildcard(), wildcard(), is_const()
    mask, mask2, cond, fill = wildcard(), wildcard(), wildcard(), is_const()
    perm = is_op("relax.permute_dims")(k)
    qk = is_op("relax.matmul")(q, perm | kt)
    s4 = is_op("relax.reshape")(qk, wildcard())
    s = s4 | qk
    scaled = is_op("relax.multiply")(s, c) | is_op("relax.multiply")(c, s) | is_op("relax.divide")(s, c)
    s = scaled | s
    s = is_op("relax.where")(cond, s, fill) | is_op("relax.where")(cond, fill, s) | s  # masked_fill
    s = is_op("relax.add")(s, mask) | is_op("relax.add")(mask, s) | s
    s = is_op("relax.add")(s, mask2) | is_op("relax.add")(mask2, s) | s  # T5: position bias, then the mask
    sm = is_op("relax.nn.softmax")(s)
    p3 = is_op("relax.reshape")(sm, wildcard())
    anchor = is_op("relax.matmul")(p3 | sm, v)
    return anchor, {"anchor": anchor, "q": q, "k": k, "kt": kt, "perm": perm, "qk": qk, "s4": s4, "scale": c,
                    "mask": mask, "mask2": mask2, "cond": cond, "fill": fill, "sm": sm, "p3": p3, "v": v}


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


def compress_mask(mask: np.ndarray, neutral: float = 0.0) -> np.ndarray | None:
    """A constant ``(G, Mm, Nn)`` mask with the axes along which it does not vary cut to one
    (a padding mask built per query row, a bias equal for every head); None when it is all
    ``neutral`` (0 for an additive mask: adding it changes nothing softmax can see, only ``-0.0``
    to ``+0.0``; 1 for a keep mask). DINOv2 adds a zero ``(730, 730)`` mask at 384x384, which
    the kernel otherwise read for every head."""
    if (mask == neutral).all():
        return None
    for axis in range(3):
        first = np.take(mask, [0], axis=axis)
        if mask.shape[axis] > 1 and np.array_equal(mask, np.broadcast_to(first, mask.shape), equal_nan=True):
            mask = first
    return np.ascontiguousarray(mask)


def _constant(expr) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr.value, "numpy") else None


def _mask_operand(masks: list, lead: tuple, M: int, N: int):
    """The additive mask as ``(expr, (G, Mm, Nn))``: two masks (T5's position bias, then the
    padding mask) are summed first, which rounds once where the graph rounds twice; constants
    sum at compile time and are compressed (None: all zeros)."""
    groups = mask_groups(np.broadcast_shapes(*(static_shape(m) for m in masks)), lead, M, N)
    values = [_constant(m) for m in masks]
    if all(v is not None for v in values):
        mask = compress_mask(sum(v.astype("float32") for v in values).reshape(groups))
        return None if mask is None else (relax.const(mask), mask.shape)
    total = masks[0] if len(masks) == 1 else relax.op.add(masks[0], masks[1])
    return relax.op.reshape(total, groups), groups


def _keep_operand(cond, keep_where_true: bool, lead: tuple, M: int, N: int):
    """``where``'s condition as a float32 keep mask ``(expr, (G, Mm, Nn))``, 1.0 keeping the
    score (negated when the scores are ``where``'s third operand); a constant one compressed
    (None: it keeps every score)."""
    groups = mask_groups(static_shape(cond), lead, M, N)
    value = _constant(cond)
    if value is not None:
        keep = value.astype(bool)
        keep = compress_mask((keep if keep_where_true else ~keep).astype("float32").reshape(groups), neutral=1.0)
        return None if keep is None else (relax.const(keep), keep.shape)
    flag = cond if keep_where_true else relax.op.logical_not(cond)
    return relax.op.reshape(relax.op.astype(flag, "float32"), groups), groups


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
    masks = [ann[n] for n in ("mask", "mask2") if n in ann]
    if masks:
        if any(_static(m) is None or dtype(m) != "float32" for m in masks):
            return False
        try:
            both = np.broadcast_shapes(*(_static(m) for m in masks))
        except ValueError:
            return False
        if mask_groups(both, scores[:-2], M, N) is None:
            return False
    if "cond" in ann:
        cs = _static(ann["cond"])
        if cs is None or dtype(ann["cond"]) != "bool" or mask_groups(cs, scores[:-2], M, N) is None:
            return False
        if constant_scalar(ann["fill"]) is None or dtype(ann["fill"]) != "float32":
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
    lead4 = static_shape(sm.args[0])[:-2]
    adds = [c for c in calls if c.op.name == "relax.add"]  # each: the scores and one mask
    mask = _mask_operand([next(comp.outer(a) for a in add.args if comp.outer(a) is not None) for add in adds],
                         lead4, M, N) if adds else None
    keep = fill = None
    where = next((c for c in calls if c.op.name == "relax.where"), None)
    if where is not None:
        on_true = comp.outer(where.args[1]) is None  # where(cond, scores, fill)
        keep = _keep_operand(comp.outer(where.args[0]), on_true, lead4, M, N)
        fill = None if keep is None else constant_scalar(comp.outer(where.args[2 if on_true else 1]))
    for expr, shape in (t for t in (mask, keep) if t is not None):
        args.append(expr)
        shapes.append(tuple(int(d) for d in shape))
    attrs = {"k_layout": layout, "scale": scale, "scale_op": scale_op, "out_shape": (B, M, dv)}
    if fill is not None:
        attrs["fill"] = fill
    wl = Workload("attention", shapes, [dtype(q)] * 3 + ["float32"] * (len(args) - 3),  # checked equal
                  dtype(q), attrs=attrs)
    out_shape = lead + (M, dv)
    return wl, args, None if len(lead) == 1 else (lambda y: relax.op.reshape(y, out_shape))


register_family(Family("attention", [("sdpa", _attention)], _check, _extract, chains=False, cpu_only=True,
                       fuses_on=fuses_on,
                       covers="float32 q, k, v of static shapes and equal batch axes, a constant scale, a masked_fill "
                              "and up to two masks shared along trailing batch axes"))
