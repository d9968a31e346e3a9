"""Order ops on floats with NaN where PyTorch puts it: ``LowerArgExtremes``, ``NaNLastSort``.

PyTorch (and NumPy) order a NaN above every number: it is ``argmax``'s and ``argmin``'s answer,
the last element of an ascending ``sort``, the first of a descending one, picked first by
``topk`` (and last by ``topk(largest=False)``).

TVM's argmax keeps the running best with ``value > best``, which a NaN never passes, so a NaN
was skipped (``argmax([1, nan, 3])`` gave 2, PyTorch and NumPy 1: a classifier fed a NaN
reported a class). Float ``argmax``/``argmin`` calls of static shape are computed by
``topi_kernels.reduce.arg_extreme`` instead (a NaN is the extreme, ties and NaNs go to the first
index); the fallback schedule parallelizes it like the stock one. Integer inputs and symbolic
shapes keep stock lowering. CPU only (the pipeline runs it for LLVM targets).

TVM's ``sort``/``argsort``/``topk`` compare with ``<``, for which a NaN is neither below nor above
anything: the order around it came out scrambled (``argsort([nan, 3, 1])`` gave ``[0, 2, 1]``).
``NaNLastSort`` sorts the key ``where(isnan(x), +inf, x)`` instead and reads the values back from
``x`` at the sorted indices (``gather_elements``), so they keep their NaNs. A NaN ties with a
+inf in that key: where a row holds both, they keep their original order among themselves
(PyTorch puts the NaNs after the infinities). All targets; floats only.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..topi_kernels.reduce import arg_extreme
from .mutate import has_op, mutate_functions, op_name, static_dims

LARGEST = {"relax.argmax": True, "relax.argmin": False}


@mutator
class _Lower(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        largest = LARGEST.get(op_name(call))
        x = call.args[0] if call.args else None
        if largest is None or static_dims(x) is None or not str(x.ty.dtype).startswith(("float", "bfloat")):
            return call
        axis = None if call.attrs.axis is None else int(call.attrs.axis)
        return self.builder_.call_te(arg_extreme, x, axis, bool(call.attrs.keepdims), largest,
                                     primfunc_name_hint="ext_" + op_name(call).rsplit(".", 1)[1])


SORTS = ("relax.sort", "relax.argsort", "relax.topk")


def _nan_largest(x):
    return relax.op.where(relax.op.isnan(x), relax.const(float("inf"), str(x.ty.dtype)), x)


@mutator
class _Sort(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        name, x = op_name(call), (call.args[0] if call.args else None)
        if name not in SORTS or not str(getattr(getattr(x, "ty", None), "dtype", "")).startswith(("float", "bfloat")):
            return call
        a = call.attrs
        key = _nan_largest(x)
        if name == "relax.argsort":
            return relax.op.argsort(key, int(a.axis), bool(a.descending), str(a.dtype))
        if name == "relax.sort":
            idx = relax.op.argsort(key, int(a.axis), bool(a.descending), "int64")
            return relax.op.gather_elements(x, idx, int(a.axis))
        ret = str(a.ret_type)
        top = self.builder_.emit(relax.op.topk(key, int(a.k), int(a.axis), "both", bool(a.largest), str(a.dtype)))
        idx = relax.TupleGetItem(top, 1)
        values = relax.op.gather_elements(x, idx, int(a.axis))
        return values if ret == "values" else idx if ret == "indices" else relax.Tuple([values, idx])


def NaNLastSort() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: float sort/argsort/topk with NaN above every number (module doc)."""
    def run(mod, _ctx):
        if not has_op(mod, *SORTS):
            return mod
        return mutate_functions(_Sort(mod), mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.NaNLastSort")


def LowerArgExtremes() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: float argmax/argmin that take a NaN as the extreme (module doc)."""
    def run(mod, _ctx):
        if not has_op(mod, *LARGEST):
            return mod
        return mutate_functions(_Lower(mod), mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.LowerArgExtremes")


__all__ = ["LowerArgExtremes", "NaNLastSort"]
