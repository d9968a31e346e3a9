"""Reduction candidates (sum/mean/max/min) against NumPy on the canonical (O, R, I) form, and the
Relax family on any axis set (negative axes, keepdims, size-1 axes, full reductions)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import ext
from ext.relax_passes.families.reduce import canonical
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import assert_close, run_relax
from ext.workload import Workload

NP = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
RELAX = {"sum": relax.op.sum, "mean": relax.op.mean, "max": relax.op.max, "min": relax.op.min}


def red_wl(O, R, I, kind):
    return Workload("reduce", [(O, R, I)], ["float32"], "float32", attrs={"kind": kind, "out_shape": (O, I)})


def tol(kind, R):
    # max/min are exact; float32 sums of R values in [-1, 1] (lane-wise partial sums) drift ~sqrt(R) ulp
    return dict(rtol=0, atol=0) if kind in ("max", "min") else dict(rtol=1e-5, atol=2e-6 * max(R, 16) ** 0.5 * 4)


CASES = [  # (candidate, O, R, I)
    ("reduce.inner", 1, 1, 1), ("reduce.inner", 7, 13, 1), ("reduce.inner", 512, 49, 1),
    ("reduce.inner", 3, 131, 1), ("reduce.inner", 2, 1000, 1), ("reduce.inner", 3, 2053, 1),
    ("reduce.outer", 1, 512, 49), ("reduce.outer", 3, 7, 5), ("reduce.outer", 5, 1, 17), ("reduce.outer", 2, 37, 130), ("reduce.outer", 1, 4096, 33),
    ("reduce.split", 1, 997, 1), ("reduce.split", 2, 4096, 1), ("reduce.split", 1, 64, 1),
]


@pytest.mark.parametrize("name,O,R,I", CASES)
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_candidate_matches_numpy(cpu_target, name, O, R, I, kind):
    cand, wl = REGISTRY.get(name), red_wl(O, R, I, kind)
    assert cand.applies(wl, cpu_target), cand.applies(wl, cpu_target).reason
    x = np.random.default_rng(O * R + I).uniform(-1, 1, (O, R, I)).astype("float32")
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])
    assert_close(got, NP[kind](x.astype("float64"), axis=1), **tol(kind, R), what=f"{name} {kind} {(O, R, I)}")


@pytest.mark.parametrize("name,dims", [("reduce.inner", (5, 70, 1)), ("reduce.outer", (2, 30, 100)),
                                       ("reduce.split", (1, 3000, 1))])
def test_space_points_are_correct(cpu_target, name, dims):
    cand, wl = REGISTRY.get(name), red_wl(*dims, "sum")
    x = np.random.default_rng(3).uniform(-1, 1, dims).astype("float32")
    for cfg in cand.space(wl, cpu_target):
        got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
        assert_close(got, x.astype("float64").sum(1), **tol("sum", dims[1]), what=str(cfg))


def test_canonical_form():
    assert canonical((1, 512, 7, 7), [2, 3]) == (512, 49, 1)
    assert canonical((1, 512, 7, 7), [1]) == (1, 512, 49)
    assert canonical((4096, 4096), None) == (1, 4096 * 4096, 1)
    assert canonical((2, 1, 3), [0, 1]) == (1, 2, 3)
    assert canonical((2, 3, 4), [0, 2]) is None  # split axis set: stock lowering
    assert canonical((5, 1), [1]) == (5, 1, 1)  # reducing only a size-1 axis


def test_selection_by_shape(cpu_target):
    pick = lambda *d: ext.strategies.choose(red_wl(*d, "sum"), cpu_target).name  # noqa: E731
    assert pick(512, 49, 1) == "reduce.inner"
    assert pick(1, 512, 49) == "reduce.outer"
    assert pick(1, 1 << 20, 1) == "reduce.split"
    assert "float32" in REGISTRY.get("reduce.inner").applies(
        Workload("reduce", [(2, 3, 1)], ["int32"], "int32", attrs={"kind": "sum"}), cpu_target).reason


RELAX_CASES = [  # (shape, axis, keepdims)
    ((1, 512, 7, 7), [2, 3], False), ((1, 512, 7, 7), [1], True), ((6, 9), [-1], True), ((6, 9), [0], False),
    ((6, 9), None, False), ((2, 3, 4), [0, 2], False), ((3, 1, 5), [-2], False), ((4,), [0], True),
]


@pytest.mark.parametrize("shape,axis,keepdims", RELAX_CASES)
def test_relax_reductions(cpu_target, shape, axis, keepdims):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = [bb.emit(RELAX[k](x, axis, keepdims)) for k in ("sum", "mean", "max")]
            y = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(y)
    ex = ext.build(bb.get(), cpu_target)
    n_ext = len(ext.last_report().find("reduce"))
    assert n_ext == (0 if canonical(shape, axis) is None else 3)
    data = np.random.default_rng(5).uniform(-1, 1, shape).astype("float32")
    got = run_relax(ex, data)
    ax = None if axis is None else tuple(axis)
    for kind, g in zip(("sum", "mean", "max"), got):
        want = NP[kind](data.astype("float64"), axis=ax, keepdims=keepdims)
        assert_close(g, np.asarray(want), **tol(kind, 512), what=f"{kind} {shape} {axis}")
