"""``F.interpolate`` where TVM's ``resize2d`` cannot say what PyTorch computes: a scale factor
whose output size is not a whole multiple of the input, and antialiased bilinear resizing.

PyTorch maps an output pixel back with the scale the caller gave (``src = (dst + 0.5) / s - 0.5``),
``resize2d`` with the ratio of the sizes (``in / out``); the two differ whenever ``in * s`` is not
a whole number (9 rows at ``scale_factor=1.7``: 15 rows, source rows 1.5% apart, values off by up
to 1.1; nearest-neighbour rows picked off by one). ``antialias=True`` (downscaling with a widened triangle filter) was translated as a plain
bilinear resize. Both were silent wrong answers.

Here such a resize is separable resampling along H, then W: per output index a few taps (2 for
bilinear, 4 for bicubic, the filter's support for antialiasing) with PyTorch's source indices and
weights (``aten/src/ATen/native/UpSample.h``), computed at import as constants; each tap a
``take`` and a multiply-add, so a NaN reaches only the outputs whose taps read it. Every other
resize keeps the stock translation (ext's resize kernels).
"""
from __future__ import annotations

import math

import numpy as np
from tvm import relax

from .torch_ops import Emitting, node_arg

CUBIC_A = -0.75  # PyTorch's bicubic coefficient (antialiased bicubic: -0.5)


def _source_scale(n_in: int, n_out: int, align_corners: bool, scale) -> float:
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale else n_in / n_out


def _cubic(x: float, a: float) -> float:
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def taps(n_in: int, n_out: int, mode: str, align_corners: bool, scale=None, antialias: bool = False,
         cubic_a: float = CUBIC_A, asymmetric: bool = False):
    """``(index, weight)``: ``(n_out, T)`` source indices and weights of one axis, as PyTorch
    resamples it (``mode`` "linear" or "cubic"); ONNX's ``Resize`` computes the same (its
    half-pixel linear reads the edge pixel for a source below 0, as PyTorch's clamp does), with
    its ``cubic_coeff_a`` and ``asymmetric`` coordinates (``src = dst / scale``)."""
    s = _source_scale(n_in, n_out, align_corners, scale)
    if antialias:
        rows = [_antialias_taps(o, n_in, s, mode) for o in range(n_out)]
    else:
        sources = [s * o if align_corners or asymmetric else s * (o + 0.5) - 0.5 for o in range(n_out)]
        if mode == "linear":
            rows = [[(o, 1.0)] if n_in == n_out else _linear_taps(src, n_in) for o, src in enumerate(sources)]
        else:
            rows = [_cubic_taps(src, n_in, cubic_a) for src in sources]
    width = max(len(r) for r in rows)
    # short rows repeat their first tap with weight 0: an index PyTorch reads for that output too
    index = np.array([[r[k][0] if k < len(r) else r[0][0] for k in range(width)] for r in rows])
    weight = np.array([[r[k][1] if k < len(r) else 0.0 for k in range(width)] for r in rows])
    return index.astype("int64"), weight


def _antialias_taps(o: int, n_in: int, s: float, mode: str) -> list:
    """The filter widened by the downscale ``s``, its weights normalized for output ``o``."""
    size = 2 if mode == "linear" else 4
    support, inv = (size / 2 * s, 1 / s) if s >= 1 else (size / 2, 1.0)
    center = s * (o + 0.5)
    lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
    w = [max(0.0, 1 - abs(x)) if mode == "linear" else _cubic(x, -0.5)
         for x in ((j - center + 0.5) * inv for j in range(lo, hi))]
    total = sum(w)
    return list(zip(range(lo, hi), [v / total if total else v for v in w]))


def _linear_taps(src: float, n_in: int) -> list:
    src = max(src, 0.0)
    i0 = min(int(math.floor(src)), n_in - 1)
    lam = min(max(src - i0, 0.0), 1.0)
    return [(i0, 1 - lam), (i0 + (1 if i0 < n_in - 1 else 0), lam)]


def _cubic_taps(src: float, n_in: int, a: float) -> list:
    i0 = int(math.floor(src))
    t = src - i0
    w = [_cubic(t + 1, a), _cubic(t, a), _cubic(1 - t, a), _cubic(2 - t, a)]
    return [(min(max(i0 - 1 + k, 0), n_in - 1), w[k]) for k in range(4)]


class ExactResize(Emitting):
    """Importer mixin (before ``ExportedProgramImporter``): the resizes of the module doc."""

    def _upsample_bilinear2d(self, node):
        return self._resize_or_stock(node, "linear", super()._upsample_bilinear2d, antialias=False)

    def _upsample_bicubic2d(self, node):
        return self._resize_or_stock(node, "cubic", super()._upsample_bicubic2d, antialias=False)

    def _upsample_bilinear2d_aa(self, node):
        return self._resize_or_stock(node, "linear", None, antialias=True)

    def _upsample_nearest2d(self, node):
        """A scale factor that is not ``out / in``: PyTorch's ``floor(dst * (1 / s))`` in float32."""
        x, scales = self.env[node.args[0]], node_arg(node, 2, "scale_factors", None)
        dims = [getattr(d, "value", d) for d in list(x.ty.shape)[-2:]]
        scales = list(scales) if isinstance(scales, (list, tuple)) else [scales, scales]
        if not scales[0] or not all(isinstance(d, int) for d in dims) or all(d * s == int(d * s) for d, s in zip(dims, scales)):
            return super()._upsample_nearest2d(node)
        for axis, (n_in, s) in enumerate(zip(dims, scales)):
            n_out = int(math.floor(n_in * s))
            src = np.floor(np.arange(n_out, dtype="float32") * np.float32(1.0 / s)).astype("int64")
            x = self._emit(relax.op.take(x, relax.const(np.minimum(src, n_in - 1)), axis=len(x.ty.shape) - 2 + axis))
        return x

    def _resize_or_stock(self, node, mode: str, stock, antialias: bool):
        x = self.env[node.args[0]]
        size = node_arg(node, 1, "output_size")
        align = bool(node_arg(node, 2, "align_corners", False))
        scales = node_arg(node, 3, "scale_factors", None)
        if scales is None and len(node.args) > 3:  # the .default overloads: scales_h, scales_w
            scales = [node_arg(node, 3, "scales_h", None), node_arg(node, 4, "scales_w", None)]
        scales = list(scales) if isinstance(scales, (list, tuple)) else [scales, scales]
        dims = [getattr(d, "value", d) for d in list(x.ty.shape)[-2:]]
        if not all(isinstance(d, int) for d in dims):
            if antialias:
                raise NotImplementedError("antialiased resize needs static input sizes")
            return stock(node)
        out = list(size) if size else [int(math.floor(d * s)) for d, s in zip(dims, scales)]
        uneven = not align and any(s and d * s != o for d, s, o in zip(dims, scales, out))
        if not (antialias or uneven):
            return stock(node)
        if antialias and align:
            raise NotImplementedError("antialiased resize with align_corners=True does not import")
        for axis, (n_in, n_out, s) in enumerate(zip(dims, out, scales)):
            index, weight = taps(n_in, n_out, mode, align, s, antialias)
            x = self._resample(x, len(x.ty.shape) - 2 + axis, index, weight)
        return x

    def _resample(self, x, axis: int, index, weight):
        return resample(self._emit, x, axis, index, weight)


def resample(emit, x, axis: int, index, weight):
    """``sum_t x.take(index[:, t], axis) * weight[:, t]`` along ``axis`` (``weight`` None: one
    tap, a plain ``take``); ``emit`` binds each step."""
    if weight is None:
        return emit(relax.op.take(x, relax.const(index[:, 0]), axis=axis))
    rank, dt = len(x.ty.shape), str(x.ty.dtype)
    shape = [1] * rank
    shape[axis] = index.shape[0]
    acc = None
    for t in range(index.shape[1]):
        tap = emit(relax.op.take(x, relax.const(index[:, t]), axis=axis))
        term = emit(relax.op.multiply(tap, relax.const(weight[:, t].reshape(shape).astype(dt))))
        acc = term if acc is None else emit(relax.op.add(acc, term))
    return acc
