"""conv2d as an implicit GEMM (the CUDA candidates' compute; kept apart from ``conv2d.py``).

See :func:`implicit_gemm`. The gathered operands are never stored: the CUDA schedules
(``tir_schedules/cuda/conv2d.py``) inline them into their shared-memory loads.
"""
from __future__ import annotations

from tvm import te

from . import epilogue as ep
from .conv2d import ConvGeom, padded_read
from .matmul import _i64, ceil_to, padded_accumulation

def implicit_gemm(X: te.Tensor, Wt: te.Tensor, g: ConvGeom, *, data_layout: str, kernel_layout: str,
                  pads=(1, 1, 1), epilogue=(), extras=(), out_dtype="float32", acc_dtype="float32"):
    """conv2d (groups == 1) as a GEMM whose operands are gathered on the fly; returns
    ``(C, D, b_layout, out_map)``.

    NCHW/OIHW: ``C[o, p] = sum_k W2[o, k] * Col[k, p]`` (rows = output channels, columns
    ``p = (n*OH + oh)*OW + ow``, contiguous in the output), ``k = (c*KH + kh)*KW + kw``.
    NHWC/OHWI or HWIO: ``C[p, o] = sum_k Col[p, k] * W2(k, o)``, ``k = (kh*KW + kw)*C + c``
    (channels innermost, contiguous in NHWC). ``Col`` reads the zero-padded input (never
    stored: the schedule inlines it into its shared-memory loads); both operands are then
    zero-padded to multiples of ``pads = (Mp, Np, Kp)``. ``D`` is the output in the data
    layout; ``out_map`` maps D's indices to ``C``'s ``(row, col)``, for
    ``transform_block_layout`` so the schedule sees a 2-D epilogue.
    """
    read = padded_read(X, g, data_layout)
    sh, sw = g.stride
    dh, dw = g.dilation
    hw, K, P = g.OH * g.OW, g.C * g.KH * g.KW, g.N * g.OH * g.OW

    def patch(p, c, kh, kw):
        n, r = p // hw, p % hw
        return read(n, c, (r // g.OW) * sh + kh * dh, (r % g.OW) * sw + kw * dw)

    if data_layout == "NCHW":
        khw = g.KH * g.KW
        A = te.compute((_i64(g.O), _i64(K)), lambda o, k: Wt[o, k // khw, (k % khw) // g.KW, k % g.KW],
                       name="A_gather")
        B = te.compute((_i64(K), _i64(P)), lambda k, p: patch(p, k // khw, (k % khw) // g.KW, k % g.KW),
                       name="B_gather")
        M, N, b_layout = g.O, P, "kn"
    else:
        A = te.compute((_i64(P), _i64(K)), lambda p, k: patch(p, k % g.C, k // (g.KW * g.C), (k // g.C) % g.KW),
                       name="A_gather")
        if kernel_layout == "OHWI":
            B = te.compute((_i64(g.O), _i64(K)), lambda o, k: Wt[o, k // (g.KW * g.C), (k // g.C) % g.KW, k % g.C],
                           name="B_gather")
            b_layout = "nk"
        else:  # HWIO
            B = te.compute((_i64(K), _i64(g.O)), lambda k, o: Wt[k // (g.KW * g.C), (k // g.C) % g.KW, k % g.C, o],
                           name="B_gather")
            b_layout = "kn"
        M, N = P, g.O
    Mp, Np, Kp = (ceil_to(v, m) for v, m in zip((M, N, K), pads))
    C = padded_accumulation(A, B, b_layout=b_layout, Mp=Mp, Np=Np, Kp=Kp, acc_dtype=acc_dtype)
    if data_layout == "NCHW":
        shape = (g.N, g.O, g.OH, g.OW)
        out_map = lambda n, o, oh, ow: (o, n * hw + oh * g.OW + ow)  # noqa: E731
    else:
        shape = (g.N, g.OH, g.OW, g.O)
        out_map = lambda n, oh, ow, o: (n * hw + oh * g.OW + ow, o)  # noqa: E731
    D = ep.fused_output(tuple(_i64(d) for d in shape), lambda *i: C[out_map(*i)], epilogue, extras, out_dtype)
    return C, D, b_layout, out_map
