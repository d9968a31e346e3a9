"""Run a pattern rewrite with a function's large constants lifted out as parameters.

``relax.dpl.rewrite_call``'s cost grows with the bound constants' size (the
rewrite's result is checked against its input between rounds, and a constant's
data takes part): on BERT-base (110 M parameters as constants) the four rewrites
of ``UnflattenLinear`` took 5.1 s, against 0.16 s with the weights lifted. Rewrites
that read only the types of their large operands (shapes, dtypes) run on the
lifted function; each lifted parameter is bound back to its constant afterwards.
"""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

_Const = tvm.ir.expr.Constant

#: constants with at least this many elements are lifted (scalars and small tables, which
#: rewrites may read by value, stay in place)
MIN_LIFTED_ELEMENTS = 4096


def _elements(const) -> int:
    n = 1
    for d in const.value.shape:
        n *= int(d)
    return n


@mutator
class _Lift(PyExprMutator):
    def __init__(self):
        super().__init__()
        self.params: dict = {}  # constant handle -> (var, constant)

    def visit_generic_const_(self, op):
        if not hasattr(op.value, "shape") or _elements(op) < MIN_LIFTED_ELEMENTS:
            return op
        key = op.__chandle__()
        if key not in self.params:
            self.params[key] = (relax.Var(f"lifted{len(self.params)}", op.ty), op)
        return self.params[key][0]


def rewrite_lifted(func: relax.Function, rewrite: Callable[[relax.Function], relax.Function]) -> relax.Function:
    """``rewrite(func)`` computed on ``func`` with its large constants as extra parameters."""
    lift = _Lift()
    body = lift.visit_expr(func.body)
    if not lift.params:
        return rewrite(func)
    extra = [var for var, _ in lift.params.values()]
    lifted = relax.Function(list(func.params) + extra, body, func.ret_ty, func.is_pure, func.attrs)
    out = rewrite(lifted)
    if out.same_as(lifted):
        return func
    return out.bind_params({var: const for var, const in lift.params.values()})


def LiftedPass(inner: tvm.transform.Pass) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """``inner`` (a stock rewrite over ``rewrite_call`` that reads only types of large operands,
    such as ``RemoveRedundantReshape``) run on each Relax function with its large constants
    lifted: on BERT-large's bound weights ``RemoveRedundantReshape`` took 3.6 s."""

    def transform(mod, _ctx):
        out = mod
        for gv, func in mod.functions_items():
            if not isinstance(func, relax.Function):
                continue

            def run(lifted, gv=gv):
                scratch = out.clone()
                scratch.update_func(gv, lifted)
                return inner(scratch)[gv]

            new = rewrite_lifted(func, run)
            if not new.same_as(func):
                out = out.clone()
                out.update_func(gv, new)
        return out

    return tvm.transform.module_pass(transform, opt_level=0, name=f"ext.Lifted.{inner.info.name}")
