"""resize2d.rows (2-D linear / nearest resize, NCHW) against the stock lowering and PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.testing import assert_close, one_op_module, run_relax

CASES = [  # (input shape, output (h, w), method, coordinate mode, rounding)
    ((1, 3, 7, 9), (15, 20), "linear", "half_pixel", ""),           # odd up-scale, rows with a tail
    ((2, 5, 28, 28), (224, 224), "linear", "half_pixel", ""),       # LR-ASPP-like x8, batch 2
    ((1, 4, 13, 11), (5, 6), "linear", "half_pixel", ""),           # down-scale
    ((1, 2, 6, 7), (11, 13), "linear", "align_corners", ""),
    ((1, 3, 9, 5), (17, 33), "linear", "asymmetric", ""),
    ((1, 3, 9, 5), (1, 10), "linear", "pytorch_half_pixel", ""),
    ((1, 3, 5, 7), (20, 28), "linear", "half_pixel", ""),           # x4: phases, odd width
    ((1, 3, 6, 9), (12, 18), "linear", "pytorch_half_pixel", ""),   # x2
    ((1, 2, 4, 1), (8, 4), "linear", "asymmetric", ""),             # x4 of one column: no interior
    ((1, 6, 10, 10), (20, 20), "nearest_neighbor", "asymmetric", "floor"),  # whole up-scale: integer division
    ((1, 6, 10, 7), (23, 17), "nearest_neighbor", "asymmetric", "floor"),
    ((1, 3, 8, 9), (13, 4), "nearest_neighbor", "half_pixel", "round_prefer_ceil"),
    ((1, 3, 8, 9), (13, 4), "nearest_neighbor", "align_corners", ""),          # "": round
    ((1, 3, 8, 9), (19, 21), "nearest_neighbor", "tf_half_pixel_for_nn", "round_prefer_floor"),
    ((1, 3, 8, 9), (19, 21), "nearest_neighbor", "asymmetric", "ceil"),
    ((1, 3, 8, 9), (19, 21), "nearest_neighbor", "half_pixel", "round"),
]


def _resize_module(shape, size, method, mode, rounding):
    return one_op_module(lambda x, **kw: relax.op.image.resize2d(x, size, **kw), shape, method=method,
                         coordinate_transformation_mode=mode, rounding_method=rounding)


@pytest.mark.parametrize("shape,size,method,mode,rounding", CASES)
def test_matches_stock_lowering(cpu_target, shape, size, method, mode, rounding):
    mod = _resize_module(shape, size, method, mode, rounding)
    x = np.random.default_rng(sum(shape)).uniform(-2, 2, shape).astype("float32")
    x.flat[::37] = np.nan  # NaN (and inf) reach the same outputs as in the op's own lowering
    x.flat[5::41] = np.inf
    got = run_relax(ext.build(mod, cpu_target), x)
    assert [d.name for d in ext.last_report().find("resize2d")] == ["resize2d.rows"]
    stock = run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x)
    assert np.array_equal(np.isnan(got), np.isnan(stock))
    assert_close(got, stock, rtol=1e-5, atol=1e-5, what=f"{method}/{mode} {shape}->{size} vs stock TVM")


def test_align_corners_to_one_pixel(cpu_target):
    """``align_corners`` onto one pixel reads the first (PyTorch's choice); the stock lowering
    divides by ``out - 1`` there and fails to build."""
    mod = _resize_module((1, 2, 6, 7), (1, 1), "linear", "align_corners", "")
    x = np.random.default_rng(2).uniform(-1, 1, (1, 2, 6, 7)).astype("float32")
    assert_close(run_relax(ext.build(mod, cpu_target), x), x[:, :, :1, :1], rtol=0, atol=0)


F = torch.nn.functional


@pytest.mark.parametrize("mode,align,shape,size", [
    ("bilinear", False, (1, 5, 13, 17), (40, 31)),
    ("bilinear", True, (2, 3, 9, 8), (17, 15)),
    ("bilinear", False, (1, 4, 30, 22), (11, 9)),   # down
    ("nearest", None, (1, 4, 7, 9), (21, 27)),       # x3
    ("nearest", None, (1, 4, 7, 9), (10, 13)),
])
def test_interpolate_matches_pytorch(cpu_target, mode, align, shape, size):
    """F.interpolate imported from PyTorch takes the kernel and gives PyTorch's values."""
    class Up(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, size=size, mode=mode, align_corners=align)

    x = torch.from_numpy(np.random.default_rng(7).standard_normal(shape).astype("float32"))
    got = run_relax(ext.build(from_torch(Up().eval(), (x,)), cpu_target), x.numpy())
    assert [d.name for d in ext.last_report().find("resize2d")] == ["resize2d.rows"]
    assert_close(got, Up()(x).numpy(), rtol=1e-5, atol=2e-6, what=f"{mode} align_corners={align}")


def test_space_points_are_correct(cpu_target):
    from ext.runner import CompiledCandidate
    from ext.strategies import REGISTRY

    for size, phased in (((23, 19), False), ((22, 36), True)):  # (22, 36): a whole x2 / x4 up-scale
        mod = _resize_module((1, 3, 11, 9), size, "linear", "half_pixel", "")
        x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 11, 9)).astype("float32")
        ext.build(mod, cpu_target)
        wl = ext.last_report().find("resize2d")[0].workload
        stock = run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x)
        cand = REGISTRY.get("resize2d.rows")
        space = cand.space(wl, cpu_target)
        assert any(c.phases for c in space) == phased and cand.default_config(wl, cpu_target).phases == phased
        for cfg in space:
            got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
            assert_close(got, stock, rtol=1e-5, atol=1e-5, what=str(cfg))


@pytest.mark.parametrize("kw,why", [
    (dict(method="cubic"), "method cubic"),
    (dict(layout="NHWC"), "layout NHWC"),
])
def test_declined_cases_fall_back_with_reason(cpu_target, kw, why):
    shape = (1, 6, 7, 3) if kw.get("layout") == "NHWC" else (1, 3, 6, 7)
    mod = one_op_module(lambda x, **a: relax.op.image.resize2d(x, (9, 11), **a), shape, **kw)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    dec = ext.last_report().find("resize2d")
    assert dec[0].candidate is None and why in dec[0].alternatives[0].reason
    assert_close(got, run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method,mode,kept", [
    ("nearest_neighbor", "asymmetric", False), ("nearest_neighbor", "half_pixel", False),
    ("nearest_neighbor", "align_corners", False), ("nearest_neighbor", "tf_half_pixel_for_nn", True),
    ("linear", "half_pixel", True),  # reads its zero-weight neighbour: an inf there is NaN in PyTorch too
])
def test_nearest_resize_to_its_own_size_is_dropped(cpu_target, method, mode, kept):
    """DropIdentityResize: a nearest resize to the size it has is its input; linear ones stay."""
    from ext.relax_passes.identity_resize import DropIdentityResize

    mod = _resize_module((1, 3, 6, 7), (6, 7), method, mode, "")
    after = DropIdentityResize()(relax.transform.Normalize()(mod))
    assert ("resize2d" in after["main"].script()) == kept
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 6, 7)).astype("float32")
    x[0, 1, 2, 3], x[0, 2, 1, 1] = np.inf, np.nan
    got = run_relax(ext.build(mod, cpu_target), x)
    stock = run_relax(tvm.compile(mod, tvm.target.Target("llvm")), x)
    assert_close(got, stock, rtol=0, atol=0, what=f"{method}/{mode} vs stock")
    if not kept:
        assert_close(got, x, rtol=0, atol=0, what=f"{method}/{mode} is the input")


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False)])
def test_interpolate_to_same_size_matches_pytorch(cpu_target, mode, align):
    """Bit for bit; an inf pixel is left to nearest: PyTorch's bilinear at the same size turns the
    pixel itself into NaN, a lerp form (a + 0 * (b - a)) neither the op's lowering nor ext computes."""
    x = torch.from_numpy(np.random.default_rng(8).standard_normal((1, 4, 9, 11)).astype("float32"))
    x[0, 1, 0, 0] = float("nan")
    if mode == "nearest":
        x[0, 2, 4, 5] = float("inf")

    class Same(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, size=(9, 11), mode=mode, align_corners=align) * 2

    got = run_relax(ext.build(from_torch(Same().eval(), (x,)), cpu_target), x.numpy())
    assert_close(got, Same()(x).numpy(), rtol=0, atol=0)
