"""TVM's ONNX importer with the converters that hid ops from ext's graph passes replaced.

The stock converters of ``Clip``, ``Pad`` and ``Einsum`` emit ``call_tir`` of a TOPI compute
(``bb.emit_te``): an opaque, unscheduled kernel that no Relax pass can see into. So an ONNX
MobileNet's ReLU6 (``Clip(x, 0, 6)``) ran as two stock kernels after each conv instead of the
conv's ``clip:0:6`` epilogue, and an explicit ``Pad`` in front of a conv was not folded into
the conv's padding. Here they become the Relax ops ``from_torch`` produces (``relax.clip``,
``relax.nn.pad``, ``relax.einsum``) when their parameters are constants, with ONNX's meaning:
a NaN bound of ``Clip`` is no bound (as onnxruntime); a NaN input stays NaN (``relax.clip``'s
lowering keeps it). Anything else goes to the stock converter.

``with converters(): ...`` installs them around one import (the importer looks its table up
per node through the module function ``_get_convert_map``).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from .onnx_rnn import CONVERTERS as RECURRENT


def _float_bound(expr, default: float) -> float | None:
    """A constant scalar bound (None input: ``default``; NaN: no bound) or None if not constant."""
    if expr is None:
        return default
    value = getattr(expr, "value", None)
    data = value.numpy() if hasattr(value, "numpy") else None
    if data is None or data.size != 1:
        return None
    v = float(data.reshape(-1)[0])
    return default if math.isnan(v) else v


def _is_float(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and str(ty.dtype).startswith(("float", "bfloat"))


class Clip(stock.Clip):
    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if not _is_float(inputs[0]):
            return super()._impl_v1(bb, inputs, attr, params)
        return relax.op.clip(inputs[0], float(attr.get("min", -np.inf)), float(attr.get("max", np.inf)))

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        inputs = list(inputs) + [None] * (3 - len(inputs))
        lo, hi = _float_bound(inputs[1], -np.inf), _float_bound(inputs[2], np.inf)
        if lo is None or hi is None or not _is_float(inputs[0]):
            return super()._impl_v13(bb, inputs, attr, params)
        return relax.op.clip(inputs[0], lo, hi)


class Pad(stock.Pad):
    @classmethod
    def _impl_v2(cls, bb, inputs, attr, params):
        pads = attr.get("pads")
        if attr.get("mode", b"constant") != b"constant" or pads is None or min(pads) < 0:
            return super()._impl_v2(bb, inputs, attr, params)
        return cls._constant_pad(inputs[0], pads[: len(pads) // 2], pads[len(pads) // 2:], attr.get("value", 0.0))

    @classmethod
    def _lower_pad(cls, bb, inputs, attr, params, allowed_modes):
        if attr.get("mode", b"constant") != b"constant":
            return super()._lower_pad(bb, inputs, attr, params, allowed_modes)
        before, after, value = cls._parse_pads_and_axes(inputs, params)
        if min(before + after) < 0:
            return super()._lower_pad(bb, inputs, attr, params, allowed_modes)
        return cls._constant_pad(inputs[0], before, after, value)

    @staticmethod
    def _constant_pad(x, before, after, value):
        width = [int(v) for pair in zip(before, after) for v in pair]
        return relax.op.nn.pad(x, width, "constant", float(value or 0.0))


class Einsum(stock.Einsum):
    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        return relax.op.einsum(list(inputs), attr["equation"].decode("utf-8"))


class Celu(stock.OnnxOpConverter):
    """``x`` where positive, else ``alpha (exp(x / alpha) - 1)`` (the stock table lacks it)."""

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        x, alpha = inputs[0], float(attr.get("alpha", 1.0))
        dt = str(x.ty.dtype)
        negative = relax.op.multiply(relax.op.subtract(relax.op.exp(relax.op.divide(x, relax.const(alpha, dt))),
                                                       relax.const(1.0, dt)), relax.const(alpha, dt))
        return relax.op.where(relax.op.greater(x, relax.const(0.0, dt)), x, negative)


OVERRIDES = {"Clip": Clip, "Pad": Pad, "Einsum": Einsum, "Celu": Celu, **RECURRENT}


@contextlib.contextmanager
def converters():
    """The stock importer's converter table with ``OVERRIDES`` in it, for the ``with`` body."""
    original = stock._get_convert_map

    def table():
        return {**original(), **OVERRIDES}

    stock._get_convert_map = table
    try:
        yield
    finally:
        stock._get_convert_map = original
