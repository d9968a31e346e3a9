"""The CPU kernels of ``relax_passes/expert_matmul.py``, written as TIR directly: rows whose
count per matrix is only known at run time do not fit a TE compute's static iteration space.

``y[s, n] = sum_k x[s, k] * w[ids[s], k, n]`` for ``x (S, K)``, ``ids (S,)`` in ``[0, E)`` and
``w (E, K, N)``, ``S`` symbolic (a mixture-of-experts layer: row ``s`` is one (token, chosen
expert) pair, ``w`` the stacked experts).

* :func:`route_kernel` ``(ids) -> (order, offsets)``: a counting sort of the rows by matrix,
  ``order[offsets[e]:offsets[e + 1]]`` the rows of matrix ``e`` in their original order (one
  serial pass over ``S`` integers).
* :func:`grouped_kernel` ``(x, order, offsets, wp) -> y``: per column panel of ``cols`` (the
  panels are the parallel loop), per matrix, its rows ``rows`` at a time: a register tile of
  ``rows x cols`` accumulators over the K loop, each panel row loaded once for all of them and
  each ``x[row, k]`` broadcast once (a GEMM micro-kernel over gathered rows); the last
  ``count % rows`` rows one at a time with 4 partial sums over K (independent FMA chains).
  ``wp (E, N / cols, K, cols)`` is ``w`` in column panels, ``wp[e, j, k, c] = w[e, k, j * cols + c]``:
  a panel's rows are contiguous (rows of ``w`` itself are ``N`` floats apart, at ``N = 1024`` a
  4 KB stride that maps a panel onto a few cache sets).
"""
from __future__ import annotations

from tvm.script import tirx as T


def route_kernel(E: int, ids_dtype: str):
    @T.prim_func(s_tir=True)
    def route(var_ids: T.handle, var_order: T.handle, offsets: T.Buffer((E + 1,), "int32")):
        S = T.int64()
        ids = T.match_buffer(var_ids, (S,), ids_dtype)
        order = T.match_buffer(var_order, (S,), "int32")
        with T.sblock("root"):
            cursor = T.sblock_alloc_buffer((E,), "int32", scope="local")
            for e in range(E + 1):
                offsets[e] = 0
            for s in range(S):
                offsets[ids[s] + 1] = offsets[ids[s] + 1] + 1
            for e in range(E):
                offsets[e + 1] = offsets[e + 1] + offsets[e]
                cursor[e] = offsets[e]
            for s in range(S):
                order[cursor[ids[s]]] = T.Cast("int32", s)
                cursor[ids[s]] = cursor[ids[s]] + 1

    return route


def grouped_kernel(E: int, K: int, N: int, cols: int, rows: int):
    panels = N // cols

    @T.prim_func(s_tir=True)
    def grouped(var_x: T.handle, var_order: T.handle, offsets: T.Buffer((E + 1,), "int32"),
                wp: T.Buffer((E, panels, K, cols), "float32"), var_y: T.handle):
        S = T.int64()
        x = T.match_buffer(var_x, (S, K), "float32")
        order = T.match_buffer(var_order, (S,), "int32")
        y = T.match_buffer(var_y, (S, N), "float32")
        with T.sblock("root"):
            for j in T.parallel(panels):
                acc = T.alloc_buffer((rows, cols), "float32", scope="local")
                tile = T.alloc_buffer((rows,), "int32", scope="local")
                part = T.alloc_buffer((4, cols), "float32", scope="local")
                for e in range(E):
                    for t in range((offsets[e + 1] - offsets[e]) // rows):
                        for r in T.unroll(rows):
                            tile[r] = order[offsets[e] + t * rows + r]
                        for r in T.unroll(rows):
                            for c in T.vectorized(cols):
                                acc[r, c] = T.float32(0)
                        for k in range(K):
                            for r in T.unroll(rows):
                                for c in T.vectorized(cols):
                                    acc[r, c] = acc[r, c] + x[tile[r], k] * wp[e, j, k, c]
                        for r in T.unroll(rows):
                            for c in T.vectorized(cols):
                                y[tile[r], j * cols + c] = acc[r, c]
                    for i in range(offsets[e] + (offsets[e + 1] - offsets[e]) // rows * rows, offsets[e + 1]):
                        for u in T.unroll(4):
                            for c in T.vectorized(cols):
                                part[u, c] = T.float32(0)
                        for k4 in range(K // 4):
                            for u in T.unroll(4):
                                for c in T.vectorized(cols):
                                    part[u, c] = part[u, c] + x[order[i], k4 * 4 + u] * wp[e, j, k4 * 4 + u, c]
                        for k in range(K // 4 * 4, K):
                            for c in T.vectorized(cols):
                                part[0, c] = part[0, c] + x[order[i], k] * wp[e, j, k, c]
                        for c in T.vectorized(cols):
                            y[order[i], j * cols + c] = (part[0, c] + part[1, c]) + (part[2, c] + part[3, c])

    return grouped
