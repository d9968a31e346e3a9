"""GlobalPoolToReduce: a pool whose one window covers the image becomes a mean / max over H, W."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.relax_passes.global_pool import GlobalPoolToReduce
from ext.testing import assert_close, one_op_module, run_relax


def _ops(mod) -> set[str]:
    ops = set()
    relax.analysis.post_order_visit(
        mod["main"], lambda e: ops.add(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return ops


def _torch_ref(kind, x, k, s, ceil, inc=True):
    t = torch.from_numpy(x)
    if kind == "max":
        return torch.nn.functional.max_pool2d(t, k, s, ceil_mode=ceil).numpy()
    return torch.nn.functional.avg_pool2d(t, k, s, ceil_mode=ceil, count_include_pad=inc).numpy()


GLOBAL = [  # (kind, shape, pool (kh, kw), ceil_mode, count_include_pad)
    ("avg", (1, 40, 10, 10), (1280, 1280), True, True),   # EfficientNet-B0's head at 300x300
    ("avg", (2, 33, 7, 9), (7, 9), False, True),           # AvgPool2d(kernel = the image), odd sizes
    ("avg", (1, 17, 5, 3), (8, 8), True, False),
    ("max", (1, 19, 7, 7), (7, 7), False, True),
    ("max", (1, 6, 5, 11), (64, 64), True, True),
]


@pytest.mark.parametrize("kind,shape,k,ceil,inc", GLOBAL)
def test_global_window_is_a_reduction(cpu_target, kind, shape, k, ceil, inc):
    op = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
    kw = dict(pool_size=k, strides=k, ceil_mode=ceil)
    if kind == "avg":
        kw["count_include_pad"] = inc
    mod = one_op_module(op, shape, **kw)
    after = GlobalPoolToReduce()(mod)
    assert _ops(after) == {"relax.mean" if kind == "avg" else "relax.max"}, _ops(after)
    x = np.random.default_rng(sum(shape)).uniform(-1, 1, shape).astype("float32")
    x[0, 1, 2, 1] = np.nan  # one NaN poisons its channel's window, nothing else
    x[0, 2, :, :] = -np.inf
    x[0, 3, 0, 0] = np.inf
    got = run_relax(ext.build(mod, cpu_target), x)
    ref = _torch_ref(kind, x, k, k, ceil, inc)
    assert np.isnan(got[0, 1]).all() and not np.isnan(np.delete(got, 1, axis=1)).any()
    assert_close(got, ref, rtol=2e-6, atol=2e-6, what=f"{kind} pool {k} on {shape} vs PyTorch")


def test_nhwc_global_pool(cpu_target):
    mod = one_op_module(relax.op.nn.avg_pool2d, (1, 6, 7, 20), pool_size=(6, 7), strides=(6, 7), layout="NHWC")
    after = GlobalPoolToReduce()(mod)
    assert _ops(after) == {"relax.mean"}
    x = np.random.default_rng(3).uniform(-1, 1, (1, 6, 7, 20)).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    assert_close(got, x.mean(axis=(1, 2), keepdims=True), rtol=1e-6, atol=1e-6, what="NHWC global mean")


KEPT = [  # pools that are not one whole-image window: left as pools
    dict(pool_size=(7, 7), strides=(7, 7), padding=(1, 1)),          # padded: the divisor counts the pad
    dict(pool_size=(3, 3), strides=(3, 3)),                          # several windows
    dict(pool_size=(6, 6), strides=(6, 6)),                          # one window, not the whole 7x7 image
    dict(pool_size=(4, 4), strides=(7, 7), dilation=(2, 2)),         # dilated: skips rows
]


@pytest.mark.parametrize("kw", KEPT)
def test_other_pools_are_kept(cpu_target, kw):
    mod = one_op_module(relax.op.nn.avg_pool2d, (1, 4, 7, 7), count_include_pad=True, **kw)
    after = GlobalPoolToReduce()(mod)
    assert _ops(after) == {"relax.nn.avg_pool2d"}
    x = np.random.default_rng(5).uniform(-1, 1, (1, 4, 7, 7)).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    assert_close(got, run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x), rtol=1e-6, atol=1e-6,
                 what=f"{kw} vs stock TVM")
    if "dilation" not in kw:  # PyTorch's avg_pool2d has no dilation
        ref = torch.nn.functional.avg_pool2d(torch.from_numpy(x), kw["pool_size"], kw["strides"],
                                             kw.get("padding", (0, 0))).numpy()
        assert_close(got, ref, rtol=1e-6, atol=1e-6, what=f"{kw} vs PyTorch")
