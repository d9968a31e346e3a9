"""2-D max / average pooling, NCHW, as the same three stages as depthwise conv::

    P[n, c, hp, wp] = Xpad[n, c, hp, wp]          # pad value: -inf (max) or 0 (avg); in-kernel
    C[n, c, oh, ow] = reduce_{kh, kw} P[n, c, oh*sh + kh*dh, ow*sw + kw*dw]    # over ow padded to ow_pad
    D[n, c, oh, ow] = C[...]            (max)  or  C[...] / count(oh, ow)   (avg)

``count`` is ``KH*KW`` clipped to the padded image when ``count_include_pad``
(PyTorch's rule: the window never counts rows past ``H + pad_bottom``), else
the number of taps inside the image. Cost: ``KH*KW`` loads per output,
input read once (``P``).
"""
from __future__ import annotations

from tvm import te, tirx

from .conv2d import ConvGeom
from .matmul import _i64, ceil_to


def pool2d_nchw(X: te.Tensor, g: ConvGeom, *, kind: str, count_include_pad: bool = False, ow_pad: int = 1,
                p_width_pad: int = 1):
    """Returns ``(P, C, D)``; ``g`` describes the window (``KH, KW``, stride, padding, dilation, ``O == C``).
    ``P``'s rows are padded to a multiple of ``p_width_pad`` (the vector width) so its copy vectorizes."""
    sh, sw = g.stride
    dh, dw = g.dilation
    top, left = g.pad[0], g.pad[1]
    OWp = ceil_to(g.OW, ow_pad)
    Hp = (g.OH - 1) * sh + (g.KH - 1) * dh + 1
    Wpd = ceil_to((OWp - 1) * sw + (g.KW - 1) * dw + 1, p_width_pad)
    dt = X.dtype
    fill = tirx.min_value(dt) if kind == "max" else tirx.const(0, dt)

    def pad(n, c, hp, wp):
        h, w = hp - _i64(top), wp - _i64(left)
        inside = tirx.all(h >= 0, h < g.H, w >= 0, w < g.W)
        val = X[n, c, te.max(te.min(h, _i64(g.H - 1)), _i64(0)), te.max(te.min(w, _i64(g.W - 1)), _i64(0))]
        return tirx.if_then_else(inside, val, fill)

    P = te.compute(tuple(_i64(d) for d in (g.N, g.C, Hp, Wpd)), pad, name="P")
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    red = te.max if kind == "max" else te.sum
    C = te.compute((_i64(g.N), _i64(g.C), _i64(g.OH), _i64(OWp)), lambda n, c, oh, ow: red(
        P[n, c, oh * sh + kh * dh, ow * sw + kw * dw], axis=[kh, kw]), name="C")
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
