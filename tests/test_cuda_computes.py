"""The computes behind the CUDA candidates, run unscheduled on the CPU against NumPy.

The CUDA schedules only re-nest loops, move data between memory scopes and tensorize (TVM keeps
the semantics), so the index arithmetic that can be wrong lives in these computes: the zero
padding to tiles (``matmul_padded``) and the gathered implicit-GEMM operands for every layout,
stride and padding (``conv2d_implicit.implicit_gemm``). This is the CPU half of the numerics
check; the GPU half is the ``requires_gpu`` tests of each candidate."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from ext.testing import assert_close
from ext.topi_kernels import conv2d_implicit as cvi
from ext.topi_kernels import matmul as mm
from ext.topi_kernels.conv2d import ConvGeom
from ext.topi_kernels.matmul import _i64
from test_cuda_conv2d import conv_wl, reference as conv_reference


def _run(tensors, arrays, out_shape, out_dtype="float32"):
    func = te.create_prim_func(tensors)
    ex = tvm.compile(func, target=tvm.target.Target({"kind": "llvm"}))
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.empty(out_shape, out_dtype)]
    ex["main"](*args)
    return args[-1].numpy()


@pytest.mark.parametrize("M,N,K,pads,layout", [(7, 13, 5, (16, 16, 16), "kn"), (33, 1, 70, (64, 64, 32), "nk"),
                                                 (64, 64, 64, (64, 64, 16), "kn"), (1, 129, 3, (128, 128, 32), "nk")])
def test_matmul_padded_matches_numpy(M, N, K, pads, layout):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N) if layout == "kn" else (N, K)).astype("float16")
    bias = rng.uniform(-1, 1, (N,)).astype("float32")
    A = te.placeholder((_i64(M), _i64(K)), "float16", name="A")
    B = te.placeholder(tuple(_i64(d) for d in b.shape), "float16", name="B")
    E = te.placeholder((_i64(N),), "float32", name="E0")
    Mp, Np, Kp = (mm.ceil_to(v, p) for v, p in zip((M, N, K), pads))
    _, D = mm.matmul_padded(A, B, M=M, N=N, K=K, b_layout=layout, Mp=Mp, Np=Np, Kp=Kp, epilogue=("bias", "relu"),
                            extras=[E], out_dtype="float32", acc_dtype="float32")
    got = _run([A, B, E, D], [a, b, bias], (M, N))
    bb = b.astype("float64") if layout == "kn" else b.astype("float64").T
    assert_close(got, np.maximum(a.astype("float64") @ bb + bias, 0), rtol=1e-5, atol=1e-5)


CONVS = [conv_wl(2, 5, 9, 7, 6, 3), conv_wl(1, 3, 7, 9, 5, 3, stride=2, layout="NHWC", klayout="HWIO"),
         conv_wl(2, 4, 8, 8, 7, 1, pad=0, layout="NHWC", klayout="OHWI"),
         conv_wl(1, 6, 11, 11, 4, 5, stride=2, pad=2), conv_wl(1, 8, 6, 6, 3, 3, layout="NHWC", klayout="OHWI")]


@pytest.mark.parametrize("wl", CONVS, ids=lambda w: w.key)
@pytest.mark.parametrize("pads", [(1, 1, 1), (64, 32, 16)])
def test_implicit_gemm_matches_numpy_conv(wl, pads):
    from ext.strategies.conv2d import placeholders
    from ext.strategies.cuda_conv2d import geom

    g: ConvGeom = geom(wl)
    X, W, *extras = placeholders(wl)
    _, D, _, _ = cvi.implicit_gemm(X, W, g, data_layout=wl.attr("data_layout"), kernel_layout=wl.attr("kernel_layout"),
                                   pads=pads, epilogue=wl.epilogue, extras=extras, out_dtype="float32")
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, s).astype(d) for s, d in zip(wl.shapes, wl.dtypes)]
    got = _run([X, W, *extras, D], xs, tuple(wl.attr("out_shape")))
    assert_close(got, conv_reference(wl, xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wl", [conv_wl(2, 5, 9, 7, 6, 3), conv_wl(1, 16, 14, 14, 8, 3)], ids=lambda w: w.key)
def test_winograd_compute_matches_numpy_conv(wl):
    from ext.strategies.cuda_conv2d import winograd_tensors

    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, s).astype(d) for s, d in zip(wl.shapes, wl.dtypes)]
    got = _run(winograd_tensors(wl), xs, tuple(wl.attr("out_shape")))
    ref = conv_reference(wl, xs)
    # Winograd transforms: ~1e-6 of the largest output in float32 (TOPI's interpolation points)
    assert_close(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("a,b,transpose_b", [((2, 3, 13, 7), (3, 19, 7), True), ((5, 13, 7), (7, 19), False),
                                             ((1, 4, 6), (3, 6, 5), False)])
def test_batch_matmul_padded_matches_numpy(a, b, transpose_b):
    from ext.topi_kernels.matmul_padded import batch_matmul_padded

    out = tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-2] if transpose_b else b[-1])
    A = te.placeholder(tuple(_i64(d) for d in a), "float32", name="A")
    B = te.placeholder(tuple(_i64(d) for d in b), "float32", name="B")
    E = te.placeholder((_i64(out[-1]),), "float32", name="E0")
    _, D, _ = batch_matmul_padded(A, B, out_shape=out, transpose_b=transpose_b, Mp=mm.ceil_to(out[-2], 16),
                                  Np=mm.ceil_to(out[-1], 32), Kp=mm.ceil_to(a[-1], 8), epilogue=("bias",), extras=[E])
    rng = np.random.default_rng(3)
    xa, xb, xe = (rng.uniform(-1, 1, s).astype("float32") for s in (a, b, (out[-1],)))
    got = _run([A, B, E, D], [xa, xb, xe], out)
    ref = xa.astype("float64") @ (np.swapaxes(xb, -1, -2) if transpose_b else xb).astype("float64") + xe
    assert_close(got, ref, rtol=1e-5, atol=1e-5)
