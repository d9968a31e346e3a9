"""2-D max / average pooling, NCHW (and NCHW{b}c: ``pool2d_nchwc``), as the same three stages as
depthwise conv::

    P[n, c, hp, ph, q] = Xpad[n, c, hp, q*sw + ph]   # pad value: -inf (max) or 0 (avg); in-kernel
    C[n, c, oh, ow] = reduce_{kh, kw} Xpad[n, c, oh*sh + kh*dh, ow*sw + kw*dw]  # read from P, padded tiles
    D[n, c, oh, ow] = C[...]            (max)  or  C[...] / count(oh, ow)   (avg)

``count`` is ``KH*KW`` clipped to the padded image when ``count_include_pad``
(PyTorch's rule: the window never counts rows past ``H + pad_bottom``), else
the number of taps inside the image. A NaN in a max window gives NaN (``reduce.nan_max``), as
in PyTorch. Cost: ``KH*KW`` loads per output,
input read once (``P``).
"""
from __future__ import annotations

from tvm import te, tirx

from . import conv2d_blocked as cb
from . import reduce
from .conv2d import ConvGeom, clamp_index, phase_planes
from .dynamic import dim, round_up
from .matmul import _i64


def _fill(kind: str, dt: str):
    """The padding's value: ``-inf`` (max: a window of ``-inf`` stays ``-inf``) or 0 (avg)."""
    return reduce.identity("max", dt) if kind == "max" else tirx.const(0, dt)


def _reducer(kind: str):
    """``nan_max`` (a NaN in the window gives NaN, as in PyTorch; TVM's max drops it) or ``sum``."""
    return reduce.nan_max if kind == "max" else te.sum


def _pooled(tap, shape, out_shape, g: ConvGeom, kind: str, count_include_pad: bool, dt: str):
    """``C`` (the window reduced over tiles of ``shape``) and ``D`` (``C`` at ``out_shape``, divided
    by the window count for an average). ``tap(*index, kh, kw)``; either layout has ``oh, ow`` at
    index 2 and 3."""
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    red = _reducer(kind)
    C = te.compute(shape, lambda *i: red(tap(*i, kh, kw), axis=[kh, kw]), name="C")
    if kind == "max":
        return C, te.compute(out_shape, lambda *i: C[i], name="D")
    count = window_count(g, count_include_pad, dt)
    return C, te.compute(out_shape, lambda *i: C[i] / count(i[2], i[3]), name="D")


def pool2d_nchw(X: te.Tensor, g: ConvGeom, *, kind: str, count_include_pad: bool = False, ow_pad: int = 1,
                oh_pad: int = 1):
    """Returns ``(P, C, D)``; ``g`` describes the window (``KH, KW``, stride, padding, dilation, ``O == C``).
    ``P`` is the depthwise conv's column-phase padded input (``conv2d.phase_planes``): every tap
    reads a contiguous run of the output row, also for stride 2."""
    P, tap = phase_planes(X, g, ow_pad=ow_pad, oh_pad=oh_pad, fill=_fill(kind, X.dtype))
    shape = tuple(dim(d) for d in (g.N, g.C, round_up(g.OH, oh_pad), round_up(g.OW, ow_pad)))
    out = tuple(dim(d) for d in (g.N, g.C, g.OH, g.OW))
    return (P, *_pooled(tap, shape, out, g, kind, count_include_pad, X.dtype))


def window_count(g: ConvGeom, count_include_pad: bool, dt: str):
    """``(oh, ow) -> `` the number of taps an average divides by (see module doc), as ``dt``."""

    def extent(o, s, k, size, pad_lo, pad_hi):
        start = o * s - _i64(pad_lo)
        if count_include_pad:
            return te.min(start + _i64(k), dim(size + pad_hi)) - start
        return te.min(start + _i64(k), dim(size)) - te.max(start, _i64(0))

    sh, sw = g.stride
    return lambda oh, ow: te.max(extent(oh, sh, g.KH, g.H, g.pad[0], g.pad[2])
                                 * extent(ow, sw, g.KW, g.W, g.pad[1], g.pad[3]), _i64(1)).astype(dt)


def pool2d_nchwc(X: te.Tensor, g: ConvGeom, block: int, *, kind: str, count_include_pad: bool = False,
                 ow_pad: int = 1, oh_pad: int = 1):
    """Pooling on NCHW{block}c (``(N, C/block, H, W, block)``, the output too), the blocked depthwise
    conv's stages (``conv2d_blocked``): every tap one whole-vector load along the channels, for any
    stride. Returns ``(P, C, D)``. The taps read ``X`` in place (``P`` is ``X``, no pad stage) when no
    window of the tiles reaches past the image, and for any undilated max pool: a tap outside the
    image is clamped to the nearest row or column inside, which lies in the same window, so the
    window's max (and a NaN in it) is unchanged. Average pools with padding and dilated max pools
    read a padded copy."""
    if cb.reads_inside(g, ow_pad, oh_pad):
        P, tap = X, cb.window_tap(X, g)
    elif kind == "max" and tuple(g.dilation) == (1, 1):
        P, tap = X, _clamped_tap(X, g)
    else:
        P = cb.padded_tiles(X, g, block, ow_pad=ow_pad, oh_pad=oh_pad, fill=_fill(kind, X.dtype))
        tap = cb.window_tap(P, g)
    out = tuple(_i64(d) for d in (g.N, g.C // block, g.OH, g.OW, block))
    return (P, *_pooled(tap, cb.tile_shape(g, block, ow_pad, oh_pad), out, g, kind, count_include_pad, X.dtype))


def _clamped_tap(X: te.Tensor, g: ConvGeom):
    """The window tap of an undilated window at an index clamped into the image (see ``pool2d_nchwc``)."""
    (sh, sw), (top, left) = g.stride, g.pad[:2]
    return lambda n, q, oh, ow, r, kh, kw: X[n, q, clamp_index(oh * sh + kh - _i64(top), g.H),
                                             clamp_index(ow * sw + kw - _i64(left), g.W), r]
