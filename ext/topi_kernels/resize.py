"""2-D resize (``relax.image.resize2d``) on NCHW, linear and nearest, as Relax defines them.

Per axis, output index ``o`` maps to the input coordinate ``x(o)`` of the op's
``coordinate_transformation_mode`` (``scale = in / out``)::

    half_pixel          (o + 0.5) * scale - 0.5
    pytorch_half_pixel  the same, 0 when out == 1
    align_corners       o * (in - 1) / (out - 1), 0 when out == 1
    asymmetric          o * scale
    tf_half_pixel_for_nn (o + 0.5) * scale

Linear is separable, so it runs as two passes (``T``, then ``D``)::

    T[n, c, oh, w]  = X[n, c, y0, w] * (1 - fy) + X[n, c, y1, w] * fy        # rows: contiguous vectors
    D[n, c, oh, ow] = T[n, c, oh, x0] * (1 - fx) + T[n, c, oh, x1] * fx      # columns: reads of one row

with ``y0 = clamp(floor(y))``, ``y1 = clamp(floor(y) + 1)``, ``fy = y - floor(y)`` (the same along
x), the index clamps of the op's own lowering. A whole up-scale ``out = k * in`` (``k`` a power
of two) in the half-pixel and asymmetric modes takes the same taps in integers (``floor((2o + 1 - k) / 2k)``, the
remainder over ``2k`` as the weight; ``o / k`` for asymmetric), so each output phase ``o % k`` has
a fixed offset and weight for the schedule to use (``whole_upscale``). Nearest reads ``X[n, c, ry, rx]`` with ``r`` the
op's rounding of the coordinate (``round``, ``round_prefer_floor`` / ``round_prefer_ceil``,
``floor``, ``ceil``; an empty one: ``round`` for ``align_corners``, else ``floor``), clamped. NaN and +-inf pass through the products
like the stock lowering's (a tap with weight 0 still multiplies: ``0 * inf`` is NaN there too).
"""
from __future__ import annotations

from tvm import te, tirx

from .matmul import _i64

MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
ROUNDING = ("round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "")  # "": the mode's default


def coordinate(o, in_size: int, out_size: int, mode: str):
    """The input coordinate of output index ``o`` (a float32 expression)."""
    f = o.astype("float32")
    scale = tirx.const(in_size / out_size, "float32")
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and out_size == 1:
            return tirx.const(0.0, "float32")
        return (f + 0.5) * scale - 0.5
    if mode == "align_corners":
        return f * tirx.const((in_size - 1) / (out_size - 1), "float32") if out_size > 1 else tirx.const(0.0, "float32")
    if mode == "asymmetric":
        return f * scale
    if mode == "tf_half_pixel_for_nn":
        return (f + 0.5) * scale
    raise ValueError(f"resize2d coordinate_transformation_mode {mode!r} not handled (one of {', '.join(MODES)})")


def _clamp(i, size: int):
    return te.max(te.min(i, _i64(size - 1)), _i64(0))


def _round(x, method: str):
    """The nearest-neighbour index of coordinate ``x`` (int64) by the op's ``rounding_method``,
    as its own lowering rounds (``floor``/``ceil`` nudged by 1e-5 against float error)."""
    if method == "round":
        return te.round(x).astype("int64")
    if method == "round_prefer_floor":
        return te.ceil(x - 0.5).astype("int64")
    if method == "round_prefer_ceil":
        return te.floor(x + 0.5).astype("int64")
    if method == "floor":
        return te.floor(x + 1e-5).astype("int64")
    if method == "ceil":
        return te.ceil(x - 1e-5).astype("int64")
    raise ValueError(f"resize2d rounding_method {method!r} not handled (one of {', '.join(ROUNDING)})")


def nearest_index(o, in_size: int, out_size: int, mode: str, rounding: str):
    """The input index output ``o`` copies: an integer division for whole upscales of
    ``asymmetric``/``floor`` (exact, as the op's lowering does it), else the rounded coordinate."""
    rounding = rounding or ("round" if mode == "align_corners" else "floor")
    if mode == "asymmetric" and rounding == "floor" and out_size % in_size == 0:
        return te.floordiv(o, _i64(out_size // in_size))
    return _clamp(_round(coordinate(o, in_size, out_size, mode), rounding), in_size)


def whole_upscale(in_size: int, out_size: int, mode: str) -> int:
    """``k`` when ``out = k * in`` with ``k`` a power of two >= 2, in a mode whose coordinates are then
    ``(o + 0.5) / k - 0.5`` or ``o / k``: each output phase ``o % k`` has a fixed tap offset and
    weight, and the float coordinates of the op's lowering are exact, so the integer form gives
    the same weights bit for bit (x3 would not: ``1.5 * (1/3) - 0.5`` is 1.5e-8 in float32, not 0,
    and an infinite tap times that weight is inf, times 0 NaN). 0 otherwise."""
    k = out_size // in_size if out_size % in_size == 0 else 0
    if k < 2 or k & (k - 1):
        return 0
    return k if mode in ("half_pixel", "pytorch_half_pixel", "asymmetric") else 0


def linear_nchw(X: te.Tensor, out_hw: tuple, mode: str, out_dtype: str = "float32"):
    """Bilinear resize of ``X`` (N, C, H, W) to ``out_hw``: returns ``(T, D)`` (see module doc)."""
    N, C, H, W = (int(d) for d in X.shape)
    OH, OW = out_hw

    def taps(o, in_size, out_size):
        k = whole_upscale(in_size, out_size, mode)
        if k:  # exact integer form: x = (2o + 1 - k) / 2k (half-pixel) or o / k (asymmetric)
            num, den = (2 * o + _i64(1 - k), 2 * k) if mode != "asymmetric" else (o, k)
            i = te.floordiv(num, _i64(den))
            frac = te.floormod(num, _i64(den)).astype("float32") * tirx.const(1.0 / den, "float32")
            return _clamp(i, in_size), _clamp(i + _i64(1), in_size), frac
        x = coordinate(o, in_size, out_size, mode)
        lo = te.floor(x)
        i = lo.astype("int64")
        return _clamp(i, in_size), _clamp(i + _i64(1), in_size), x - lo

    def rows(n, c, oh, w):
        y0, y1, fy = taps(oh, H, OH)
        a, b = X[n, c, y0, w].astype("float32"), X[n, c, y1, w].astype("float32")
        return a * (1.0 - fy) + b * fy

    T = te.compute(tuple(_i64(d) for d in (N, C, OH, W)), rows, name="T")

    def cols(n, c, oh, ow):
        x0, x1, fx = taps(ow, W, OW)
        return (T[n, c, oh, x0] * (1.0 - fx) + T[n, c, oh, x1] * fx).astype(out_dtype)

    D = te.compute(tuple(_i64(d) for d in (N, C, OH, OW)), cols, name="D")
    return T, D


def nearest_nchw(X: te.Tensor, out_hw: tuple, mode: str, rounding: str, out_dtype: str = "float32"):
    """Nearest-neighbour resize of ``X`` (N, C, H, W) to ``out_hw``: returns ``D``."""
    N, C, H, W = (int(d) for d in X.shape)
    OH, OW = out_hw
    return te.compute(tuple(_i64(d) for d in (N, C, OH, OW)), lambda n, c, oh, ow: X[
        n, c, nearest_index(oh, H, OH, mode, rounding), nearest_index(ow, W, OW, mode, rounding)].astype(out_dtype),
        name="D")
