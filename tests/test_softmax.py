"""softmax candidates against NumPy (float64 reference), stability at +-1e4, and the Relax family."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import ir as I, relax as R

import ext
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import assert_close, run_relax
from ext.workload import Workload

CANDIDATES = ["softmax.rowwise", "softmax.short"]
# (rows, n): size-1 rows and axes, primes, a tail after whole vectors, BERT's 128
SHAPES = [(1, 1), (3, 1), (7, 13), (5, 17), (4, 130), (64, 128), (2, 768), (3, 1500)]


def softmax_wl(rows, n):
    return Workload("softmax", [(rows, n)], ["float32"], "float32", attrs={"out_shape": (rows, n)})


def reference(x, axis=-1):
    x = x.astype("float64")
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


# outputs lie in [0, 1]; float32 exp/sum/normalize errors stay within a few ulp of 1
TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", CANDIDATES)
@pytest.mark.parametrize("rows,n", SHAPES)
def test_candidate_matches_numpy(cpu_target, name, rows, n):
    cand, wl = REGISTRY.get(name), softmax_wl(rows, n)
    assert cand.applies(wl, cpu_target)
    x = np.random.default_rng(rows * 31 + n).normal(0, 3, (rows, n)).astype("float32")
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])
    assert_close(got, reference(x), **TOL, what=f"{name} {rows}x{n}")


@pytest.mark.parametrize("name", CANDIDATES)
def test_max_in_the_tail(cpu_target, name):
    """The row's largest element past the last whole vector (the partitioned tail of the reductions)."""
    cand, wl = REGISTRY.get(name), softmax_wl(4, 133)
    x = np.random.default_rng(2).normal(0, 1, (4, 133)).astype("float32")
    x[:, -1] = 40.0
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])
    assert_close(got, reference(x), **TOL)


@pytest.mark.parametrize("name", CANDIDATES)
def test_finite_for_large_inputs(cpu_target, name):
    cand, wl = REGISTRY.get(name), softmax_wl(8, 64)
    x = np.random.default_rng(0).uniform(-1e4, 1e4, (8, 64)).astype("float32")
    x[0] = 1e4  # a row of equal maxima
    x[1] = -1e4
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])
    assert np.isfinite(got).all()
    assert_close(got, reference(x), **TOL)
    assert_close(got.sum(-1), np.ones(8), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", CANDIDATES)
def test_space_points_are_correct(cpu_target, name):
    cand, wl = REGISTRY.get(name), softmax_wl(9, 48)
    x = np.random.default_rng(1).normal(0, 2, (9, 48)).astype("float32")
    for cfg in cand.space(wl, cpu_target)[::3]:
        got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
        assert_close(got, reference(x), **TOL, what=str(cfg))


def test_declines_with_reasons(cpu_target):
    for cand in REGISTRY.for_op("softmax", "llvm"):
        v = cand.applies(Workload("softmax", [(4, 8)], ["float16"], "float16", attrs={"out_shape": (4, 8)}),
                         cpu_target)
        assert not v and "float32" in v.reason
    pick = ext.strategies.choose(softmax_wl(1536, 128), cpu_target)
    assert pick.name == "softmax.rowwise"
    assert ext.strategies.choose(softmax_wl(100, 5), cpu_target).name == "softmax.short"


@I.ir_module
class Attention:
    @R.function
    def main(x: R.Tensor((2, 3, 5, 40), "float32")):
        with R.dataflow():
            s = R.nn.softmax(x, axis=-1)
            t = R.nn.softmax(s, axis=1)  # not the last axis: stock lowering
            R.output(t)
        return t


def test_relax_family_flattens_rows(cpu_target):
    ex = ext.build(Attention, cpu_target)
    rep = ext.last_report()
    assert [d.name for d in rep.find("softmax")] == ["softmax.rowwise"]
    assert rep.find("softmax")[0].workload.shapes == ((30, 40),)
    x = np.random.default_rng(2).normal(0, 50, (2, 3, 5, 40)).astype("float32")
    assert_close(run_relax(ex, x), reference(reference(x, -1), 1), **TOL)
