"""FFT convolution (stride 1, dilation 1; dense groups == 1 or depthwise groups == C), NCHW in and out.

Overlap-save over ``F x F`` tiles (``F`` the transform size, a knob): the tile of the padded
input at ``(th*mh, tw*mw)`` yields the ``mh x mw`` outputs its circular correlation with the
zero-padded filter gets right (``mh <= F - KH + 1``; the output is split evenly over ``TH x TW``
tiles, ``T = N * TH * TW``). A real input's spectrum is kept for ``Fh = F//2 + 1`` columns
(Hermitian symmetry): ``E = F * Fh`` bins per tile. Complex values are separate real/imaginary
planes (an axis of extent 2). With ``F = A * B`` (``A`` the largest divisor <= sqrt(F))::

    P[n, cb, hp, wp, ci]           = pad + pack X (channel blocks of kb)            # in-kernel
    R1[.., r, n1, k2, p, ci]       = sum_n2 P[.., r, n1 + A n2, ci] w^(A n2 k2)        # row DFT,
    R[.., r, k, q, ci]             = sum_n1 R1[.., r, n1, k % B, :, ci] w^(n1 k)       #   k < Fh
    V1[.., n1, u2, k, q, ci]       = sum_n2 R[.., n1 + A n2, k, :, ci] w^(A n2 u2)     # column DFT
    V[e = u*Fh + k, n, th, tw, q, c] = sum_n1 V1[.., n1, u % B, k, :, ci] w^(n1 u)
    MM[e, t, p, o]                 = sum_c V[e, t, :, c] (x) U[e, o // nb, c, :, o % nb]   # complex GEMM per bin
                                     (depthwise: M = V[e, t, :, c] (x) U[e, :, c])
    Z1, Z                          = the column DFT's two passes with w^-1, rows y < mh  # inverse
    Y[n, th, tw, ob, y, x, oi]     = sum_{k, p} Z[.., y, k, p, oi] * INV[k, x, p]      # real row DFT, x < mw
    out[n, o, h, w]                = epilogue(Y[n, h // mh, w // mw, o // ob, h % mh, w % mw, o % ob])

with ``w = e^{-2 pi i / F}``: each 1-D DFT of length ``F`` is two passes of ``B`` and ``A``
terms (``w^(A n2 k2)`` is the length-``B`` DFT's twiddle; ``w^(n1 k)`` folds the inter-pass
twiddle in), ``F * (A + B)`` complex multiply-adds instead of ``F^2``. ``U = conj(DFT2(w
zero-padded to F x F))`` (the conjugate turns the convolution theorem into the correlation a
conv layer computes) is the compile-time filter transform. ``INV`` folds the Hermitian weights
(1 for ``k = 0`` and ``k = F/2``, else 2) and ``1/F^2`` into the inverse row table (that pass
reads the half spectrum, so it stays a single pass).

Why a split DFT written as small GEMMs against constant twiddle tables, not radix-2/4
butterflies: every pass is one reduction TE compute whose inner loop is a vector FMA over a
channel block (``kb`` lanes) with a broadcast twiddle, register-blocked like the GEMMs and
built in about a second; butterflies need ``log2 F`` stages of strided complex shuffles and a
power-of-two ``F``. The split DFT costs ``A + B`` (~2 sqrt F) multiply-adds per point instead
of ``log2 F``, but any composite ``F`` works, so tiles cover the output with little waste
(56 = 2 x 28 outputs with F = 42 = 6 x 7 for a 15x15 kernel), and the dense conv's time is the
per-bin complex GEMM (``C * O`` complex multiply-adds per bin and tile against the
transforms' ``~4 sqrt(F) (C + O)``). The twiddle tables are computed inside the kernel from
``F`` cos/sin values (float64, rounded once): a few microseconds.

Error (float32 against float64, inputs in [-1, 1]): ~2e-7 of the largest output on the test
shapes (kernels up to 31x31); the tests bound it by 1e-4.
"""
from __future__ import annotations

import dataclasses
import math

from tvm import te, tirx

from . import epilogue as ep
from .conv2d import ConvGeom, padded_read
from .matmul import _i64, ceil_to


@dataclasses.dataclass(frozen=True)
class FFTGeom:
    """Tiling of one conv by ``F x F`` transforms."""

    F: int
    mh: int
    mw: int
    TH: int
    TW: int
    N: int

    @property
    def Fh(self) -> int:
        return self.F // 2 + 1

    @property
    def A(self) -> int:
        """The DFT's split ``F = A * B``: ``A`` the largest divisor <= sqrt(F) (1 for a prime F)."""
        return factor(self.F)

    @property
    def B(self) -> int:
        return self.F // self.A

    @property
    def E(self) -> int:
        return self.F * self.Fh

    @property
    def T(self) -> int:
        return self.N * self.TH * self.TW

    @property
    def Hp(self) -> int:
        return (self.TH - 1) * self.mh + self.F

    @property
    def Wp(self) -> int:
        return (self.TW - 1) * self.mw + self.F


def factor(F: int) -> int:
    """The largest divisor of ``F`` that is at most ``sqrt(F)``."""
    return max(a for a in range(1, math.isqrt(F) + 1) if F % a == 0)


def fft_geom(g: ConvGeom, F: int) -> FFTGeom:
    """Tiles of ``F x F`` transforms; each yields up to ``F - K + 1`` outputs per side, and the
    outputs are split evenly (``mh = ceil(OH / TH)``), so the inverse computes no cropped rows
    beyond the last tile's remainder."""
    if F < max(g.KH, g.KW):
        raise ValueError(f"FFT size {F} is smaller than the {g.KH}x{g.KW} kernel")
    TH, TW = -(-g.OH // (F - g.KH + 1)), -(-g.OW // (F - g.KW + 1))
    return FFTGeom(F, -(-g.OH // TH), -(-g.OW // TW), TH, TW, g.N)


def trig(F: int, name: str) -> te.Tensor:
    """``TRIG[x, p]``: cos (p = 0) / sin (p = 1) of ``2 pi x / F``, float64 math rounded once."""
    def body(x, p):
        ang = x.astype("float64") * tirx.const(2 * math.pi / F, "float64")
        return tirx.Select(p == _i64(0), te.cos(ang), te.sin(ang)).astype("float32")

    return te.compute((_i64(F), _i64(2)), body, name=name)


def _tw(TRIG, F: int, a, b, p, sign: int = 1):
    """cos/sin of ``2 pi a b / F`` (``sign`` -1 negates the sine)."""
    v = TRIG[(a * b) % _i64(F), p]
    return v if sign == 1 else tirx.Select(p == _i64(0), v, -v)


def tables(F: int, mw: int):
    """``(TRIG, TB, TF, INV)``: the twiddle tables of the kernel (see module doc)."""
    Fh, A = F // 2 + 1, factor(F)
    B = F // A
    TRIG = trig(F, "TRIG")
    TB = te.compute((_i64(B), _i64(B), _i64(2)), lambda a, b, p: TRIG[(a * b * _i64(A)) % _i64(F), p], name="TB")
    TF = te.compute((_i64(A), _i64(F), _i64(2)), lambda a, b, p: TRIG[(a * b) % _i64(F), p], name="TF")

    def inv(k, x, p):
        w = tirx.Select(tirx.any(k == _i64(0), k * 2 == _i64(F)), tirx.const(1.0 / F ** 2, "float32"),
                        tirx.const(2.0 / F ** 2, "float32"))
        return _tw(TRIG, F, k, x, p, -1) * w

    INV = te.compute((_i64(Fh), _i64(mw), _i64(2)), inv, name="INV")
    return TRIG, TB, TF, INV


def _rotate(val, table, at, q, s, sign: int):
    """One term of ``val * e^{sign i theta}`` for output plane ``q`` from input plane ``s``
    (``table[at]`` holds cos, sin of theta): a single product once ``q`` and ``s`` are unrolled."""
    cs, sn = table[(*at, _i64(0))], table[(*at, _i64(1))]
    # e^{-i t}: re += a_r cos + a_i sin, im += a_i cos - a_r sin;  e^{+i t}: the sines change sign
    off = tirx.Select(q == _i64(0), sn, -sn) if sign < 0 else tirx.Select(q == _i64(0), -sn, sn)
    return val * tirx.Select(q == s, cs, off)


def forward(X: te.Tensor, g: ConvGeom, fg: FFTGeom, kb: int, TB: te.Tensor, TF: te.Tensor):
    """``(P, R1, R, V1, V)``: packed input, the row DFT's two passes, the column DFT's two passes;
    ``V[e, n, th, tw, q, c]`` (c padded to kb)."""
    F, Fh, A, B = fg.F, fg.Fh, fg.A, fg.B
    Cp = ceil_to(g.C, kb)
    read = padded_read(X, g)
    dt = X.dtype
    tile = lambda *rest: tuple(_i64(d) for d in (g.N, fg.TH, fg.TW, Cp // kb, *rest))  # noqa: E731

    def pack(n, cb, hp, wp, ci):
        c = cb * kb + ci
        return tirx.if_then_else(c < g.C, read(n, te.min(c, _i64(g.C - 1)), hp, wp), tirx.const(0.0, dt))

    P = te.compute(tuple(_i64(d) for d in (g.N, Cp // kb, fg.Hp, fg.Wp, kb)), pack, name="P")
    # rows: R1[.., r, n1, k2, p] = sum_n2 x[r, n1 + A n2] e^{-2 pi i A n2 k2 / F} (real in)
    n2 = te.reduce_axis((_i64(0), _i64(B)), name="n2")

    def r1(n, th, tw, cb, r, n1, k2, p, ci):
        x = P[n, cb, th * fg.mh + r, tw * fg.mw + n1 + n2 * _i64(A), ci]
        return te.sum(x * tirx.Select(p == _i64(0), TB[n2, k2, _i64(0)], -TB[n2, k2, _i64(1)]), axis=n2)

    R1 = te.compute(tile(F, A, B, 2, kb), r1, name="R1")
    # R[.., r, k, q] = sum_n1 R1[.., r, n1, k % B] e^{-2 pi i n1 k / F}, k < Fh
    n1 = te.reduce_axis((_i64(0), _i64(A)), name="n1")
    s1 = te.reduce_axis((_i64(0), _i64(2)), name="s1")
    R = te.compute(tile(F, Fh, 2, kb), lambda n, th, tw, cb, r, k, q, ci: te.sum(_rotate(
        R1[n, th, tw, cb, r, n1, k % _i64(B), s1, ci], TF, (n1, k), q, s1, -1), axis=[n1, s1]), name="R")
    # columns: V1[.., n1, u2, k, q] = sum_n2 R[.., n1 + A n2, k] e^{-2 pi i A n2 u2 / F}
    m2 = te.reduce_axis((_i64(0), _i64(B)), name="m2")
    s2 = te.reduce_axis((_i64(0), _i64(2)), name="s2")
    V1 = te.compute(tile(A, B, Fh, 2, kb), lambda n, th, tw, cb, a, u2, k, q, ci: te.sum(_rotate(
        R[n, th, tw, cb, a + m2 * _i64(A), k, s2, ci], TB, (m2, u2), q, s2, -1), axis=[m2, s2]), name="V1")
    # V[u*Fh + k, .., q, c] = sum_n1 V1[.., n1, u % B, k] e^{-2 pi i n1 u / F}
    m1 = te.reduce_axis((_i64(0), _i64(A)), name="m1")
    s3 = te.reduce_axis((_i64(0), _i64(2)), name="s3")

    def v(e, n, th, tw, q, c):
        u, k = e // Fh, e % Fh
        val = V1[n, th, tw, c // kb, m1, u % _i64(B), k, s3, c % kb]
        return te.sum(_rotate(val, TF, (m1, u), q, s3, -1), axis=[m1, s3])

    V = te.compute(tuple(_i64(d) for d in (fg.E, g.N, fg.TH, fg.TW, 2, Cp)), v, name="V")
    return P, R1, R, V1, V


def complex_gemm(V: te.Tensor, U: te.Tensor, fg: FFTGeom, *, O: int, ob: int, mb: int, nb: int):
    """``(C, MM)``: per bin ``e``, ``C[e, i, p, j] = sum_c V[e, tile i, :, c] (x) U[e, j // nb, c, :, j % nb]``
    (complex; rows padded to ``mb`` re-read the last tile), ``MM`` = ``C`` cut to ``ceil(O, ob)`` columns."""
    E, T = fg.E, fg.T
    K = int(V.shape[-1])
    Mp, Np = ceil_to(T, mb), int(U.shape[1]) * nb
    c = te.reduce_axis((_i64(0), _i64(K)), name="c")
    q = te.reduce_axis((_i64(0), _i64(2)), name="q")
    TH, TW = fg.TH, fg.TW

    def a_at(e, i):
        i = te.min(i, _i64(T - 1))
        return V[e, i // (TH * TW), (i // TW) % TH, i % TW, q, c]

    def body(e, i, p, j):
        # re = Vr Ur - Vi Ui, im = Vr Ui + Vi Ur: plane (p + q) % 2 of U, negated for (re, Vi)
        prod = a_at(e, i) * U[e, j // nb, c, (p + q) % _i64(2), j % nb]
        return te.sum(tirx.Select(tirx.all(p == _i64(0), q == _i64(1)), -prod, prod), axis=[c, q])

    C = te.compute((_i64(E), _i64(Mp), _i64(2), _i64(Np)), body, name="C")
    MM = te.compute((_i64(E), _i64(T), _i64(2), _i64(ceil_to(O, ob))), lambda e, i, p, j: C[e, i, p, j], name="D")
    return C, MM


def dense_product(MM: te.Tensor, fg: FFTGeom):
    """``MM(e, n, th, tw, p, o)`` accessor of the dense GEMM's output."""
    return lambda e, n, th, tw, p, o: MM[e, (n * fg.TH + th) * fg.TW + tw, p, o]


def depthwise_product(V: te.Tensor, U: te.Tensor):
    """``M[e, n, th, tw, p, c] = V[e, n, th, tw, :, c] (x) U[e, :, c]`` (complex, to be inlined)."""
    def body(e, n, th, tw, p, c):
        vr, vi, ur, ui = V[e, n, th, tw, _i64(0), c], V[e, n, th, tw, _i64(1), c], U[e, _i64(0), c], U[e, _i64(1), c]
        return tirx.Select(p == _i64(0), vr * ur - vi * ui, vr * ui + vi * ur)

    M = te.compute(tuple(V.shape), body, name="M")
    return M, lambda e, n, th, tw, p, o: M[e, n, th, tw, p, o]


def inverse(m_at, g: ConvGeom, fg: FFTGeom, ob: int, Op: int, TB: te.Tensor, TF: te.Tensor, INV: te.Tensor,
            epilogue=(), extras=(), out_dtype="float32"):
    """``(Z1, Z, Y, out)``: inverse column DFT in two passes (rows ``y < mh``), inverse real row
    DFT (``x < mw``), NCHW output with the fused epilogue. ``m_at(e, n, th, tw, p, o)`` reads the
    products."""
    F, Fh, A, B = fg.F, fg.Fh, fg.A, fg.B
    tile = lambda *rest: tuple(_i64(d) for d in (g.N, fg.TH, fg.TW, Op // ob, *rest))  # noqa: E731
    # Z1[.., n1, y2, k, p] = sum_n2 M[(n1 + A n2) Fh + k] e^{+2 pi i A n2 y2 / F}
    n2 = te.reduce_axis((_i64(0), _i64(B)), name="n2")
    s1 = te.reduce_axis((_i64(0), _i64(2)), name="s1")
    Z1 = te.compute(tile(A, B, Fh, 2, ob), lambda n, th, tw, b, a, y2, k, p, oi: te.sum(_rotate(
        m_at((a + n2 * _i64(A)) * _i64(Fh) + k, n, th, tw, s1, b * ob + oi), TB, (n2, y2), p, s1, +1),
        axis=[n2, s1]), name="Z1")
    # Z[.., y, k, p] = sum_n1 Z1[.., n1, y % B, k] e^{+2 pi i n1 y / F}, y < mh
    n1 = te.reduce_axis((_i64(0), _i64(A)), name="n1")
    s = te.reduce_axis((_i64(0), _i64(2)), name="s")

    def z(n, th, tw, b, y, k, p, oi):
        return te.sum(_rotate(Z1[n, th, tw, b, n1, y % _i64(B), k, s, oi], TF, (n1, y), p, s, +1), axis=[n1, s])

    Z = te.compute(tuple(_i64(d) for d in (g.N, fg.TH, fg.TW, Op // ob, fg.mh, Fh, 2, ob)), z, name="Z")
    k = te.reduce_axis((_i64(0), _i64(Fh)), name="k")
    t = te.reduce_axis((_i64(0), _i64(2)), name="t")
    Y = te.compute(tuple(_i64(d) for d in (g.N, fg.TH, fg.TW, Op // ob, fg.mh, fg.mw, ob)),
                   lambda n, th, tw, b, y, x, oi: te.sum(Z[n, th, tw, b, y, k, t, oi] * INV[k, x, t], axis=[k, t]),
                   name="Y")

    def at(n, o, h, w):
        return Y[n, h // fg.mh, w // fg.mw, o // ob, h % fg.mh, w % fg.mw, o % ob]

    out = ep.fused_output(tuple(_i64(d) for d in (g.N, g.O, g.OH, g.OW)), at, epilogue, extras, out_dtype,
                          name="out")
    return Z1, Z, Y, out


def filter_transform(Wt: te.Tensor, g: ConvGeom, F: int, *, nb: int = 0, kb: int = 1) -> te.Tensor:
    """``U = conj(DFT2(W zero-padded to F x F))`` per bin ``e = u*Fh + k``, float64 sums rounded once.

    Dense (``nb`` > 0): ``U[e, jb, c, q, jl]`` for ``o = jb*nb + jl`` (the GEMM's panels), zero past
    ``O`` and ``C`` (``C`` padded to ``kb``). Depthwise (``nb == 0``): ``U[e, q, c]``, ``c`` padded to
    ``kb``. Two separable passes (taps of a row, then rows), each a sum over the kernel's taps.
    """
    Fh = F // 2 + 1
    TRIG = trig(F, "TRIG")
    b = te.reduce_axis((_i64(0), _i64(g.KW)), name="b")
    Cg = int(Wt.shape[1])
    # W1[o, c, a, k, q] = sum_b W[o, c, a, b] e^{+2 pi i b k / F}
    W1 = te.compute(tuple(_i64(d) for d in (g.O, Cg, g.KH, Fh, 2)),
                    lambda o, c, a, k, q: te.sum(Wt[o, c, a, b].astype("float64")
                                                 * TRIG[(b * k) % _i64(F), q].astype("float64"), axis=b), name="W1")
    a = te.reduce_axis((_i64(0), _i64(g.KH)), name="a")

    def dft(o, c, e, q):
        u, k = e // Fh, e % Fh
        at = (a * u) % _i64(F)
        cs, sn = TRIG[at, _i64(0)].astype("float64"), TRIG[at, _i64(1)].astype("float64")
        wr, wi = W1[o, c, a, k, _i64(0)], W1[o, c, a, k, _i64(1)]
        # (Wr + i Wi)(cos + i sin)
        return te.sum(tirx.Select(q == _i64(0), wr * cs - wi * sn, wr * sn + wi * cs), axis=a)

    if nb == 0:
        Cp = ceil_to(g.O, kb)
        W2 = te.compute(tuple(_i64(d) for d in (g.O, 1, Fh * F, 2)), dft, name="W2")

        def dw(e, q, c):
            val = W2[te.min(c, _i64(g.O - 1)), _i64(0), e, q].astype("float32")
            return tirx.if_then_else(c < g.O, val, tirx.const(0.0, "float32"))

        return te.compute(tuple(_i64(d) for d in (F * Fh, 2, Cp)), dw, name="U")
    Op, Cp = ceil_to(g.O, nb), ceil_to(g.C, kb)
    W2 = te.compute(tuple(_i64(d) for d in (g.O, g.C, F * Fh, 2)), dft, name="W2")

    def body(e, jb, c, q, jl):
        o = jb * nb + jl
        val = W2[te.min(o, _i64(g.O - 1)), te.min(c, _i64(g.C - 1)), e, q].astype("float32")
        return tirx.if_then_else(tirx.all(o < g.O, c < g.C), val, tirx.const(0.0, "float32"))

    return te.compute(tuple(_i64(d) for d in (F * Fh, Op // nb, Cp, 2, nb)), body, name="U")
