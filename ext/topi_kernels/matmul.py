"""Matrix multiplication computes: direct, packed-panel and batched.

Algorithm (all variants)::

    for i in [0, M), j in [0, N):           # optionally under batch dims
        C[i, j] = sum_k A[i, k] * B(k, j)    # 2*M*N*K flops
        D[i, j] = epilogue(C[i, j])          # bias / activation / residual

``B(k, j)`` reads one of three layouts: ``"kn"`` (``B[k, j]``), ``"nk"``
(``B[j, k]``, a PyTorch linear weight) or ``"packed"``: panels
``Bp[j // nb, k, j % nb]`` of ``nb`` contiguous columns, zero-padded to a
multiple of ``nb`` (``pack_weight``). Bytes moved: A once per panel, B once.

Padding: ``C`` is computed over ``(Mp, Np)``, multiples of ``pad_rows`` and
``pad_cols``, so schedule tiles divide it and the hot loop has no bounds
checks. Padded rows re-read row ``M - 1`` of A and padded columns read zeros
(packed) or re-read column ``N - 1``; only ``D`` (shape ``M x N``) is stored.
"""
from __future__ import annotations

from tvm import te, tirx

from . import epilogue as ep
from . import i64 as _i64


def ceil_to(v: int, m: int) -> int:
    return -(-int(v) // int(m)) * int(m)


def _clamp(idx, limit: int, padded: int):
    return idx if padded == limit else te.min(idx, _i64(limit - 1))


def b_accessor(B: te.Tensor, layout: str, N: int, Np: int, nb: int = 0):
    """``(k, j) -> B(k, j)`` for a layout (``"kn"``, ``"nk"`` or ``"packed"``)."""
    if layout == "packed":
        return lambda k, j: B[j // nb, k, j % nb]
    if layout == "nk":
        return lambda k, j: B[_clamp(j, N, Np), k]
    return lambda k, j: B[k, _clamp(j, N, Np)]


def matmul_tiled(A: te.Tensor, B: te.Tensor, *, M: int, N: int, K: int, b_layout: str, epilogue=(),
                 extras=(), out_dtype="float32", pad_rows: int = 1, pad_cols: int = 1, nb: int = 0,
                 acc_dtype: str | None = None):
    """``D = epilogue(A @ B)`` with ``A`` of shape ``(M, K)``; returns ``(C, D)``.

    ``B`` is ``(K, N)``, ``(N, K)`` or packed ``(ceil(N/nb), K, nb)``.
    """
    acc_dtype = acc_dtype or out_dtype
    Mp, Np = ceil_to(M, pad_rows), ceil_to(N, pad_cols)
    b_at = b_accessor(B, b_layout, N, Np, nb)
    k = te.reduce_axis((_i64(0), _i64(K)), name="k")
    C = te.compute((_i64(Mp), _i64(Np)), lambda i, j: te.sum(
        A[_clamp(i, M, Mp), k].astype(acc_dtype) * b_at(k, j).astype(acc_dtype), axis=k), name="C")
    D = ep.fused_output((_i64(M), _i64(N)), lambda i, j: C[i, j], epilogue, extras, out_dtype)
    return C, D


def batch_matmul(A: te.Tensor, B: te.Tensor, *, out_shape, transpose_b: bool, epilogue=(), extras=(),
                 out_dtype="float32", pad_rows: int = 1, pad_cols: int = 1, b_cols: int | None = None):
    """Batched ``D[b.., i, j] = epilogue(sum_k A[b.., i, k] * B[b.., k, j])`` with NumPy broadcasting
    over the batch dims (``B`` may be 2-D). ``C`` is padded like ``matmul_tiled``'s; ``b_cols``:
    B is already zero-padded to that many columns (``batch_operand``), read without clamping."""
    out_shape = [int(d) for d in out_shape]
    nbatch = len(out_shape) - 2
    M, N = out_shape[-2], out_shape[-1]
    K = int(A.shape[-1])
    Mp, Np = ceil_to(M, pad_rows), ceil_to(N, pad_cols)
    k = te.reduce_axis((_i64(0), _i64(K)), name="k")

    def batch_idx(t, bidx):
        extra = len(t.shape) - 2
        return ep.broadcast_index(_Shape(t.shape[:extra]), bidx) if extra else []

    def c_body(*idx):
        bidx, i, j = idx[:nbatch], idx[-2], idx[-1]
        jj = j if b_cols is not None and b_cols >= Np else _clamp(j, N, Np)
        a = A[tuple(batch_idx(A, bidx)) + (_clamp(i, M, Mp), k)]
        b = B[tuple(batch_idx(B, bidx)) + ((jj, k) if transpose_b else (k, jj))]
        return te.sum(a * b, axis=k)

    C = te.compute(tuple(_i64(d) for d in out_shape[:-2]) + (_i64(Mp), _i64(Np)), c_body, name="C")
    D = ep.fused_output(tuple(_i64(d) for d in out_shape), lambda *idx: C[idx], epilogue, extras, out_dtype)
    return C, D


class _Shape:
    """Adapter so ``broadcast_index`` can work on a shape prefix."""

    def __init__(self, shape):
        self.shape = shape


def batch_operand(B: te.Tensor, *, transpose: bool, cols: int) -> te.Tensor:
    """``Bt[..., k, j] = B(..., k, j)`` (``B[..., j, k]`` when ``transpose``), zero for ``j >= N``:
    the batch kernel's B contiguous along ``j`` and ``cols`` wide, so its inner loop is plain
    vector loads (a clamped or transposed index would make each one a gather)."""
    shape = [int(d) for d in B.shape]
    N, K = (shape[-2], shape[-1]) if transpose else (shape[-1], shape[-2])

    def body(*idx):
        k, j = idx[-2], idx[-1]
        jj = te.min(j, _i64(N - 1))
        val = B[idx[:-2] + ((jj, k) if transpose else (k, jj))]
        return val if cols == N else tirx.if_then_else(j < N, val, tirx.const(0, B.dtype))

    return te.compute([_i64(d) for d in shape[:-2]] + [_i64(K), _i64(cols)], body, name="Bt")


def pack_weight(B: te.Tensor, *, N: int, K: int, nb: int, b_layout: str) -> te.Tensor:
    """Panels ``Bp[p, k, l] = B(k, p*nb + l)``, zero past column ``N``.

    Shape ``(ceil(N/nb), K, nb)``; ``b_layout`` is ``"kn"`` or ``"nk"``.
    """
    P = ceil_to(N, nb) // nb

    def body(p, k, l):
        j = p * nb + l
        jc = te.min(j, _i64(N - 1))
        val = B[k, jc] if b_layout == "kn" else B[jc, k]
        return tirx.if_then_else(j < N, val, tirx.const(0, B.dtype))

    return te.compute((_i64(P), _i64(K), _i64(nb)), body, name="Bp")


def gemv_dot(A: te.Tensor, W: te.Tensor, *, rows: int, K: int, epilogue=(), extras=(), out_dtype="float32",
             out_shape=None):
    """Row dot products ``y[r] = sum_k A[r, k] * W[k]`` style GEMV where the reduction axis is
    contiguous in the big operand: ``A`` is ``(rows, K)``, ``W`` is ``(K,)``-like (``(K, 1)`` or
    ``(1, K)``). The output has ``out_shape`` (``(1, rows)`` or ``(rows, 1)``)."""
    k = te.reduce_axis((_i64(0), _i64(K)), name="k")
    w_at = (lambda kk: W[kk, _i64(0)]) if int(W.shape[0]) == K else (lambda kk: W[_i64(0), kk])
    C = te.compute((_i64(rows),), lambda r: te.sum(A[r, k] * w_at(k), axis=k), name="C")
    row_axis = 0 if int(out_shape[0]) == rows and int(out_shape[1]) == 1 else 1
    D = ep.fused_output(tuple(_i64(d) for d in out_shape), lambda i, j: C[i if row_axis == 0 else j],
                        epilogue, extras, out_dtype)
    return C, D


def zero_pad(X: te.Tensor, shape, name: str) -> te.Tensor:
    """``X`` zero-padded at the end of each axis to ``shape`` (``X`` itself when no padding)."""
    dims = [int(d) for d in X.shape]
    shape = [int(d) for d in shape]
    if dims == shape:
        return X

    def body(*idx):
        inside = [i < _i64(d) for i, d, p in zip(idx, dims, shape) if p != d]
        cond = inside[0]
        for c in inside[1:]:
            cond = tirx.all(cond, c)
        return tirx.if_then_else(cond, X[idx], tirx.const(0, X.dtype))

    return te.compute(tuple(_i64(d) for d in shape), body, name=name)


def matmul_padded(A: te.Tensor, B: te.Tensor, *, M: int, N: int, K: int, b_layout: str, Mp: int, Np: int,
                  Kp: int, epilogue=(), extras=(), out_dtype="float32", acc_dtype: str = "float32"):
    """``D = epilogue(A @ B)`` over zero-padded operands; returns ``(C, D)``.

    ``A_pad`` ``(Mp, Kp)`` and ``B_pad`` (``(Kp, Np)`` for ``"kn"``, ``(Np, Kp)`` for ``"nk"``) are
    zero-filled copies (stages a schedule inlines into its shared-memory loads; absent when no
    padding is needed), so every tile divides ``C`` ``(Mp, Np)`` and the padded K adds zeros.
    Products accumulate in ``acc_dtype``; ``D`` ``(M, N)`` stores only the real outputs.
    """
    C = padded_accumulation(A, B, b_layout=b_layout, Mp=Mp, Np=Np, Kp=Kp, acc_dtype=acc_dtype)
    D = ep.fused_output((_i64(M), _i64(N)), lambda i, j: C[i, j], epilogue, extras, out_dtype)
    return C, D


def padded_accumulation(A: te.Tensor, B: te.Tensor, *, b_layout: str, Mp: int, Np: int, Kp: int,
                        acc_dtype: str = "float32") -> te.Tensor:
    """``C (Mp, Np) = A_pad @ B_pad`` in ``acc_dtype`` over the zero-padded operands of
    :func:`matmul_padded` (``B`` is ``(K, N)`` for ``"kn"``, ``(N, K)`` for ``"nk"``)."""
    Ap = zero_pad(A, (Mp, Kp), "A_pad")
    Bp = zero_pad(B, (Kp, Np) if b_layout == "kn" else (Np, Kp), "B_pad")
    k = te.reduce_axis((_i64(0), _i64(Kp)), name="k")
    b_at = (lambda kk, j: Bp[kk, j]) if b_layout == "kn" else (lambda kk, j: Bp[j, kk])
    return te.compute((_i64(Mp), _i64(Np)), lambda i, j: te.sum(
        Ap[i, k].astype(acc_dtype) * b_at(k, j).astype(acc_dtype), axis=k), name="C")


# -- run-time weights read in place (matmul.stream) ---------------------------------------------
#
# A weight that arrives with every call cannot be packed at compile time, and packing it per call
# moves it through memory three times instead of once. For a few rows of A the two kernels below
# read B once where it lies, vectorized along B's contiguous axis, with no bounds check in the
# hot loop: odd sizes are handled by an overlapping last vector (kn) or a scalar K tail (nk).


def stream_kn(A: te.Tensor, B: te.Tensor, *, M: int, N: int, K: int, lanes: int, pad_rows: int = 1,
              pad_vectors: int = 1, epilogue=(), extras=(), out_dtype="float32"):
    """``D = epilogue(A @ B)`` with ``B`` ``(K, N)`` read in place; returns ``(C, D)``.

    ``C[i, v, l] = sum_k A[i, k] * B[k, s(v) + l]`` with ``s(v) = min(v * lanes, N - lanes)``:
    vector ``v`` of a row of B starts at a lane-aligned column, except the last one, which
    ends at column ``N - 1`` and overlaps its neighbour (columns it repeats are computed twice
    and stored once). Every load is a full contiguous vector. ``C`` has ``ceil(M / pad_rows)``
    row tiles and ``pad_vectors``-aligned vector count (padded rows re-read row ``M - 1``,
    padded vectors the last vector); ``lanes <= N``.
    """
    if not 1 <= lanes <= N:
        raise ValueError(f"stream_kn: lanes={lanes} must be in [1, N={N}]")
    nv = -(-N // lanes)
    Mp, Vp = ceil_to(M, pad_rows), ceil_to(nv, pad_vectors)
    k = te.reduce_axis((_i64(0), _i64(K)), name="k")
    C = te.compute((_i64(Mp), _i64(Vp), _i64(lanes)), lambda i, v, l: te.sum(
        A[_clamp(i, M, Mp), k] * B[k, te.min(v * lanes, _i64(N - lanes)) + l], axis=k), name="C")
    shift, last = nv * lanes - N, (nv - 1) * lanes

    def value(i, j):
        if shift:  # columns of the overlapping last vector sit `shift` lanes further in C
            j = tirx.Select(j < _i64(last), j, j + _i64(shift))
        return C[i, j // lanes, j % lanes]

    D = ep.fused_output((_i64(M), _i64(N)), value, epilogue, extras, out_dtype)
    return C, D


def dot_nk(A: te.Tensor, W: te.Tensor, *, M: int, N: int, K: int, lanes: int, pad_rows: int = 1,
           pad_cols: int = 1, epilogue=(), extras=(), out_dtype="float32"):
    """``D = epilogue(A @ W^T)`` with ``W`` ``(N, K)`` (a PyTorch linear weight) read in place:
    row dot products along the contiguous K axis. Returns ``(P, D)``.

    ``P[i, j, l]`` holds ``lanes`` partial sums over ``k = k0 * lanes + l`` for the first
    ``K - K % lanes`` products; ``C`` adds them up and the ``K % lanes`` tail products (one
    scalar loop over ``lanes + K % lanes`` terms); ``D = epilogue(C)``. ``P`` and ``C`` are
    computed over ``ceil(M / pad_rows)`` row and ``ceil(N / pad_cols)`` column tiles (padded
    rows and columns re-read the last one); ``lanes <= K``.
    """
    if not 1 <= lanes <= K:
        raise ValueError(f"dot_nk: lanes={lanes} must be in [1, K={K}]")
    km = K - K % lanes
    Mp, Np = ceil_to(M, pad_rows), ceil_to(N, pad_cols)
    k0 = te.reduce_axis((_i64(0), _i64(km // lanes)), name="k0")
    P = te.compute((_i64(Mp), _i64(Np), _i64(lanes)), lambda i, j, l: te.sum(
        A[_clamp(i, M, Mp), k0 * lanes + l] * W[_clamp(j, N, Np), k0 * lanes + l], axis=k0), name="P")
    r = te.reduce_axis((_i64(0), _i64(lanes + K - km)), name="r")

    def total(i, j):  # lanes partial sums, then the K % lanes tail products
        if K == km:
            return te.sum(P[i, j, r], axis=r)
        part = P[i, j, te.min(r, _i64(lanes - 1))]
        kt = r + _i64(km - lanes)  # in [km - lanes, K): in bounds on either branch
        tail = A[_clamp(i, M, Mp), kt] * W[_clamp(j, N, Np), kt]
        return te.sum(tirx.if_then_else(r < _i64(lanes), part, tail), axis=r)

    C = te.compute((_i64(Mp), _i64(Np)), total, name="C")
    return P, ep.fused_output((_i64(M), _i64(N)), lambda i, j: C[i, j], epilogue, extras, out_dtype)
