"""The reduction anchors ``R.sum``, ``R.mean``, ``R.max``, ``R.min`` (no epilogue chain).

Size-1 axes are dropped and neighbouring axes of the same kind merged; when
the reduced axes then form one contiguous group, the input is viewed as
``(O, R, I)`` (a free reshape) and the output reshaped back (``keepdims`` or
not). Axis sets that stay split (e.g. axes 0 and 2 of a 3-D tensor with
non-unit sizes) are left to stock lowering.
"""
from __future__ import annotations

import math

from tvm import relax, tirx
from tvm.sym import Analyzer  # tvm.arith in older TVM

from ...workload import Workload
from . import Composite, Family, dtype, register_family, single_op_anchor, static_shape

OPS = {"relax.sum": "sum", "relax.mean": "mean", "relax.max": "max", "relax.min": "min"}


def canonical(shape, axes) -> tuple | None:
    """``(O, R, I)`` for reducing ``axes`` of ``shape``, or None when the reduced axes stay split."""
    nd = len(shape)
    red = set(range(nd)) if axes is None else {int(a) % nd for a in axes}
    kinds = [(d, ax in red) for ax, d in enumerate(shape) if d != 1]
    pattern = "".join("R" if r else "K" for _, r in kinds)
    first, last = pattern.find("R"), pattern.rfind("R")
    if first >= 0 and "K" in pattern[first:last + 1]:
        return None
    if first < 0:
        return math.prod(d for d, _ in kinds), 1, 1
    O = math.prod(d for d, _ in kinds[:first])
    R = math.prod(d for d, _ in kinds[first:last + 1])
    I = math.prod(d for d, _ in kinds[last + 1:])
    return O, R, I


def _axes(call):
    return None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]


def _check(variant: str, ann: dict) -> bool:
    x = ann["x"]
    if not isinstance(x.ty, relax.TensorType) or x.ty.shape is None or len(x.ty.shape) == 0:
        return False
    shape = static_shape(x)
    if not all(isinstance(d, int) for d in shape):
        return symbolic_outer(x, _axes(ann["anchor"])) is not None
    return canonical(shape, _axes(ann["anchor"])) is not None


def _extract(comp: Composite):
    call = next(c for c in comp.calls if c.op.name in OPS)
    x = comp.outer(call.args[0])
    shape = static_shape(x)
    if not all(isinstance(d, int) for d in shape):
        return _extract_symbolic(comp, call, x)
    dims = canonical(shape, _axes(call))
    if dims is None:
        return None
    O, R, I = dims
    out_shape = static_shape(comp.func.body.body)
    wl = Workload("reduce", [dims], [dtype(x)], str(comp.func.body.body.ty.dtype),
                  attrs={"kind": OPS[call.op.name], "out_shape": (O, I)})
    return wl, [relax.op.reshape(x, dims)], (lambda y: relax.op.reshape(y, out_shape))


def symbolic_outer(x, axes):
    """``(outer axes, R, I)`` for reducing ``axes`` of ``x`` whose symbolic axes all come before the
    first reduced one (a batch): the canonical form with ``O`` their product. Reduced axes that
    are symbolic themselves must be the trailing ones (a global pool over a run-time image size:
    ``R`` their product, a PrimExpr, and ``I == 1``). None otherwise."""
    shape = static_shape(x)
    nd = len(shape)
    red = set(range(nd)) if axes is None else {int(a) % nd for a in axes}
    first = min(red) if red else nd
    if any(not isinstance(d, int) for d in shape[first:]):
        if red != set(range(first, nd)):
            return None
        R = tirx.IntImm("int64", 1)
        for i in range(first, nd):
            R = R * x.ty.shape[i]
        return [x.ty.shape[i] for i in range(first)], Analyzer().simplify(R), 1
    dims = canonical((2,) * min(first, 1) + tuple(shape[first:]), [a - first + min(first, 1) for a in red])
    if dims is None:
        return None
    return [x.ty.shape[i] for i in range(first)], dims[1], dims[2]


def _extract_symbolic(comp: Composite, call, x):
    """The canonical ``(O, R, I)`` workload with ``O`` the symbolic product of the outer axes."""
    from ..symbolic import dim_text

    found = symbolic_outer(x, _axes(call))
    if found is None:
        return None
    outer, R, I = found
    r_text = R if isinstance(R, int) else int(R) if isinstance(R, tirx.IntImm) else dim_text(R)
    O = tirx.IntImm("int64", 1)
    for d in outer:
        O = O * d
    O = Analyzer().simplify(O)
    o_text = int(O) if isinstance(O, tirx.IntImm) else dim_text(O)
    nd = len(x.ty.shape)
    axes = set(range(nd)) if _axes(call) is None else {a % nd for a in _axes(call)}
    keep = bool(call.attrs.keepdims)
    out_shape = [1 if i in axes else d for i, d in enumerate(x.ty.shape) if keep or i not in axes]
    wl = Workload("reduce", [(o_text, r_text, I)], [dtype(x)], str(comp.func.body.body.ty.dtype),
                  attrs={"kind": OPS[call.op.name], "out_shape": (o_text, I)})
    return wl, [relax.op.reshape(x, [O, R, I])], (lambda y: relax.op.reshape(y, out_shape))


register_family(Family("reduce", [(name.split(".")[1], single_op_anchor(op)) for op, name in
                                  [(op, "x." + k) for op, k in OPS.items()]], _check, _extract, chains=False,
                       covers="shapes whose reduced axes form one contiguous group once size-1 axes "
                              "are dropped, symbolic axes before the reduced ones or among trailing reduced ones"))
