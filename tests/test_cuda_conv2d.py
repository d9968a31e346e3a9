"""CUDA conv2d candidates: nvcc for sm_80/sm_90 without a GPU, structure (shared-memory tiles,
wmma for fp16), launch limits, declines; numerics against a NumPy conv on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import ext
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY, choose
from ext.testing import assert_close, has_nvcc, nvcc_compile, own_candidates, requires_gpu
from ext.tir_schedules.cuda.launch import check_limits, inspect_candidate
from ext.workload import Workload

ARCHS = ("sm_80", "sm_90")


def conv_wl(N, C, H, W, O, k, *, stride=1, pad=1, layout="NCHW", klayout="OIHW", dtype="float32",
            epilogue=("bias", "relu")):
    oh, ow = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    xs = (N, C, H, W) if layout == "NCHW" else (N, H, W, C)
    ws = {"OIHW": (O, C, k, k), "OHWI": (O, k, k, C), "HWIO": (k, k, C, O)}[klayout]
    out = (N, O, oh, ow) if layout == "NCHW" else (N, oh, ow, O)
    shapes, dtypes = [xs, ws], [dtype, dtype]
    if "bias" in epilogue:
        shapes.append((1, O, 1, 1) if layout == "NCHW" else (O,))
        dtypes.append("float32")
    return Workload("conv2d", shapes, dtypes, "float32",
                    attrs={"strides": (stride, stride), "padding": (pad,) * 4, "dilation": (1, 1), "groups": 1,
                           "data_layout": layout, "kernel_layout": klayout, "out_shape": out, "w_const": True},
                    epilogue=epilogue)


CASES = {
    "ig_nchw_fp32": ("conv2d.cuda_implicit_gemm", conv_wl(2, 19, 15, 13, 37, 3)),
    "ig_nhwc_fp16": ("conv2d.cuda_implicit_gemm", conv_wl(1, 24, 14, 14, 40, 3, layout="NHWC", klayout="OHWI",
                                                           dtype="float16")),
    "direct_nhwc_hwio": ("conv2d.cuda_direct", conv_wl(1, 3, 7, 9, 5, 3, stride=2, layout="NHWC", klayout="HWIO")),
    "winograd": ("conv2d.cuda_winograd", conv_wl(2, 19, 15, 13, 37, 3)),
}
MARKERS = {"ig_nchw_fp32": ["__shared__"], "ig_nhwc_fp16": ["wmma::mma_sync", "extern __shared__"]}


def built(case, arch):
    name, wl = CASES[case]
    cand, target = REGISTRY.get(name), ext.target.cuda(arch)
    assert cand.applies(wl, target), cand.applies(wl, target).reason
    return inspect_candidate(cand, wl, target)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_builds_structure_and_nvcc(case, arch, tmp_path):
    res = built(case, arch)
    assert check_limits(res.kernels, arch) == []
    for marker in MARKERS.get(case, []):
        assert marker in res.source, f"{case}: {marker!r} missing"
    if case == "winograd":
        assert len(res.kernels) >= 3  # transform, batched GEMM, inverse: one kernel per stage
    if has_nvcc():
        proc = nvcc_compile(res.source, arch, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_selection_and_declines():
    t = ext.target.cuda("sm_90")
    assert choose(conv_wl(1, 64, 56, 56, 64, 3, layout="NHWC", klayout="OHWI", dtype="float16"), t).name \
        == "conv2d.cuda_implicit_gemm"
    assert choose(conv_wl(1, 3, 5, 5, 4, 3), t).name == "conv2d.cuda_direct"
    grouped = conv_wl(1, 8, 8, 8, 8, 3).with_(attrs=dict(conv_wl(1, 8, 8, 8, 8, 3).attrs, groups=8))
    for cand in [c for c in REGISTRY.for_op("conv2d", "cuda") if ".cuda_" in c.name]:
        v = cand.applies(grouped, t)
        assert not v and "groups" in v.reason
    wino = REGISTRY.get("conv2d.cuda_winograd")
    assert "stride" in wino.applies(conv_wl(1, 8, 9, 9, 8, 3, stride=2), t).reason
    assert "NCHW" in wino.applies(conv_wl(1, 8, 9, 9, 8, 3, layout="NHWC", klayout="OHWI"), t).reason


# -- numerics (need a GPU) ---------------------------------------------------------------------

def reference(wl, xs):
    x, w = xs[0].astype("float64"), xs[1].astype("float64")
    nchw = wl.attr("data_layout") == "NCHW"
    if not nchw:
        x = x.transpose(0, 3, 1, 2)
    w = {"OIHW": w, "OHWI": w.transpose(0, 3, 1, 2), "HWIO": w.transpose(3, 2, 0, 1)}[wl.attr("kernel_layout")]
    s, p = wl.attr("strides")[0], wl.attr("padding")[0]
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    oh, ow = (H - KH) // s + 1, (W - KW) // s + 1
    y = np.zeros((N, O, oh, ow))
    for kh in range(KH):
        for kw in range(KW):
            patch = x[:, :, kh:kh + s * oh:s, kw:kw + s * ow:s]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, kh, kw])
    if not nchw:
        y = y.transpose(0, 2, 3, 1)
    if "bias" in wl.epilogue:
        y = y + xs[2].astype("float64")
    return np.maximum(y, 0)


GPU_CASES = [conv_wl(1, 3, 7, 9, 5, 3, stride=2), conv_wl(2, 19, 15, 13, 37, 3), conv_wl(1, 64, 28, 28, 64, 3),
             conv_wl(1, 17, 11, 11, 33, 1, pad=0, layout="NHWC", klayout="OHWI"),
             conv_wl(2, 24, 14, 14, 40, 3, layout="NHWC", klayout="OHWI", dtype="float16"),
             conv_wl(1, 16, 9, 9, 24, 3, layout="NHWC", klayout="HWIO", dtype="float16")]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("wl", GPU_CASES, ids=lambda w: w.key)
def test_numerics_on_gpu(wl):
    target = ext.target.cuda(ext.target.local_cuda_arch())
    cands = own_candidates(wl, target)
    assert cands
    for cand in cands:
        xs = random_inputs(wl, seed=5)
        ref = reference(wl, xs)
        out = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).run(xs).astype("float64")
        K = xs[1].size // (wl.attr("out_shape")[1] if wl.attr("data_layout") == "NCHW" else wl.attr("out_shape")[3])
        # fp32: sums of K products; fp16 inputs are exact in fp32 products; Winograd transforms
        # add ~1e-6 of the largest output (TOPI's points)
        atol = (1e-3 if wl.dtypes[0] == "float16" else 4e-6) * max(K, 16) ** 0.5 + 1e-5 * np.abs(ref).max()
        assert_close(out, ref, rtol=1e-4, atol=atol, what=f"{cand.name} {wl.key}")
