"""End-to-end: ext.build / relax.build(relax_pipeline="ext") on small models, checked against NumPy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I, relax as R

import ext
from ext.models.gemm import dense, mlp, numpy_reference
from ext.testing import assert_close, run_relax


def chosen(report):
    return [(d.workload.op, d.name, d.source) for d in report.decisions]


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 13, 5), (64, 96, 80), (1, 257, 129), (300, 1024, 64)])
@pytest.mark.parametrize("transpose_weight", [False, True])
def test_dense_model_matches_numpy(cpu_target, M, N, K, transpose_weight):
    mod, params = dense(M, N, K, transpose_weight=transpose_weight)
    x = np.random.default_rng(0).standard_normal((M, K)).astype("float32")
    got = run_relax(ext.build(mod, cpu_target), x)
    assert_close(got, numpy_reference(x, params), rtol=1e-5, atol=4e-6 * max(K, 16))
    (d,) = ext.last_report().decisions
    # a transposed constant weight is transposed once by FoldConstant, so the kernel sees (K, N)
    assert d.workload.attr("b_const") and not d.workload.attr("transpose_b")


def test_report_names_different_candidates_for_gemm_and_gemv(cpu_target, tmp_path):
    picks = {}
    for M in (512, 1):
        mod, _ = dense(M, 256, 128)
        ext.build(mod, cpu_target, report=tmp_path / f"r{M}.json")
        data = json.loads((tmp_path / f"r{M}.json").read_text())
        (d,) = data["decisions"]
        picks[M] = d["candidate"]
        assert d["alternatives"], "every decision lists its alternatives"
        assert all(a["reason"] for a in d["alternatives"])
    assert picks == {512: "matmul.packed", 1: "matmul.gemv"}


def test_constant_weight_is_packed_at_compile_time(cpu_target):
    """The packing kernel of a constant weight is folded away: main calls one kernel."""
    mod, _ = dense(128, 256, 128)
    lowered = None

    @tvm.transform.module_pass(opt_level=0)
    def capture(m, _ctx):
        nonlocal lowered
        lowered = m
        return m

    from ext import relax_passes as rp
    from ext.strategies import SelectionReport, Selector

    with cpu_target:
        seq = tvm.transform.Sequential([rp.Canonicalize(), rp.FuseEpilogues(),
                                        rp.LowerToCandidates(Selector(cpu_target), SelectionReport()),
                                        relax.transform.FoldConstant(), capture])
        seq(mod)
    text = lowered["main"].script()
    assert text.count("R.call_tir") == 1 and "matmul_packed" in text
    assert "_in1" not in text  # the packing kernel is no longer called


def test_weight_as_parameter_is_packed_at_run_time(cpu_target):
    """A transposed weight passed at run time (a PyTorch linear): packed by its own kernel, never
    materialized as a transpose."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((96, 80), "float32"), w: R.Tensor((200, 80), "float32"), b: R.Tensor((200,), "float32")):
            with R.dataflow():
                y = R.nn.relu(R.add(R.matmul(x, R.permute_dims(w, [1, 0])), b))
                R.output(y)
            return y

    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(96, 80), (200, 80), (200,)])
    ex = ext.build(Mod, cpu_target)
    got = run_relax(ex, x, w, b)
    assert_close(got, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-4)
    assert chosen(ext.last_report()) == [("matmul", "matmul.packed", "plevel")]
    (d,) = ext.last_report().decisions
    assert d.workload.attr("transpose_b") and not d.workload.attr("b_const")
    assert "transpose" not in ex.as_text() and "permute" not in ex.as_text()


def test_nd_activation_flattened_and_batched_matmul(cpu_target):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((2, 9, 24), "float32"), w: R.Tensor((24, 40), "float32"), b: R.Tensor((40,), "float32"),
                 q: R.Tensor((3, 17, 8), "float32"), k: R.Tensor((3, 11, 8), "float32")):
            with R.dataflow():
                y = R.nn.silu(R.add(R.matmul(x, w), b))
                s = R.matmul(q, R.permute_dims(k, [0, 2, 1]))
                R.output(y, s)
            return (y, s)

    rng = np.random.default_rng(2)
    x, w, b, q, k = (rng.standard_normal(s).astype("float32")
                     for s in [(2, 9, 24), (24, 40), (40,), (3, 17, 8), (3, 11, 8)])
    y, s = run_relax(ext.build(Mod, cpu_target), x, w, b, q, k)
    z = x @ w + b
    assert_close(y, z / (1 + np.exp(-z)), rtol=1e-5, atol=1e-5)
    assert_close(s, q @ k.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    names = sorted(d.name for d in ext.last_report().decisions)
    assert names == ["matmul.batch", "matmul.packed"] or names == ["matmul.batch", "matmul.direct"]


def test_int32_matmul_falls_back_and_says_so(cpu_target, tmp_path):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((5, 7), "int32"), w: R.Tensor((7, 3), "int32")):
            with R.dataflow():
                y = R.add(R.matmul(x, w), R.const(1, "int32"))
                R.output(y)
            return y

    rng = np.random.default_rng(3)
    x, w = rng.integers(-9, 9, (5, 7)).astype("int32"), rng.integers(-9, 9, (7, 3)).astype("int32")
    got = run_relax(ext.build(Mod, cpu_target, report=tmp_path / "r.json"), x, w)
    np.testing.assert_array_equal(got, x @ w + 1)  # integers: exact
    (d,) = json.loads((tmp_path / "r.json").read_text())["decisions"]
    assert d["candidate"] == "fallback" and d["source"] == "fallback"
    assert any("float32 only" in a["reason"] for a in d["alternatives"])


def test_relax_build_with_registered_pipeline_name(cpu_target):
    mod = mlp(batch=4, sizes=(32, 16, 5))
    x = np.random.default_rng(4).standard_normal((4, 32)).astype("float32")
    a = run_relax(relax.build(mod, cpu_target, relax_pipeline="ext"), x)
    b = run_relax(relax.build(mod, cpu_target), x)  # stock default pipeline as the reference
    assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert len(ext.last_report()) == 2


def test_malformed_target_raises_value_error():
    mod, _ = dense(4, 4, 4)
    with pytest.raises(ValueError, match="not supported"):
        ext.build(mod, "llvm -mcpu=znver4")


def test_candidate_that_fails_to_build_is_skipped(cpu_target):
    """A candidate whose build raises is reported 'failed' and the next one is used."""
    import dataclasses

    from ext.strategies import REGISTRY

    packed = REGISTRY.get("matmul.packed")

    def broken(wl, cfg, target):
        raise RuntimeError("schedule rejected for this shape")

    REGISTRY.unregister("matmul.packed")
    REGISTRY.register(dataclasses.replace(packed, build=broken))
    try:
        mod, params = dense(256, 128, 64)
        x = np.random.default_rng(5).standard_normal((256, 64)).astype("float32")
        got = run_relax(ext.build(mod, cpu_target), x)
        assert_close(got, numpy_reference(x, params), rtol=1e-5, atol=1e-4)
        (d,) = ext.last_report().decisions
        assert d.name != "matmul.packed"
        failed = [a for a in d.alternatives if a.candidate == "matmul.packed"]
        assert failed and failed[0].status == "failed" and "schedule rejected" in failed[0].reason
    finally:
        REGISTRY.unregister("matmul.packed")
        REGISTRY.register(packed)
