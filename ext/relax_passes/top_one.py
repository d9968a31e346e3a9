"""A top-1 whose indices nobody reads is a max (or min) reduction: ``TopOneToReduce``.

``torch.max(x, dim)`` returns values and indices; PyTorch's exporter keeps both, and TVM's
translator writes it as ``topk(x, k=1, ret_type="both")``. Hiera pools its mask units with
``x.max(dim=1).values``: the indices die, but ``topk`` runs the stock sort lowering, 23 ms of
Hiera-B's 74 (onnxruntime's ReduceMax: 0.5 ms). Where every reader of the top-1 takes its
values, they become ``max(x, axis, keepdims=True)`` (``min`` for the smallest) and the
``topk`` is left for dead-code elimination. ext's reductions keep NaN as PyTorch's ``max``
does (``topi_kernels/reduce.py``); ties do not matter to the values. A top-1 whose indices are
read stays as it is. With ``keepdim=True`` the translator packs ``(values, indices)`` into a new
tuple and reads its field 0, which stock ``CanonicalizeBindings`` leaves: such reads are taken
from the tuple's field first, so the indices die.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import has_op, mutate_functions, op_name, var_uses


def _values_only(func: relax.Function) -> dict:
    """Variables bound to a top-1 whose every reader takes field 0 -> the ``topk`` call."""
    var2val = relax.analysis.get_var2val(func)
    uses = var_uses(func)
    tops = {v: c for v, c in var2val.items()
            if op_name(c) == "relax.topk" and int(c.attrs.k) == 1 and str(c.attrs.ret_type) == "both"}
    first = {}
    for val in var2val.values():
        if isinstance(val, relax.TupleGetItem) and val.tuple_value in tops and val.index == 0:
            first[val.tuple_value] = first.get(val.tuple_value, 0) + 1
    return {v: c for v, c in tops.items() if first.get(v, 0) == uses[v]}


@mutator
class _ReadFields(PyExprMutator):
    """``(a, b)[0]`` -> ``a`` where the tuple is a variable bound to a tuple expression."""

    def __init__(self, mod=None):
        super().__init__(mod)
        self.var2val: dict = {}

    def visit_function_(self, func):
        self.var2val = relax.analysis.get_var2val(func)
        return super().visit_function_(func)

    def visit_tuple_getitem_(self, op):
        tup = self.var2val.get(op.tuple_value)
        if isinstance(tup, relax.Tuple):
            return self.visit_expr(tup.fields[op.index])
        return super().visit_tuple_getitem_(op)


@mutator
class _TopOne(PyExprMutator):
    def __init__(self, mod=None):
        super().__init__(mod)
        self.tops: dict = {}

    def visit_function_(self, func):
        self.tops = _values_only(func)
        return super().visit_function_(func)

    def visit_tuple_getitem_(self, op):
        call = self.tops.get(op.tuple_value)
        if call is None:
            return super().visit_tuple_getitem_(op)
        reduce = relax.op.max if bool(call.attrs.largest) else relax.op.min
        return reduce(self.visit_expr(call.args[0]), axis=[int(call.attrs.axis)], keepdims=True)


def TopOneToReduce() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: the values of a top-1 read alone become a reduction (module docstring)."""
    def run(mod, _ctx):
        if not has_op(mod, "relax.topk"):
            return mod
        mod = relax.transform.DeadCodeElimination()(mutate_functions(_ReadFields(mod), mod))
        return mutate_functions(_TopOne(mod), mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.TopOneToReduce")


__all__ = ["TopOneToReduce"]
