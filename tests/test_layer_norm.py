"""layer_norm candidates against a float64 NumPy reference; the layer_norm + dropout pair as one kernel."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import ir as I, relax as R

import ext
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import assert_close, run_relax
from ext.workload import Workload

SHAPES = [(1, 1), (3, 7), (5, 17), (4, 130), (16, 768), (2, 64)]


def ln_wl(rows, n, *, dropout=None, center=True, scale=True, eps=1e-5):
    attrs = {"eps": eps, "center": center, "scale": scale, "out_shape": (rows, n)}
    if dropout is not None:
        attrs["dropout"] = dropout
    return Workload("layer_norm", [(rows, n), (n,), (n,)], ["float32"] * 3, "float32", attrs=attrs)


def reference(x, g, b, *, eps=1e-5, center=True, scale=True, axes=(-1,)):
    x = x.astype("float64")
    m = x.mean(axes, keepdims=True)
    v = x.var(axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    return y * (g if scale else 1) + (b if center else 0)


def inputs(rows, n, mean=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(mean, 2.0, (rows, n)).astype("float32"), rng.normal(1, 0.5, n).astype("float32"),
            rng.normal(0, 0.5, n).astype("float32")]


# outputs are O(1..5); float32 statistics over n <= 768 elements: ~1e-6 relative
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,dropout", [("layer_norm.fused", None), ("layer_norm.dropout", 0.1)])
@pytest.mark.parametrize("rows,n", SHAPES)
def test_candidate_matches_numpy(cpu_target, name, dropout, rows, n):
    cand, wl = REGISTRY.get(name), ln_wl(rows, n, dropout=dropout)
    assert cand.applies(wl, cpu_target)
    xs = inputs(rows, n, seed=rows + n)
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(got, reference(*xs), **TOL, what=f"{name} {rows}x{n}")


@pytest.mark.parametrize("center,scale", [(False, True), (True, False), (False, False)])
def test_center_scale_flags(cpu_target, center, scale):
    cand, wl = REGISTRY.get("layer_norm.fused"), ln_wl(6, 48, center=center, scale=scale, eps=1e-3)
    xs = inputs(6, 48, seed=4)
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(got, reference(*xs, eps=1e-3, center=center, scale=scale), **TOL)


def test_large_mean_small_spread(cpu_target):
    """The shifted sums keep precision where sum/sum-of-squares would cancel (mean 1e4, std 2)."""
    cand, wl = REGISTRY.get("layer_norm.fused"), ln_wl(8, 768)
    xs = inputs(8, 768, mean=1e4, seed=5)
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    # x itself is float32 at 1e4 (ulp 1e-3): a relative 1e-3/2 input quantization bounds the match
    assert_close(got, reference(*xs), rtol=1e-4, atol=1e-4)


def test_space_points_are_correct(cpu_target):
    cand, wl = REGISTRY.get("layer_norm.fused"), ln_wl(9, 80)
    xs = inputs(9, 80, seed=6)
    for cfg in cand.space(wl, cpu_target):
        got = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(got, reference(*xs), **TOL, what=str(cfg))


def test_declines_with_reasons(cpu_target):
    fused, pair = REGISTRY.get("layer_norm.fused"), REGISTRY.get("layer_norm.dropout")
    assert "dropout" in fused.applies(ln_wl(4, 8, dropout=0.1), cpu_target).reason
    assert "no dropout" in pair.applies(ln_wl(4, 8), cpu_target).reason
    bad = Workload("layer_norm", [(4, 8), (4,), (8,)], ["float32"] * 3, "float32", attrs={"out_shape": (4, 8)})
    assert "gamma/beta" in fused.applies(bad, cpu_target).reason


@I.ir_module
class Block:
    @R.function
    def main(x: R.Tensor((2, 8, 96), "float32"), g: R.Tensor((96,), "float32"), b: R.Tensor((96,), "float32")):
        with R.dataflow():
            d = R.nn.dropout(R.nn.layer_norm(x, g, b, axes=[-1], epsilon=1e-6), 0.1)
            y = d[0]
            z = R.nn.layer_norm(y, g, b, axes=[-1])
            R.output(z)
        return z


def _kernels(mod) -> list[str]:
    return [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def test_layer_norm_dropout_is_one_kernel(cpu_target):
    ex = ext.build(Block, cpu_target)
    rep = ext.last_report()
    assert [d.name for d in rep.find("layer_norm")] == ["layer_norm.dropout", "layer_norm.fused"]
    assert rep.find("layer_norm")[0].workload.attr("dropout") == pytest.approx(0.1)
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(Block)
    # the pair and the second layer_norm; no dropout copy, no mask (reshapes are views at run time)
    kernels = [k for k in _kernels(lowered) if "reshape" not in k]
    assert sorted(kernels) == ["layer_norm_dropout", "layer_norm_fused"], kernels
    x, g, b = inputs(16, 96, seed=7)
    x = x.reshape(2, 8, 96)
    want = reference(reference(x, g, b, eps=1e-6), g, b)
    assert_close(run_relax(ex, x, g, b), want, **TOL)


def test_multi_axis_layer_norm_is_flattened(cpu_target):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((3, 4, 5), "float32"), g: R.Tensor((4, 5), "float32"), b: R.Tensor((4, 5), "float32")):
            with R.dataflow():
                y = R.nn.layer_norm(x, g, b, axes=[-2, -1])
                R.output(y)
            return y

    ex = ext.build(Mod, cpu_target)
    assert ext.last_report().find("layer_norm")[0].workload.shapes[0] == (3, 20)
    rng = np.random.default_rng(8)
    x, g, b = (rng.normal(size=s).astype("float32") for s in [(3, 4, 5), (4, 5), (4, 5)])
    assert_close(run_relax(ex, x, g, b), reference(x, g, b, axes=(-2, -1)), **TOL)


def test_dropout_mask_still_available(cpu_target):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((4, 32), "float32"), g: R.Tensor((32,), "float32"), b: R.Tensor((32,), "float32")):
            with R.dataflow():
                d = R.nn.dropout(R.nn.layer_norm(x, g, b, axes=[-1]), 0.5)
                y = R.add(d[0], d[1])  # inference mask: ones
                R.output(y)
            return y

    ex = ext.build(Mod, cpu_target)
    assert ext.last_report().find("layer_norm")[0].name == "layer_norm.dropout"
    x, g, b = inputs(4, 32, seed=9)
    assert_close(run_relax(ex, x, g, b), reference(x, g, b) + 1.0, **TOL)


def _group_norm_module(shape, groups):
    from tvm import relax

    c = shape[1]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    g, b = relax.Var("g", relax.TensorType((c,), "float32")), relax.Var("b", relax.TensorType((c,), "float32"))
    with bb.function("main", [x, g, b]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(relax.op.nn.group_norm(x, g, b, groups, 1, list(range(2, len(shape))))))
        bb.emit_func_output(y)
    return bb.get()


def group_norm_reference(x, g, b, groups, eps=1e-5):
    n, c = x.shape[:2]
    xr = x.astype("float64").reshape(n, groups, -1)
    y = (xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + eps)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * g.reshape(bshape) + b.reshape(bshape)


@pytest.mark.parametrize("shape,groups", [((1, 16, 9, 9), 1), ((2, 12, 7, 5), 3), ((1, 32, 13, 11), 8),
                                          ((3, 6, 1, 1), 6), ((2, 10, 17), 5)])
def test_group_norm_is_a_row_kernel(cpu_target, shape, groups):
    """Group norm: rows of whole groups with a per-channel affine, against float64 NumPy; NaN stays in its group."""
    ex = ext.build(_group_norm_module(shape, groups), cpu_target)
    assert [d.name for d in ext.last_report().find("layer_norm")] == ["layer_norm.fused"]
    rng = np.random.default_rng(sum(shape) + groups)
    x = (rng.normal(size=shape) * 3 + 2).astype("float32")
    g, b = (rng.normal(size=shape[1]).astype("float32") for _ in range(2))
    x[0, 0].flat[0] = np.nan
    got, want = run_relax(ex, x, g, b), group_norm_reference(x, g, b, groups)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert_close(got[ok], want[ok], rtol=1e-4, atol=1e-4)
