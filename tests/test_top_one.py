"""TopOneToReduce: ``torch.max(x, dim).values`` (a top-1 whose indices die) runs as a max reduction."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.relax_passes import Canonicalize
from ext.testing import assert_close


class Values(torch.nn.Module):
    def __init__(self, dim: int, keepdim: bool, smallest: bool = False):
        super().__init__()
        self.dim, self.keepdim, self.smallest = dim, keepdim, smallest

    def forward(self, x):
        f = torch.min if self.smallest else torch.max
        return f(x, self.dim, keepdim=self.keepdim).values * 2.0


class ValuesAndIndices(torch.nn.Module):
    def forward(self, x):
        v, i = torch.max(x, 1)
        return v + i.to(v.dtype)


def _ops(mod) -> set[str]:
    ops = set()
    relax.analysis.post_order_visit(
        mod["main"], lambda e: ops.add(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return ops


def _run(mod, x, target):
    return relax.VirtualMachine(ext.build(mod, target), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("shape,dim,keepdim,smallest", [
    ((1, 4, 49, 96), 1, False, False),   # Hiera's mask-unit pooling: max over the 4 units
    ((3, 7, 13), -1, True, False),
    ((2, 11, 5), 0, False, True),        # torch.min: the smallest
    ((5, 17), 1, False, False),
])
def test_values_of_a_top_one_are_a_reduction(cpu_target, shape, dim, keepdim, smallest):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype("float32")
    x.flat[3] = np.nan  # a NaN in one row: its max is NaN, as in PyTorch
    x.flat[-1] = -np.inf
    model = Values(dim, keepdim, smallest).eval()
    want = model(torch.from_numpy(x)).numpy()
    mod = from_torch(model, (torch.from_numpy(x),))
    ops = _ops(Canonicalize()(mod))
    assert "relax.topk" not in ops and ("relax.min" if smallest else "relax.max") in ops, ops
    got = _run(mod, x, cpu_target)
    assert got.shape == want.shape
    assert (np.isnan(got) == np.isnan(want)).all() and np.isnan(want).any()
    assert_close(got, want, rtol=0, atol=0, what="top-1 values as a reduction")


def test_a_top_one_whose_indices_are_read_stays(cpu_target):
    x = np.random.default_rng(1).standard_normal((3, 9, 5)).astype("float32")
    model = ValuesAndIndices().eval()
    mod = from_torch(model, (torch.from_numpy(x),))
    assert "relax.topk" in _ops(Canonicalize()(mod))
    assert_close(_run(mod, x, cpu_target), model(torch.from_numpy(x)).numpy(), rtol=0, atol=0, what="max and argmax")


def test_min_with_dim_imports_with_its_indices(cpu_target):
    """``torch.min(x, dim)`` (values and indices): the stock translator had no ``min.dim``."""
    class MinBoth(torch.nn.Module):
        def forward(self, x):
            v, i = torch.min(x, 2, keepdim=True)
            return v * i.to(v.dtype)

    x = np.random.default_rng(2).standard_normal((2, 3, 7)).astype("float32")
    model = MinBoth().eval()
    mod = from_torch(model, (torch.from_numpy(x),))
    assert_close(_run(mod, x, cpu_target), model(torch.from_numpy(x)).numpy(), rtol=0, atol=0, what="min and argmin")
