"""Blocked activations between convs: the NCHW{b}c kernels against float64 NumPy, and
``BlockChannels`` on small graphs against PyTorch (with the pass off as a second reference)."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY
from ext.strategies._util import lanes
from ext.testing import assert_close
from ext.tuning.references import REFERENCES
from ext.workload import Workload
from conv2d_helpers import blocked_wl, conv_tol, reference


@pytest.fixture(autouse=True)
def _sixteen_lanes(cpu_target):
    if lanes(cpu_target) != 16:
        pytest.skip("the blocked layouts here are NCHW16c (AVX-512)")


# (N, C, H, W, O, K, stride, pad, dilation)
DIRECT = [
    (1, 32, 13, 11, 48, 1, 1, 0, 1),     # 1x1 in place; O one block past the 32-wide tile
    (2, 16, 9, 7, 32, 1, 2, 0, 1),       # 1x1 stride 2, batch 2
    (1, 32, 15, 13, 64, 3, 2, 1, 1),     # 3x3 stride 2 (the pack pads a blocked input)
    (1, 16, 7, 9, 16, 5, 1, 2, 1),       # 5x5, one block each side
    (1, 48, 5, 5, 32, 3, 1, 2, 2),       # dilation 2
    (2, 32, 13, 10, 48, 3, 1, 1, 1),     # 3x3 stride 1 (Winograd too), batch 2, odd tiles
]


@pytest.mark.parametrize("name", ["conv2d.direct_nchwc", "conv2d.winograd"])
@pytest.mark.parametrize("sides", [(16, 16), (0, 16), (16, 0)], ids=["blk-blk", "nchw-blk", "blk-nchw"])
@pytest.mark.parametrize("shape", DIRECT, ids=lambda s: "n{}c{}h{}w{}o{}k{}s{}p{}d{}".format(*s))
def test_dense_blocked_sides_match_numpy(cpu_target, name, sides, shape):
    N, C, H, W, O, K, s, p, d = shape
    wl = blocked_wl(N, C, H, W, O, K, stride=s, pad=p, dil=d, b_in=sides[0], b_out=sides[1])
    cand = REGISTRY.get(name)
    verdict = cand.applies(wl, cpu_target)
    if name == "conv2d.winograd" and (K, s, d) != (3, 1, 1):
        assert not verdict
        return
    assert verdict, verdict.reason
    xs = random_inputs(wl, seed=sum(shape))
    ref = reference(wl, xs)
    # Winograd: its error bound, 1e-4 of the largest output (test_conv2d.py)
    tol = dict(rtol=0, atol=1e-4 * float(abs(ref).max())) if name == "conv2d.winograd" else conv_tol(wl)
    for cfg in [cand.default_config(wl, cpu_target)] + cand.space(wl, cpu_target)[::7]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, **tol, what=f"{name} {shape} {sides} {cfg}")


# (N, C, H, W, O, K, stride, groups): each group whole 16-channel blocks (RegNet-X, ResNeXt)
GROUPED = [
    (1, 64, 9, 11, 64, 3, 1, 4),     # 16-wide groups, as RegNet-X's
    (1, 96, 8, 7, 64, 3, 2, 2),      # 48 in / 32 out per group, stride 2
    (2, 32, 5, 13, 32, 1, 1, 2),     # grouped 1x1, batch 2
]


@pytest.mark.parametrize("sides", [(16, 16), (0, 16), (16, 0)], ids=["blk-blk", "nchw-blk", "blk-nchw"])
@pytest.mark.parametrize("shape", GROUPED, ids=lambda s: "n{}c{}h{}w{}o{}k{}s{}g{}".format(*s))
def test_grouped_blocked_sides_match_numpy(cpu_target, sides, shape):
    N, C, H, W, O, K, s, groups = shape
    wl = blocked_wl(N, C, H, W, O, K, stride=s, pad=K // 2, groups=groups, b_in=sides[0], b_out=sides[1])
    cand = REGISTRY.get("conv2d.direct_nchwc")
    verdict = cand.applies(wl, cpu_target)
    assert verdict, verdict.reason
    xs = random_inputs(wl, seed=sum(shape))
    ref = reference(wl, xs)
    for cfg in [cand.default_config(wl, cpu_target)] + cand.space(wl, cpu_target)[::5]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, **conv_tol(wl), what=f"{shape} {sides} {cfg}")


def test_direct_blocked_se_scale_and_clip(cpu_target):
    wl = blocked_wl(2, 32, 6, 7, 32, 1, pad=0, epilogue=("bias", "clip:0:6", "scale"))
    cand = REGISTRY.get("conv2d.direct_nchwc")
    xs = random_inputs(wl, seed=3)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, reference(wl, xs), **conv_tol(wl))


def _both_orders(cfg) -> list:
    """``cfg`` with each parallel order of the blocked sliding-window kernels (``TileConfig``)."""
    return [dataclasses.replace(cfg, order=o) for o in ("channels", "rows")]


# (N, C, H, W, K, stride, pad, dilation)
DEPTHWISE = [
    (1, 32, 13, 13, 3, 1, 1, 1),
    (2, 16, 14, 15, 3, 2, 1, 1),
    (1, 48, 11, 17, 5, 2, 2, 1),
    (1, 16, 3, 3, 7, 1, 3, 1),           # kernel larger than the image
    (1, 16, 12, 9, 3, 1, 2, 2),          # dilation 2
    (1, 32, 19, 13, 3, 1, 4, 4),         # dilation 4 (DeepLab's atrous layers): 4 x 4 tiles, ragged
    (1, 16, 9, 40, 3, 2, (0, 0, 1, 1), 1),  # TF SAME: pad right/bottom only, wide row
    (1, 16, 30, 30, 3, 1, 1, 1),         # rows of more than one register tile
]


@pytest.mark.parametrize("shape", DEPTHWISE, ids=lambda s: "n{}c{}h{}w{}k{}s{}p{}d{}".format(*s))
def test_depthwise_nchwc_matches_numpy(cpu_target, shape):
    N, C, H, W, K, s, p, d = shape
    wl = blocked_wl(N, C, H, W, C, K, stride=s, pad=p, dil=d, groups=C)
    cand = REGISTRY.get("conv2d.depthwise_nchwc")
    assert cand.applies(wl, cpu_target), cand.applies(wl, cpu_target).reason
    xs = random_inputs(wl, seed=sum(v if isinstance(v, int) else sum(v) for v in shape))
    for cfg in _both_orders(cand.default_config(wl, cpu_target)) + cand.space(wl, cpu_target)[::5]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, reference(wl, xs), **conv_tol(wl), what=f"{shape} {cfg}")


def test_dilated_depthwise_defaults_to_square_tiles(cpu_target):
    """4 x 4 tiles when dilated (960 channels at 64x64, dilation 4: 0.80-0.85 ms against 1.66-2.02
    as one row of 8); undilated layers keep row tiles."""
    cand = REGISTRY.get("conv2d.depthwise_nchwc")
    dilated = cand.default_config(blocked_wl(1, 32, 19, 13, 32, 3, pad=4, dil=4, groups=32), cpu_target)
    plain = cand.default_config(blocked_wl(1, 32, 19, 41, 32, 3, pad=1, groups=32), cpu_target)
    assert (dilated.rows, dilated.reg_n) == (4, 4) and plain.rows == 1, (dilated, plain)


# (kind, C, H, W, K, stride, pad, ceil_mode): odd planes, more threads' worth of rows than blocks
POOLS = [("max", 32, 13, 11, 3, 2, 1, False), ("avg", 16, 9, 7, 2, 2, 0, False), ("max", 48, 27, 27, 3, 2, 0, True),
         ("avg", 16, 15, 17, 3, 1, 1, False), ("max", 32, 21, 21, 3, 2, 0, False)]


def _blocked_pool(case, ln):
    kind, C, H, W, k, s, p, ceil = case
    out_hw = [-(-(n + 2 * p - k) // s) + 1 if ceil else (n + 2 * p - k) // s + 1 for n in (H, W)]
    attrs = {"kind": kind, "pool_size": (k, k), "strides": (s, s), "padding": (p,) * 4, "dilation": (1, 1),
             "ceil_mode": ceil, "count_include_pad": False, "layout": f"NCHW{ln}c",
             "out_shape": (1, C // ln, *out_hw, ln)}
    return Workload("pool2d", [(1, C // ln, H, W, ln)], ["float32"], "float32", attrs=attrs)


@pytest.mark.parametrize("case", POOLS, ids=lambda c: "{}c{}h{}w{}k{}s{}p{}ceil{}".format(*c))
def test_pool2d_nchwc_both_orders_match_numpy(cpu_target, case):
    kind, C, H, W, k, s, p, ceil = case
    wl = _blocked_pool(case, lanes(cpu_target))
    cand = REGISTRY.get("pool2d.nchwc")
    assert cand.applies(wl, cpu_target), cand.applies(wl, cpu_target).reason
    ref_fn, tol = REFERENCES["pool2d"]
    xs = random_inputs(wl, seed=C + H)
    want = np.asarray(ref_fn(wl, xs), "float64")
    rtol, atol = tol(wl)
    for cfg in _both_orders(cand.default_config(wl, cpu_target)) + cand.space(wl, cpu_target)[::6]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out.astype("float64"), want.reshape(out.shape), rtol=rtol, atol=atol, what=f"{case} {cfg}")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("pad", [0, 1])
def test_pool2d_nchwc_reads_in_place(cpu_target, kind, pad):
    """No pad stage when the windows lie inside the image, and for a padded max pool (taps clamped
    into the image); a padded average pool and a dilated max pool keep it. +-inf and NaN at the
    borders still come out as PyTorch's."""
    from ext.strategies.pool import geom
    from ext.topi_kernels.conv2d_blocked import reads_inside

    ln = lanes(cpu_target)
    cand = REGISTRY.get("pool2d.nchwc")
    wl = _blocked_pool((kind, 32, 21, 21, 3, 2, pad, False), ln)
    cfg = cand.default_config(wl, cpu_target)
    assert reads_inside(geom(wl), cfg.reg_n, cfg.rows) is (pad == 0)
    has_pad_stage = '("P")' in cand.build(wl, cfg, cpu_target).script()
    assert has_pad_stage is (kind == "avg" and pad == 1)
    if kind == "max":
        dilated = Workload("pool2d", wl.shapes, wl.dtypes, wl.out_dtype,
                           attrs={**dict(wl.attrs), "dilation": (2, 2), "out_shape": (1, 32 // ln, 9, 9, ln)})
        assert '("P")' in cand.build(dilated, cand.default_config(dilated, cpu_target), cpu_target).script()
    x = np.random.default_rng(5).normal(size=(1, 32, 21, 21)).astype("float32")
    x[0, 3, 4, 5], x[0, 17, 0, 0], x[0, 30, 20, 20], x[0, 9, 0, 20] = np.nan, np.inf, -np.inf, np.nan
    x[0, 21, :, :] = -np.inf  # a plane of -inf: every window of it, border ones too, stays -inf
    xb = x.reshape(1, 32 // ln, ln, 21, 21).transpose(0, 1, 3, 4, 2).copy()
    pool = torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d
    kw = {} if kind == "max" else {"count_include_pad": False}
    want = pool(torch.from_numpy(x), 3, 2, pad, **kw).numpy()
    out = CompiledCandidate(cand, wl, cfg, cpu_target).run([xb])
    got = out.transpose(0, 1, 4, 2, 3).reshape(want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_blocked_candidates_decline_with_reasons(cpu_target):
    dw = REGISTRY.get("conv2d.depthwise_nchwc")
    assert "layout" in dw.applies(blocked_wl(1, 16, 8, 8, 16, 3, groups=16, b_in=0, b_out=0), cpu_target).reason
    mult2 = blocked_wl(1, 16, 8, 8, 32, 3, groups=16)
    assert "multiplier 1" in dw.applies(mult2, cpu_target).reason
    grouped = blocked_wl(1, 32, 8, 8, 32, 3, groups=4)  # 8-channel groups: no whole blocks
    assert "per group" in REGISTRY.get("conv2d.direct_nchwc").applies(grouped, cpu_target).reason
    mixed = blocked_wl(1, 32, 8, 8, 32, 3, b_in=0, b_out=16)
    for name in ("conv2d.conv1x1", "conv2d.im2col", "conv2d.depthwise"):
        assert not REGISTRY.get(name).applies(mixed, cpu_target), name
    assert not REGISTRY.get("conv2d.direct_nchwc_dyn").applies(mixed, cpu_target)


# -- the pass, on models ------------------------------------------------------------------------------

class _Inverted(torch.nn.Module):
    """MobileNetV2-style: expand 1x1 -> ReLU6 -> depthwise 3x3 -> ReLU6 -> project 1x1 (+ input),
    then a squeeze-and-excitation gate and a hardswish, twice over."""

    def __init__(self, c=32, e=96):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, c, 3, 2, 1)
        self.blocks = nn.ModuleList([nn.Sequential(
            nn.Conv2d(c, e, 1), nn.ReLU6(), nn.Conv2d(e, e, 3, 1, 1, groups=e), nn.ReLU6(), nn.Conv2d(e, c, 1))
            for _ in range(2)])
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, 16, 1), nn.ReLU(), nn.Conv2d(16, c, 1),
                                nn.Hardsigmoid())
        self.tail = nn.Conv2d(c, 48, 1)
        self.act = nn.Hardswish()

    def forward(self, x):
        x = self.stem(x)
        for blk in self.blocks:
            x = x + blk(x)
        x = x * self.se(x)
        return self.act(self.tail(x)).mean((2, 3))


def _build(model, x, flag: str):
    old = os.environ.get("EXT_BLOCK_CHANNELS")
    os.environ["EXT_BLOCK_CHANNELS"] = flag
    try:
        ex = ext.build(from_torch(model, (x,)), ext.target.cpu(), cache=False, verbose=False)
    finally:
        if old is None:
            os.environ.pop("EXT_BLOCK_CHANNELS")
        else:
            os.environ["EXT_BLOCK_CHANNELS"] = old
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), ext.last_report()


def _kernels(rep) -> list:
    return [(d.name, d.workload.attr("data_layout"), d.workload.attr("out_layout")) for d in rep.decisions
            if d.workload.op == "conv2d"]


@pytest.mark.parametrize("hw", [(17, 23), (9, 13)])
def test_inverted_residual_blocks_run_blocked_and_match_torch(cpu_target, hw):
    torch.manual_seed(0)
    model = _Inverted().eval()
    x = torch.randn(1, 3, *hw)
    with torch.no_grad():
        ref = model(x).numpy()
    got, rep = _build(model, x, "1")
    plain, _ = _build(model, x, "0")
    kernels = _kernels(rep)
    # (rows of whole vectors, e.g. 16x16, give the 1x1 convs to conv2d.conv1x1, which reads and writes
    # NCHW as it lies: such a region saves nothing and stays NCHW)
    assert any(k[0] == "conv2d.depthwise_nchwc" for k in kernels), kernels  # one decision per workload
    assert any(k[1] == "NCHW16c" and k[0] == "conv2d.direct_nchwc" for k in kernels), kernels
    assert not any(k[0] == "conv2d.depthwise" for k in kernels), kernels
    scale = float(np.abs(ref).max())
    assert_close(got, ref, rtol=0, atol=1e-4 * scale)
    assert_close(got, plain, rtol=0, atol=1e-5 * scale)


class _GroupedBottleneck(torch.nn.Module):
    """RegNet-X's block: 1x1 -> ReLU -> grouped 3x3 (16-channel groups) -> ReLU -> 1x1, + input."""

    def __init__(self, c=64, stride=1):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, c, 3, 2, 1)
        self.body = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, stride, 1, groups=c // 16),
                                  nn.ReLU(), nn.Conv2d(c, c, 1))

    def forward(self, x):
        x = self.stem(x)
        return torch.relu(x + self.body(x))


def test_grouped_convs_with_whole_block_groups_run_blocked(cpu_target):
    """The grouped 3x3 joins the region (RegNet-X-400MF-like model: 3.1-3.3 -> 2.4 ms, 0.89x onnxruntime)."""
    torch.manual_seed(0)
    model = _GroupedBottleneck().eval()
    x = torch.randn(1, 3, 19, 17)
    with torch.no_grad():
        ref = model(x).numpy()
    got, rep = _build(model, x, "1")
    grouped = [d for d in rep.decisions if d.workload.op == "conv2d" and d.workload.attr("groups") == 4]
    assert grouped and all(d.workload.attr("data_layout") == "NCHW16c" for d in grouped), _kernels(rep)
    assert_close(got, ref, rtol=0, atol=1e-4 * float(np.abs(ref).max()))


def _with_nan(model_class, shape, at, seed: int):
    """``(model, x, PyTorch's output, ext's with the pass)`` for an input with one NaN at ``at``."""
    torch.manual_seed(seed)
    model = model_class().eval()
    x = torch.randn(*shape)
    x[at] = float("nan")
    with torch.no_grad():
        ref = model(x).numpy()
    return model, x, ref, _build(model, x, "1")[0]


def test_nan_stays_nan_through_a_blocked_region(cpu_target):
    _, _, ref, got = _with_nan(_Inverted, (1, 3, 16, 16), (0, 1, 5, 7), seed=1)
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


class _Lone(torch.nn.Module):
    """A conv whose output feeds only a reduction over the channels, and convs with 24 channels:
    nothing to gain."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 32, 3, 1, 1)
        self.b = torch.nn.Conv2d(3, 24, 1)
        self.c = torch.nn.Conv2d(24, 24, 3, 1, 1, groups=24)

    def forward(self, x):
        return self.c(self.b(x)) + torch.relu(self.a(x)).amax(1, keepdim=True)


class _Dense(torch.nn.Module):
    """DenseNet / Inception shapes: a max-pooled stem, two dense layers (BN -> ReLU -> conv, each
    output concatenated to its input), an inception branch pair with a 3x3 max pool branch, an
    average-pooled transition (``count_include_pad`` both ways) and a ceil-mode max pool."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.dense = nn.ModuleList([nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 16, 3, 1, 1))
                                    for c in (32, 48)])
        self.b1 = nn.Conv2d(64, 32, 1)
        self.b2 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(64, 16, 1))
        self.trans = nn.Sequential(nn.Conv2d(48, 32, 3, 1, 1), nn.AvgPool2d(2, 2), nn.ReLU())
        self.pad_avg = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.tail = nn.Sequential(nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(32, 32, 3, 1, 1))
        for bn in self.modules():
            if isinstance(bn, nn.BatchNorm2d):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.dense:
            x = torch.cat([x, layer(x)], 1)
        x = torch.cat([self.b1(x), self.b2(x)], 1)
        x = self.trans(x)
        return self.tail(self.pad_avg(x) + x)


@pytest.mark.parametrize("hw", [(23, 19), (16, 16)])
def test_concat_and_pools_stay_blocked_and_match_torch(cpu_target, hw):
    torch.manual_seed(3)
    model = _Dense().eval()
    x = torch.randn(1, 3, *hw)
    with torch.no_grad():
        ref = model(x).numpy()
    got, rep = _build(model, x, "1")
    plain, _ = _build(model, x, "0")
    pools = [(d.name, d.workload.attr("layout")) for d in rep.decisions if d.workload.op == "pool2d"]
    assert pools and all(p == ("pool2d.nchwc", "NCHW16c") for p in pools), pools
    kernels = _kernels(rep)
    assert sum(k[1] == "NCHW16c" for k in kernels) >= 3, kernels  # the dense layers read the concat blocked
    scale = float(np.abs(ref).max())
    assert_close(got, ref, rtol=0, atol=1e-4 * scale)
    assert_close(got, plain, rtol=0, atol=1e-5 * scale)


def test_nan_stays_nan_through_blocked_concat_and_pools(cpu_target):
    """Every NaN of PyTorch's output is NaN in ext's, with the pass and without it alike. (ext's
    NaN set is larger: a Winograd layer spreads a NaN over its whole output tile, as any Winograd
    kernel does; the pools alone keep PyTorch's set exactly: ``test_nan_inf``.)"""
    model, x, ref, got = _with_nan(_Dense, (1, 3, 48, 40), (0, 2, 3, 4), seed=4)
    plain, _ = _build(model, x, "0")
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    assert np.isnan(got[np.isnan(ref)]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(plain))
    finite = ~np.isnan(got)
    assert_close(got[finite], ref[finite], rtol=0, atol=1e-4 * float(np.abs(ref[finite]).max()))



class _Wide1x1(torch.nn.Module):
    """MobileViTV2's first stage: a 1x1 64->128 on a 128x128 plane between blocked convs."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.a = nn.Conv2d(3, 64, 3, 1, 1)
        self.b = nn.Conv2d(64, 128, 1)
        self.c = nn.Conv2d(128, 128, 3, 1, 1, groups=128)
        self.d = nn.Conv2d(128, 64, 1)

    def forward(self, x):
        silu = torch.nn.functional.silu
        return self.d(silu(self.c(silu(self.b(silu(self.a(x)))))))


class _Narrow1x1(torch.nn.Module):
    """MobileNetV2's first block: depthwise 32 at 112x112, then 1x1 32->16 and 16->96."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 32, 3, 2, 1)
        self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32)
        self.project = nn.Conv2d(32, 16, 1)
        self.expand = nn.Conv2d(16, 96, 1)

    def forward(self, x):
        return self.expand(self.project(torch.relu(self.dw(torch.relu(self.stem(x))))))


def test_conv1x1_pick_traded_only_with_both_sides_blocked(cpu_target):
    """A ``conv2d.conv1x1`` pick goes to the blocked kernel when its estimate with both sides
    NCHW16c is lower (64->128 at 128x128: 1.37 ms conv1x1, 0.68 blocked, timed alone), and stays
    conv1x1 when the region would block only one side (32->16 at 112x112: 0.046 ms conv1x1, 0.073
    blocked in and NCHW out)."""
    torch.manual_seed(5)
    for model, x, traded in ((_Wide1x1(), torch.randn(1, 3, 128, 128), ("conv2d.direct_nchwc", "NCHW16c", None)),
                             (_Narrow1x1(), torch.randn(1, 3, 224, 224), ("conv2d.conv1x1", "NCHW", None))):
        model.eval()
        with torch.no_grad():
            ref = model(x).numpy()
        got, rep = _build(model, x, "1")
        one_by_one = [k for k, d in zip(_kernels(rep), (d for d in rep.decisions if d.workload.op == "conv2d"))
                      if d.workload.shapes[1][2:] == (1, 1) and d.workload.shapes[1][:2] in ((128, 64), (16, 32))]
        assert one_by_one == [traded], _kernels(rep)
        assert_close(got, ref, rtol=0, atol=1e-4 * float(np.abs(ref).max()))
