"""Arithmetic and comparisons on bool tensors, in 8-bit integers: ``BoolArithmetic``.

PyTorch programs combine masks with arithmetic: ``torch.isfinite`` decomposes to
``(x == x) * (|x| != inf)``, ``torch.count_nonzero`` of a mask to ``mask != False``, and
``a + b`` on bools is an "or". TVM's LLVM backend takes a bool operand of ``*`` or of a
comparison for a float and fails to build (``fcmp`` on an ``i1``; a float multiply check).
Each such call is computed on ``int8`` copies of its operands; an arithmetic result goes back
to bool (nonzero is true), which is PyTorch's answer: ``True + True`` is ``True``.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import has_op, mutate_functions, op_name

ARITHMETIC = ("relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum")
COMPARISON = ("relax.equal", "relax.not_equal", "relax.less", "relax.less_equal", "relax.greater",
              "relax.greater_equal")


def _is_bool(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.dtype == "bool"


@mutator
class _BoolArithmetic(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = op_name(call)
        if name not in ARITHMETIC + COMPARISON or not all(_is_bool(a) for a in call.args):
            return call
        as_int = [relax.op.astype(a, "int8") for a in call.args]
        out = relax.Call(call.op, as_int, call.attrs)
        return relax.op.astype(out, "bool") if name in ARITHMETIC else out


def BoolArithmetic() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: bool operands of arithmetic and comparisons computed as int8 (module doc)."""
    def run(mod, _ctx):
        if not has_op(mod, *ARITHMETIC, *COMPARISON):
            return mod
        return mutate_functions(_BoolArithmetic(mod), mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.BoolArithmetic")


__all__ = ["BoolArithmetic"]
