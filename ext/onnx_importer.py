"""TVM's ONNX importer with the converters that hid ops from ext's graph passes replaced.

The stock converters of ``Clip``, ``Pad`` and ``Einsum`` emit ``call_tir`` of a TOPI compute
(``bb.emit_te``): an opaque, unscheduled kernel that no Relax pass can see into. So an ONNX
MobileNet's ReLU6 (``Clip(x, 0, 6)``) ran as two stock kernels after each conv instead of the
conv's ``clip:0:6`` epilogue, and an explicit ``Pad`` in front of a conv was not folded into
the conv's padding. Here they become the Relax ops ``from_torch`` produces (``relax.clip``,
``relax.nn.pad``, ``relax.einsum``) when their parameters are constants, with ONNX's meaning:
a NaN bound of ``Clip`` is no bound (as onnxruntime); a NaN input stays NaN (``relax.clip``'s
lowering keeps it). Anything else goes to the stock converter.

``Resize`` by a ``scales`` input the output size does not state maps pixels back with that scale
(``Resize`` below; an empty ``scales`` beside ``sizes`` counts as none, where the stock
converter stopped on an assertion); ``Celu``, ``DFT``, ``LpNormalization`` and the recurrent
layers are added (``onnx_rnn``); ``Gather``, ``Concat`` and ``Cast`` of shapes keep symbolic
extents known (``onnx_shapes``).

``with converters(): ...`` installs them around one import (the importer looks its table up
per node through the module function ``_get_convert_map``).
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from .onnx_rnn import CONVERTERS as RECURRENT
from .onnx_shapes import CONVERTERS as SHAPES, integral_scales, resize_to_symbolic_size, same_pads, same_padded
from .torch_fft import contract_along, dft_matrices
from .torch_layout_ops import window_argmax
from .torch_resize import resample, taps


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


class Conv(stock.Conv):
    """``auto_pad`` ``SAME_*`` as the conv's own ``pads`` wherever they are known at import
    (``same_pads``). The stock converter padded the input with an opaque TOPI kernel before
    every such conv (tf2onnx writes SAME for "same" convs, PyTorch's ``padding="same"`` exports
    it), which no graph pass can fold: EfficientNet-B0 with a dynamic image size ran 16 such pads,
    5.5 ms of 38."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        mode = attr.get("auto_pad", b"NOTSET")
        mode = mode.decode("utf-8") if isinstance(mode, bytes) else mode
        shape = getattr(getattr(inputs[0], "ty", None), "shape", None)
        if mode in ("SAME_UPPER", "SAME_LOWER") and isinstance(shape, relax.ShapeExpr):
            rank = len(shape.values) - 2
            window = ([int(k) for k in attr.get("kernel_shape", inputs[1].ty.shape.values[2:])],
                      list(attr.get("strides", [1] * rank)), list(attr.get("dilations", [1] * rank)))
            pads = same_pads(inputs[0], *window, mode)
            attr = {key: v for key, v in attr.items() if key != "auto_pad"}
            if pads is None:  # a strided symbolic extent: its pads follow the size at run time
                padded = same_padded(bb, inputs[0], *window, mode)
                inputs = [padded, inputs[1], inputs[2] if len(inputs) > 2 else None]  # the bias is optional
                pads = [0] * (2 * rank)
            attr["pads"] = pads
        return super()._impl_v11(bb, inputs, attr, params)


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


def log_sum_exp(x, axes, keepdims: bool):
    """``log(sum(exp(x - m))) + m`` with ``m`` the max where finite, else 0: a row holding +inf
    gives +inf, as PyTorch and onnxruntime (the stock ``x - max`` made it ``inf - inf``, NaN)."""
    dt = str(x.ty.dtype)
    m = relax.op.max(x, axes, True)
    m = relax.op.where(relax.op.logical_or(relax.op.isnan(m), relax.op.isinf(m)), relax.const(0.0, dt), m)
    out = relax.op.add(relax.op.log(relax.op.sum(relax.op.exp(relax.op.subtract(x, m)), axes, True)), m)
    return out if keepdims else relax.op.squeeze(out, axes)


class ReduceLogSumExp(stock.ReduceLogSumExp):
    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        return log_sum_exp(inputs[0], attr.get("axes", None), bool(attr.get("keepdims", 1)))

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        axes = getattr(inputs[1], "value", None) if len(inputs) > 1 and inputs[1] is not None else None
        if len(inputs) > 1 and inputs[1] is not None and axes is None:
            return super()._impl_v18(bb, inputs, attr, params)  # axes computed at run time
        axes = axes.numpy().tolist() if axes is not None else None
        if not axes and attr.get("noop_with_empty_axes", 0):
            return inputs[0]
        return log_sum_exp(inputs[0], axes or None, bool(attr.get("keepdims", 1)))


class DFT(stock.OnnxOpConverter):
    """ONNX ``DFT`` (PyTorch's dynamo exporter writes every ``torch.fft`` call as one; the stock
    table lacks it): the transform along ``axis`` as matmuls with the cosine and sine matrices
    of ``torch_fft``, on a real (last axis 1) or complex (last axis 2) input; ``inverse``
    scales by ``1 / n``, ``onesided`` keeps ``n // 2 + 1`` bins. A ``dft_length`` other than the
    axis' length is refused."""

    @classmethod
    def _impl_v17(cls, bb, inputs, attr, params):
        return cls._transform(bb, inputs[0], inputs[1] if len(inputs) > 1 else None, int(attr.get("axis", 1)), attr)

    @classmethod
    def _impl_v20(cls, bb, inputs, attr, params):
        axis = inputs[2] if len(inputs) > 2 else None
        axis = -2 if axis is None else int(axis.value.numpy().reshape(-1)[0])
        return cls._transform(bb, inputs[0], inputs[1] if len(inputs) > 1 else None, axis, attr)

    @classmethod
    def _transform(cls, bb, x, length, axis: int, attr):
        shape = [int(d) for d in x.ty.shape]
        axis %= len(shape)
        n = shape[axis]
        if length is not None and int(length.value.numpy().reshape(-1)[0]) != n:
            raise NotImplementedError("ONNX DFT: a dft_length other than the signal's length does not import")
        last = len(shape) - 1
        real = bb.emit(relax.op.squeeze(relax.op.strided_slice(x, [last], [0], [1]), [last]))
        imag = (bb.emit(relax.op.squeeze(relax.op.strided_slice(x, [last], [1], [2]), [last]))
                if shape[-1] == 2 else None)
        inverse = bool(attr.get("inverse", 0))
        cos, sin = dft_matrices(n, str(x.ty.dtype), 1.0 / n if inverse else 1.0)
        along = functools.partial(contract_along, bb, axis=axis)
        sign = 1.0 if inverse else -1.0  # the transform's kernel is cos + sign * i sin
        rc, rs = along(x=real, mat=cos), along(x=real, mat=sin)
        def scale(t):
            return relax.op.multiply(t, relax.const(sign, str(x.ty.dtype)))

        if imag is None:
            out_r, out_i = rc, scale(rs)
        else:
            ic, is_ = along(x=imag, mat=cos), along(x=imag, mat=sin)
            out_r, out_i = relax.op.subtract(rc, scale(is_)), relax.op.add(ic, scale(rs))
        out = relax.op.stack([out_r, out_i], axis=-1)
        if attr.get("onesided", 0):
            out = relax.op.strided_slice(out, [axis], [0], [n // 2 + 1])
        return out


class ConvTranspose(stock.ConvTranspose):
    """``output_shape`` (tf2onnx's transposed convs state it) sets the pads, as onnxruntime
    computes them: ``total = max(0, natural - output_shape)`` split head/tail (more at the tail for
    SAME_UPPER, else at the head: the spec's rule), and rows past the natural size (a negative total) are output
    padding. The stock converter ignored it: 19 rows where 20 were asked."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if "output_shape" not in attr:
            return super()._impl_v1(bb, inputs, attr, params)
        x, w = inputs[0], inputs[1]
        n = len(x.ty.shape) - 2
        sizes = [getattr(d, "value", None) for d in list(x.ty.shape)[2:]]
        out = list(attr.pop("output_shape"))[-n:]
        if not all(isinstance(d, int) for d in sizes):
            raise NotImplementedError("ConvTranspose output_shape with symbolic input sizes")
        strides, dil = attr.get("strides", [1] * n), attr.get("dilations", [1] * n)
        adj = list(attr.get("output_padding", [0] * n))
        kernel = list(attr["kernel_shape"]) if "kernel_shape" in attr else [int(d) for d in w.ty.shape.values[2:]]
        upper = attr.pop("auto_pad", b"NOTSET") in (b"SAME_UPPER", "SAME_UPPER")
        heads, tails = [], []
        for i in range(n):
            natural = (sizes[i] - 1) * strides[i] + adj[i] + (kernel[i] - 1) * dil[i] + 1
            total = max(0, natural - out[i])
            head = total // 2 if upper else total - total // 2
            heads.append(head)
            tails.append(total - head)
            adj[i] += out[i] - (natural - total)  # rows past the natural size: output padding
        attr.update(pads=heads + tails, output_padding=adj)
        return super()._impl_v1(bb, inputs, attr, params)


class MaxPool(stock.MaxPool):
    """A second output (``Indices``): the stock converter gave one and the import stopped. The
    index is over the flattened tensor (``storage_order`` 0), ``(n * C + c) * H * W`` plus the
    in-plane index of ``torch_layout_ops.window_argmax``: onnxruntime's, except in a window holding a
    NaN, where ext's pooled value is NaN (as PyTorch's) and the index points at it; onnxruntime
    skips NaN in both."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        values = super()._impl_v1(bb, inputs, attr, params)
        if attr.get("tvm_custom", {}).get("num_outputs", 1) < 2:
            return values
        x, a = inputs[0], values.attrs
        if len(x.ty.shape) != 4 or attr.get("storage_order", 0):
            raise NotImplementedError("MaxPool indices: 2-D pools in row-major order only")
        values = bb.emit(values)
        pad = [int(v) for v in a.padding]
        index = window_argmax(bb.emit, x, values, [int(v) for v in a.pool_size], [int(v) for v in a.strides], pad[:2],
                              [int(v) for v in a.dilation])
        n, c, h, w = (int(d) for d in x.ty.shape)
        planes = (np.arange(n * c, dtype="int64") * h * w).reshape(n, c, 1, 1)
        return relax.Tuple([values, bb.emit(relax.op.add(index, relax.const(planes)))])


class LpNormalization(stock.OnnxOpConverter):
    """``x / ||x||_p`` along ``axis`` (p 1 or 2), which the stock table lacks."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, axis, p = inputs[0], attr.get("axis", -1), attr.get("p", 2)
        if p not in (1, 2):
            raise NotImplementedError(f"LpNormalization p={p}: ONNX allows 1 or 2")
        norm = (relax.op.sum(relax.op.abs(x), [axis], keepdims=True) if p == 1
                else relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), [axis], keepdims=True)))
        return relax.op.divide(x, norm)


class Resize(stock.Resize):
    """A ``scales`` input whose output size is not ``in * scale``: the source coordinate comes from
    the given scale (``(dst + 0.5) / scale - 0.5``), where the stock converter's ``resize2d`` used
    ``in / out`` (bilinear off by up to 1.3 at ``scales`` 1.7, nearest rows off by one; a silent
    wrong answer). Such resizes resample along H and W with ``torch_resize``'s taps; others, and
    ``exclude_outside``, antialiasing or a crop ROI, keep the stock converter."""

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        inputs = list(inputs)
        if len(inputs) > 3 and _empty_constant(inputs[2], params):
            inputs[2] = None  # an empty `scales` beside `sizes` (opset 11-12 required the input): none
        inputs = integral_scales(inputs, params)
        out = cls._by_scale(bb, inputs, attr, params)
        if out is not None:
            return out
        sizes = inputs[3] if len(inputs) > 3 else None
        if isinstance(sizes, relax.ShapeExpr) and not all(isinstance(d, tvm.tirx.IntImm) for d in sizes.values):
            return resize_to_symbolic_size(super()._impl_v18, bb, inputs, attr, params, sizes)
        return super()._impl_v18(bb, inputs, attr, params)

    @classmethod
    def _by_scale(cls, bb, inputs, attr, params):
        x = inputs[0]
        scales = stock.get_constant(inputs[2], params) if len(inputs) > 2 and inputs[2] is not None else None
        coord = attr.get("coordinate_transformation_mode", b"half_pixel").decode("ascii")
        mode = attr.get("mode", b"nearest").decode("ascii")
        if (not isinstance(scales, tvm.ir.GenericConst) or x.ty.shape is None or len(x.ty.shape) != 4
                or attr.get("exclude_outside", 0)
                or attr.get("antialias", 0) or coord not in ("half_pixel", "pytorch_half_pixel", "asymmetric")):
            return None
        dims = [getattr(d, "value", None) for d in list(x.ty.shape)[2:]]
        scale = [float(v) for v in scales.value.numpy()[2:]]
        if len(scale) != 2 or not all(isinstance(d, int) for d in dims) or all(d * f == int(d * f) for d, f in zip(dims, scale)):
            return None
        emit = bb.normalize
        for axis, (n_in, f) in enumerate(zip(dims, scale)):
            n_out = int(np.floor(n_in * f))
            if n_out < 2 and coord == "pytorch_half_pixel":
                return None
            if mode == "nearest":
                index, weight = _nearest(n_in, n_out, f, coord, attr.get("nearest_mode", b"round_prefer_floor")), None
            else:
                index, weight = taps(n_in, n_out, "cubic" if mode == "cubic" else "linear", False, f,
                                     cubic_a=attr.get("cubic_coeff_a", -0.75), asymmetric=coord == "asymmetric")
            x = resample(emit, x, 2 + axis, index, weight)
        return x


def _empty_constant(expr, params) -> bool:
    value = stock.get_constant(expr, params) if expr is not None else None
    return isinstance(value, tvm.ir.GenericConst) and value.value.numpy().size == 0


def _nearest(n_in: int, n_out: int, scale: float, coord: str, rounding: bytes):
    """``(n_out, 1)`` source indices of ONNX's nearest mode (float32 coordinates, as onnxruntime)."""
    o, f = np.arange(n_out, dtype="float32"), np.float32(scale)
    src = o / f if coord == "asymmetric" else (o + np.float32(0.5)) / f - np.float32(0.5)
    pick = {b"floor": np.floor, b"ceil": np.ceil, b"round_prefer_ceil": lambda v: np.floor(v + np.float32(0.5)),
            b"round_prefer_floor": lambda v: np.ceil(v - np.float32(0.5))}[rounding]
    return np.clip(pick(src), 0, n_in - 1).astype("int64")[:, None]


OVERRIDES = {"Clip": Clip, "Pad": Pad, "Einsum": Einsum, "Celu": Celu, "DFT": DFT, "ReduceLogSumExp": ReduceLogSumExp,
             "Resize": Resize, "LpNormalization": LpNormalization, "ConvTranspose": ConvTranspose,
             "MaxPool": MaxPool, "Conv": Conv, **SHAPES, **RECURRENT}


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
