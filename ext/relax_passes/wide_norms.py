"""Layer, group and instance norms of a dtype the stock legalization refuses, as Relax arithmetic.

TOPI's ``layer_norm``, ``group_norm`` and ``instance_norm`` take float32 and float16 only
("only support float32 and float16 for now"), so a float64 model with a norm failed to build.
``DecomposeWideNorms`` writes each such norm out in its own dtype::

    d = x - mean(x, axes);  y = d / sqrt(mean(d * d, axes) + eps) * gamma + beta

(the group norm over ``x`` reshaped to ``(N, G, C / G, ...)``). The norms of float32 and float16
are left to ext's kernels. A NaN anywhere in a normalized group gives NaN in its outputs, as
in PyTorch.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import has_op, mutate_functions, op_name

#: dtypes the stock legalization of the norms takes
NATIVE = ("float32", "float16")
NORMS = ("relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.instance_norm")


def _normalized(bb, x, axes: list[int], eps: float):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (population variance, as the norms take)."""
    dtype = str(x.ty.dtype)
    d = bb.emit(relax.op.subtract(x, bb.emit(relax.op.mean(x, axes, keepdims=True))))
    var = bb.emit(relax.op.mean(bb.emit(relax.op.multiply(d, d)), axes, keepdims=True))
    root = bb.emit(relax.op.sqrt(bb.emit(relax.op.add(var, relax.const(eps, dtype)))))
    return bb.emit(relax.op.divide(d, root))


def _affine(bb, y, gamma, beta, attrs, shape: list[int]):
    """``y * gamma + beta`` with both reshaped to ``shape`` (1 but on their own axes)."""
    if attrs.scale:
        y = bb.emit(relax.op.multiply(y, bb.emit(relax.op.reshape(gamma, shape))))
    if attrs.center:
        y = bb.emit(relax.op.add(y, bb.emit(relax.op.reshape(beta, shape))))
    return y


def decompose(bb, call: relax.Call):
    """The norm ``call`` as arithmetic, or None (an input without a static rank, a layout
    not handled: a group norm whose channels are not axis 1)."""
    x, gamma, beta = call.args
    a = call.attrs
    ty = x.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    rank = len(ty.shape)
    axes = sorted(int(i) % rank for i in a.axes)
    eps = float(a.epsilon)
    name = op_name(call)
    if name == "relax.nn.layer_norm":
        shape = [ty.shape[i] if i in axes else 1 for i in range(rank)]
        return _affine(bb, _normalized(bb, x, axes, eps), gamma, beta, a, shape)
    channel = int(a.channel_axis) % rank
    shape = [ty.shape[i] if i == channel else 1 for i in range(rank)]
    if name == "relax.nn.instance_norm":
        return _affine(bb, _normalized(bb, x, axes, eps), gamma, beta, a, shape)
    groups = int(a.num_groups)
    if channel != 1 or axes != list(range(2, rank)):
        return None
    dims = list(ty.shape)
    grouped = bb.emit(relax.op.reshape(x, [dims[0], groups, dims[1] // groups, *dims[2:]]))
    y = _normalized(bb, grouped, list(range(2, rank + 1)), eps)
    return _affine(bb, bb.emit(relax.op.reshape(y, dims)), gamma, beta, a, shape)


@mutator
class _Decompose(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if op_name(call) not in NORMS or str(call.args[0].ty.dtype) in NATIVE:
            return call
        new = decompose(self.builder_, call)
        return call if new is None else new


def DecomposeWideNorms() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """See the module doc."""
    def run(mod, _ctx):
        return mutate_functions(_Decompose(mod), mod) if has_op(mod, *NORMS) else mod
    return tvm.transform.module_pass(run, opt_level=0, name="ext.DecomposeWideNorms")


__all__ = ["DecomposeWideNorms", "decompose"]
