"""Float comparisons, max/min and zero products that answer for NaN as PyTorch does:
``NaNSafeCompare``.

IEEE (and PyTorch) say every comparison with a NaN is false except ``!=``, which is true, so
``!(a < b)`` is true for a NaN. TVM gets two of these wrong, both silently:

* its LLVM backend emits ``a != b`` on floats as an *ordered* not-equal (``fcmp one``):
  ``nan != x`` is false. ``x != x`` (the NaN test) never finds one: ``torch.nanmean``, which
  counts its elements as ``~(x != x)``, divided by the count with the NaNs in it;
* its simplifier rewrites a negated comparison into the opposite one, ``!(a < b)`` into
  ``b <= a`` and ``!(a == b)`` into ``a != b``, which differ exactly at NaN. The attention of
  ``F.scaled_dot_product_attention`` with a mask decomposes to a "fully masked row" test,
  ``~any(~(scores == -inf))``: a query row of NaNs came out as zeros instead of NaNs. It also
  calls ``x == x`` true (``x <= x``, ``x >= x``), false for a NaN.

Here, on floating-point operands, ``not_equal(a, b)`` becomes ``isnan(a) | isnan(b) | (a != b)``
and ``logical_not(cmp(a, b))`` becomes the opposite comparison ``| isnan(a) | isnan(b)``: what
IEEE computes, in a form the simplifier leaves alone (LLVM folds it back to one unordered
compare); ``x == x`` becomes ``~isnan(x)``. ``maximum(a, b)`` / ``minimum`` of floats lower to
``a > b ? a : b``, which answers ``b`` for a NaN ``a`` (``torch.maximum`` answers NaN from either
side): they become ``isnan(a) ? a : maximum(a, b)``. A float times a constant 0 (a decomposed
softshrink's "else 0" branch is ``x * 0``) is folded to 0 by the TIR simplifier, NaN and
infinities too: it becomes ``isnan(x) | isinf(x) ? NaN : 0`` (the sign of a zero is not kept);
a float divided by a constant 0 stopped the build ("Divide by zero" in the TIR builder): it
becomes ``x * inf`` with the zero's sign (``0 / 0`` and ``nan / 0`` NaN, as IEEE says).
Integer comparisons are left as they are. A negation over a combination of comparisons
(``~(a < b & c < d)``) is not rewritten.
"""
from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import has_op, mutate_functions, op_name

#: a comparison -> the one true where it is false, NaN aside
OPPOSITE = {"relax.less": relax.op.greater_equal, "relax.less_equal": relax.op.greater,
            "relax.greater": relax.op.less_equal, "relax.greater_equal": relax.op.less,
            "relax.equal": relax.op.not_equal}

#: comparisons the simplifier calls true for a tensor against itself, false for NaN
REFLEXIVE = ("relax.equal", "relax.less_equal", "relax.greater_equal")


def _float_operands(call) -> bool:
    return all(isinstance(getattr(a, "ty", None), relax.TensorType) and str(a.ty.dtype).startswith(("float", "bfloat"))
               for a in call.args)


def _or_nan(cmp, a, b):
    """``cmp | isnan(a) | isnan(b)`` (one ``isnan`` when both are the same tensor)."""
    nan = relax.op.isnan(a) if a.same_as(b) else relax.op.logical_or(relax.op.isnan(a), relax.op.isnan(b))
    return relax.op.logical_or(nan, cmp)


def _zero_constant(x, c):
    """The value of ``c`` when it is a one-element constant 0 that does not widen ``x``; None otherwise."""
    value = c.value.numpy() if isinstance(c, tvm.ir.expr.Constant) else None
    if value is not None and value.size == 1 and float(value.reshape(-1)[0]) == 0.0 and value.ndim <= len(x.ty.shape):
        return float(value.reshape(-1)[0])
    return None


def _times_zero(a, b):
    """The tensor operand of ``a * b`` when the other is a constant 0 (``_zero_constant``)."""
    for x, c in ((a, b), (b, a)):
        if _zero_constant(x, c) is not None:
            return x
    return None


@mutator
class _Compare(PyExprMutator):
    def __init__(self, mod=None):
        super().__init__(mod)
        self.var2val: dict = {}

    def visit_function_(self, func):
        self.var2val = relax.analysis.get_var2val(func)
        return super().visit_function_(func)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = op_name(call)
        if name == "relax.not_equal" and _float_operands(call):
            a, b = call.args
            return _or_nan(relax.op.not_equal(a, b), a, b)
        if name in ("relax.maximum", "relax.minimum") and _float_operands(call):
            a = call.args[0]
            return relax.op.where(relax.op.isnan(a), a, call)
        if name == "relax.multiply" and _float_operands(call):
            zero_times = _times_zero(*call.args)
            if zero_times is not None:
                dt = zero_times.ty.dtype
                special = relax.op.logical_or(relax.op.isnan(zero_times), relax.op.isinf(zero_times))
                return relax.op.where(special, relax.const(float("nan"), dt), relax.const(0.0, dt))
        if name == "relax.divide" and _float_operands(call):
            zero = _zero_constant(*call.args)
            if zero is not None:  # IEEE: x / +-0 is x * +-inf
                x = call.args[0]
                return relax.op.multiply(x, relax.const(math.copysign(math.inf, zero), x.ty.dtype))
        if name in REFLEXIVE and call.args[0].same_as(call.args[1]) and _float_operands(call):
            return relax.op.logical_not(relax.op.isnan(call.args[0]))
        if name == "relax.logical_not":
            inner = self.var2val.get(call.args[0], call.args[0])
            opposite = OPPOSITE.get(op_name(inner))
            if opposite is not None and _float_operands(inner):
                a, b = (self.visit_expr(x) for x in inner.args)
                return _or_nan(opposite(a, b), a, b)
        return call


def NaNSafeCompare() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: float ``!=`` and negated comparisons as IEEE computes them (module doc)."""
    def run(mod, _ctx):
        if not has_op(mod, "relax.not_equal", "relax.logical_not", "relax.maximum", "relax.minimum", "relax.multiply",
                       "relax.divide", *REFLEXIVE):
            return mod
        return mutate_functions(_Compare(mod), mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.NaNSafeCompare")


__all__ = ["NaNSafeCompare"]
