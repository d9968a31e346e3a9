"""Strided slices proved in bounds by the function's symbol ranges.

``torch.export`` slices a model's buffers by the input's length (BERT's
``position_ids[:, :seq]``) and the importer keeps NumPy's clamping
(``assume_inbound=False``), so the result's extent is ``min(s, 512)`` even when the function
declares ``s <= 512`` (attrs ``tir_var_lower_bound`` / ``tir_var_upper_bound``). One
``min`` in a shape makes every op after it shape-unknown (``R.Tensor(ndim=3)``), and stock
legalization of a layer norm on such a tensor fails. Where the bounds prove every
``0 <= begin <= end <= extent`` (unit strides), the clamp is a no-op: the slice is
rewritten with ``assume_inbound=True`` and the shapes after it are inferred again (``s``).

In a function with symbolic shapes, negative slice axes are also counted from the front:
stock legalization of a slice with symbolic bounds indexed the shape with ``-1`` and stopped
(transformers' decoders slice position ids along ``-1`` by the sequence length).
"""
from __future__ import annotations

from tvm import relax, tirx
from tvm.ir import PrimType, Range
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym import Analyzer


def _bounded_analyzer(func) -> Analyzer | None:
    attrs = func.attrs or {}
    lo = dict(attrs["tir_var_lower_bound"].items()) if "tir_var_lower_bound" in attrs else {}
    hi = dict(attrs["tir_var_upper_bound"].items()) if "tir_var_upper_bound" in attrs else {}
    if not hi:
        return None
    ana = Analyzer()
    for var in relax.analysis.defined_symbolic_vars(func):
        name = var.name
        if name in hi:
            low = int(lo.get(name, 0))
            ana.bind(var, Range(low, int(hi[name]) + 1))
    return ana


@mutator
class _Slices(PyExprMutator):
    def __init__(self, ana: Analyzer | None, mod=None):
        super().__init__(mod)
        self.ana = ana

    def visit_shape_expr_(self, op):
        if self.ana is None:
            return op
        return relax.ShapeExpr([self.ana.simplify(v) for v in op.values])

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if getattr(call.op, "name", None) != "relax.strided_slice":
            return call
        call = _positive_axes(call)
        if self.ana is None or call.attrs.assume_inbound:
            return call
        shape = getattr(call.args[0].ty, "shape", None)
        if shape is None or len(call.args) < 4:
            return call
        fields = [_ints(a) for a in call.args[1:]]
        if any(f is None for f in fields):
            return call
        axes, begin, end = fields[:3]
        strides = fields[3] if len(fields) > 3 else [1] * len(axes)
        for axis, b, e, st in zip(axes, begin, end, strides):
            extent = shape[int(axis)]
            if not (self.ana.can_prove_equal(st, 1) and self.ana.can_prove(b >= 0) and self.ana.can_prove(b <= e)
                    and self.ana.can_prove(e <= extent)):
                return call
        return relax.op.strided_slice(*call.args[:5], assume_inbound=True)


def _positive_axes(call):
    """The slice with its negative axes counted from the front (``-1`` -> ``ndim - 1``): stock
    legalization of a slice with symbolic bounds indexes the shape with the axis as given and
    stopped at ``-1`` (every transformers decoder with a symbolic sequence length)."""
    ndim = getattr(call.args[0].ty, "ndim", -1)
    axes = _ints(call.args[1])
    if ndim is None or ndim < 0 or axes is None or not any(_const(a) is not None and _const(a) < 0 for a in axes):
        return call
    fixed = [tirx.IntImm(str(a.ty.dtype), ndim + _const(a)) if _const(a) is not None and _const(a) < 0 else a for a in axes]
    return relax.op.strided_slice(call.args[0], relax.Tuple(fixed), *call.args[2:5],
                                  assume_inbound=call.attrs.assume_inbound)


def _const(expr):
    return int(expr.value) if hasattr(expr, "value") and isinstance(expr.value, int) else None


def _ints(arg):
    """The PrimExprs of a slice argument (a tuple of PrimValues or a shape), None otherwise."""
    if isinstance(arg, relax.ShapeExpr):
        return list(arg.values)
    items = getattr(arg, "fields", None)  # a relax tuple of PrimExprs (TVM 0.27: no PrimValue wrapper)
    if items is None or not all(isinstance(getattr(item, "ty", None), PrimType) for item in items):
        return None
    return list(items)


@relax.transform.function_pass(opt_level=0, name="ext.ProveSliceBounds")
class ProveSliceBounds:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        ana = _bounded_analyzer(func)
        if ana is None and not relax.analysis.defined_symbolic_vars(func):
            return func  # static shapes: nothing to prove, and stock slices take negative axes
        return _Slices(ana, mod).visit_expr(func)


__all__ = ["ProveSliceBounds"]
