"""Fused epilogues: bias add, activation, residual add, applied element-wise
to an anchor's accumulator on its way out (one store per output element).

``fused_output(shape, value, epilogue, extras)`` builds the output tensor
``D[idx] = post(value(idx))`` where ``post`` applies ``epilogue`` in order;
``"bias"`` and ``"residual"`` each add the next tensor of ``extras``, ``"scale"``
multiplies by it (the squeeze-and-excitation gate, ``(N, C, 1, 1)``), each
broadcast NumPy-style against ``shape`` (right-aligned, size-1 dims repeat).
Activations with parameters come as names such as ``"clip:0:6"`` (``ext.workload``).

NaN and +-inf pass through every activation as through NumPy/PyTorch (see
``elemwise``): float32 uses ``elemwise.ACTIVATIONS``; other dtypes use the
intrinsics below, whose NaN behaviour is the backend's (CUDA's ``expf``/``tanhf``
propagate it), with the same NaN-keeping select forms for relu, clip, leaky ReLU,
hardsigmoid and hardswish (``elemwise.GENERIC``: no transcendental, any dtype).
"""
from __future__ import annotations

import math

from tvm import te, tirx

from . import elemwise


def dtype_of(x) -> str:
    """dtype string of a TIR expression (TVM 0.27 exposes it as ``.ty``)."""
    if isinstance(x, te.tensor.TensorSlice):
        return x.tensor.dtype
    return str(x.ty)


def _const(v, like):
    return tirx.const(v, dtype_of(like))


def _sigmoid(x):
    return _const(1, x) / (_const(1, x) + te.exp(-x))


ACTIVATION_EXPR = {
    "relu": elemwise.relu,  # x < 0 ? 0 : x keeps NaN (max(x, 0) lowers to x > 0 ? x : 0, which drops it)
    "sigmoid": _sigmoid,
    "tanh": lambda x: te.tanh(x),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: _const(0.5, x) * x * (_const(1, x) + te.erf(x * _const(1 / math.sqrt(2), x))),
    "gelu_tanh": lambda x: _const(0.5, x) * x * (_const(1, x) + te.tanh(
        _const(math.sqrt(2 / math.pi), x) * (x + _const(0.044715, x) * x * x * x))),
}


def broadcast_index(tensor: te.Tensor, idx) -> list:
    """Index ``tensor`` at output position ``idx`` with NumPy broadcasting."""
    shape = list(tensor.shape)
    off = len(idx) - len(shape)
    return [idx[off + d] if int(n) != 1 else tirx.IntImm(dtype_of(idx[off + d]), 0) for d, n in enumerate(shape)]


def apply(value, idx, epilogue, extras):
    """The epilogue applied to one scalar ``value`` at output index ``idx``."""
    rest = list(extras)
    if isinstance(value, te.tensor.TensorSlice):
        value = value.asobject()
    for op in epilogue:
        if op in ("bias", "scale", "residual"):
            t = rest.pop(0)
            other = t[tuple(broadcast_index(t, idx))].astype(dtype_of(value))
            value = value * other if op == "scale" else value + other
        elif dtype_of(value) == "float32" or op.split(":")[0] in elemwise.GENERIC:
            value = elemwise.activation(op)(value)  # vectorizable polynomial / select forms
        else:
            value = ACTIVATION_EXPR[op](value)
    return value


def split_per_channel(epilogue, extras, channel_axis=1, rank: int = 4):
    """``(pre, pre_extras, post, post_extras)``: the longest prefix of ``epilogue`` whose tensor
    steps are per channel (their extras size 1 on every axis of a rank-``rank`` output but
    ``channel_axis`` (an axis, or a tuple: blocked channels) and the batch), and the rest. A blocked kernel applies ``pre`` on its
    channel-vector tiles (vectorized, before the unpack) and ``post`` (a residual read at
    output positions) in the unpack."""
    rest, pre_extras = list(extras), []
    for i, op in enumerate(epilogue):
        if op in ("bias", "scale", "residual"):
            shape = [int(d) for d in rest[0].shape]
            shape = [1] * (rank - len(shape)) + shape
            keep = (0, *channel_axis) if isinstance(channel_axis, tuple) else (0, channel_axis)
            if len(shape) != rank or any(d != 1 for a, d in enumerate(shape) if a not in keep):
                return tuple(epilogue[:i]), pre_extras, tuple(epilogue[i:]), rest
            pre_extras.append(rest.pop(0))
    return tuple(epilogue), pre_extras, (), rest


def fused_output(shape, value, epilogue, extras, out_dtype: str, name: str = "D") -> te.Tensor:
    """``D[idx] = epilogue(value(*idx))`` cast to ``out_dtype``."""

    def body(*idx):
        v = apply(value(*idx), idx, epilogue, extras)
        return v if dtype_of(v) == out_dtype else v.astype(out_dtype)

    return te.compute(shape, body, name=name)
