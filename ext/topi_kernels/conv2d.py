"""2-D convolution computes: blocked direct (NCHWc inside, NCHW outside),
NHWC direct, depthwise, and the GEMM forms (1x1 pointwise, im2col).

Geometry (``ConvGeom``): data ``N x C x H x W``, weight ``O x C/g x KH x KW``,
stride ``(sh, sw)``, padding ``(top, left, bottom, right)``, dilation
``(dh, dw)``, ``g`` groups; ``OH = (H + top + bottom - dh*(KH-1) - 1) // sh + 1``
(same for ``OW``). Cost: ``2 * N * O * OH * OW * C/g * KH * KW`` flops.

Blocked direct (``direct_nchwc``)::

    P[n, cb, hp, wp, ci] = Xpad[n, cb*icb + ci, hp, wp]          # pad + pack, in-kernel (1x1: subsampled;
                                                                   # 1x1 stride 1, no padding: X read in place)
    for n, ob, oh, ow (ow padded to OWp), oi in ocb:               # C in NCHW[ocb]c
        C[n, ob, oh, ow, oi] = sum_{rc, kh, kw, ri}
            P[n, cb(ob, rc), oh*sh + kh*dh, ow*sw + kw*dw, ri] * Wp[ob, rc, kh, kw, ri, oi]
    D[n, o, oh, ow] = epilogue(C[n, o // ocb, oh, ow, o % ocb])     # unpack to NCHW

``Wp`` (``pack_weight_nchwc``) is OIHW regrouped into ``ocb``-wide output and
``icb``-wide input blocks, zero-padded past ``O``/``C`` (groups == 1) and built
once at compile time for constant weights. With groups > 1 the blocks must
divide the per-group channel counts and ``cb(ob, rc)`` picks the group's
input blocks. Bytes: the input once (pack), the weight once per output row
tile, the output twice (C, then D). A 1x1 stride-1 unpadded conv whose channels
fill whole ``icb`` blocks (and whose width needs no padding) skips ``P`` and
broadcasts from ``X`` itself: consecutive columns of one channel are contiguous
in NCHW, and the pack's copy cost 4-33% of those layers (ResNet-50's 1x1 convs,
measured alone).

GEMM forms (``conv_gemm_operands``): with ``K = C*KH*KW`` and ``P = N*OH*OW``
columns, ``C[o, p] = sum_k W2[o, k] * Bp[p // nb, k, p % nb]``: ``Bp`` is the
im2col patch matrix already in ``matmul.packed``'s panel layout (a 1x1
stride-1 conv reads ``X`` itself, no copy), so the matmul compute and schedule
are reused unchanged; ``out[0, o, oh, ow] = D[o, oh*OW + ow]`` with the epilogue in ``D``.
"""
from __future__ import annotations

import dataclasses

from tvm import te, tirx

from . import epilogue as ep
from .dynamic import clamp, dim, is_static, round_up  # conv2d_nchwc's batch and image size may be symbolic
from .matmul import _i64, ceil_to


@dataclasses.dataclass(frozen=True)
class ConvGeom:
    """Shapes of one conv2d (all ints); layouts are handled by the caller."""

    N: int
    C: int
    H: int
    W: int
    O: int
    KH: int
    KW: int
    stride: tuple = (1, 1)
    pad: tuple = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple = (1, 1)
    groups: int = 1

    @property
    def OH(self) -> int:
        return (self.H + self.pad[0] + self.pad[2] - self.dilation[0] * (self.KH - 1) - 1) // self.stride[0] + 1

    @property
    def OW(self) -> int:
        return (self.W + self.pad[1] + self.pad[3] - self.dilation[1] * (self.KW - 1) - 1) // self.stride[1] + 1

    @property
    def Cg(self) -> int:
        return self.C // self.groups

    @property
    def Og(self) -> int:
        return self.O // self.groups

    @property
    def flops(self) -> float:
        return 2.0 * self.N * self.O * self.OH * self.OW * self.Cg * self.KH * self.KW


def _zero(dtype):
    return tirx.const(0, dtype)


def clamp_index(i, size: int):
    """``i`` clamped into ``[0, size)``: the in-image row or column nearest to a padded one."""
    return te.max(te.min(i, dim(size - 1)), _i64(0))


def padded_read(X: te.Tensor, g: ConvGeom, layout: str = "NCHW", block: int = 0, fill=None):
    """``(n, c, hp, wp) -> X`` at padded coordinates, ``fill`` (zero) outside the image; ``block``:
    ``X`` is blocked NCHW{block}c, ``(N, C/block, H, W, block)``."""
    fill = _zero(X.dtype) if fill is None else fill
    top, left = g.pad[0], g.pad[1]

    def read(n, c, hp, wp):
        h, w = hp - _i64(top), wp - _i64(left)
        inside = tirx.all(h >= 0, h < g.H, w >= 0, w < g.W)
        hc, wc = clamp_index(h, g.H), clamp_index(w, g.W)
        if block:
            val = X[n, c // block, hc, wc, c % block]
        else:
            val = X[n, c, hc, wc] if layout == "NCHW" else X[n, hc, wc, c]
        return tirx.if_then_else(inside, val, fill)

    return read


# -- blocked direct --------------------------------------------------------------------------------

def nchwc_blocks(g: ConvGeom, icb: int, ocb: int) -> tuple[int, int]:
    """(input blocks per group, output blocks) of the packed layouts."""
    if g.groups == 1:
        return ceil_to(g.C, icb) // icb, ceil_to(g.O, ocb) // ocb
    return g.Cg // icb, g.O // ocb


def pack_weight_nchwc(Wt: te.Tensor, g: ConvGeom, icb: int, ocb: int) -> te.Tensor:
    """``Wp[ob, rc, kh, kw, ri, oi] = W[ob*ocb + oi, rc*icb + ri, kh, kw]`` (zero past O / C/g)."""
    RC, OB = nchwc_blocks(g, icb, ocb)

    def body(ob, rc, kh, kw, ri, oi):
        o, c = ob * ocb + oi, rc * icb + ri
        val = Wt[te.min(o, _i64(g.O - 1)), te.min(c, _i64(g.Cg - 1)), kh, kw]
        return tirx.if_then_else(tirx.all(o < g.O, c < g.Cg), val, _zero(Wt.dtype))

    shape = (OB, RC, g.KH, g.KW, icb, ocb)
    return te.compute(tuple(_i64(d) for d in shape), body, name="Wp")


def conv2d_nchwc(X: te.Tensor, Wp: te.Tensor, g: ConvGeom, *, icb: int, ocb: int, ow_pad: int = 1,
                 epilogue=(), extras=(), out_dtype="float32", in_block: int = 0, out_block: int = 0):
    """Blocked direct conv (see module doc); returns ``(P, C, D)``. ``in_block``: ``X`` is
    NCHW{in_block}c itself; ``out_block``: so is ``D`` (``BlockChannels``), no unpack: ``D``
    re-blocks ``C``'s ``ocb``-wide channel tiles into ``out_block``-wide ones (whole vectors;
    ``ocb % out_block == 0``)."""
    RC, OB = nchwc_blocks(g, icb, ocb)
    sh, sw = g.stride
    dh, dw = g.dilation
    OWp = round_up(g.OW, ow_pad)
    CB = RC * g.groups
    # a 1x1 kernel reads only every stride-th pixel: the pack subsamples, the conv reads P densely
    fold = (g.KH, g.KW) == (1, 1)
    ph, pw = (sh, sw) if fold else (1, 1)
    if fold:
        sh = sw = 1
    Hp = (g.OH - 1) * sh + (g.KH - 1) * dh + 1
    Wpd = (OWp - 1) * sw + (g.KW - 1) * dw + 1
    read = padded_read(X, g, block=in_block)

    def pack(n, cb, hp, wp, ci):
        c = cb * icb + ci
        hp, wp = hp * ph, wp * pw
        val = read(n, te.min(c, _i64(g.C - 1)), hp, wp)
        # padded width columns past OW (ow_pad) and channels past C read zeros
        ok = tirx.all(c < g.C, wp < g.W + g.pad[1])
        return tirx.if_then_else(ok, val, _zero(X.dtype))

    same_w = is_static(OWp) and is_static(g.OW) and int(OWp) == int(g.OW)
    # a 1x1 stride-1 conv reads X in place: no pack. With a run-time width the register tiles'
    # padded columns read the last column (their outputs are cropped): a pack there was a pass
    # over the input per conv (ResNet-50's 1x1 layers 1.13-1.23x the static kernel's time)
    direct = (fold and (ph, pw) == (1, 1) and not any(g.pad) and (same_w or not is_static(g.W)) and g.groups == 1
              and g.C % icb == 0 and in_block in (0, icb))
    if direct:
        P = None

        def at(idx):
            n, cb, h, w, ci = idx
            w = w if same_w else clamp(w, g.W, OWp)
            return X[n, cb, h, w, ci] if in_block else X[n, cb * icb + ci, h, w]
    else:
        P = te.compute((dim(g.N), _i64(CB), dim(Hp), dim(Wpd), _i64(icb)), pack, name="P")
        at = P.__getitem__
    rc = te.reduce_axis((_i64(0), _i64(RC)), name="rc")
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    ri = te.reduce_axis((_i64(0), _i64(icb)), name="ri")
    obg = OB // g.groups  # output blocks per group

    def conv(n, ob, oh, ow, oi):
        cb = rc if g.groups == 1 else (ob // obg) * RC + rc
        return te.sum(at((n, cb, oh * sh + kh * dh, ow * sw + kw * dw, ri)).astype(out_dtype)
                      * Wp[ob, rc, kh, kw, ri, oi].astype(out_dtype), axis=[rc, kh, kw, ri])

    C = te.compute((dim(g.N), _i64(OB), dim(g.OH), dim(OWp), _i64(ocb)), conv, name="C")
    # per-channel steps (bias, SE scale, activations) on the channel-vector tiles, before the
    # unpack: along ``oi`` they vectorize (the unpack's rows of OW columns often do not, and a
    # scalar GELU/SiLU there cost as much as the conv); a residual is read in the unpack
    pre, pre_extras, post, post_extras = ep.split_per_channel(
        epilogue, extras, (1, 4) if out_block else 1, 5 if out_block else 4)
    src = C
    if pre:
        def tile(n, ob, oh, ow, oi):
            o = ob * ocb + oi
            o = te.min(o, _i64(g.O - 1)) if OB * ocb > g.O else o  # padded channels read a real one
            idx = (n, o // out_block, oh, ow, o % out_block) if out_block else (n, o, oh, ow)
            return ep.apply(C[n, ob, oh, ow, oi], idx, pre, pre_extras)

        src = te.compute(C.shape, tile, name="E")
    if out_block:  # b-wide vectors out of ocb-wide tiles: q*b + r = (q // k)*ocb + (q % k)*b + r
        b, k = out_block, ocb // out_block
        D = ep.fused_output((dim(g.N),) + tuple(dim(d) for d in (g.O // b, g.OH, g.OW, b)),
                            lambda n, q, oh, ow, r: src[n, q // k, oh, ow, (q % k) * b + r],
                            post, post_extras, out_dtype)
        return P, C, D
    D = ep.fused_output((dim(g.N),) + tuple(dim(d) for d in (g.O, g.OH, g.OW)),
                        lambda n, o, oh, ow: src[n, o // ocb, oh, ow, o % ocb], post, post_extras, out_dtype)
    return P, C, D


# -- NHWC direct (any groups) ----------------------------------------------------------------------

def conv2d_nhwc(X: te.Tensor, Wt: te.Tensor, g: ConvGeom, *, kernel_layout="HWIO", epilogue=(), extras=(),
                out_dtype="float32"):
    """``D[n, oh, ow, o] = epilogue(sum_{kh, kw, c} Xpad[n, oh*sh+kh*dh, ow*sw+kw*dw, grp*Cg+c] * W(kh, kw, c, o))``.

    ``kernel_layout`` is ``"HWIO"`` (``W[kh, kw, c, o]``) or ``"OHWI"``; returns ``(Xp, C, D)``.
    """
    sh, sw = g.stride
    dh, dw = g.dilation
    Hp = (g.OH - 1) * sh + (g.KH - 1) * dh + 1
    Wpd = (g.OW - 1) * sw + (g.KW - 1) * dw + 1
    read = padded_read(X, g, "NHWC")
    Xp = te.compute((_i64(g.N), _i64(Hp), _i64(Wpd), _i64(g.C)), lambda n, h, w, c: read(n, c, h, w), name="P")
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    rc = te.reduce_axis((_i64(0), _i64(g.Cg)), name="rc")
    w_at = (lambda a, b, c, o: Wt[a, b, c, o]) if kernel_layout == "HWIO" else (lambda a, b, c, o: Wt[o, a, b, c])

    def conv(n, oh, ow, o):
        c = rc if g.groups == 1 else (o // g.Og) * g.Cg + rc
        return te.sum(Xp[n, oh * sh + kh * dh, ow * sw + kw * dw, c].astype(out_dtype)
                      * w_at(kh, kw, rc, o).astype(out_dtype), axis=[kh, kw, rc])

    C = te.compute((_i64(g.N), _i64(g.OH), _i64(g.OW), _i64(g.O)), conv, name="C")
    D = ep.fused_output(tuple(_i64(d) for d in (g.N, g.OH, g.OW, g.O)), lambda *i: C[i], epilogue, extras,
                        out_dtype)
    return Xp, C, D


# -- depthwise ---------------------------------------------------------------------------------------

def phase_planes(X: te.Tensor, g: ConvGeom, *, ow_pad: int = 1, oh_pad: int = 1, fill=None):
    """The padded input split by column phase for a row-tiled sliding window (depthwise conv,
    pooling)::

        P[n, c, hp, ph, q] = Xpad[n, c, hp, q*sw + ph]        (``fill`` outside the image)

    so that the tap ``(kh, kw)`` of output ``(oh, ow)`` is ``P[n, c, oh*sh + kh*dh, (kw*dw) % sw,
    ow + (kw*dw) // sw]``: contiguous along ``ow`` for any stride. Rows cover ``oh_pad`` / columns
    ``ow_pad``-padded outputs; the batch, height and width may be symbolic. Returns ``(P, tap)`` with ``tap(n, c, oh, ow, kh, kw)``."""
    sh, sw = g.stride
    dh, dw = g.dilation
    OWp, OHp = round_up(g.OW, ow_pad), round_up(g.OH, oh_pad)
    Hp = (OHp - 1) * sh + (g.KH - 1) * dh + 1
    Q = round_up(OWp + ((g.KW - 1) * dw) // sw, ow_pad)  # whole vectors for the pack too
    fill = _zero(X.dtype) if fill is None else fill
    top, left = g.pad[0], g.pad[1]

    def pack(n, c, hp, ph, q):
        h, w = hp - _i64(top), q * _i64(sw) + ph - _i64(left)
        inside = tirx.all(h >= 0, h < g.H, w >= 0, w < g.W)
        val = X[n, c, clamp_index(h, g.H), clamp_index(w, g.W)]
        return tirx.if_then_else(inside, val, fill)

    P = te.compute((dim(g.N), _i64(g.C), dim(Hp), _i64(sw), dim(Q)), pack, name="P")

    def tap(n, c, oh, ow, kh, kw):
        return P[n, c, oh * sh + kh * dh, (kw * dw) % sw, ow + (kw * dw) // sw]

    return P, tap


def phase_interior(g: ConvGeom) -> tuple[int, int, int]:
    """``(lo, hi, sw)``: the columns ``lo <= q < hi`` of ``phase_planes``' ``P`` whose ``sw``
    phases (``w = q*sw + ph - left``, ``0 <= ph < sw``) all lie inside the image."""
    sw, left = g.stride[1], g.pad[1]
    lo = -(-left // sw)
    hi = (g.W + left - sw) // sw + 1
    return lo, max(lo, hi), sw


def depthwise_nchw(X: te.Tensor, Wt: te.Tensor, g: ConvGeom, *, ow_pad: int = 1, oh_pad: int = 1, epilogue=(),
                   extras=(), out_dtype="float32"):
    """Depthwise (``groups == C``, multiplier ``O // C``)::

        D[n, o, oh, ow] = epilogue(sum_{kh, kw} Xpad[n, o // mult, oh*sh + kh*dh, ow*sw + kw*dw] * W[o, 0, kh, kw])

    over the column-phase planes of ``phase_planes`` (every tap a contiguous run of the row for
    any stride); ``C`` is computed over ``ow`` / ``oh`` padded to ``ow_pad`` / ``oh_pad`` so
    register tiles divide it (batch, height and width may be symbolic). Returns ``(P, C, D)``.
    """
    mult = g.O // g.C
    P, tap = phase_planes(X, g, ow_pad=ow_pad, oh_pad=oh_pad)
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    shape = (dim(g.N), _i64(g.O), dim(round_up(g.OH, oh_pad)), dim(round_up(g.OW, ow_pad)))
    C = te.compute(shape, lambda n, o, oh, ow: te.sum(
        tap(n, o // mult, oh, ow, kh, kw).astype(out_dtype) * Wt[o, _i64(0), kh, kw].astype(out_dtype),
        axis=[kh, kw]), name="C")
    D = ep.fused_output(tuple(dim(d) for d in (g.N, g.O, g.OH, g.OW)), lambda n, o, oh, ow: C[n, o, oh, ow],
                        epilogue, extras, out_dtype)
    return P, C, D


def rows_nchw(X: te.Tensor, Wt: te.Tensor, g: ConvGeom, *, ow_pad: int = 1, oh_pad: int = 1, epilogue=(),
              extras=(), out_dtype="float32"):
    """A dense conv (``groups == 1``) over few input channels, vectorized along the output row
    (an image's stem: 3 channels)::

        D[n, o, oh, ow] = epilogue(sum_{rc, kh, kw} Xpad[n, rc, oh*sh + kh*dh, ow*sw + kw*dw] * W[o, rc, kh, kw])

    over ``phase_planes`` as the depthwise kernel reads them; NCHW in and out, no unpack.
    Returns ``(P, C, D)``."""
    P, tap = phase_planes(X, g, ow_pad=ow_pad, oh_pad=oh_pad)
    rc = te.reduce_axis((_i64(0), _i64(g.C)), name="rc")
    kh = te.reduce_axis((_i64(0), _i64(g.KH)), name="kh")
    kw = te.reduce_axis((_i64(0), _i64(g.KW)), name="kw")
    shape = (_i64(g.N), _i64(g.O), _i64(ceil_to(g.OH, oh_pad)), _i64(ceil_to(g.OW, ow_pad)))
    C = te.compute(shape, lambda n, o, oh, ow: te.sum(
        tap(n, rc, oh, ow, kh, kw).astype(out_dtype) * Wt[o, rc, kh, kw].astype(out_dtype), axis=[rc, kh, kw]),
        name="C")
    D = ep.fused_output(tuple(_i64(d) for d in (g.N, g.O, g.OH, g.OW)), lambda n, o, oh, ow: C[n, o, oh, ow],
                        epilogue, extras, out_dtype)
    return P, C, D


def conv1x1_nchw(X: te.Tensor, Wt: te.Tensor, g: ConvGeom, *, epilogue=(), extras=(), out_dtype="float32"):
    """A 1x1 stride-1 unpadded conv read and written in NCHW as it lies (no pack, no unpack)::

        C[n, o, h, w] = sum_c W[o, c, 0, 0] * X[n, c, h, w];   D = epilogue(C)

    Pixels of one channel are contiguous, so a tile of whole output rows is a run
    of vectors of ``X`` per input channel, multiplied by broadcast weights. Returns ``(C, D)``.
    """
    rc = te.reduce_axis((_i64(0), _i64(g.C)), name="rc")
    C = te.compute((_i64(g.N), _i64(g.O), _i64(g.H), _i64(g.W)), lambda n, o, h, w: te.sum(
        X[n, rc, h, w].astype(out_dtype) * Wt[o, rc, _i64(0), _i64(0)].astype(out_dtype), axis=rc), name="C")
    D = ep.fused_output(tuple(_i64(d) for d in (g.N, g.O, g.H, g.W)), lambda n, o, h, w: C[n, o, h, w],
                        epilogue, extras, out_dtype)
    return C, D


# -- GEMM forms: pointwise (1x1) and im2col ------------------------------------------------------------

def gemm_dims(g: ConvGeom) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM form: rows = output channels, columns = N*OH*OW, K = C*KH*KW."""
    return g.O, g.N * g.OH * g.OW, g.C * g.KH * g.KW


def is_identity_1x1(g: ConvGeom) -> bool:
    """A 1x1 stride-1 unpadded conv of batch 1 reads ``X`` as its (K, P) matrix as-is."""
    return g.KH == g.KW == 1 and g.stride == (1, 1) and not any(g.pad) and g.N == 1


def im2col_packed(X: te.Tensor, g: ConvGeom, nb: int) -> te.Tensor:
    """Patch matrix in panel layout: ``Bp[pb, k, pl] = Xpad[n, c, oh*sh + kh*dh, ow*sw + kw*dw]``
    with ``p = pb*nb + pl = n*OH*OW + oh*OW + ow`` and ``k = (c*KH + kh)*KW + kw``; zero for
    ``p >= N*OH*OW`` (panel padding)."""
    _, P, K = gemm_dims(g)
    sh, sw = g.stride
    dh, dw = g.dilation
    read = padded_read(X, g)
    hw = g.OH * g.OW

    def body(pb, k, pl):
        p = pb * nb + pl
        pc = te.min(p, _i64(P - 1))
        n, r = pc // hw, pc % hw
        oh, ow = r // g.OW, r % g.OW
        c, kk = k // (g.KH * g.KW), k % (g.KH * g.KW)
        kh, kw = kk // g.KW, kk % g.KW
        val = read(n, c, oh * sh + kh * dh, ow * sw + kw * dw)
        return tirx.if_then_else(p < P, val, _zero(X.dtype))

    return te.compute((_i64(ceil_to(P, nb) // nb), _i64(K), _i64(nb)), body, name="Bp")


def as_gemm_operand(E: te.Tensor, g: ConvGeom, name: str, cols: int) -> te.Tensor:
    """An NCHW-broadcastable epilogue tensor (bias ``(1, O, 1, 1)``, residual ``(1, O, OH, OW)``) seen as
    ``(O, cols)``, the GEMM output's shape (batch 1, pixels padded to ``cols``); inlined by the schedule."""
    last = g.OH * g.OW - 1

    def body(o, p):
        p = te.min(p, _i64(last))
        return E[tuple(ep.broadcast_index(E, (_i64(0), o, p // g.OW, p % g.OW)))]

    return te.compute((_i64(g.O), _i64(cols)), body, name=name)


def gemm_to_nchw(D: te.Tensor, g: ConvGeom) -> te.Tensor:
    """``out[0, o, oh, ow] = D[o, oh*OW + ow]`` (batch 1)."""
    return te.compute(tuple(_i64(d) for d in (1, g.O, g.OH, g.OW)),
                      lambda n, o, oh, ow: D[o, oh * g.OW + ow], name="out")
