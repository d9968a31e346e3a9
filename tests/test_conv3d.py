"""Conv3dToConv2d: conv3d built through the conv2d candidates matches PyTorch's Conv3d on
patch embeddings, padded / strided / dilated time axes, (1,k,k) and (k,1,1) kernels, groups."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ext
from ext.frontend import from_torch
from ext.testing import assert_close, run_relax

# (N, C, D, H, W, O, kernel, stride, padding, dilation, groups)
CASES = [
    (1, 3, 8, 32, 32, 24, (2, 16, 16), (2, 16, 16), 0, 1, 1),      # VideoMAE's tubelet embedding
    (2, 5, 7, 9, 11, 7, (3, 3, 3), 1, 1, 1, 1),                    # batch 2, odd sizes
    (1, 4, 9, 10, 8, 6, (3, 3, 3), (2, 2, 1), (1, 0, 1), (2, 1, 1), 1),  # time stride + dilation
    (1, 6, 5, 8, 8, 6, (1, 3, 3), 1, (0, 1, 1), 1, 1),             # spatial only: a transpose
    (1, 6, 7, 6, 6, 12, (3, 1, 1), (2, 1, 1), (1, 0, 0), 1, 3),    # temporal only, groups 3
    (1, 8, 6, 7, 7, 8, (3, 3, 3), 1, 1, 1, 8),                     # depthwise (X3D)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}c{}d{}h{}w{}o{}-k{}-s{}-p{}-d{}-g{}".format(*c))
def test_conv3d_matches_torch(cpu_target, case):
    N, C, D, H, W, O, k, s, p, d, g = case
    torch.manual_seed(sum(case[:6]))
    model = torch.nn.Sequential(torch.nn.Conv3d(C, O, k, s, p, d, groups=g), torch.nn.ReLU()).eval()
    x = torch.randn(N, C, D, H, W)
    x[0, 0, 1, 2, 3] = float("nan")  # NaN stays NaN: every output it reaches is NaN in both
    with torch.no_grad():
        want = model(x).numpy()
    ex = ext.build(from_torch(model, (x,)), cpu_target, cache=False, verbose=False)
    assert not ext.last_report().find_stock("relax.nn.conv3d"), "conv3d left to stock lowering"
    got = run_relax(ex, x.numpy())
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert_close(got[ok], want[ok], rtol=1e-4, atol=1e-4)
