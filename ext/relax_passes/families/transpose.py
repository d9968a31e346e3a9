"""Layout-transform anchors: ``R.permute_dims`` and ``R.layout_transform`` whose
effect is one batched transpose ``(B, R, S, E) -> (B, S, R, E)`` (see
``topi_kernels/layout.py``): NCHW <-> NHWC, NCHW <-> NCHW{c}, NHWC <-> NCHW{c},
attention head swaps. Other permutations and padded layout transforms are
left to stock lowering.

The family is ``layout_transform`` (its workloads' op and its candidates' prefix); the
module is named ``transpose`` so that it loads after the anchor families (``conv2d``,
``matmul``...): ``FuseEpilogues`` tries families in module-name order, and
``matmul(x, permute_dims(w))`` must stay the matmul family's.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ...topi_kernels.layout import canonical_permutation, split_axes_form
from ...workload import Workload
from . import Composite, Family, dtype, register_family, single_op_anchor, static_shape


def view(call) -> tuple | None:
    """``(B, R, S, E)`` for a permute_dims / layout_transform call, or None."""
    x = call.args[0]
    if not isinstance(x.ty, relax.TensorType) or x.ty.shape is None:
        return None
    shape = static_shape(x)
    if not all(isinstance(d, int) for d in shape) or len(shape) == 0:
        return None
    if call.op.name == "relax.permute_dims":
        axes = call.attrs.axes
        perm = list(range(len(shape)))[::-1] if axes is None else [int(a) for a in axes]
        return canonical_permutation(shape, perm)
    if getattr(call.attrs, "pad_value", None) is not None or getattr(call.attrs, "axis_separators", None):
        return None
    form = split_axes_form(shape, call.attrs.index_map)
    return None if form is None else canonical_permutation(*form)


def _check(variant: str, ann: dict) -> bool:
    if isinstance(ann["x"], tvm.ir.expr.Constant):  # FoldConstant does it at compile time
        return False
    return view(ann["anchor"]) is not None


def _extract(comp: Composite):
    call = next(c for c in comp.calls if c.op.name in ("relax.permute_dims", "relax.layout_transform"))
    x = comp.outer(call.args[0])
    dims = view(call)
    if x is None or dims is None:
        return None
    B, R, S, E = dims
    out_shape = static_shape(comp.func.body.body)
    wl = Workload("layout_transform", [dims], [dtype(x)], dtype(x),
                  attrs={"out_shape": (B, S, R, E), "src": static_shape(x)})
    return wl, [relax.op.reshape(x, dims)], (lambda y: relax.op.reshape(y, out_shape))


register_family(Family("layout_transform", [("permute", single_op_anchor("relax.permute_dims")),
                                     ("layout", single_op_anchor("relax.layout_transform"))], _check, _extract,
                       chains=False,
                       covers="static permutations that swap two groups of axes, (B, R, S, E) -> (B, S, R, E), "
                              "without padding"))
