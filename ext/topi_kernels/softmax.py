"""Softmax over the last axis of a ``(rows, n)`` matrix, numerically safe.

Algorithm (three passes over a row that stays in L1)::

    for r in [0, rows):
        m = max_k X[r, k]                       # n compares
        for k: E[k] = exp(X[r, k] - m)          # every exponent <= 0: no overflow
        s = sum_k E[k]                          # s >= 1 (the max element gives exp(0))
        for k: Y[r, k] = E[k] * (1 / s)         # one division per row

Cost: about ``16 * rows * n`` flops (12 for the polynomial ``exp``, see
``elemwise.py``) and ``8 * rows * n`` bytes moved (X read once, Y written once).
Subtracting the row max keeps every ``exp`` argument <= 0, so inputs around
+-1e4 (or any finite values) give finite outputs; a row that is all ``-inf``
gives NaN, as in NumPy and PyTorch. So does a row holding a NaN or a ``+inf``
(``exp`` keeps NaN, ``inf - inf`` is NaN, and the row sum carries it to every
output); a ``-inf`` next to finite values gives 0 there.

N-D inputs are flattened to rows by the Relax family (a free reshape).
"""
from __future__ import annotations

from tvm import te, tirx

from . import elemwise as ew
from . import i64 as _i64
from .dynamic import dim  # rows may be symbolic (a tirx.Var)


def softmax_rows(X: te.Tensor, rows: int, n: int, out_dtype: str = "float32", pad_to: int = 1) -> te.Tensor:
    """``Y = softmax(X, axis=-1)`` for ``X`` of shape ``(rows, n)``; blocks ``max``, ``exp``, ``sum``, ``out``.

    ``pad_to > 1`` runs the two row reductions to a multiple of ``pad_to`` (reading -inf for the
    max and 0 for the sum past ``n``) so that a schedule can split them into whole vectors.
    """
    npad = -(-n // pad_to) * pad_to
    last = _i64(n - 1)

    def padded(load, ident):
        if npad == n:
            return load
        return lambda r, k: tirx.if_then_else(k < _i64(n), load(r, te.min(k, last)), ident)

    k = te.reduce_axis((_i64(0), _i64(npad)), name="k")
    x_at = padded(lambda r, kk: X[r, kk], tirx.min_value(X.dtype))
    M = te.compute((dim(rows),), lambda r: te.max(x_at(r, k), axis=k), name="max")
    E = te.compute((dim(rows), _i64(n)), lambda r, j: ew.exp(X[r, j] - M[r], nonpositive=True), name="exp")
    k2 = te.reduce_axis((_i64(0), _i64(npad)), name="k2")
    e_at = padded(lambda r, kk: E[r, kk], tirx.const(0.0, X.dtype))
    S = te.compute((dim(rows),), lambda r: te.sum(e_at(r, k2), axis=k2), name="sum")
    one = tirx.const(1.0, X.dtype)
    Y = te.compute((dim(rows), _i64(n)), lambda r, j: E[r, j] * (one / S[r]), name="out")
    return Y if out_dtype == X.dtype else te.compute(Y.shape, lambda *i: Y[i].astype(out_dtype), name="cast")
