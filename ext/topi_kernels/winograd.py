"""Winograd F(m x m, 3 x 3) convolution (stride 1, dilation 1, groups 1), NCHW in and out.

With ``alpha = m + 2`` and the Cook-Toom matrices ``A (alpha x m)``,
``B (alpha x alpha)``, ``G (alpha x 3)`` of TOPI's ``winograd_util``
(interpolation points chosen for accuracy), each ``m x m`` output tile is
``Y = A^T [ (G g G^T) . (B^T d B) ] A`` where ``d`` is the ``alpha x alpha``
input tile. Over ``T = N * ceil(OH/m) * ceil(OW/m)`` tiles and ``E = alpha^2``
transformed positions::

    U[e, ob, c, oi] = (G W[o, c] G^T)[e]                    # filter transform: a compile-time transform
    P[n, cb, hp, wp, ci] = pad + pack X (channel blocks)      # in-kernel
    T1[eps*alpha + r2, t, c] = sum_r1 B[r1, eps] d_t,c[r1, r2]
    V[e = eps*alpha + nu, t, c] = sum_r2 B[r2, nu] T1[eps*alpha + r2, t, c]     # data transform
    MM[e, t, o] = sum_c V[e, t, c] * U[e, o // nb, c, o % nb]   # E batched GEMMs (matmul.packed recipe)
    Z1[i*alpha + nu, t, o] = sum_eps A[eps, i] MM[eps*alpha + nu, t, o]
    Y[i*m + j, t, o] = sum_nu A[nu, j] Z1[i*alpha + nu, t, o]                  # inverse transform
    out[n, o, h, w] = epilogue(Y[(h % m)*m + w % m, tile(n, h // m, w // m), o])

The transforms are written as explicit sums over the non-zero coefficients
(a ``Select`` over the transformed index that folds once the schedule unrolls
that index), so no multiplications by zero remain.

Cost: GEMM ``2 * E * T * C * O`` flops (``E / m^2`` = 2.25 for F(4,3), 4 for
F(2,3), against 9 for direct conv), transforms ``O(E * T * (C + O))``.

Error (float32 against a float64 reference, ResNet-18 layers, inputs in
[-1, 1]): F(4x4,3x3) ~4e-6 and F(2x2,3x3) ~1e-6 of the largest output; the
tests bound it by 1e-4 of the largest output. F(6x6,3x3) would be ~3x less
accurate and was slower, so it is not offered.
"""
from __future__ import annotations

import functools

import numpy as np
from tvm import te, tirx

from . import epilogue as ep
from .conv2d import ConvGeom, padded_read
from .matmul import _i64, ceil_to

TILES = (2, 4)


@functools.lru_cache(maxsize=None)
def matrices(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, G)`` float64 Cook-Toom matrices for F(m, r)."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    A, B, G = _cook_toom_convolution(_interpolation_points(m + r - 1), m, r)
    return np.asarray(A, np.float64), np.asarray(B, np.float64), np.asarray(G, np.float64)


def tiles(g: ConvGeom, m: int) -> tuple[int, int, int]:
    """(tile rows, tile columns, total tiles)."""
    th, tw = -(-g.OH // m), -(-g.OW // m)
    return th, tw, g.N * th * tw


def _lin(terms, dtype):
    """``sum(coef * value)`` over non-zero coefficients (``+v``/``-v`` for unit ones)."""
    acc = None
    for coef, val in terms:
        if coef == 0:
            continue
        v = val if coef == 1 else (-val if coef == -1 else val * tirx.const(float(coef), dtype))
        acc = v if acc is None else acc + v
    return acc if acc is not None else tirx.const(0.0, dtype)


def _select(index, branches):
    """``branches[index]`` for a loop variable ``index`` (folds to one branch once unrolled)."""
    out = branches[-1]
    for k in range(len(branches) - 2, -1, -1):
        out = tirx.Select(index == k, branches[k], out)
    return out


def _second_pass(T: te.Tensor, M: np.ndarray, k: int, name: str) -> te.Tensor:
    """The right-hand factor of a separable transform over ``T[e, n, th, tw, c]`` grouped by
    ``alpha = M.shape[0]`` rows: ``out[a * k + j, ...] = sum_r M[r, j] * T[a * alpha + r, ...]``
    (``B`` of ``B^T d B`` with ``k = alpha``, ``A`` of ``A^T M A`` with ``k = m``)."""
    alpha, dt = M.shape[0], T.dtype
    groups = int(T.shape[0]) // alpha

    def body(e, n, th, tw, c):
        a = e // k
        branches = [_lin([(M[r, j], T[a * alpha + r, n, th, tw, c]) for r in range(alpha)], dt) for j in range(k)]
        return _select(e % k, branches)

    return te.compute(tuple(_i64(int(d)) for d in (groups * k, *T.shape[1:])), body, name=name)


def filter_transform(Wt: te.Tensor, g: ConvGeom, m: int, nb: int, kb: int) -> te.Tensor:
    """``U[e, jb, k, jl] = (G W[o, k] G^T)[e]`` for ``o = jb*nb + jl``, zero past ``O`` and ``C``.

    Shape ``(alpha^2, ceil(O/nb), ceil(C/kb)*kb, nb)``: the GEMM's packed B panels.
    """
    _, _, G = matrices(m)
    alpha = m + 2
    Op, Cp = ceil_to(g.O, nb), ceil_to(g.C, kb)
    dt = Wt.dtype

    def body(e, jb, k, jl):
        o = jb * nb + jl
        w = lambda a, b: Wt[te.min(o, _i64(g.O - 1)), te.min(k, _i64(g.C - 1)), _i64(a), _i64(b)]  # noqa: E731
        branches = [_lin([(G[e0 // alpha, a] * G[e0 % alpha, b], w(a, b)) for a in range(3) for b in range(3)], dt)
                    for e0 in range(alpha * alpha)]
        return tirx.if_then_else(tirx.all(o < g.O, k < g.C), _select(e, branches), tirx.const(0.0, dt))

    return te.compute(tuple(_i64(d) for d in (alpha * alpha, Op // nb, Cp, nb)), body, name="U")


def data_transform(X: te.Tensor, g: ConvGeom, m: int, kb: int, in_block: int = 0):
    """``(P, T1, V)``: padded/packed input, row pass, ``V[e, n, th, tw, c]`` (tile ``t = (n, th, tw)``);
    ``in_block``: ``X`` is NCHW{in_block}c (the pack copies whole channel vectors)."""
    _, B, _ = matrices(m)
    alpha = m + 2
    TH, TW, T = tiles(g, m)
    Cp = ceil_to(g.C, kb)
    read = padded_read(X, g, block=in_block)
    dt = X.dtype

    def pack(n, cb, hp, wp, ci):
        c = cb * kb + ci
        return tirx.if_then_else(c < g.C, read(n, te.min(c, _i64(g.C - 1)), hp, wp), tirx.const(0.0, dt))

    P = te.compute(tuple(_i64(d) for d in (g.N, Cp // kb, TH * m + 2, TW * m + 2, kb)), pack, name="P")

    def t1(e1, n, th, tw, c):
        r2 = e1 % alpha
        val = lambda r1: P[n, c // kb, th * m + r1, tw * m + r2, c % kb]  # noqa: E731
        branches = [_lin([(B[r1, eps], val(r1)) for r1 in range(alpha)], dt) for eps in range(alpha)]
        return _select(e1 // alpha, branches)

    tile_shape = (g.N, TH, TW, Cp)
    T1 = te.compute(tuple(_i64(d) for d in (alpha * alpha, *tile_shape)), t1, name="T1")

    return P, T1, _second_pass(T1, B, alpha, "V")


def batched_gemm(V: te.Tensor, U: te.Tensor, *, O: int, mb: int, nb: int, out_dtype="float32"):
    """``C[e, i, j] = sum_k V[e, tile i, k] * U[e, j // nb, k, j % nb]`` over rows padded to ``mb``
    (padded rows re-read the last tile); ``MM`` (block ``D``) is ``C`` cut to ``(E, T, ceil(O, 16))``."""
    E, N, TH, TW, K = (int(d) for d in V.shape)
    T = N * TH * TW
    Mp, Np = ceil_to(T, mb), int(U.shape[1]) * nb
    k = te.reduce_axis((_i64(0), _i64(K)), name="k")

    def a_at(e, i):
        i = te.min(i, _i64(T - 1))
        return V[e, i // (TH * TW), (i // TW) % TH, i % TW, k]

    C = te.compute((_i64(E), _i64(Mp), _i64(Np)), lambda e, i, j: te.sum(
        a_at(e, i).astype(out_dtype) * U[e, j // nb, k, j % nb].astype(out_dtype), axis=k), name="C")
    MM = te.compute((_i64(E), _i64(T), _i64(min(Np, ceil_to(O, 16)))), lambda e, i, j: C[e, i, j], name="D")
    return C, MM


def inverse_transform(MM: te.Tensor, g: ConvGeom, m: int, epilogue=(), extras=(), out_dtype="float32",
                      out_block: int = 0):
    """``(Z1, Y, out)``: the two passes of ``A^T M A`` and the output with the epilogue, NCHW or
    (``out_block``) NCHW{out_block}c, whose channel vectors ``Y`` holds contiguous."""
    A, _, _ = matrices(m)
    alpha = m + 2
    TH, TW, T = tiles(g, m)
    _, _, Op = (int(d) for d in MM.shape)
    dt = MM.dtype

    tile_shape = (g.N, TH, TW, Op)

    def z1(e1, n, th, tw, o):
        nu, t = e1 % alpha, (n * TH + th) * TW + tw
        branches = [_lin([(A[eps, i], MM[eps * alpha + nu, t, o]) for eps in range(alpha)], dt) for i in range(m)]
        return _select(e1 // alpha, branches)

    Z1 = te.compute(tuple(_i64(d) for d in (m * alpha, *tile_shape)), z1, name="Z1")

    Y = _second_pass(Z1, A, m, "Y")

    if out_block:
        b = out_block
        shape = (g.N, g.O // b, g.OH, g.OW, b)

        def at(n, q, h, w, r):
            return Y[(h % m) * m + w % m, n, h // m, w // m, q * b + r]
    else:
        shape = (g.N, g.O, g.OH, g.OW)

        def at(n, o, h, w):
            return Y[(h % m) * m + w % m, n, h // m, w // m, o]

    out = ep.fused_output(tuple(_i64(d) for d in shape), at, epilogue, extras, out_dtype, name="out")
    return Z1, Y, out
