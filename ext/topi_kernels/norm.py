"""Layer normalization over the last axis of a ``(rows, n)`` matrix, fused scale/shift.

Algorithm (shifted sums: the two sums have no dependency on each other, so the
mean and the variance come from one sweep each over the L1-resident row)::

    for r in [0, rows):
        K  = X[r, 0]                                   # shift: any element of the row
        s1 = sum_k (X[r, k] - K);  s2 = sum_k (X[r, k] - K)^2
        m = s1 / n                                     # mean - K, kept shifted
        var  = max(s2 / n - m^2, 0)                    # population variance, as PyTorch
        rstd = 1 / sqrt(var + eps)
        for k: Y[r, k] = ((X[r, k] - K) - m) * rstd * gamma[k] + beta[k]

Cost: ``~8 * rows * n`` flops, ``8 * rows * n + 8 * n`` bytes moved.

NaN and +-inf: a row holding any makes ``s1``/``s2`` NaN or inf, the variance
``inf - inf = NaN``, and every output of that row NaN, as NumPy and PyTorch give
(the variance clamp keeps NaN; nothing in the per-element loop changes).

Error bound: with ``d = X - K`` the textbook sum/sum-of-squares formula loses
``(mean - K)^2 / var`` in relative accuracy (catastrophic cancellation when
``|mean| >> std``). Shifting by a row element bounds ``|mean - K|`` by the
row's spread, so the relative error of ``var`` stays within about
``n * eps32 * (1 + (mean - K)^2 / var)``, i.e. ``O(n * eps32 * n)`` in the worst
case of one outlier and ``O(n * eps32)`` for typical rows; float32 sums of
768 elements give ~1e-6 relative error on ``rstd`` (tests check 1e-5 against
float64 with a mean of 1e3 times the spread).

``center``/``scale`` off drop ``beta``/``gamma``. Group norm (``relax.nn.group_norm`` over
``(N, C, *spatial)`` with ``G`` groups) is the same kernel over ``N * G`` rows of
``C / G * HW`` elements with a per-channel affine: ``channel_run = HW`` indexes
``gamma``/``beta`` (of ``C`` values) by ``(r % G) * (C / G) + k // HW``. Dropout after layer norm is
the identity at inference (``relax.nn.dropout`` has no training flag; stock
TVM legalizes it to a copy plus a mask of ones), so the fused
``layer_norm + dropout`` kernel is this kernel.
"""
from __future__ import annotations

from tvm import te, tirx

from . import i64 as _i64
from .dynamic import dim  # rows may be symbolic (a tirx.Var)


def _let(name: str, dtype: str, value, body):
    v = tirx.Var(name, dtype)
    return tirx.Let(v, value, body(v))


def layer_norm_rows(X: te.Tensor, gamma: te.Tensor, beta: te.Tensor, rows: int, n: int, *, eps: float,
                    center: bool = True, scale: bool = True, pad_to: int = 1,
                    channel_run: int | None = None, groups: int = 1) -> te.Tensor:
    """``Y = layer_norm(X) * gamma + beta`` over the last axis; blocks ``s1``, ``s2``, ``mean``, ``rstd``, ``out``.

    ``pad_to > 1`` runs the sums to a multiple of ``pad_to`` (adding 0 past ``n``) so that a
    schedule can split them into whole vectors. ``channel_run``/``groups``: group norm's
    per-channel affine (see the module doc).
    """
    dt = X.dtype
    zero = _i64(0)
    npad = -(-n // pad_to) * pad_to

    def shift(r):
        # a row of one element is not shifted: the simplifier folds X[r, 0] - X[r, 0] to 0,
        # which would turn a NaN input into beta
        return X[r, zero] if n > 1 else tirx.const(0.0, dt)

    def d(r, k):  # X[r, k] - K, 0 past the row
        if npad == n:
            return X[r, k] - shift(r)
        return tirx.if_then_else(k < _i64(n), X[r, te.min(k, _i64(n - 1))] - shift(r), tirx.const(0.0, dt))

    k1 = te.reduce_axis((zero, _i64(npad)), name="k1")
    k2 = te.reduce_axis((zero, _i64(npad)), name="k2")
    S1 = te.compute((dim(rows),), lambda r: te.sum(d(r, k1), axis=k1), name="s1")

    def sq(r, k):
        v = d(r, k)
        return v * v

    S2 = te.compute((dim(rows),), lambda r: te.sum(sq(r, k2), axis=k2), name="s2")
    inv_n = tirx.const(1.0 / n, dt)
    # the shifted mean s1/n: adding K back would round it to K's ulp (6e-5 at K = 1000)
    M = te.compute((dim(rows),), lambda r: S1[r] * inv_n, name="mean")

    def rstd(r):
        # clamp rounding below 0 with ``v < 0 ? 0 : v``: NaN (inf - inf from a row holding +-inf)
        # stays NaN, so the whole row comes out NaN as in NumPy (``max(v, 0)`` would give 0)
        var = _let("v", dt, S2[r] * inv_n - M[r] * M[r],
                   lambda v: tirx.Select(v < tirx.const(0.0, dt), tirx.const(0.0, dt), v))
        return te.rsqrt(var + tirx.const(eps, dt))

    RS = te.compute((dim(rows),), rstd, name="rstd")

    def param(r, k):
        if channel_run is None:
            return k
        per_group = _i64(n // channel_run)
        return (r % _i64(groups)) * per_group + k // _i64(channel_run)

    def out(r, k):
        y = ((X[r, k] - shift(r)) - M[r]) * RS[r]
        if scale:
            y = y * gamma[param(r, k)]
        if center:
            y = y + beta[param(r, k)]
        return y

    return te.compute((dim(rows), _i64(n)), out, name="out")
