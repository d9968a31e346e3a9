"""Legalizations of stock Relax ops that crash in TVM 0.27, given to ``LegalizeOps`` by
``symbolic_views.legalize_passes``.

``relax.full`` / ``relax.full_like`` with an infinite or NaN fill (``torch.full_like(x,
float("-inf"))``, Longformer's attention mask): the stock legalization hands ``topi.full`` the
call's dtype as a ``PrimType``, and ``topi.full`` tests ``"float" in dtype`` before accepting a
non-finite fill: ``TypeError: argument of type 'PrimType' is not iterable``. Here the same TOPI
call gets the dtype's name; every other fill legalizes as before.
"""
from __future__ import annotations

import math

import tvm
from tvm import relax, topi


def _full(default, like: bool):
    def legalize(bb: relax.BlockBuilder, call: relax.Call):
        fill, shape = call.args[1], (call.args[0].ty.shape if like else call.args[0])
        if isinstance(fill, tvm.ir.expr.Constant) and hasattr(fill.value, "numpy") and isinstance(
                shape, relax.ShapeExpr):
            value = fill.value.numpy().item()
            if isinstance(value, float) and not math.isfinite(value):
                return bb.call_te(topi.full, list(shape.values), str(call.ty.dtype), value,
                                  primfunc_name_hint="full_like" if like else "full")
        return default(bb, call)

    return legalize


def custom_legalizations() -> dict:
    """``{op name: legalization}`` for ``LegalizeOps(customize_legalize_map=...)``."""
    return {op: _full(tvm.ir.Op.get(op).get_attr("FLegalize"), like)
            for op, like in (("relax.full", False), ("relax.full_like", True))}
