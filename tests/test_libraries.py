"""Vendor-library candidates: NumPy agreement on the matmul test shapes, declines with reasons,
the lowering (call_dps_packed + our epilogue), libraries=False, and export."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tvm
from conv2d_helpers import conv_tol, conv_wl
from conv2d_helpers import reference as conv_reference
from test_conv2d import SHAPES as CONV_SHAPES, shape_seed
from test_conv2d import _id as conv_id
from test_matmul import SHAPES, matmul_wl, reference, tol
from tvm import relax

import ext
from ext.libraries import blas, torch_ops
from ext.libraries.export import NeedsPythonError
from ext.models.gemm import dense, numpy_reference
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY, SelectionReport
from ext.testing import assert_close, run_relax
from ext.workload import Workload

CPU_LIBS = ["matmul.openblas", "matmul.onednn"]


class Force:
    """Tuning-history stand-in: pick ``name`` for every workload of its op."""

    def __init__(self, name):
        self.name = name

    def best(self, wl, target):
        return (self.name, {}, 0.0) if wl.op == REGISTRY.get(self.name).op else None


def build_forced(mod, target, name):
    rep = SelectionReport()
    ex = relax.build(mod, target, relax_pipeline=ext.pipeline(target, report=rep, history=Force(name)))
    ex.ext_report = rep
    return ex, rep


@pytest.mark.parametrize("name", CPU_LIBS)
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_library_matches_numpy(cpu_target, name, M, N, K, transpose_b):
    cand = REGISTRY.get(name)
    wl = matmul_wl(M, N, K, transpose_b=transpose_b, epilogue=("bias", "relu", "residual"))
    verdict = cand.applies(wl, cpu_target)
    if not verdict:
        pytest.skip(f"{name} declines: {verdict.reason}")
    xs = random_inputs(wl, seed=M * 7 + N)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, reference(wl, xs), **tol(K), what=f"{name} {M}x{N}x{K}")


@pytest.mark.parametrize("name", CPU_LIBS)
@pytest.mark.parametrize("epilogue", [(), ("bias",), ("bias", "gelu"), ("residual",)])
def test_library_epilogues_and_batches(cpu_target, name, epilogue):
    cand = REGISTRY.get(name)
    wl = matmul_wl(9, 21, 17, epilogue=epilogue, batch=(3,))
    xs = random_inputs(wl, seed=5)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    ref = xs[0].astype("float64") @ xs[1]
    for op, extra in zip([e for e in epilogue if e in ("bias", "residual")], xs[2:]):
        ref = ref + extra
    if "gelu" in epilogue:
        from scipy.special import erf

        ref = 0.5 * ref * (1 + erf(ref / np.sqrt(2)))
    assert_close(out, ref, rtol=1e-5, atol=1e-5, what=f"{name} {epilogue}")


@pytest.mark.parametrize("name", CPU_LIBS + ["conv2d.onednn"])
def test_every_space_point_is_correct(cpu_target, name):
    """Each thread-count knob value (the tuner and libraries="measure" may pick any)."""
    cand = REGISTRY.get(name)
    if name.startswith("conv2d"):
        wl = conv_wl(1, 5, 9, 9, 6, 3, epilogue=("bias", "relu"))
        ref_fn, tol_ = conv_reference, conv_tol(wl)
    else:
        wl = matmul_wl(11, 45, 29, epilogue=("bias", "sigmoid"))
        ref_fn, tol_ = reference, dict(rtol=1e-5, atol=1e-5)
    xs = random_inputs(wl, seed=3)
    for cfg in cand.space(wl, cpu_target):
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref_fn(wl, xs), **tol_, what=f"{name} {cfg}")


@pytest.mark.parametrize("name", CPU_LIBS)
def test_library_float64(cpu_target, name):
    cand = REGISTRY.get(name)
    wl = Workload("matmul", [(5, 3), (3, 4)], ["float64"] * 2, "float64", attrs={"out_shape": (5, 4)})
    assert cand.applies(wl, cpu_target)
    xs = random_inputs(wl, seed=2)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert out.dtype == np.float64
    assert_close(out, xs[0] @ xs[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CPU_LIBS)
@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_library_declines_unsupported_dtype(cpu_target, name, dtype):
    wl = Workload("matmul", [(8, 8), (8, 8)], [dtype] * 2, dtype, attrs={"out_shape": (8, 8)})
    verdict = REGISTRY.get(name).applies(wl, cpu_target)
    assert not verdict and dtype in verdict.reason


def test_library_declines_zero_size_and_vectors(cpu_target):
    zero = Workload("matmul", [(0, 8), (8, 4)], ["float32"] * 2, "float32", attrs={"out_shape": (0, 4)})
    vec = Workload("matmul", [(8,), (8, 4)], ["float32"] * 2, "float32", attrs={"out_shape": (4,)})
    for name in CPU_LIBS:
        assert "zero-size" in REGISTRY.get(name).applies(zero, cpu_target).reason
        assert "rank" in REGISTRY.get(name).applies(vec, cpu_target).reason


def test_cuda_libraries_decline_without_cuda_build():
    reason = torch_ops.unavailable_reason("cuda")
    if reason is None:
        pytest.skip("a CUDA-enabled PyTorch is importable here")
    wl = matmul_wl(64, 64, 64)
    verdict = REGISTRY.get("matmul.cublas").applies(wl, ext.target.cuda("sm_80"))
    assert not verdict and "CUDA" in verdict.reason
    # and on a CPU target it is not a candidate at all
    assert "serves cuda" in REGISTRY.get("matmul.cublas").applies(wl, ext.target.cpu()).reason


def test_library_absent_declines(cpu_target, monkeypatch):
    monkeypatch.setattr(blas, "unavailable_reason", lambda: "NumPy is linked against 'mkl', not OpenBLAS")
    verdict = REGISTRY.get("matmul.openblas").applies(matmul_wl(8, 8, 8), cpu_target)
    assert not verdict and "not OpenBLAS" in verdict.reason


@pytest.mark.parametrize("name", CPU_LIBS)
def test_build_calls_library_then_our_epilogue(cpu_target, name):
    mod, params = dense(33, 97, 129)
    ex, rep = build_forced(mod, cpu_target, name)
    (d,) = rep.decisions
    assert d.name == name and d.source == "log" and d.to_json()["needs_python"]
    text = ex.as_text()
    assert "ext.lib." in text, "the VM calls the packed function"
    x = np.random.default_rng(0).standard_normal((33, 129)).astype("float32")
    assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=4e-6 * 129)
    assert "needs this Python process" in rep.table() and name in rep.table()


def test_lowering_emits_call_dps_packed_and_epilogue_kernel(cpu_target):
    from ext import relax_passes as rp
    from ext.strategies import Selector

    mod, _ = dense(16, 24, 8)
    with cpu_target:
        seq = tvm.transform.Sequential([rp.Canonicalize(), rp.FuseEpilogues(),
                                        rp.LowerToCandidates(Selector(cpu_target, history=Force("matmul.openblas")),
                                                             SelectionReport())])
        text = seq(mod)["main"].script()
    assert 'R.call_dps_packed("ext.lib.openblas.matmul"' in text
    assert text.count("R.call_tir") == 1 and "epilogue" in text


def test_libraries_off_reports_our_kernels_only(cpu_target):
    mod, params = dense(256, 128, 192)
    x = np.random.default_rng(3).standard_normal((256, 192)).astype("float32")
    ex = ext.build(mod, cpu_target, libraries=False)
    assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=4e-6 * 192)
    rep = ext.last_report()
    for d in rep.decisions:
        names = {d.name} | {a.candidate for a in d.alternatives}
        assert not any(REGISTRY.get(n).library for n in names if n in REGISTRY), names
    assert "ext.lib." not in ex.as_text() and "needs this Python" not in rep.table()


def test_export_refuses_naming_the_candidate_then_works_in_a_process_with_ext(cpu_target, tmp_path):
    mod, params = dense(20, 30, 40)
    ex, _ = build_forced(mod, cpu_target, "matmul.onednn")
    with pytest.raises(NeedsPythonError, match=r"matmul\.onednn"):
        ext.export_library(ex, tmp_path / "lib.so")
    ext.export_library(ex, tmp_path / "lib.so", allow_python=True)
    x = np.random.default_rng(4).standard_normal((20, 40)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", numpy_reference(x, params))
    script = (f"import numpy as np, tvm, ext\nfrom tvm import relax\n"
              f"vm = relax.VirtualMachine(tvm.runtime.load_module({str(tmp_path / 'lib.so')!r}), tvm.cpu())\n"
              f"y = vm['main'](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r}))).numpy()\n"
              f"np.testing.assert_allclose(y, np.load({str(tmp_path / 'ref.npy')!r}), rtol=1e-5, atol=1e-4)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    # our own kernels alone export as usual
    ex2 = ext.build(mod, cpu_target, libraries=False)
    ext.export_library(ex2, tmp_path / "own.so")
    assert (tmp_path / "own.so").exists()


# -- conv2d -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", CONV_SHAPES, ids=conv_id)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_onednn_matches_numpy(cpu_target, shape, layout):
    N, C, H, W, O, K, s, p, d, g = shape
    wl = conv_wl(N, C, H, W, O, K, stride=s, pad=p, dil=d, groups=g, layout=layout,
                 epilogue=("bias", "residual", "relu"))
    cand = REGISTRY.get("conv2d.onednn")
    verdict = cand.applies(wl, cpu_target)
    if not verdict:
        pytest.skip(f"conv2d.onednn declines: {verdict.reason}")
    xs = random_inputs(wl, seed=shape_seed(shape))
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, conv_reference(wl, xs), **conv_tol(wl), what=f"conv2d.onednn {layout} {shape}")


def test_conv2d_onednn_asymmetric_padding_and_declines(cpu_target):
    cand = REGISTRY.get("conv2d.onednn")
    wl = conv_wl(1, 5, 9, 8, 7, 3, stride=2, pad=(0, 1, 2, 0), epilogue=())
    xs = random_inputs(wl, seed=9)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, conv_reference(wl, xs), **conv_tol(wl))
    nchwc = wl.with_(attrs=dict(dict(wl.attrs), data_layout="NCHW16c"))
    assert "layout" in cand.applies(nchwc, cpu_target).reason
    if torch_ops.unavailable_reason("cuda"):
        assert "CUDA" in REGISTRY.get("conv2d.cudnn").applies(wl, ext.target.cuda("sm_80")).reason


def test_conv2d_onednn_in_a_build(cpu_target):
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Conv:
        @R.function
        def main(x: R.Tensor((1, 8, 12, 12), "float32"), w: R.Tensor((16, 8, 3, 3), "float32"),
                 b: R.Tensor((1, 16, 1, 1), "float32")):
            with R.dataflow():
                y = R.nn.relu(R.add(R.nn.conv2d(x, w, padding=[1, 1, 1, 1]), b))
                R.output(y)
            return y

    rng = np.random.default_rng(6)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(1, 8, 12, 12), (16, 8, 3, 3), (1, 16, 1, 1)])
    ex, rep = build_forced(Conv, cpu_target, "conv2d.onednn")
    assert rep.decisions[0].name == "conv2d.onednn"
    wl = rep.decisions[0].workload
    assert_close(run_relax(ex, x, w, b), conv_reference(wl, [x, w, b]), **conv_tol(wl))


# -- libraries="measure" ------------------------------------------------------------------------

def test_measured_selection_times_libraries_and_caches(cpu_target, tmp_path, monkeypatch):
    from ext.libraries import measure

    monkeypatch.setenv("EXT_LIBRARY_TIMINGS", str(tmp_path / "timings.json"))
    fake = {"matmul.direct": 3e-6, "matmul.packed": 3e-6, "matmul.openblas": 1e-6, "matmul.onednn": 2e-6}
    monkeypatch.setattr(measure, "race", lambda calls, *a, **k: {n: [fake.get(n, 5e-6)] * 3 for n in calls})
    mod, params = dense(24, 40, 56)
    ex = ext.build(mod, cpu_target, libraries="measure")
    (d,) = ext.last_report().decisions
    assert (d.name, d.source) == ("matmul.openblas", "measured")
    assert d.config.threads == 1  # CPU libraries run on one thread beside TVM's pool
    assert any(a.candidate == "matmul.onednn" and "2.00x the winner" in a.reason for a in d.alternatives)
    x = np.random.default_rng(7).standard_normal((24, 56)).astype("float32")
    assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=4e-6 * 56)
    assert "matmul.openblas" in (tmp_path / "timings.json").read_text()
    # a rebuild reads the cache: nothing is timed again
    monkeypatch.setattr(measure, "race", lambda *a, **k: pytest.fail("re-measured a cached workload"))
    ext.build(mod, cpu_target, libraries="measure")
    assert ext.last_report().decisions[0].name == "matmul.openblas"


def test_measured_selection_needs_a_clear_win():
    from ext.libraries.measure import pick

    ours, lib = "matmul.packed", "matmul.openblas"
    assert pick({ours: [1.0, 1.0, 1.0], lib: [0.8, 0.8, 0.8]}, ours) == lib
    assert pick({ours: [1.0, 1.0, 1.0], lib: [0.95, 0.95, 0.95]}, ours) == ours  # within the 10% margin
    assert pick({ours: [1.0, 1.0, 0.1, 0.1, 1.0], lib: [0.5, 0.5, 2.0, 2.0, 0.5]}, ours) == lib
    assert pick({ours: [1.0, 0.1, 0.1, 0.1, 1.0], lib: [0.5, 0.5, 0.5, 0.5, 0.5]}, ours) == ours


def test_measured_selection_never_picks_a_wrong_library(cpu_target, tmp_path, monkeypatch):
    from ext.libraries import measure

    monkeypatch.setenv("EXT_LIBRARY_TIMINGS", "")
    monkeypatch.setattr(measure, "race",
                        lambda calls, *a, **k: {n: [1e-9 if n.startswith("matmul.openblas") else 1.0] for n in calls})

    @tvm.register_global_func("ext.lib.openblas.matmul", override=True)
    def wrong(a, b, transpose_b, threads, out):
        np.from_dlpack(out)[...] = 0.0

    try:
        timings = measure.LibraryTimings(cpu_target, cache_path="")
        wl = matmul_wl(16, 32, 48)
        name, _, _ = timings.best(wl, cpu_target)
        assert name != "matmul.openblas"
        assert all("differs" in v for k, v in timings.last[wl.key].items() if k.startswith("matmul.openblas"))
    finally:
        tvm.register_global_func("ext.lib.openblas.matmul", blas._matmul, override=True)
