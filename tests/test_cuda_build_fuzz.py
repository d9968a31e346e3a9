"""Every CUDA candidate builds (TIR -> CUDA C, no GPU) and fits sm_80's launch limits on a fixed
random sample of awkward workloads and knob settings: sizes 1, primes, tile +-1, K = 1, rows of
one element, every layout and epilogue. (A longer run of the same generator found the bugs
fixed in the schedules: unit loops, mixed-dtype shared memory, ragged splits.)"""
from __future__ import annotations

import random

import pytest

import ext
from ext.strategies import REGISTRY
from ext.tir_schedules.cuda.launch import check_limits, inspect_kernel
from test_cuda_conv2d import conv_wl
from test_cuda_matmul import matmul_wl
from test_cuda_norm import layer_norm_wl, reduce_wl, softmax_wl

DIMS = [1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 129, 255]


def _workload(rng: random.Random):
    kind = rng.choice(["matmul", "matmul", "conv2d", "rows"])
    d = lambda: rng.choice(DIMS)  # noqa: E731
    if kind == "matmul" and rng.random() < 0.25:
        from test_cuda_matmul import batch_wl

        a = (rng.choice([1, 3]), d(), d())
        b = rng.choice([(a[0], a[2], d()), (a[2], d())])
        return batch_wl(a, b, dtype=rng.choice(["float32", "float16"]))
    if kind == "matmul":
        return matmul_wl(d(), d(), d(), dtype=rng.choice(["float32", "float16"]),
                         out_dtype=rng.choice(["float32", "float16"]), transpose_b=rng.random() < 0.5,
                         epilogue=rng.choice([(), ("bias",), ("bias", "relu"), ("bias", "gelu", "residual")]))
    if kind == "conv2d":
        layout, klayout = rng.choice([("NCHW", "OIHW"), ("NHWC", "OHWI"), ("NHWC", "HWIO")])
        k = rng.choice([1, 3, 5])
        return conv_wl(rng.choice([1, 2]), rng.choice([1, 3, 8, 17]), rng.choice([5, 7, 13]), rng.choice([5, 7, 13]),
                       rng.choice([1, 5, 16, 33]), k, stride=rng.choice([1, 2]), pad=k // 2, layout=layout,
                       klayout=klayout, dtype=rng.choice(["float32", "float16"]))
    r, c = d(), d() * rng.choice([1, 3])
    return rng.choice([softmax_wl(r, c), layer_norm_wl(r, c), reduce_wl(r, c, 1, "max"), reduce_wl(r, c, d(), "mean")])


def _cases(n=40, seed=2026):
    rng = random.Random(seed)
    target = ext.target.cuda("sm_80")
    out = []
    while len(out) < n:
        wl = _workload(rng)
        for cand in REGISTRY.for_op(wl.op, "cuda"):
            if ".cuda_" in cand.name and cand.applies(wl, target):
                space = cand.space(wl, target)
                cfg = rng.choice(space) if space and rng.random() < 0.5 else cand.default_config(wl, target)
                out.append(pytest.param(cand.name, wl, cfg, id=f"{len(out)}-{cand.name}"))
    return out


@pytest.mark.parametrize("name,wl,cfg", _cases())
def test_random_workload_builds_within_limits(name, wl, cfg):
    target = ext.target.cuda("sm_80")
    res = inspect_kernel(REGISTRY.get(name).build(wl, cfg, target), target)
    assert res.kernels and check_limits(res.kernels, "sm_80") == [], (wl.key, cfg)
