"""Batched matmul over zero-padded operands (the CUDA batched candidate's compute).

``D[b.., i, j] = epilogue(sum_k A[b.., i, k] * B[b.., k, j])`` with NumPy broadcasting over
the batch dims (``B`` may be 2-D), computed as ``C[bt, i, j]`` over one flattened batch axis
``bt`` so a schedule binds it to ``blockIdx.z``; ``A_pad``/``B_pad`` are zero-filled to
``(Mp, Kp)`` / ``(Kp, Np)`` (``(Np, Kp)`` when ``transpose_b``) tiles like ``matmul_padded``'s.
``out_map`` maps an output index to ``C``'s, for ``transform_block_layout``.
Cost: ``2 * prod(batch) * M * N * K`` flops.
"""
from __future__ import annotations

import math

from tvm import te, tirx

from . import epilogue as ep
from .matmul import _i64


def _unravel(bt, dims):
    """Batch index tuple of the flat batch index ``bt`` over ``dims``."""
    idx, rest = [], bt
    for d in reversed(dims):
        idx.append(rest % d)
        rest = rest // d
    return idx[::-1]


def _bcast(t: te.Tensor, bidx):
    extra = len(t.shape) - 2
    if extra == 0:
        return []
    off = len(bidx) - extra
    return [bidx[off + d] if int(n) != 1 else _i64(0) for d, n in enumerate(t.shape[:extra])]


def batch_matmul_padded(A: te.Tensor, B: te.Tensor, *, out_shape, transpose_b: bool, Mp: int, Np: int, Kp: int,
                        epilogue=(), extras=(), out_dtype="float32", acc_dtype="float32"):
    """Returns ``(C, D, out_map)``; see the module doc."""
    out_shape = [int(d) for d in out_shape]
    batch, (M, N), K = out_shape[:-2], out_shape[-2:], int(A.shape[-1])
    Bt = math.prod(batch)

    def a_pad(bt, i, k):
        inside = tirx.all(i < _i64(M), k < _i64(K))
        ic, kc = te.min(i, _i64(M - 1)), te.min(k, _i64(K - 1))
        return tirx.if_then_else(inside, A[tuple(_bcast(A, _unravel(bt, batch))) + (ic, kc)], tirx.const(0, A.dtype))

    def b_pad(bt, r, s):  # (k, j) or (j, k)
        j, k = (r, s) if transpose_b else (s, r)
        inside = tirx.all(j < _i64(N), k < _i64(K))
        jc, kc = te.min(j, _i64(N - 1)), te.min(k, _i64(K - 1))
        at = (jc, kc) if transpose_b else (kc, jc)
        return tirx.if_then_else(inside, B[tuple(_bcast(B, _unravel(bt, batch))) + at], tirx.const(0, B.dtype))

    Ap = te.compute((_i64(Bt), _i64(Mp), _i64(Kp)), a_pad, name="A_pad")
    Bp = te.compute((_i64(Bt),) + ((_i64(Np), _i64(Kp)) if transpose_b else (_i64(Kp), _i64(Np))), b_pad, name="B_pad")
    k = te.reduce_axis((_i64(0), _i64(Kp)), name="k")
    b_at = (lambda bt, kk, j: Bp[bt, j, kk]) if transpose_b else (lambda bt, kk, j: Bp[bt, kk, j])
    C = te.compute((_i64(Bt), _i64(Mp), _i64(Np)), lambda bt, i, j: te.sum(
        Ap[bt, i, k].astype(acc_dtype) * b_at(bt, k, j).astype(acc_dtype), axis=k), name="C")

    def out_map(*idx):
        flat = _i64(0)
        for d, v in zip(batch, idx[:-2]):
            flat = flat * d + v
        return flat, idx[-2], idx[-1]

    D = ep.fused_output(tuple(_i64(d) for d in out_shape), lambda *i: C[out_map(*i)], epilogue, extras, out_dtype)
    return C, D, out_map
