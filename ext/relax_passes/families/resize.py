"""The resize2d anchor: ``relax.image.resize2d(x, size)`` (no epilogue chains).

Workload: ``shapes = [x]``; attrs ``method``, ``coordinate_transformation_mode``,
``rounding_method``, ``layout`` and ``out_shape``.
"""
from __future__ import annotations

from tvm import relax, tirx
from tvm.relax.dpl import is_op, wildcard

from ...workload import Workload
from . import Composite, Family, dtype, register_family, static_shape

OP = "relax.image.resize2d"


def _resize():
    x = wildcard()
    anchor = is_op(OP)(x, wildcard())
    return anchor, {"anchor": anchor, "x": x}


def _check(variant: str, ann: dict) -> bool:
    """A 4-D input and a static output size: a symbolic size stays a plain ``resize2d`` for stock
    legalization (no candidate takes one, and a declined composite, inlined back, hands its size
    over as a variable, which ``LegalizeOps`` cannot read: YOLO with a dynamic image size)."""
    ty, out = ann["x"].ty, ann["anchor"].ty
    return (isinstance(ty, relax.TensorType) and ty.shape is not None and len(ty.shape) == 4
            and isinstance(out, relax.TensorType) and out.shape is not None
            and all(isinstance(d, tirx.IntImm) for d in out.shape.values))


def _extract(comp: Composite):
    call = next(c for c in comp.calls if c.op.name == OP)
    a = call.attrs
    x = comp.outer(call.args[0])
    attrs = {"method": str(a.method), "coordinate_transformation_mode": str(a.coordinate_transformation_mode),
             "rounding_method": str(a.rounding_method), "layout": str(a.layout), "out_shape": static_shape(call)}
    return Workload("resize2d", [static_shape(x)], [dtype(x)], dtype(call), attrs=attrs), [x], None


register_family(Family("resize2d", [("resize", _resize)], _check, _extract, chains=False, covers="4-D input"))
