"""Scaled dot-product attention in one kernel: ``softmax(Q K^T * scale + mask) V``.

Shapes: ``Q (B, M, d)``, keys ``K (B, N, d)`` (layout ``"nk"``) or ``(B, d, N)`` (``"kn"``),
``V (B, N, dv)``, an additive ``mask (G, Mm, Nn)`` (``Mm`` in {1, M}, ``Nn`` in {1, N}, batch
``b`` reading mask ``b // (B / G)``: a per-sequence mask shared by its heads) and a ``keep``
tensor of the same form (``where(keep > 0, scores, fill)`` before the mask: a causal
``masked_fill``, which drops even a NaN score where it masks). Output ``(B, M, dv)``.

Blocks (a schedule keeps everything but ``Kp`` inside one block of query rows)::

    Kp[b, p, k, l] = K(b, p*nb + l, k), 0 past N     # key panels, contiguous along the keys
    C[b, i, j]  = sum_k Q[b, i, k] * Kp(b, j, k)       # scores: a register tile per panel
    S[b, i, j]  = where(keep > 0, C * scale, fill) + mask   # (divide when the graph divides)
    max[b, i]   = max_{j < N} S                        # padded keys read -inf
    exp[b, i, j] = exp(S - max)                        # every argument <= 0 (or NaN)
    sum[b, i]   = sum_{j < N} exp
    pv[b, i, c] = sum_{j < N} exp[b, i, j] * V[b, j, c]
    out[b, i, c] = pv * (1 / sum)

The rows of scores (``S``, ``exp``) never leave the cache: a stock graph writes the
``B * M * N`` scores, reads them twice in a softmax and once more in the second matmul
(Whisper's encoder: 54 MB per layer, four passes). The result differs from
``matmul(softmax(S), V)`` only in rounding: the row's ``1 / sum`` is applied after the
products, not before. NaN and infinities propagate as there: a NaN score makes the row's
sum NaN, so the whole output row; ``exp`` of a masked ``-inf`` is 0, and ``0 * inf`` in
``V`` is NaN in both.
"""
from __future__ import annotations

from tvm import te, tirx

from . import elemwise as ew
from . import i64 as _i64
from .matmul import ceil_to


def _clamp(idx, limit: int, padded: int):
    return idx if padded == limit else te.min(idx, _i64(limit - 1))


def attention(Q: te.Tensor, K: te.Tensor, V: te.Tensor, mask: te.Tensor | None = None, keep: te.Tensor | None = None,
              *, k_layout: str, scale: float | None, scale_op: str = "multiply", fill: float | None = None, mb: int,
              nb: int) -> te.Tensor:
    """The output block ``out`` (see module doc); rows padded to ``mb``, keys to ``nb`` (the
    scores and the row reductions: whole panels and vectors)."""
    B, M, d = (int(s) for s in Q.shape)
    N, dv = int(V.shape[1]), int(V.shape[2])
    Mp, Np = ceil_to(M, mb), ceil_to(N, nb)
    dt = Q.dtype

    def key(b, j, k):
        jc = _clamp(j, N, Np)
        val = K[b, jc, k] if k_layout == "nk" else K[b, k, jc]
        return val if Np == N else tirx.if_then_else(j < _i64(N), val, tirx.const(0, dt))

    Kp = te.compute((_i64(B), _i64(Np // nb), _i64(d), _i64(nb)),
                    lambda b, p, k, l: key(b, p * _i64(nb) + l, k), name="Kp")
    k = te.reduce_axis((_i64(0), _i64(d)), name="k")
    C = te.compute((_i64(B), _i64(Mp), _i64(Np)), lambda b, i, j: te.sum(
        Q[b, _clamp(i, M, Mp), k] * Kp[b, j // _i64(nb), k, j % _i64(nb)], axis=k), name="C")

    def scaled(x):
        if scale is None:
            return x
        c = tirx.const(scale, dt)
        return x / c if scale_op == "divide" else x * c

    def at(t, b, i, j):  # a (G, Mm, Nn) operand broadcast over the scores
        G, Mm, Nn = (int(s) for s in t.shape)
        return t[b // _i64(B // G), _clamp(i, M, Mp) if Mm > 1 else _i64(0), _clamp(j, N, Np) if Nn > 1 else _i64(0)]

    def score(b, i, j):
        val = scaled(C[b, i, j])
        if keep is not None:
            val = tirx.Select(at(keep, b, i, j) > tirx.const(0, dt), val, tirx.const(fill, dt))
        return val if mask is None else val + at(mask, b, i, j)

    S = te.compute((_i64(B), _i64(Mp), _i64(Np)), score, name="S")
    j1 = te.reduce_axis((_i64(0), _i64(Np)), name="j1")
    lowest = tirx.min_value(dt)
    mx = te.compute((_i64(B), _i64(Mp)), lambda b, i: te.max(
        S[b, i, j1] if Np == N else tirx.if_then_else(j1 < _i64(N), S[b, i, j1], lowest), axis=j1), name="max")
    E = te.compute((_i64(B), _i64(Mp), _i64(N)), lambda b, i, j: ew.exp(S[b, i, j] - mx[b, i], nonpositive=True),
                   name="exp")
    j2 = te.reduce_axis((_i64(0), _i64(Np)), name="j2")
    zero = tirx.const(0.0, dt)
    sm = te.compute((_i64(B), _i64(Mp)), lambda b, i: te.sum(
        E[b, i, j2] if Np == N else tirx.if_then_else(j2 < _i64(N), E[b, i, te.min(j2, _i64(N - 1))], zero),
        axis=j2), name="sum")
    j3 = te.reduce_axis((_i64(0), _i64(N)), name="j3")
    PV = te.compute((_i64(B), _i64(Mp), _i64(dv)), lambda b, i, c: te.sum(E[b, i, j3] * V[b, j3, c], axis=j3),
                    name="pv")
    one = tirx.const(1.0, dt)
    return te.compute((_i64(B), _i64(M), _i64(dv)), lambda b, i, c: PV[b, i, c] * (one / sm[b, i]), name="out")
