"""FFT conv2d: error bound against float64 on odd sizes (dense and depthwise, several transform
sizes), the filter transform against NumPy's FFT, declines with reasons, knob space, estimates
and selection, and one build through the pipeline with a constant filter folded at compile time."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY, Selector
from ext.strategies import conv2d_fft as fs
from ext.strategies.conv2d import geom
from ext.tir_schedules.cpu.conv2d_fft import FFTConfig
from ext.topi_kernels import conv2d_fft as ft

from conv2d_helpers import conv_wl, reference

#: documented bound (issue 17): max |error| <= 1e-4 * max |output| against float64
FFT_REL_BOUND = 1e-4

CAND = REGISTRY.get("conv2d.fft")


def _rel_error(wl, cfg, target, seed=0) -> float:
    xs = random_inputs(wl, seed=seed)
    out = CompiledCandidate(CAND, wl, cfg, target).run(xs)
    ref = reference(wl, xs)
    return float(np.abs(out - ref).max() / np.abs(ref).max())


DENSE = [  # (N, C, H, W, O, K, pad, epilogue)
    (1, 3, 13, 17, 5, 5, 2, ("bias", "relu")),
    (1, 3, 13, 17, 5, 7, 3, ("bias",)),
    (2, 3, 13, 17, 5, 11, 5, ("bias", "residual")),
    (1, 17, 11, 13, 19, (3, 5), (1, 2, 0, 3), ()),  # non-square kernel, asymmetric padding
    (2, 1, 13, 17, 1, 7, 3, ("bias", "relu")),      # one channel in and out: one-lane blocks
]


@pytest.mark.parametrize("case", DENSE, ids=lambda c: f"{c[1]}x{c[2]}x{c[3]}->{c[4]}k{c[5]}")
def test_dense_error_bound_default_and_other_tiles(cpu_target, case):
    N, C, H, W, O, K, pad, epi = case
    wl = conv_wl(N, C, H, W, O, K, pad=pad, epilogue=epi)
    g = geom(wl)
    default = CAND.default_config(wl, cpu_target)
    tiles = fs.tile_choices(g, 16)
    # the default, the largest (one tile, odd or even) and the smallest transform offered
    for cfg in {default, FFTConfig(tile=tiles[0], mb=2, nb=16), FFTConfig(tile=tiles[-1], mb=3, nb=16)}:
        rel = _rel_error(wl, cfg, cpu_target)
        assert rel <= FFT_REL_BOUND, f"{cfg} on {wl.key}: relative error {rel:.2e}"


@pytest.mark.parametrize("N,C,H,W,K,pad", [(1, 7, 13, 17, 5, 2), (1, 7, 13, 17, 11, 5),
                                            (2, 19, 9, 11, 7, (0, 3, 2, 1))])
def test_depthwise_error_bound(cpu_target, N, C, H, W, K, pad):
    wl = conv_wl(N, C, H, W, C, K, pad=pad, groups=C)
    for cfg in {CAND.default_config(wl, cpu_target), FFTConfig(tile=fs.tile_choices(geom(wl), 16)[-1])}:
        rel = _rel_error(wl, cfg, cpu_target)
        assert rel <= FFT_REL_BOUND, f"{cfg} on {wl.key}: relative error {rel:.2e}"


def test_prime_transform_size_is_one_unsplit_pass(cpu_target):
    """F = 13 (prime): the split DFT degenerates to A = 1, B = 13 and stays exact."""
    assert ft.factor(13) == 1 and ft.factor(42) == 6 and fs.dft_cost(13) == 13 * 14 and fs.dft_cost(42) == 42 * 13
    wl = conv_wl(1, 3, 13, 17, 5, 5, pad=2)
    assert 13 not in fs.tile_choices(geom(wl), 16)  # offered sizes are the cheaper composite ones
    rel = _rel_error(wl, FFTConfig(tile=13, mb=4, nb=16), cpu_target)
    assert rel <= FFT_REL_BOUND, f"relative error {rel:.2e}"


def test_large_kernel_error_bound(cpu_target):
    """A 31x31 kernel over a 37x37 image (3 tiles per side with F = 43)."""
    wl = conv_wl(1, 5, 37, 37, 3, 31, pad=15, epilogue=("bias",))
    rel = _rel_error(wl, FFTConfig(tile=43, mb=4, nb=16), cpu_target)
    assert rel <= FFT_REL_BOUND, f"relative error {rel:.2e}"


@pytest.mark.parametrize("depthwise", [False, True])
def test_filter_transform_is_the_conjugate_spectrum(cpu_target, depthwise):
    C, O, K, F, nb = (7, 7, 5, 12, 16) if depthwise else (3, 5, 5, 11, 16)
    wl = conv_wl(1, C, 13, 13, O, K, pad=2, groups=C if depthwise else 1)
    cfg = FFTConfig(tile=F, mb=4, nb=nb)
    func = CAND.input_transforms(wl, cfg, cpu_target)[1]
    w = random_inputs(wl, seed=5)[1]
    lib = tvm.compile(func.with_attr("global_symbol", "f"), target=cpu_target)
    shape = fs._u_shape(geom(wl), cfg, 16)
    got = tvm.runtime.empty(shape, "float32", tvm.cpu())
    lib["f"](tvm.runtime.tensor(w), got)
    spec = np.conj(np.fft.rfft2(w.astype(np.float64), s=(F, F)))  # [O, Cg, F, Fh]
    spec = spec.reshape(O, w.shape[1], F * (F // 2 + 1))
    u = got.numpy()
    if depthwise:  # U[e, q, c]
        ref = np.stack([spec[:, 0].real.T, spec[:, 0].imag.T], 1)
        np.testing.assert_allclose(u[:, :, :C], ref, rtol=0, atol=1e-5 * np.abs(ref).max())
        assert not u[:, :, C:].any()
    else:  # U[e, jb, c, q, jl], o = jb*nb + jl
        full = u.transpose(0, 2, 3, 1, 4).reshape(u.shape[0], u.shape[2], 2, -1)  # [e, c, q, o]
        ref = np.stack([spec.real.transpose(2, 1, 0), spec.imag.transpose(2, 1, 0)], 2)
        np.testing.assert_allclose(full[:, :C, :, :O], ref, rtol=0, atol=1e-5 * np.abs(ref).max())
        assert not full[:, :, :, O:].any() and not full[:, C:].any()


@pytest.mark.parametrize("kw,why", [(dict(stride=2), "stride"), (dict(dil=2), "dilation"),
                                    (dict(groups=3), "groups"), (dict(layout="NHWC"), "layout")])
def test_declines_with_reason(cpu_target, kw, why):
    v = CAND.applies(conv_wl(1, 6, 13, 13, 6, 5, pad=2, **kw), cpu_target)
    assert not v and why in v.reason, v.reason


def test_depthwise_multiplier_declines(cpu_target):
    v = CAND.applies(conv_wl(1, 4, 13, 13, 8, 5, pad=2, groups=4), cpu_target)
    assert not v and "groups" in v.reason


def test_unsuited_for_1x1_and_runtime_filters(cpu_target):
    assert "1x1" in CAND.suited(conv_wl(1, 8, 13, 13, 8, 1, pad=0), cpu_target).reason
    assert "not a constant" in CAND.suited(conv_wl(1, 8, 13, 13, 8, 7, pad=3, w_const=False), cpu_target).reason
    assert CAND.suited(conv_wl(1, 8, 13, 13, 8, 7, pad=3), cpu_target)


def test_fft_size_smaller_than_kernel_is_an_error():
    with pytest.raises(ValueError, match="smaller than the 7x7 kernel"):
        ft.fft_geom(geom(conv_wl(1, 3, 13, 13, 3, 7, pad=3)), 6)


def test_knob_space_fits_the_registers(cpu_target):
    wl = conv_wl(1, 64, 56, 56, 64, 15, pad=7)
    space = CAND.space(wl, cpu_target)
    assert space and CAND.default_config(wl, cpu_target) in space
    acc = ext.target.cpu_info(cpu_target).accumulators
    lanes = ext.target.cpu_info(cpu_target).lanes_f32
    assert all(2 * c.mb * c.nb // lanes <= acc and c.nb % lanes == 0 for c in space)
    assert len({c.tile for c in space}) >= 3  # the tuner gets several transform sizes
    for cfg in space:  # every transform covers the output with its tiles
        fg = ft.fft_geom(geom(wl), cfg.tile)
        assert fg.TH * fg.mh >= 56 and fg.TW * fg.mw >= 56


def _sweep_wl(C, k, groups=1):
    return conv_wl(1, C, 56, 56, C, k, pad=k // 2, groups=groups)


def test_estimates_rank_fft_for_large_kernels_only(cpu_target):
    """Selection (no log) by estimate: Winograd at 3x3, FFT for the dense 11x11+ and the
    31x31 depthwise layers of the bench sweep; the report says the estimated times."""
    picks = {k: Selector(cpu_target).choose(_sweep_wl(64, k)) for k in (3, 11, 15, 31)}
    assert picks[3].name == "conv2d.winograd"
    for k in (11, 15, 31):
        assert picks[k].name == "conv2d.fft" and picks[k].source == "estimate", (k, picks[k].reason)
        assert "estimated" in picks[k].reason
    lost = {a.candidate: a.reason for a in picks[3].alternatives}
    assert "estimated" in lost["conv2d.fft"]
    est = [CAND.estimated(_sweep_wl(64, k), cpu_target) for k in (5, 11, 31)]
    assert 0 < est[0] < est[1] < est[2]


def test_build_through_the_pipeline_folds_the_filter(cpu_target):
    """relu(conv2d(x, W) + b) with a constant 13x13 filter: ext picks FFT and matches float64."""
    from ext.models.conv import conv_bias_relu

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 16, 29, 31)).astype("float32")
    w = rng.uniform(-1, 1, (16, 16, 13, 13)).astype("float32") / 50
    b = rng.uniform(-1, 1, (16,)).astype("float32")
    ex = ext.build(conv_bias_relu(x.shape, w, b, (1, 1), (6, 6)), cpu_target, cache=False, verbose=False)
    dec = ext.last_report().find("conv2d")[0]
    assert dec.name == "conv2d.fft", dec.reason
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    ref = np.maximum(reference(conv_wl(1, 16, 29, 31, 16, 13, pad=6, epilogue=()), [x, w]) + b.reshape(1, -1, 1, 1), 0)
    assert float(np.abs(out - ref).max() / np.abs(ref).max()) <= FFT_REL_BOUND
