"""Convolutions on blocked activations (NCHW{b}c, ``(N, C/b, H, W, b)``), which
``relax_passes.block_channels`` keeps between consecutive convs so that no conv
unpacks its output to NCHW and the next packs it again.

The blocked direct conv is ``conv2d.conv2d_nchwc(..., block=b)``. Depthwise here::

    Wb[q, kh, kw, r] = W[q*b + r, 0, kh, kw]                              # once, at compile time
    P[n, q, hp, wp, r] = Xpad[n, q, hp, wp, r]                             # rows a tile reads, per thread
    C[n, q, oh, ow, r] = sum_{kh, kw} P[n, q, oh*sh + kh*dh, ow*sw + kw*dw, r] * Wb[q, kh, kw, r]
    D = epilogue(C)                                                        # (N, C/b, OH, OW, b)

Every tap is one whole-vector load along ``r`` (the ``b`` channels of a pixel) for any
stride, and one FMA with the tap's weight vector: no broadcast, no phase split.
Bytes: the input once (plus the padded rows each tile copies), the output once.
"""
from __future__ import annotations

from tvm import te

from . import epilogue as ep
from .conv2d import ConvGeom, padded_read
from .matmul import _i64, ceil_to


def pack_weight_depthwise(Wt: te.Tensor, g: ConvGeom, block: int) -> te.Tensor:
    """``Wb[q, kh, kw, r] = W[q*block + r, 0, kh, kw]``."""
    shape = (g.O // block, g.KH, g.KW, block)
    return te.compute(tuple(_i64(d) for d in shape), lambda q, kh, kw, r: Wt[q * block + r, _i64(0), kh, kw],
                      name="Wb")


def padded_tiles(X: te.Tensor, g: ConvGeom, block: int, *, ow_pad: int = 1, oh_pad: int = 1, fill=None):
    """``P[n, q, hp, wp, r]``: the blocked input padded (``fill``, zero by default) to the rows and
    columns whole ``oh_pad`` x ``ow_pad`` output tiles read; shared by the depthwise conv and pooling."""
    OHp, OWp = ceil_to(g.OH, oh_pad), ceil_to(g.OW, ow_pad)
    Hp = (OHp - 1) * g.stride[0] + (g.KH - 1) * g.dilation[0] + 1
    Wpd = (OWp - 1) * g.stride[1] + (g.KW - 1) * g.dilation[1] + 1
    read = padded_read(X, g, block=block, fill=fill)
    return te.compute(tuple(_i64(d) for d in (g.N, g.C // block, Hp, Wpd, block)),
                      lambda n, q, hp, wp, r: read(n, q * block + r, hp, wp), name="P")


def reads_inside(g: ConvGeom, ow_pad: int = 1, oh_pad: int = 1) -> bool:
    """Whether every window of every whole ``oh_pad`` x ``ow_pad`` tile lies inside the unpadded
    image: then the taps can read ``X`` itself and the pad stage ``P`` is a copy for nothing."""
    OHp, OWp = ceil_to(g.OH, oh_pad), ceil_to(g.OW, ow_pad)
    return (not any(g.pad) and (OHp - 1) * g.stride[0] + (g.KH - 1) * g.dilation[0] < g.H
            and (OWp - 1) * g.stride[1] + (g.KW - 1) * g.dilation[1] < g.W)


def window_tap(P: te.Tensor, g: ConvGeom):
    """``(n, q, oh, ow, r, kh, kw) -> P``: the tap ``(kh, kw)`` of output ``(oh, ow)``."""
    (sh, sw), (dh, dw) = g.stride, g.dilation
    return lambda n, q, oh, ow, r, kh, kw: P[n, q, oh * sh + kh * dh, ow * sw + kw * dw, r]


def tile_shape(g: ConvGeom, block: int, ow_pad: int = 1, oh_pad: int = 1) -> tuple:
    """``(N, C/block, OH, OW, block)`` with ``OH``/``OW`` padded to whole tiles."""
    return tuple(_i64(d) for d in (g.N, g.C // block, ceil_to(g.OH, oh_pad), ceil_to(g.OW, ow_pad), block))


def depthwise_nchwc(X: te.Tensor, Wb: te.Tensor, g: ConvGeom, block: int, *, ow_pad: int = 1, oh_pad: int = 1,
                    epilogue=(), extras=(), out_dtype="float32"):
    """Depthwise conv (``groups == C == O``) on NCHW{block}c; returns ``(P, C, D)``. ``C`` covers
    ``oh``/``ow`` padded to ``oh_pad``/``ow_pad`` (whole register tiles); ``P`` its padded input."""
    P = padded_tiles(X, g, block, ow_pad=ow_pad, oh_pad=oh_pad)
    tap = window_tap(P, g)
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    C = te.compute(tile_shape(g, block, ow_pad, oh_pad), lambda n, q, oh, ow, r: te.sum(
        tap(n, q, oh, ow, r, kh, kw).astype(out_dtype) * Wb[q, kh, kw, r].astype(out_dtype),
        axis=[kh, kw]), name="C")
    D = ep.fused_output(tuple(_i64(d) for d in (g.N, g.C // block, g.OH, g.OW, block)), lambda *i: C[i], epilogue,
                        extras, out_dtype)
    return P, C, D
