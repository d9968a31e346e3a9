"""Fold a constant per-channel affine chain after a conv2d or matmul into its weight and bias.

Rewrite, when every value of the chain has the chain as its only user::

    y = anchor(x, W); y1 = y + b; y2 = y1 * g; y3 = (y2 - m) / s ...
      -> anchor(x, W * scale[o]) + shift           (scale, shift: the chain's composition)

``b``, ``g``, ``m``, ``s`` are constants that vary along the anchor's output channels only (or
scalars); each step is ``+ c``, ``c +``, ``- c``, ``c -`` (the sign flips), ``* c``, ``c *`` or
``/ c``; after a matmul, reshapes that keep the channels last may sit between the steps
(LeViT flattens the rows for its BatchNorm1d). The anchor's weight is a constant: conv2d's ``O`` axis, matmul's last axis (also read
through ``permute_dims`` of a constant ``(N, K)`` weight, PyTorch's ``Linear``). Found in:
layer scale (ConvNeXt, BEiT, DINOv2, PoolFormer: ``gamma * (linear(x) + b)``), a BatchNorm1d
after a Linear written out by the importer (LeViT: ``(y - mean) / sqrt(var + eps) * w + b``).
The chain then runs as the anchor's bias epilogue, and a residual add or an activation after it
can fuse into the same kernel. A chain without a scale is left alone, and after the last scale
one add is taken, no more: ``clip(y + 3, 0, 6) / 6`` after a bias or a batch norm is hardsigmoid,
which the epilogue fusion matches only with its ``+ 3``.

Numerics: ``(x @ W) * g`` becomes ``x @ (W * g)``, one rounding in a different place (about an
ulp of the product); a NaN or infinity in ``x`` still reaches the same outputs, and a zero ``g``
still turns an infinite product into NaN (``inf * 0`` either way).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from .fold_batchnorm import conv_channel_axis
from .mutate import mutate_functions, op_name, static_dims, var_uses

#: the element-wise ops a chain step may be (with a constant as the other operand)
STEPS = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide"}


def _array(c) -> np.ndarray | None:
    """A relax constant's tensor as NumPy; None for anything else."""
    return c.value.numpy() if isinstance(c, Constant) and hasattr(c.value, "numpy") else None


def _weight(call, var2val):
    """How to rebuild the anchor ``call`` with its constant weight scaled along the output
    channels (``rebuild(x, scale)``), or None when the weight is no constant."""
    op, w = op_name(call), call.args[1]
    w = var2val.get(w, w)
    if op == "relax.nn.conv2d":
        layout = str(call.attrs.kernel_layout)
        arr = _array(w)
        if arr is None or "O" not in layout or arr.ndim != 4:
            return None
        axis = layout.index("O")
        return lambda x, s: relax.op.nn.conv2d(x, relax.const(_scaled(arr, s, axis)), *_conv_attrs(call.attrs))
    if op == "relax.matmul":
        arr = _array(w)
        if arr is not None and arr.ndim >= 2:  # (..., K, N): every batch's N columns
            return lambda x, s: relax.op.matmul(x, relax.const(_scaled(arr, s, arr.ndim - 1)), call.attrs.out_dtype)
        inner = var2val.get(w.args[0], w.args[0]) if op_name(w) == "relax.permute_dims" else None
        arr = _array(inner)
        if arr is not None and arr.ndim == 2 and [int(a) for a in (w.attrs.axes or [1, 0])] == [1, 0]:
            return lambda x, s: relax.op.matmul(
                x, relax.op.permute_dims(relax.const(_scaled(arr, s, 0)), [1, 0]), call.attrs.out_dtype)
    return None


def _conv_attrs(a) -> tuple:
    return (a.strides, a.padding, a.dilation, a.groups, a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype)


def _scaled(w: np.ndarray, s: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * w.ndim
    shape[axis] = -1
    return (w.astype("float64") * s.reshape(shape)).astype(w.dtype)


def _channel_axis(call) -> int | None:
    """The anchor output's channel axis (non-negative), or None for a layout without one."""
    if op_name(call) == "relax.matmul":
        return call.ty.ndim - 1 if call.ty.ndim > 0 else None  # ndim -1: not known
    axis = conv_channel_axis(call)
    return axis if axis >= 0 else None


def _channel_vector(c, out_dims: list[int], axis: int, dtype: str) -> np.ndarray | None:
    """A ``dtype`` constant varying along ``axis`` of the output only (or a scalar) as a vector
    of its channels (float64), or None."""
    data = _array(c)
    if data is None or str(c.ty.dtype) != dtype:
        return None
    data = data.astype("float64")
    if data.ndim > len(out_dims):
        return None
    dims = [1] * (len(out_dims) - data.ndim) + list(data.shape)
    if any(d != 1 and (i != axis or d != out_dims[axis]) for i, d in enumerate(dims)):
        return None
    return np.broadcast_to(data.reshape(-1), (out_dims[axis],))  # one value, or one per channel


def _step(op: str, first: bool, consts: np.ndarray, scale, shift):
    """``(scale, shift)`` after one step ``op`` (the chain its ``first`` operand or the second);
    None if not affine, or for a constant that is not finite or a divisor that is zero (folded,
    ``(x @ W) / 0`` would be a sum of infinite terms, NaN where it was an infinity)."""
    if not np.isfinite(consts).all() or op == "relax.divide" and not consts.all():
        return None
    if op == "relax.add":
        return scale, shift + consts
    if op == "relax.multiply":
        return scale * consts, shift * consts
    if op == "relax.subtract":
        return (scale, shift - consts) if first else (-scale, consts - shift)
    if op == "relax.divide" and first:
        return scale / consts, shift / consts
    return None


def _plan(func: relax.Function) -> dict:
    """The chain ends to rewrite: ``{end var: (anchor call, rebuild, scale, shift)}`` (``rebuild``:
    ``_weight``'s)."""
    var2val = relax.analysis.get_var2val(func)
    uses = var_uses(func)
    user = {}
    for var, val in var2val.items():
        for arg in (val.args if isinstance(val, relax.Call) else []):
            if isinstance(arg, relax.Var) and uses.get(arg) == 1:
                user[arg] = var
    plan = {}
    for var, val in var2val.items():
        rebuild = _weight(val, var2val) if op_name(val) in ("relax.nn.conv2d", "relax.matmul") else None
        if rebuild is None:
            continue
        dims, axis, dtype = static_dims(val), _channel_axis(val), str(val.ty.dtype)
        if dims is None or axis is None or dtype not in ("float32", "float16"):
            continue
        scale, shift = np.ones(dims[axis]), np.zeros(dims[axis])
        cur, scales, shifts = var, 0, 0  # shifts: adds since the last scale
        while cur in user:  # its one reader is the next step
            nxt = user[cur]
            call = var2val[nxt]
            if op_name(call) == "relax.reshape" and op_name(val) == "relax.matmul":  # rows regrouped, channels last
                new_dims = static_dims(call)
                if new_dims is None or new_dims[-1] != dims[-1]:
                    break
                cur, dims, axis = nxt, new_dims, len(new_dims) - 1
                continue
            if op_name(call) not in STEPS or len(call.args) != 2 or static_dims(call) != dims:
                break
            first = call.args[0].same_as(cur)
            other = call.args[1] if first else call.args[0]
            vec = None if other.same_as(cur) else _channel_vector(var2val.get(other, other), dims, axis, dtype)
            got = None if vec is None else _step(op_name(call), first, vec, scale, shift)
            scaling = op_name(call) in ("relax.multiply", "relax.divide") or op_name(call) == "relax.subtract" and not first
            if got is None or (not scaling and scales and shifts):  # a second shift: an activation's
                break
            scale, shift = got
            scales, shifts = scales + scaling, (0 if scaling else shifts + 1)
            cur = nxt
        if scales:
            plan[cur] = (val, rebuild, scale, shift)
    return plan


@mutator
class _Fold(PyExprMutator):
    def __init__(self, mod=None):
        super().__init__(mod)
        self.plan: dict = {}

    def visit_function_(self, func):
        self.plan = _plan(func)
        return super().visit_function_(func)

    def visit_var_binding_(self, binding):
        if binding.var not in self.plan:
            return super().visit_var_binding_(binding)
        anchor, rebuild, scale, shift = self.plan[binding.var]
        dims, axis = static_dims(anchor), _channel_axis(anchor)
        bias_shape = [dims[axis]] if op_name(anchor) == "relax.matmul" else [
            dims[axis] if i == axis else 1 for i in range(len(dims))]
        dtype = str(anchor.ty.dtype)
        y = self.builder_.emit(rebuild(self.visit_expr(anchor.args[0]), scale))
        new = relax.op.add(y, relax.const(shift.reshape(bias_shape).astype(dtype)))
        end = static_dims(binding.var)
        if end != dims:  # the chain regrouped a matmul's rows: the shifted result reshaped (a view)
            new = relax.op.reshape(self.builder_.emit(new), end)
        out = self.builder_.emit(new) if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output(new)
        self.set_var_remap(binding.var, out)


def FoldAffineIntoAnchor() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: constant per-channel affine chains after conv2d / matmul folded into their
    weights (module docstring); the chain's old bindings are left for dead-code elimination."""
    return tvm.transform.module_pass(lambda mod, _ctx: mutate_functions(_Fold(mod), mod), opt_level=0,
                                     name="ext.FoldAffineIntoAnchor")
