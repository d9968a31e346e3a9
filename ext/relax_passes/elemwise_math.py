"""Lower float32 ``exp``/``sigmoid``/``tanh``/``silu``/``gelu``/``gelu_tanh``/``relu``/``clip``/
``leakyrelu`` calls to element-wise kernels built from ``topi_kernels.elemwise`` before stock
legalization.

Stock legalization turns these into ``T.exp``/``T.erf``/``T.tanh``, which the
LLVM backend lowers to one scalar libm call per element; the expansions here
are straight-line multiply-adds that vectorize. The kernels are plain
element-wise PrimFuncs, so ``FuseOps`` still fuses them with their neighbours
and the CPU fallback schedule vectorizes and parallelizes the fused chain.
``relu`` is here for NaN only: stock ``max(x, 0)`` lowers to ``x > 0 ? x : 0``
and turns NaN into 0, ext's ``x < 0 ? 0 : x`` keeps it as PyTorch does (same
single ``vmaxps``, operands swapped); ``clip`` (ReLU6, and the two clips of an imported
hardswish/hardsigmoid once ``merge_clips`` made them one) and ``leakyrelu`` likewise.
Other dtypes and ops are left to stock legalization. CPU only (the pipeline
runs it for LLVM targets).
"""
from __future__ import annotations

import functools

import tvm
from tvm import relax
from tvm.relax.dpl import is_op
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..topi_kernels.elemwise import UNARY, activation_compute, unary_compute
from ..workload import activation_name
from .mutate import mutate_functions


def prim_float(expr) -> float | None:
    """The number a constant scalar argument holds (``clip``'s bounds: an ``IntImm``/``FloatImm``);
    None when symbolic or not a scalar."""
    value = getattr(expr, "value", None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def commutative(op: str, a, b):
    """A DPL pattern for ``op(a, b)`` in either operand order (multiply, add)."""
    return is_op(op)(a, b) | is_op(op)(b, a)


def constant_scalar(expr) -> float | None:
    """The value of a one-element Relax constant (None otherwise)."""
    value = getattr(expr, "value", None)  # a Relax constant holds a runtime Tensor
    if not isinstance(value, tvm.runtime.Tensor):
        return None
    data = value.numpy()
    return float(data.reshape(-1)[0]) if data.size == 1 else None


def is_constant(expr, want: float) -> bool:
    """``expr`` is a one-element constant within 1e-6 relative of ``want``."""
    v = constant_scalar(expr)
    return v is not None and abs(v - want) <= 1e-6 * abs(want)


def parametric_activation(call) -> str | None:
    """The epilogue activation name of a ``relax.clip`` / ``relax.nn.leakyrelu`` call with constant
    parameters (``"clip:0:6"``, ``"leaky_relu:0.1"``), None for anything else."""
    op = getattr(call.op, "name", None) if isinstance(call, relax.Call) else None
    if op == "relax.clip" and len(call.args) == 3:
        lo, hi = prim_float(call.args[1]), prim_float(call.args[2])
        if lo is None or hi is None or not lo <= hi:
            return None
        return activation_name("clip", lo, hi)
    if op == "relax.nn.leakyrelu":
        return activation_name("leaky_relu", float(call.attrs.alpha))
    return None


@mutator
class _Lower(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        op = getattr(call.op, "name", None)
        act = parametric_activation(call)
        if (op not in UNARY or len(call.args) != 1) and act is None:
            return call
        ty = call.args[0].ty
        if not isinstance(ty, relax.TensorType) or str(ty.dtype) != "float32" or ty.shape is None:
            return call
        name = "ext_" + op.rsplit(".", 1)[1]
        compute = functools.partial(activation_compute, act) if act else functools.partial(unary_compute, op)
        return self.builder_.call_te(compute, call.args[0], primfunc_name_hint=name)

    def run(self):
        return mutate_functions(self, self.mod_)


def LowerElementwiseMath() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: vectorizable float32 transcendental element-wise ops (see module doc)."""
    return tvm.transform.module_pass(lambda mod, _ctx: _Lower(mod).run(), opt_level=0,
                                     name="ext.LowerElementwiseMath")
