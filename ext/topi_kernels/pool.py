"""2-D max / average pooling, NCHW, as the same three stages as depthwise conv::

    P[n, c, hp, ph, q] = Xpad[n, c, hp, q*sw + ph]   # pad value: -inf (max) or 0 (avg); in-kernel
    C[n, c, oh, ow] = reduce_{kh, kw} Xpad[n, c, oh*sh + kh*dh, ow*sw + kw*dw]  # read from P, padded tiles
    D[n, c, oh, ow] = C[...]            (max)  or  C[...] / count(oh, ow)   (avg)

``count`` is ``KH*KW`` clipped to the padded image when ``count_include_pad``
(PyTorch's rule: the window never counts rows past ``H + pad_bottom``), else
the number of taps inside the image. Cost: ``KH*KW`` loads per output,
input read once (``P``).
"""
from __future__ import annotations

from tvm import te, tirx

from .conv2d import ConvGeom, phase_planes
from .matmul import _i64, ceil_to


def pool2d_nchw(X: te.Tensor, g: ConvGeom, *, kind: str, count_include_pad: bool = False, ow_pad: int = 1,
                oh_pad: int = 1):
    """Returns ``(P, C, D)``; ``g`` describes the window (``KH, KW``, stride, padding, dilation, ``O == C``).
    ``P`` is the depthwise conv's column-phase padded input (``conv2d.phase_planes``): every tap
    reads a contiguous run of the output row, also for stride 2."""
    sh, sw = g.stride
    dt = X.dtype
    fill = tirx.min_value(dt) if kind == "max" else tirx.const(0, dt)
    P, tap = phase_planes(X, g, ow_pad=ow_pad, oh_pad=oh_pad, fill=fill)
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    red = te.max if kind == "max" else te.sum
    shape = (_i64(g.N), _i64(g.C), _i64(ceil_to(g.OH, oh_pad)), _i64(ceil_to(g.OW, ow_pad)))
    C = te.compute(shape, lambda n, c, oh, ow: red(tap(n, c, oh, ow, kh, kw), axis=[kh, kw]), name="C")
    if kind == "max":
        return P, C, te.compute(tuple(_i64(d) for d in (g.N, g.C, g.OH, g.OW)), lambda *i: C[i], name="D")

    def extent(o, s, k, size, pad_lo, pad_hi):
        start = o * s - _i64(pad_lo)
        if count_include_pad:
            return te.min(start + _i64(k), _i64(size + pad_hi)) - start
        return te.min(start + _i64(k), _i64(size)) - te.max(start, _i64(0))

    def avg(n, c, oh, ow):
        cnt = extent(oh, sh, g.KH, g.H, g.pad[0], g.pad[2]) * extent(ow, sw, g.KW, g.W, g.pad[1], g.pad[3])
        return C[n, c, oh, ow] / te.max(cnt, _i64(1)).astype(dt)

    return P, C, te.compute(tuple(_i64(d) for d in (g.N, g.C, g.OH, g.OW)), avg, name="D")
