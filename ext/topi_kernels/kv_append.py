"""A key/value cache append fused with the attention product that reads it (decode step).

A decode step returns ``present = concat(past, new)`` along the sequence and multiplies the
query (scores) or the attention weights (output) by that same ``present``. Run apart, the
cache moves through DRAM three times (read past, write present, read present); here one
(batch, head) slice of ``present`` is written, then multiplied while it is in L2 (at 1000
tokens of a 64-wide head: 256 KB).

* :func:`append_scores`: ``S[g, i, j] = sum_d Q[g, i, d] * present[g, j, d]`` (``q @ k^T``);
* :func:`append_mix`: ``O[g, i, d] = sum_j A[g, i, j] * present[g, j, d]`` (``p @ v``);

over 4-D tensors ``(B, H, ., .)``: caches ``past (B, H, P, D)`` (``P`` symbolic) and
``new (B, H, T, D)``; ``present`` is ``(B, H, P + T, D)``. Each returns ``(present, out)``.
"""
from __future__ import annotations

from tvm import te, tirx

from . import i64 as _i64


def _present(past: te.Tensor, new: te.Tensor) -> te.Tensor:
    P = past.shape[2]
    B, H, _, D = past.shape

    def body(b, h, j, d):
        return tirx.if_then_else(j < P, past[b, h, j, d], new[b, h, j - P, d])

    return te.compute((B, H, P + new.shape[2], D), body, name="present")


def append_scores(Q: te.Tensor, past: te.Tensor, new: te.Tensor, lanes: int):
    """``(present, S)``; ``Q`` is ``(B, H, M, D)``, ``D`` a multiple of ``lanes`` (the CPU schedule
    takes ``M = 1``: a decode step's one query row)."""
    present = _present(past, new)
    B, H, M, D = Q.shape
    S_len = present.shape[2]
    k0 = te.reduce_axis((_i64(0), _i64(int(D) // lanes)), name="k0")
    part = te.compute((B, H, M, S_len, _i64(lanes)), lambda b, h, i, j, l: te.sum(
        Q[b, h, i, k0 * lanes + l] * present[b, h, j, k0 * lanes + l], axis=k0), name="part")
    r = te.reduce_axis((_i64(0), _i64(lanes)), name="r")
    S = te.compute((B, H, M, S_len), lambda b, h, i, j: te.sum(part[b, h, i, j, r], axis=r), name="S")
    return present, S


def append_mix(A: te.Tensor, past: te.Tensor, new: te.Tensor):
    """``(present, O)``; ``A`` is ``(B, H, M, P + T)``."""
    present = _present(past, new)
    B, H, M = A.shape[0], A.shape[1], A.shape[2]
    D = past.shape[3]
    j = te.reduce_axis((_i64(0), present.shape[2]), name="j")
    O = te.compute((B, H, M, D), lambda b, h, i, d: te.sum(A[b, h, i, j] * present[b, h, j, d], axis=j), name="O")
    return present, O
