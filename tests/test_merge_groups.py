"""MergeNarrowGroups: half-vector conv groups merged in pairs compute the same conv (weights
against PyTorch's grouped conv), and on a model the even group counts merge, odd ones stay."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ext
from ext.frontend import from_torch
from ext.relax_passes.merge_groups import merged_weight
from ext.strategies.conv2d import lanes
from ext.testing import assert_close, run_relax


@pytest.mark.parametrize("C,O,groups,k", [(16, 16, 2, 2), (48, 96, 6, 2), (64, 32, 16, 4), (24, 24, 6, 3)])
def test_merged_weight_is_the_grouped_conv(C, O, groups, k):
    rng = np.random.default_rng(C + O)
    x = torch.from_numpy(rng.normal(size=(1, C, 7, 5)).astype("float32"))
    w = rng.normal(size=(O, C // groups, 3, 3)).astype("float32")
    want = torch.nn.functional.conv2d(x, torch.from_numpy(w), padding=1, groups=groups)
    merged = merged_weight(w, groups, k)
    assert merged.shape == (O, k * C // groups, 3, 3)
    got = torch.nn.functional.conv2d(x, torch.from_numpy(merged), padding=1, groups=groups // k)
    assert_close(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


class _NarrowGroups(torch.nn.Module):
    """RegNet-Y's 8-channel groups: 1x1 -> grouped 3x3 (even, then odd group count) -> 1x1."""

    def __init__(self, even=64, odd=72):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(3, even, 3, 2, 1), nn.ReLU(), nn.Conv2d(even, even, 3, 1, 1, groups=even // 8), nn.ReLU(),
            nn.Conv2d(even, odd, 1), nn.ReLU(), nn.Conv2d(odd, odd, 3, 2, 1, groups=odd // 8), nn.ReLU(),
            nn.Conv2d(odd, 32, 1))

    def forward(self, x):
        return self.body(x)


def test_even_groups_merge_and_the_model_matches_torch(cpu_target):
    if lanes(cpu_target) != 16:
        pytest.skip("8-channel groups are half a vector on AVX-512 only")
    torch.manual_seed(0)
    model = _NarrowGroups().eval()
    x = torch.randn(1, 3, 23, 19)
    with torch.no_grad():
        want = model(x).numpy()
    ex = ext.build(from_torch(model, (x,)), cpu_target, cache=False, verbose=False)
    groups = sorted({(d.workload.attr("groups"), d.workload.shapes[1][1]) for d in ext.last_report().decisions
                     if d.workload.op == "conv2d" and d.workload.attr("groups") > 1})
    assert groups == [(4, 16), (9, 8)], groups  # 8 groups of 8 -> 4 of 16; 9 groups stay
    assert_close(run_relax(ex, x.numpy()), want, rtol=0, atol=1e-4 * float(np.abs(want).max()))
