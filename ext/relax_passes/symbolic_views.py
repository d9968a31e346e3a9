"""Reshapes of run-time-sized tensors stay views of their input.

Stock legalization turns every ``reshape`` (and ``squeeze``, ``expand_dims``,
``flatten``) into a copy kernel; ``RewriteDataflowReshape`` turns a standalone
one back into a view only where it proves the kernel a pure reshape. With
symbolic extents it cannot: the flat index is a chain of floor divisions and
modulos by products of symbolic sizes, the copy stays, and LLVM took more than
10 minutes over that index arithmetic (ShuffleNet's channel shuffle with a
run-time image height and width; the static build has none of it).

``legalize_passes`` gives the backend's legalization passes with its
``LegalizeOps`` told to leave such an op a ``relax.reshape`` to the output's
shape: the VM runs it as a view (no kernel, no copy), and Relax's memory
planning knows a reshape shares its input's storage. Static shapes legalize
as before (a reshape fused into its neighbours' kernel costs nothing there).
"""
from __future__ import annotations

import tvm
from tvm import relax, tirx

from .legalize_fixes import custom_legalizations

#: ops that only reinterpret a contiguous tensor's shape
VIEW_OPS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")


def _symbolic_out_shape(call: relax.Call):
    """The call's output shape when it is known and has a symbolic extent, else None."""
    ty = call.ty
    shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr):
        return None
    return shape if any(not isinstance(d, tirx.IntImm) for d in shape.values) else None


def _as_view(default):
    """A legalization of a view op: ``relax.reshape`` where the output is symbolic, else ``default``."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call):
        shape = _symbolic_out_shape(call)
        if shape is None:
            return default(bb, call)
        if call.op == tvm.ir.Op.get("relax.reshape"):
            return call
        return relax.op.reshape(call.args[0], shape)

    return legalize


def legalize_passes(passes: list) -> list:
    """``passes`` (a backend's legalization passes) with each ``LegalizeOps`` replaced by one
    that keeps symbolic view ops as views (see the module doc) and legalizes what the stock
    legalization crashes on (``legalize_fixes``), without a default schedule."""
    custom = {op: _as_view(tvm.ir.Op.get(op).get_attr("FLegalize")) for op in VIEW_OPS}
    custom.update(custom_legalizations())  # stock crashes (legalize_fixes)
    # the stock GPU backends end with dlight's default schedule: ext's FallbackSchedule, which
    # follows, applies the same rules after its own (tir_schedules/cuda/fallback.py)
    return [relax.transform.LegalizeOps(customize_legalize_map=custom) if p.info.name == "LegalizeOps" else p
            for p in passes if p.info.name != "ApplyDefaultSchedule"]
