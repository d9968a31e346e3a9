"""CUDA softmax, layer_norm and reduction candidates: nvcc for sm_80/sm_90 without a GPU,
warp-shuffle / shared-memory trees in the generated code, launch limits; numerics on a GPU."""
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


def softmax_wl(rows, n):
    return Workload("softmax", [(rows, n)], ["float32"], "float32", attrs={"out_shape": (rows, n)})


def layer_norm_wl(rows, n):
    return Workload("layer_norm", [(rows, n), (n,), (n,)], ["float32"] * 3, "float32",
                    attrs={"eps": 1e-5, "center": True, "scale": True, "out_shape": (rows, n)})


def reduce_wl(O, R, I, kind):
    return Workload("reduce", [(O, R, I)], ["float32"], "float32", attrs={"kind": kind, "out_shape": (O, I)})


REPRESENTATIVE = {
    "softmax.cuda_rows": softmax_wl(37, 1001),
    "layer_norm.cuda_rows": layer_norm_wl(13, 769),
    "reduce.cuda_rows": reduce_wl(37, 1001, 1, "max"),
    "reduce.cuda_cols": reduce_wl(3, 101, 77, "mean"),
}
TREES = {"softmax.cuda_rows", "layer_norm.cuda_rows", "reduce.cuda_rows"}


def built(name, arch, wl=None, config=None):
    wl = wl or REPRESENTATIVE[name]
    cand, target = REGISTRY.get(name), ext.target.cuda(arch)
    assert cand.applies(wl, target), cand.applies(wl, target).reason
    return inspect_candidate(cand, wl, target, config)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(REPRESENTATIVE))
def test_builds_structure_and_nvcc(name, arch, tmp_path):
    res = built(name, arch)
    assert check_limits(res.kernels, arch) == []
    if name in TREES:  # 256 threads: shuffles within warps, shared memory across warps
        assert "__shfl_down_sync" in res.source and "__shared__" in res.source
        assert res.kernels[0].grid.get("blockIdx.x") == REPRESENTATIVE[name].shapes[0][0]
    if has_nvcc():
        proc = nvcc_compile(res.source, arch, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("threads", [32, 1024])
def test_one_warp_and_full_block_configs_build(threads):
    cfg = REGISTRY.get("softmax.cuda_rows").config(threads=threads)
    res = built("softmax.cuda_rows", "sm_80", config=cfg)
    assert res.kernels[0].threads_per_block == threads and check_limits(res.kernels, "sm_80") == []


def test_selection_and_declines():
    t = ext.target.cuda("sm_90")
    assert choose(reduce_wl(8, 4096, 1, "sum"), t).name == "reduce.cuda_rows"
    assert choose(reduce_wl(8, 64, 300, "sum"), t).name == "reduce.cuda_cols"
    fp16 = Workload("softmax", [(4, 64)], ["float16"], "float16", attrs={"out_shape": (4, 64)})
    d = choose(fp16, t)
    assert d.name == "fallback" and any("float32" in a.reason for a in d.alternatives)


# -- numerics (need a GPU) ---------------------------------------------------------------------

def reference(wl, xs):
    x = xs[0].astype("float64")
    if wl.op == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if wl.op == "layer_norm":
        g, b = xs[1].astype("float64"), xs[2].astype("float64")
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b
    return getattr(np, wl.attr("kind"))(x, axis=1)


GPU_CASES = [softmax_wl(1, 1), softmax_wl(7, 33), softmax_wl(37, 1001), softmax_wl(3, 5000),
             layer_norm_wl(1, 3), layer_norm_wl(13, 769), layer_norm_wl(2, 4097),
             reduce_wl(1, 1, 1, "sum"), reduce_wl(37, 1001, 1, "max"), reduce_wl(5, 3, 1, "min"),
             reduce_wl(2, 70000, 1, "mean"), reduce_wl(3, 101, 77, "mean"), reduce_wl(1, 9, 1000, "max")]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("wl", GPU_CASES, ids=lambda w: w.key)
def test_numerics_on_gpu(wl):
    target = ext.target.cuda(ext.target.local_cuda_arch())
    cands = own_candidates(wl, target)
    assert cands, f"no CUDA candidate applies to {wl.key}"
    for cand in cands:
        xs = random_inputs(wl, seed=3)
        out = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).run(xs)
        # float32 trees: error ~ log2(threads) + n/threads roundings of the row's magnitude
        assert_close(out.astype("float64"), reference(wl, xs).reshape(out.shape), rtol=1e-4, atol=1e-5,
                     what=f"{cand.name} {wl.key}")
