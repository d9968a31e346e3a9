"""The matmul anchor: ``matmul(x, w)`` or ``matmul(x, permute_dims(w))``
(a PyTorch linear weight), and its workload.

N-D ``x`` with a 2-D ``w`` is flattened to rows (a reshape, free at run time)
so the 2-D kernels see one ``(M, K)`` matrix; batched pairs keep their batch
dims for ``matmul.batch``.
"""
from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ...flops import matmul_out_shape
from ...workload import Workload
from . import Composite, Family, dtype, register_family, static_shape


def _plain():
    x, w = wildcard(), wildcard()
    anchor = is_op("relax.matmul")(x, w)
    return anchor, {"anchor": anchor, "x": x, "w": w}


def _transposed():
    x, w = wildcard(), wildcard()
    wt = is_op("relax.permute_dims")(w)
    anchor = is_op("relax.matmul")(x, wt)
    return anchor, {"anchor": anchor, "x": x, "w": w, "wt": wt}


def _check(variant: str, ann: dict) -> bool:
    x, w = ann["x"], ann["w"]
    if not (isinstance(x.ty, relax.TensorType) and isinstance(w.ty, relax.TensorType)):
        return False
    if x.ty.shape is None or w.ty.shape is None or len(x.ty.shape) < 2 or len(w.ty.shape) < 2:
        return False
    if variant == "transposed":
        axes = ann["wt"].attrs.axes
        nd = len(w.ty.shape)
        want = list(range(nd - 2)) + [nd - 1, nd - 2]
        if axes is None and nd != 2:
            return False
        if axes is not None and [int(a) for a in axes] != want:
            return False
    return True


def _extract(comp: Composite):
    mm = next(c for c in comp.calls if c.op.name == "relax.matmul")
    x_in, w_in = mm.args[0], comp.value(mm.args[1])
    transposed = isinstance(w_in, relax.Call) and w_in.op.name == "relax.permute_dims"
    w_param = w_in.args[0] if transposed else w_in
    x, w = comp.outer(x_in), comp.outer(w_param)
    extras = comp.extras()
    out_shape = static_shape(comp.func.body.body if hasattr(comp.func.body, "body") else comp.func.body)
    xs, ws = static_shape(x), static_shape(w)
    args, post = [x, w] + extras, None
    shapes = [xs, ws] + [static_shape(e) for e in extras]
    flat = len(xs) > 2 and len(ws) == 2 and all(isinstance(d, int) for d in xs)
    if flat:  # rows of an N-D activation against one weight: a 2-D problem
        rows = math.prod(xs[:-1])
        n = out_shape[-1]
        args[0] = relax.op.reshape(x, (rows, xs[-1]))
        shapes[0] = (rows, xs[-1])
        for i, e in enumerate(extras):
            es = static_shape(e)
            if es == tuple(out_shape):
                args[2 + i], shapes[2 + i] = relax.op.reshape(e, (rows, n)), (rows, n)
            elif math.prod(es) == n:
                args[2 + i], shapes[2 + i] = relax.op.reshape(e, (n,)), (n,)
            else:
                return None
        post = lambda y: relax.op.reshape(y, out_shape)  # noqa: E731
    attrs = {"transpose_b": transposed, "b_const": isinstance(w, tvm.ir.expr.Constant)}
    wl = Workload("matmul", shapes, [dtype(x), dtype(w)] + [dtype(e) for e in extras],
                  dtype(comp.func.body.body) if hasattr(comp.func.body, "body") else "float32",
                  attrs=attrs, epilogue=comp.epilogue)
    wl = wl.with_(attrs=dict(attrs, out_shape=matmul_out_shape(wl)) if wl.is_static else attrs)
    return wl, args, post


register_family(Family("matmul", [("transposed", _transposed), ("plain", _plain)], _check, _extract,
                       covers="operands of rank >= 2; a transposed weight swaps its last two axes"))
