"""A matrix-vector product per row, each row with the matrix its index selects.

``y[s, n] = sum_k x[s, k] * w[ids[s], k, n]``: ``x (S, K)``, ``ids (S,)`` (integers in
``[0, E)``), ``w (E, K, N)``. This is a mixture-of-experts layer's expert projection with the
tokens left where they are: row ``s`` is one (token, chosen expert) pair and ``w`` stacks the
experts' weights. It reads ``w[ids[s]]`` in place; the gathered form, ``take(w, ids)`` then a
batched product, first copies a whole matrix per row.

``w`` comes in column panels, ``wp (E, N / cols, K, cols)`` with
``wp[e, j, k, c] = w[e, k, j * cols + c]``: a panel's rows are contiguous, so the K loop of one
panel walks memory in order (rows of ``w`` itself are ``N`` floats apart: at ``N = 1024`` a
4 KB stride, which maps every row of a panel to the same few cache sets).
"""
from __future__ import annotations

from tvm import te

from . import i64 as _i64


def expert_matmul(x: te.Tensor, ids: te.Tensor, wp: te.Tensor) -> te.Tensor:
    """``y (S, N)`` as in the module docstring, from the paneled ``wp``."""
    S, K = x.shape
    panels, cols = int(wp.shape[1]), int(wp.shape[3])
    k = te.reduce_axis((_i64(0), _i64(int(K))), name="k")
    return te.compute((S, _i64(panels * cols)),
                      lambda s, n: te.sum(x[s, k] * wp[ids[s], n // cols, k, n % cols], axis=k), name="y")
