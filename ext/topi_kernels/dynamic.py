"""Computes whose outer extents may be symbolic (``tirx.Var``), for workloads
whose batch / rows / sequence are known only at run time.

The static computes pad M and N to whole register tiles with Python ints; here
the padded extents are PrimExprs (``ceildiv(M, mb) * mb``), so a schedule that
splits them by the tile size gets exact loops (TVM proves the divisibility) and
the hot loop keeps no bounds check: padded rows re-read row ``M - 1`` of A,
padded columns read zeros. Only ``D`` (the true shape) is stored.

* ``matmul_rows``: ``D[..., i, j] = epilogue(sum_k A[..., i, k] * Bp(k, j))``
  with ``A`` of any rank against one packed weight (``pack_weight`` panels):
  the leading axes of ``A`` other than the last are batch loops, the last is
  tiled (a transformer activation ``(b, s, K)`` needs no reshape).
* ``batch_matmul``: batched pairs (attention) with symbolic M, N and K; ``B``
  is copied inside the kernel into ``Bt[..., k, j]`` contiguous along ``j`` and
  zero-padded to whole panels (the static kernel does this as a separate
  transform of a static shape), so the inner loop is plain vector loads.
* ``softmax_cols``: softmax over rows of symbolic length (attention scores).
* ``reduce_rows``: ``reduce.reduce_3d`` with a symbolic number of rows.

The row-wise softmax / layer-norm computes (``softmax.py``, ``norm.py``) and the
blocked direct conv (``conv2d.conv2d_nchwc``, batch) take a symbolic extent
themselves, through ``dim``.
"""
from __future__ import annotations

from tvm import te, tirx
from tvm.ir.expr import Expr as PrimExpr

from . import epilogue as ep
from . import i64 as _i64


def dim(v):
    """An extent as TE wants it: int64 immediates for ints, PrimExprs (symbolic) unchanged."""
    return v if isinstance(v, PrimExpr) else _i64(v)


def is_static(v) -> bool:
    return isinstance(v, int) or isinstance(v, tirx.IntImm)


def round_up(v, m: int):
    """``v`` rounded up to a multiple of ``m`` (an int when ``v`` is static)."""
    if is_static(v):
        return -(-int(v) // m) * m
    return tirx.floordiv(v + _i64(m - 1), _i64(m)) * _i64(m)


def clamp(idx, limit, padded):
    """``min(idx, limit - 1)`` unless the extent is not padded."""
    if is_static(limit) and is_static(padded) and int(limit) == int(padded):
        return idx
    return te.min(idx, dim(limit) - _i64(1))


class Broadcastable:
    """``epilogue.apply`` broadcasts an extra tensor by its static extents; a symbolic extent is
    never a broadcast (Relax types it as the output's symbol), so it reads as ``2``."""

    def __init__(self, t: te.Tensor):
        self.t = t
        self.dtype = t.dtype
        self.shape = [d if isinstance(d, tirx.IntImm) else 2 for d in t.shape]

    def __getitem__(self, idx):
        return self.t[idx]


def fused_output(shape, value, epilogue, extras, out_dtype: str) -> te.Tensor:
    """``epilogue.fused_output`` over a shape with symbolic extents."""
    return ep.fused_output(tuple(dim(d) for d in shape), value, epilogue,
                           [Broadcastable(t) for t in extras], out_dtype)


def matmul_rows(A: te.Tensor, Bp: te.Tensor, *, N: int, nb: int, epilogue=(), extras=(), out_dtype="float32",
                pad_rows: int = 1):
    """``D = epilogue(A @ B)`` with ``A`` ``(*batch, M, K)`` (any extent symbolic but K) and
    ``B`` packed ``(ceil(N/nb), K, nb)``; returns ``(C, D)``, ``C`` over ``(*batch, Mp, Np)``."""
    *lead, M, K = A.shape
    Mp, Np = round_up(M, pad_rows), round_up(N, nb)
    k = te.reduce_axis((_i64(0), dim(K)), name="k")

    def c_body(*idx):
        b, i, j = idx[:-2], idx[-2], idx[-1]
        a = A[tuple(b) + (clamp(i, M, Mp), k)]
        return te.sum(a * Bp[j // nb, k, j % nb], axis=k)

    C = te.compute(tuple(lead) + (dim(Mp), dim(Np)), c_body, name="C")
    D = fused_output(tuple(lead) + (M, N), lambda *idx: C[idx], epilogue, extras, out_dtype)
    return C, D


def _batch_index(shape, bidx) -> tuple:
    """Index of an operand's batch axes at output batch position ``bidx`` (NumPy broadcasting)."""
    off = len(bidx) - len(shape)
    return tuple(_i64(0) if is_static(n) and int(n) == 1 else bidx[off + d] for d, n in enumerate(shape))


def batch_matmul(A: te.Tensor, B: te.Tensor, *, out_shape, transpose_b: bool, epilogue=(), extras=(),
                 out_dtype="float32", pad_rows: int = 1, pad_cols: int = 1):
    """Batched ``D = epilogue(A @ B)`` (``B[..., j, k]`` when ``transpose_b``) over symbolic extents;
    returns ``(Bt, C, D)``: ``Bt`` the in-kernel copy of B (B itself when it is already contiguous
    along whole panels), ``C`` the padded accumulation."""
    out_shape = tuple(out_shape)
    nbatch = len(out_shape) - 2
    M, N = out_shape[-2], out_shape[-1]
    K = A.shape[-1]
    Mp, Np = round_up(M, pad_rows), round_up(N, pad_cols)
    bb = tuple(B.shape[:-2])

    def bt_body(*idx):
        k, j = idx[-2], idx[-1]
        jj = clamp(j, N, Np)
        val = B[tuple(idx[:-2]) + ((jj, k) if transpose_b else (k, jj))]
        if is_static(N) and is_static(Np) and int(N) == int(Np):
            return val
        return tirx.if_then_else(j < dim(N), val, tirx.const(0, B.dtype))

    direct = not transpose_b and is_static(N) and is_static(Np) and int(N) == int(Np)
    Bt = B if direct else te.compute(bb + (dim(K), dim(Np)), bt_body, name="Bt")  # direct: read in place
    k = te.reduce_axis((_i64(0), dim(K)), name="k")

    def c_body(*idx):
        bidx, i, j = idx[:nbatch], idx[-2], idx[-1]
        a = A[_batch_index(A.shape[:-2], bidx) + (clamp(i, M, Mp), k)]
        return te.sum(a * Bt[_batch_index(bb, bidx) + (k, j)], axis=k)

    C = te.compute(tuple(dim(d) for d in out_shape[:-2]) + (dim(Mp), dim(Np)), c_body, name="C")
    D = fused_output(out_shape, lambda *idx: C[idx], epilogue, extras, out_dtype)
    return Bt, C, D


def softmax_cols(X: te.Tensor, lanes: int, out_dtype: str = "float32") -> te.Tensor:
    """``softmax(X, axis=-1)`` for ``X`` ``(rows, n)`` with ``n`` symbolic (attention rows of a
    symbolic sequence): ``topi_kernels.softmax``'s passes, shaped for a symbolic row length.

    A loop of symbolic length split by the vector width keeps a predicate, which scalarizes it
    (3.3x slower on ``exp``), and padding it to whole vectors needs a clamped index, a gather.
    So the element-wise passes stay plain loops to ``n`` (LLVM vectorizes them with a run-time
    tail), and each row reduction is split in two: the whole vectors ``[0, n // lanes * lanes)``
    (blocks ``max_v`` / ``sum_v``, an exact split a schedule turns into lane-wise partials) and
    the scalar tail (``max_t`` / ``sum_t``, under ``lanes`` elements)."""
    from . import elemwise as ew

    rows, n = X.shape
    full = tirx.floordiv(n, _i64(lanes)) * _i64(lanes)

    def halves(name, load, reducer):
        kv = te.reduce_axis((_i64(0), full), name=f"{name}_kv")
        kt = te.reduce_axis((_i64(0), n - full), name=f"{name}_kt")
        v = te.compute((rows,), lambda r: reducer(load(r, kv), axis=kv), name=f"{name}_v")
        t = te.compute((rows,), lambda r: reducer(load(r, full + kt), axis=kt), name=f"{name}_t")
        return v, t

    Mv, Mt = halves("max", lambda r, k: X[r, k], te.max)
    M = te.compute((rows,), lambda r: te.max(Mv[r], Mt[r]), name="max")
    E = te.compute((rows, n), lambda r, j: ew.exp(X[r, j] - M[r], nonpositive=True), name="exp")
    Sv, St = halves("sum", lambda r, k: E[r, k], te.sum)
    one = tirx.const(1.0, X.dtype)
    inv = te.compute((rows,), lambda r: one / (Sv[r] + St[r]), name="inv")
    Y = te.compute((rows, n), lambda r, j: E[r, j] * inv[r], name="out")
    return Y if out_dtype == X.dtype else te.compute(Y.shape, lambda *i: Y[i].astype(out_dtype), name="cast")


def reduce_rows(X: te.Tensor, kind: str, *, pad_to: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """``reduce.reduce_3d`` for ``X (O, R, I)`` with ``O`` symbolic (a batch before the reduced
    axes: the global average pool of a CNN of any batch); blocks ``acc`` and ``out``."""
    from . import reduce as red

    if kind not in red.KINDS:
        raise ValueError(f"unknown reduction {kind!r} (known: {red.KINDS})")
    O, R, I = X.shape[0], int(X.shape[1]), int(X.shape[2])
    Rp = -(-R // pad_to) * pad_to if I == 1 else R
    k = te.reduce_axis((_i64(0), _i64(Rp)), name="k")

    def body(o, i):
        return red._combine(kind, red._padded(X, kind, R, Rp, lambda kk: X[o, kk, i])(k), k)

    acc = te.compute((O, _i64(I)), body, name="acc")
    return red._finish(kind, R, acc, out_dtype or X.dtype, (O, _i64(I)))


def reduce_cols(X: te.Tensor, kind: str, lanes: int, out_dtype: str | None = None) -> te.Tensor:
    """``reduce_rows`` for ``X (O, R, 1)`` with ``R`` symbolic too (a global pool over a run-time
    image size), split as ``softmax_cols`` splits a row: the whole vectors ``[0, R // lanes *
    lanes)`` (block ``acc_v``, lane-wise partials once scheduled) and the scalar tail (``acc_t``),
    combined in ``acc`` by the same reducer (NaN-keeping for max/min); blocks ``acc`` and ``out``."""
    from . import reduce as red

    if kind not in red.KINDS:
        raise ValueError(f"unknown reduction {kind!r} (known: {red.KINDS})")
    O, R = X.shape[0], X.shape[1]
    full = tirx.floordiv(R, _i64(lanes)) * _i64(lanes)
    kv = te.reduce_axis((_i64(0), full), name="kv")
    kt = te.reduce_axis((_i64(0), R - full), name="kt")
    V = te.compute((O,), lambda o: red._combine(kind, X[o, kv, 0], kv), name="acc_v")
    T = te.compute((O,), lambda o: red._combine(kind, X[o, full + kt, 0], kt), name="acc_t")
    j = te.reduce_axis((_i64(0), _i64(2)), name="j")
    acc = te.compute((O, _i64(1)), lambda o, i: red._combine(kind, tirx.Select(j == 0, V[o], T[o]), j), name="acc")
    return red._finish(kind, R, acc, out_dtype or X.dtype, (O, _i64(1)))


def batch_dot(A: te.Tensor, B: te.Tensor, *, out_shape, lanes: int, epilogue=(), extras=(), out_dtype="float32"):
    """Batched ``D = epilogue(A @ B^T)`` with ``B[..., j, k]`` read in place along its contiguous
    K (static, a multiple of ``lanes``) and any other extent symbolic: a decode step's attention
    scores ``q @ k^T`` over a cache of run-time length. ``P[..., i, j, l]`` holds ``lanes``
    partial sums over ``k = k0 * lanes + l``, ``C`` their total. Returns ``(P, C, D)``."""
    out_shape = tuple(out_shape)
    nbatch = len(out_shape) - 2
    K = int(A.shape[-1])
    if K % lanes:
        raise ValueError(f"batch_dot: K={K} is not a multiple of lanes={lanes}")
    k0 = te.reduce_axis((_i64(0), _i64(K // lanes)), name="k0")
    bb = tuple(B.shape[:-2])

    def p_body(*idx):
        bidx, i, j, l = idx[:nbatch], idx[-3], idx[-2], idx[-1]
        k = k0 * lanes + l
        a = A[_batch_index(A.shape[:-2], bidx) + (i, k)]
        return te.sum(a * B[_batch_index(bb, bidx) + (j, k)], axis=k0)

    P = te.compute(tuple(dim(d) for d in out_shape) + (_i64(lanes),), p_body, name="P")
    r = te.reduce_axis((_i64(0), _i64(lanes)), name="r")
    C = te.compute(tuple(dim(d) for d in out_shape), lambda *idx: te.sum(P[idx + (r,)], axis=r), name="C")
    D = ep.fused_output(out_shape, lambda *idx: C[idx], epilogue, extras, out_dtype)
    return P, C, D
