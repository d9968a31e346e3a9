"""``cummax`` / ``cummin`` on targets other than the CPU: ``ExpandRunningExtremes``.

The importer emits a running extreme as one ``call_tir`` to a sequential scan
(``topi_kernels.scan``: a parallel loop over the lines of the axis, a serial one along it), a
host kernel. A GPU runs kernels with bound threads only, so for it this pass replaces the call
by data-parallel Relax ops: ``ceil(log2 n)`` rounds of ``out[j] = pick(out[j - s], out[j])`` for
s = 1, 2, 4, ... (static sizes only; a symbolic axis is refused by name). The CPU keeps the
scan: the rounds read the last one several times and their fused kernel's expressions grew
with the rounds' product (9 s to build a 6 x 13 ``cummax``).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import mutate_functions

#: the PrimFunc attribute the importer's scan carries: ``"max"`` or ``"min"``, and its axis
KIND_ATTR, AXIS_ATTR = "ext.running_extreme", "ext.running_extreme_axis"


def log_step_extreme(emit, x, dim: int, larger: bool):
    """``(values, indices)`` of ``cummax`` (``larger``) / ``cummin`` of ``x`` along ``dim`` in
    Relax ops, ``emit`` binding each: a later element equal to the running extreme takes its
    place, NaN beats every number and a later NaN an earlier one (as in PyTorch)."""
    if any(not isinstance(d, tvm.tirx.IntImm) for d in x.ty.shape):
        raise NotImplementedError("cummax/cummin on this target: symbolic sizes are not supported (static shapes only)")
    shape = [int(d) for d in x.ty.shape]
    n, dt = shape[dim], str(x.ty.dtype)
    floating = "float" in dt
    idx_shape = [n if i == dim else 1 for i in range(len(shape))]
    values = x
    index = emit(relax.op.broadcast_to(relax.op.reshape(relax.op.arange(0, n, 1, "int64"), idx_shape), shape))
    compare = relax.op.greater_equal if larger else relax.op.less_equal
    step = 1
    while step < n:
        lead = [step if i == dim else d for i, d in enumerate(shape)]
        # the element ``step`` before; in front of the first ones an element every pick passes over
        fill = relax.op.full(lead, relax.const(float("-inf") if larger else float("inf"), dt) if floating
                             else relax.const(-(2 ** 31) if larger else 2 ** 31 - 1, dt), dt)
        before = emit(relax.op.concat([fill, relax.op.strided_slice(values, [dim], [0], [n - step])], dim))
        before_at = emit(relax.op.concat([relax.op.zeros(lead, "int64"),
                                          relax.op.strided_slice(index, [dim], [0], [n - step])], dim))
        keep = compare(values, before)
        if floating:  # a NaN takes the place of anything, a NaN's place is taken by NaNs only
            keep = relax.op.logical_or(relax.op.isnan(values),
                                       relax.op.logical_and(relax.op.logical_not(relax.op.isnan(before)), keep))
        keep = emit(keep)
        values = emit(relax.op.where(keep, values, before))
        index = emit(relax.op.where(keep, index, before_at))
        step *= 2
    return relax.Tuple([values, index])


@mutator
class _Expand(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if getattr(call.op, "name", None) != "relax.call_tir":
            return call
        func = self.mod_[call.args[0]] if isinstance(call.args[0], relax.GlobalVar) else None
        kind = func.attrs.get(KIND_ATTR) if func is not None and func.attrs else None
        if kind is None:
            return call
        return log_step_extreme(self.builder_.emit, call.args[1][0], int(func.attrs[AXIS_ATTR]), str(kind) == "max")

    def run(self):
        if not any(isinstance(f, tvm.tirx.PrimFunc) and f.attrs and KIND_ATTR in f.attrs
                   for _, f in self.mod_.functions_items()):
            return self.mod_  # no running extreme: the module as it came (most builds)
        return relax.transform.DeadCodeElimination()(mutate_functions(self, self.mod_))


def ExpandRunningExtremes() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: scan ``call_tir``s of running extremes -> data-parallel Relax ops (non-CPU targets)."""
    return tvm.transform.module_pass(lambda mod, _ctx: _Expand(mod).run(), opt_level=0,
                                     name="ext.ExpandRunningExtremes")
