"""CUDA matmul candidates: build for sm_80/sm_90 and pass nvcc (no GPU needed), structural
checks on the generated code, selection and declines; numerics against NumPy on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import ext
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY, choose
from ext.testing import assert_close, has_nvcc, nvcc_compile, requires_gpu
from ext.tir_schedules.cuda.launch import check_limits, inspect_candidate
from ext.workload import Workload

ARCHS = ("sm_80", "sm_90")
NAMES = ("matmul.cuda_tiled", "matmul.cuda_tensorcore", "matmul.cuda_gemv", "matmul.cuda_small", "matmul.cuda_batch")


def matmul_wl(M, N, K, *, dtype="float32", out_dtype="float32", transpose_b=False, epilogue=("bias", "relu")):
    shapes = [(M, K), (N, K) if transpose_b else (K, N)]
    if "bias" in epilogue:
        shapes.append((N,))
    if "residual" in epilogue:
        shapes.append((M, N))
    dtypes = [dtype, dtype] + [out_dtype] * (len(shapes) - 2)
    return Workload("matmul", shapes, dtypes, out_dtype,
                    attrs={"transpose_b": transpose_b, "b_const": True, "out_shape": (M, N)}, epilogue=epilogue)


def batch_wl(a, b, *, dtype="float32", transpose_b=False, epilogue=("bias",)):
    out = tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-2] if transpose_b else b[-1])
    shapes = [a, b] + ([(out[-1],)] if "bias" in epilogue else [])
    return Workload("matmul", shapes, [dtype, dtype] + ["float32"] * (len(shapes) - 2), "float32",
                    attrs={"transpose_b": transpose_b, "out_shape": out}, epilogue=epilogue)


#: one representative odd-shaped workload per candidate (not multiples of any tile)
REPRESENTATIVE = {
    "matmul.cuda_tiled": matmul_wl(77, 93, 45, epilogue=("bias", "relu", "residual")),
    "matmul.cuda_tensorcore": matmul_wl(77, 93, 45, dtype="float16", transpose_b=True),
    "matmul.cuda_gemv": matmul_wl(1, 93, 45, transpose_b=True),
    "matmul.cuda_small": matmul_wl(7, 9, 5, dtype="float16", out_dtype="float16"),
    "matmul.cuda_batch": batch_wl((2, 3, 13, 7), (3, 19, 7), transpose_b=True),
}
#: what must appear in each candidate's CUDA source
MARKERS = {
    "matmul.cuda_tiled": ["__shared__", "__syncthreads"],
    "matmul.cuda_tensorcore": ["wmma::mma_sync", "wmma::load_matrix_sync", "extern __shared__"],
    "matmul.cuda_gemv": ["__shfl_down_sync"],
    "matmul.cuda_small": ["__global__"],
    "matmul.cuda_batch": ["__shared__", "blockIdx.z"],
}

def built(name: str, arch: str, wl=None, config=None):
    """(source, kernels) of a candidate, built once per (name, arch, workload, config) per session."""
    wl = wl or REPRESENTATIVE[name]
    cand, target = REGISTRY.get(name), ext.target.cuda(arch)
    assert cand.applies(wl, target), cand.applies(wl, target).reason
    return inspect_candidate(cand, wl, target, config)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", NAMES)
def test_builds_and_structure(name, arch):
    res = built(name, arch)
    for marker in MARKERS[name]:
        assert marker in res.source, f"{name}: {marker!r} missing from the generated CUDA"
    assert res.kernels, "no device kernel"
    assert check_limits(res.kernels, arch) == []


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not installed")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", NAMES)
def test_source_passes_nvcc(name, arch, tmp_path):
    res = built(name, arch)
    proc = nvcc_compile(res.source, arch, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_tiled_uses_register_tiles_and_double_buffering():
    res = built("matmul.cuda_tiled", "sm_80")
    (k,) = res.kernels
    cfg = REGISTRY.get("matmul.cuda_tiled").default_config(REPRESENTATIVE["matmul.cuda_tiled"], ext.target.cuda("sm_80"))
    assert k.threads_per_block == cfg.threads
    # double buffering doubles the A and B tiles: (BM + BN) * BK * 4 bytes * 2 stages
    assert k.static_shared == (cfg.block_m + cfg.block_n) * cfg.block_k * 4 * 2
    assert f"C_local_ptr[{cfg.thread_m * cfg.thread_n}]" in res.source


@pytest.mark.parametrize("name", ["matmul.cuda_tiled", "matmul.cuda_tensorcore", "matmul.cuda_gemv"])
def test_space_points_build_within_limits(name):
    """Tuning may pick any point: a spread of each space builds and fits sm_80's limits."""
    wl = REPRESENTATIVE[name]
    target = ext.target.cuda("sm_80")
    space = REGISTRY.get(name).space(wl, target)
    assert space
    for cfg in space[:: max(1, len(space) // 3)]:
        assert check_limits(built(name, "sm_80", wl, cfg).kernels, "sm_80") == [], cfg


def test_tensorcore_pads_odd_shapes_and_declines_with_reasons():
    tc = REGISTRY.get("matmul.cuda_tensorcore")
    t = ext.target.cuda("sm_90")
    assert tc.applies(matmul_wl(77, 93, 45, dtype="float16"), t)  # padded to the tile
    fp32 = tc.applies(matmul_wl(64, 64, 64), t)
    assert not fp32 and "float16" in fp32.reason
    bf16 = tc.applies(matmul_wl(64, 64, 64, dtype="bfloat16"), t)
    assert not bf16 and "bf16" in bf16.reason
    gemv = tc.applies(matmul_wl(1, 64, 64, dtype="float16"), t)
    assert not gemv and "matrix-vector" in gemv.reason
    old = tc.applies(matmul_wl(64, 64, 64, dtype="float16"), ext.target.cuda("sm_61"))
    assert not old and "sm_70" in old.reason
    waste = tc.suited(matmul_wl(17, 2000, 17, dtype="float16"), t)
    assert not waste and "padding" in waste.reason


@pytest.mark.parametrize("wl,expected", [
    (matmul_wl(4096, 4096, 4096, dtype="float16"), "matmul.cuda_tensorcore"),
    (matmul_wl(1024, 1024, 1024), "matmul.cuda_tiled"),
    (matmul_wl(1, 4096, 1024, transpose_b=True), "matmul.cuda_gemv"),
    (matmul_wl(1, 4096, 1024, dtype="float16"), "matmul.cuda_gemv"),
    (matmul_wl(8, 8, 8), "matmul.cuda_small"),
    (matmul_wl(17, 2000, 17, dtype="float16"), "matmul.cuda_tiled"),
])
def test_selection_by_shape(wl, expected):
    assert choose(wl, ext.target.cuda("sm_90")).name == expected


def test_batched_goes_to_cuda_batch():
    t = ext.target.cuda("sm_90")
    assert choose(batch_wl((4, 32, 16), (4, 16, 8), dtype="float16"), t).name == "matmul.cuda_batch"
    assert choose(batch_wl((5, 13, 7), (7, 19)), t).name == "matmul.cuda_batch"  # 2-D B broadcast
    for name in NAMES[:-1]:
        v = REGISTRY.get(name).applies(batch_wl((4, 32, 16), (4, 16, 8)), t)
        assert not v and "matmul.cuda_batch" in v.reason


def test_end_to_end_fp16_matmul_bias_relu_builds_for_sm90():
    from tvm.script import ir as I, relax as R

    @I.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor((100, 256), "float16"), w: R.Tensor((256, 300), "float16"),
                 b: R.Tensor((300,), "float32")):
            with R.dataflow():
                y = R.nn.relu(R.add(R.matmul(x, w, out_dtype="float32"), b))
                R.output(y)
            return y

    ex = ext.build(Model, ext.target.cuda("sm_90"))
    (decision,) = [d for d in ext.last_report().decisions if d.workload.op == "matmul"]
    assert decision.name == "matmul.cuda_tensorcore"
    src = ex.mod.imports[0].imports[0].inspect_source()
    assert "wmma::mma_sync" in src


# -- numerics (need a GPU) ---------------------------------------------------------------------

ACT = {"relu": lambda x: np.maximum(x, 0)}


def reference(wl, xs):
    a, b, *extras = [x.astype("float64") for x in xs]
    if wl.attr("transpose_b"):
        b = b.T
    y = a @ b
    for op in wl.epilogue:
        y = y + extras.pop(0) if op in ("bias", "residual") else ACT[op](y)
    return y


def tol(wl):
    K = wl.shapes[0][1]
    if "float16" in (wl.dtypes[0], wl.out_dtype):
        # fp16 inputs are exact products in fp32; an fp16 output rounds to 2^-11 relative
        return dict(rtol=2e-3 if wl.out_dtype == "float16" else 1e-4, atol=1e-3 * max(K, 16) ** 0.5)
    return dict(rtol=1e-5, atol=4e-6 * max(K, 16))


GPU_SHAPES = [(1, 1, 1), (7, 13, 5), (1, 100, 37), (37, 1, 50), (33, 97, 129), (128, 200, 96), (777, 333, 1000)]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
@pytest.mark.parametrize("dtype,transpose_b", [("float32", False), ("float16", True), ("float16", False)])
def test_numerics_on_gpu(name, M, N, K, dtype, transpose_b):
    target = ext.target.cuda(ext.target.local_cuda_arch())
    wl = matmul_wl(M, N, K, dtype=dtype, transpose_b=transpose_b, epilogue=("bias", "relu", "residual"))
    cand = REGISTRY.get(name)
    if not cand.applies(wl, target):
        pytest.skip(cand.applies(wl, target).reason)
    xs = random_inputs(wl, seed=M + N + K)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).run(xs)
    assert_close(out.astype("float64"), reference(wl, xs), **tol(wl), what=f"{name} {M}x{N}x{K} {dtype}")


@pytest.mark.parametrize("name,dtype,vector_type", [("matmul.cuda_tiled", "float32", "float4"),
                                                     ("matmul.cuda_tensorcore", "float16", "uint4")])
def test_aligned_shapes_get_16_byte_loads(name, dtype, vector_type):
    """Shapes that need no padding load global memory 16 bytes per thread (float4 / 8 halves)."""
    res = built(name, "sm_90", matmul_wl(256, 256, 256, dtype=dtype, epilogue=()))
    assert vector_type in res.source


BATCH_GPU_CASES = [((4, 64, 128), (4, 128, 96), False), ((2, 3, 13, 7), (3, 19, 7), True), ((5, 13, 7), (7, 19), False),
                   ((1, 1, 1), (3, 1, 1), False)]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("a,b,transpose_b", BATCH_GPU_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_numerics_on_gpu(a, b, transpose_b, dtype):
    target = ext.target.cuda(ext.target.local_cuda_arch())
    wl = batch_wl(a, b, dtype=dtype, transpose_b=transpose_b)
    cand = REGISTRY.get("matmul.cuda_batch")
    xs = random_inputs(wl, seed=7)
    x, w, bias = (v.astype("float64") for v in xs)
    ref = x @ (np.swapaxes(w, -1, -2) if transpose_b else w) + bias
    out = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).run(xs)
    assert_close(out.astype("float64"), ref, **tol(wl), what=f"batch {a} {b} {dtype}")
