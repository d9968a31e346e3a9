"""The softmax anchor: ``R.nn.softmax(x, axis=-1)`` (no epilogue chain).

The workload is the input flattened to ``(rows, n)``, softmax over the last
axis; a reshape in and out (free at run time) keeps the original shape.
Softmax over another axis is left to stock lowering.
"""
from __future__ import annotations

import math

from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ...workload import Workload
from ..symbolic import flatten_rows as flatten_symbolic
from . import Composite, Family, dtype, register_family, static_shape


def _softmax():
    x = wildcard()
    anchor = is_op("relax.nn.softmax")(x)
    return anchor, {"anchor": anchor, "x": x}


def _check(variant: str, ann: dict) -> bool:
    x, anchor = ann["x"], ann["anchor"]
    if not isinstance(x.ty, relax.TensorType) or x.ty.shape is None or len(x.ty.shape) == 0:
        return False
    return int(anchor.attrs.axis) in (-1, len(x.ty.shape) - 1)


def flatten_rows(x, shape):
    """``(reshaped x, rows, n)`` for an N-D tensor viewed as rows of its last axis."""
    rows, n = math.prod(shape[:-1]), shape[-1]
    return (x if len(shape) == 2 else relax.op.reshape(x, (rows, n))), rows, n


def _extract(comp: Composite):
    call = next(c for c in comp.calls if c.op.name == "relax.nn.softmax")
    x = comp.outer(call.args[0])
    shape = static_shape(x)
    if not all(isinstance(d, int) for d in shape):  # symbolic leading axes: rows named by their product
        arg, rows, n = flatten_symbolic(x)
        wl = Workload("softmax", [(rows, n)], [dtype(x)], dtype(x), attrs={"out_shape": (rows, n)})
        return wl, [arg], None if len(shape) == 2 else (lambda y: relax.op.reshape(y, x.ty.shape))
    arg, rows, n = flatten_rows(x, shape)
    wl = Workload("softmax", [(rows, n)], [dtype(x)], dtype(x), attrs={"out_shape": (rows, n)})
    post = None if len(shape) == 2 else (lambda y: relax.op.reshape(y, shape))
    return wl, [arg], post


register_family(Family("softmax", [("plain", _softmax)], _check, _extract, chains=False,
                       covers="softmax over the last axis"))
