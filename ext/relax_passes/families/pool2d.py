"""The pool2d anchor: ``relax.nn.max_pool2d`` / ``relax.nn.avg_pool2d`` (no epilogue chains).

Workload: ``shapes = [x]``; attrs ``kind`` (``"max"``/``"avg"``), ``pool_size``,
``strides``, ``padding`` (t, l, b, r), ``dilation``, ``ceil_mode``,
``count_include_pad``, ``layout`` and ``out_shape``.
"""
from __future__ import annotations

from tvm import relax

from ...workload import Workload
from . import Composite, Family, dtype, register_family, single_op_anchor, static_shape

OPS = {"relax.nn.max_pool2d": "max", "relax.nn.avg_pool2d": "avg"}


def _check(variant: str, ann: dict) -> bool:
    ty = ann["x"].ty
    return isinstance(ty, relax.TensorType) and ty.shape is not None and len(ty.shape) in (4, 5)  # 5: NCHW{b}c


def _extract(comp: Composite):
    call = next(c for c in comp.calls if c.op.name in OPS)
    a = call.attrs
    x = comp.outer(call.args[0])
    attrs = {"kind": OPS[call.op.name], "pool_size": tuple(int(v) for v in a.pool_size),
             "strides": tuple(int(v) for v in a.strides), "padding": tuple(int(v) for v in a.padding),
             "dilation": tuple(int(v) for v in a.dilation), "ceil_mode": bool(a.ceil_mode),
             "count_include_pad": bool(getattr(a, "count_include_pad", False)),
             "layout": str(a.layout) if str(a.out_layout) == str(a.layout) else f"{a.layout}->{a.out_layout}",
             "out_shape": static_shape(call)}
    return Workload("pool2d", [static_shape(x)], [dtype(x)], dtype(call), attrs=attrs), [x], None


register_family(Family("pool2d", [(kind, single_op_anchor(op)) for op, kind in OPS.items()], _check, _extract,
                       chains=False, covers="4-D input (5-D: NCHW{b}c)"))
