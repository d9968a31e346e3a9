"""pool2d.rows (max/avg pooling beside the conv family) against PyTorch and stock TVM lowering."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.testing import assert_close, one_op_module, run_relax


CASES = [  # (kind, shape, pool, stride, pad, ceil_mode, count_include_pad)
    ("max", (1, 64, 112, 112), 3, 2, 1, False, False),  # ResNet stem
    ("max", (2, 5, 13, 11), 3, 2, 1, True, False),       # odd sizes, ceil_mode
    ("max", (1, 3, 8, 9), 2, 2, 0, False, False),
    ("avg", (1, 7, 15, 17), 3, 1, 1, False, True),
    ("avg", (1, 7, 15, 17), 3, 2, 1, False, False),
    ("avg", (1, 16, 56, 56), 2, 2, 0, False, False),
]


@pytest.mark.parametrize("kind,shape,k,s,p,ceil,inc", CASES)
def test_pool_matches_torch_and_stock(cpu_target, kind, shape, k, s, p, ceil, inc):
    op = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
    kw = dict(pool_size=k, strides=s, padding=p, ceil_mode=ceil)
    if kind == "avg":
        kw["count_include_pad"] = inc
    mod = one_op_module(op, shape, **kw)
    x = np.random.default_rng(sum(shape)).uniform(-1, 1, shape).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    dec = ext.last_report().find("pool2d")
    assert len(dec) == 1 and dec[0].name == "pool2d.rows", [d.name for d in dec]
    stock = run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x)
    assert_close(got, stock, rtol=1e-6, atol=1e-6, what="vs stock TVM")
    if kind == "max":
        ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil).numpy()
    else:
        ref = torch.nn.functional.avg_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil,
                                             count_include_pad=inc).numpy()
    assert_close(got, ref, rtol=1e-6, atol=1e-6, what="vs PyTorch")


def test_unsupported_layout_falls_back(cpu_target):
    mod = one_op_module(relax.op.nn.max_pool2d, (1, 8, 8, 4), pool_size=2, strides=2, layout="NHWC")
    x = np.random.default_rng(0).uniform(-1, 1, (1, 8, 8, 4)).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    dec = ext.last_report().find("pool2d")
    assert dec[0].candidate is None and "layout" in dec[0].alternatives[0].reason
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x.transpose(0, 3, 1, 2)), 2, 2).numpy()
    assert_close(got, ref.transpose(0, 2, 3, 1), rtol=0, atol=0)
