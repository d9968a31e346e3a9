"""Winograd: the transform matrices, the error bound on ResNet-18's 3x3 layers, tile choice and declines."""
from __future__ import annotations

import numpy as np
import pytest

from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY
from ext.strategies.conv2d import geom, wino_tile
from ext.topi_kernels import winograd as wg
from ext.tir_schedules.cpu.winograd import WinogradConfig

from conv2d_helpers import conv_wl, reference

RESNET18_3X3 = [(64, 56), (128, 28), (256, 14), (512, 7)]  # (channels, size), stride 1, pad 1

#: documented bound (topi_kernels/winograd.py): max |error| <= 1e-4 * max |output| against float64
WINOGRAD_REL_BOUND = 1e-4


@pytest.mark.parametrize("m", wg.TILES)
def test_transform_matrices_compute_a_correlation(m):
    A, B, G = wg.matrices(m)
    rng = np.random.default_rng(m)
    d, g = rng.standard_normal(m + 2), rng.standard_normal(3)
    np.testing.assert_allclose(A.T @ ((G @ g) * (B.T @ d)), np.correlate(d, g, "valid"), rtol=0, atol=1e-12)


#: every tile on every ResNet-18 3x3 layer but F(4,3) on 7x7x512 (slow to build; the smaller layers cover it)
ERROR_CASES = [(c, s, m) for c, s in RESNET18_3X3 for m in wg.TILES if not (m == 4 and c == 512)]


@pytest.mark.parametrize("c,size,m", ERROR_CASES, ids=[f"{c}x{s}-F{m}" for c, s, m in ERROR_CASES])
def test_error_bound_on_resnet18_layers(cpu_target, c, size, m):
    wl = conv_wl(1, c, size, size, c, 3, epilogue=())
    cand = REGISTRY.get("conv2d.winograd")
    xs = random_inputs(wl, seed=c)
    out = CompiledCandidate(cand, wl, WinogradConfig(tile=m, mb=4, nb=64), cpu_target).run(xs)
    ref = reference(wl, xs)
    rel = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert rel <= WINOGRAD_REL_BOUND, f"F({m},3) on {c}x{size}: relative error {rel:.2e}"


def test_tile_choice():
    assert [wino_tile(geom(conv_wl(1, c, s, s, c, 3)), 16) for c, s in RESNET18_3X3] == [4, 4, 4, 2]
    assert [wino_tile(geom(conv_wl(1, c, s, s, c, 3)), 8) for c, s in RESNET18_3X3] == [4, 4, 4, 2]  # AVX2


@pytest.mark.parametrize("kw,why", [(dict(stride=2), "stride"), (dict(dil=2), "dilation"),
                                    (dict(groups=2), "groups"), (dict(K=5), "3x3")])
def test_declines_with_reason(cpu_target, kw, why):
    args = dict(K=3)
    args.update(kw)
    k = args.pop("K")
    v = REGISTRY.get("conv2d.winograd").applies(conv_wl(1, 8, 9, 9, 8, k, **args), cpu_target)
    assert not v and why in v.reason
