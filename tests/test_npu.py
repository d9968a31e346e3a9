"""The simulated systolic-array NPU: the ISA against NumPy, the simulator's cycle counts, GEMM
and conv kernels on odd shapes in both dataflows, the target row, a model built for the npu
target against the CPU build, and the report of where each op ran."""
from __future__ import annotations

import numpy as np
import pytest

import ext
from ext.npu import kernels
from ext.npu.isa import ComputeOS, ComputeWS, MvIn, MvOut, Preload, Tile
from ext.npu.sim import Simulator
from ext.npu.target import ArrayConfig, array_config, parse
from ext.testing import assert_close, run_relax
from ext.workload import Workload

CFG = ArrayConfig(4, 5, "auto", spad_kib=8, acc_kib=2)  # a small odd array: partial folds everywhere
FILL = CFG.rows + CFG.cols - 2


def _rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).uniform(-1, 1, shape).astype("float32")


# -- the ISA, one instruction at a time ------------------------------------------------------------

def test_mvin_copies_a_block_and_broadcasts_a_row_into_the_accumulator():
    src = _rand(7, 9)
    sim = Simulator(CFG, {"x": src})
    sim.run([MvIn("x", 2, 3, Tile(10, 3, 4, 6)), MvIn("x", 5, 1, Tile(0, 3, 5, 5), "acc", broadcast=True)])
    assert_close(sim._view(Tile(10, 3, 4, 6), "spad"), src[2:5, 3:7], what="mvin block")
    assert_close(sim._view(Tile(0, 3, 5, 5), "acc"), np.repeat(src[5:6, 1:6], 3, axis=0), what="mvin broadcast")
    assert sim.stats.dram_read_bytes == (12 + 5) * 4
    assert sim.stats.dma_cycles == -(-48 // CFG.bandwidth) + -(-20 // CFG.bandwidth)


def test_preload_and_compute_ws_against_numpy_and_their_cycles():
    a, w = _rand(6, 3), _rand(3, 5)
    sim = Simulator(CFG, {"a": a, "w": w})
    sim.run([MvIn("a", 0, 0, Tile(0, 6, 3, 3)), MvIn("w", 0, 0, Tile(32, 3, 5, 5)), Preload(Tile(32, 3, 5, 5)),
             ComputeWS(Tile(0, 6, 3, 3), Tile(0, 6, 5, 5), accumulate=False)])
    assert_close(sim._view(Tile(0, 6, 5, 5), "acc"), a @ w, rtol=1e-6, atol=1e-6, what="ws")
    assert sim.stats.compute_cycles == CFG.rows + 6 + FILL  # preload + stream + fill/drain: one fold
    sim.run([ComputeWS(Tile(0, 6, 3, 3), Tile(0, 6, 5, 5), accumulate=True)])  # same weights: stream goes on
    assert_close(sim._view(Tile(0, 6, 5, 5), "acc"), 2 * (a @ w), rtol=1e-6, atol=1e-6, what="ws accumulate")
    assert sim.stats.compute_cycles == CFG.rows + 12 + FILL and sim.stats.macs == 2 * 6 * 3 * 5


def test_compute_os_against_numpy_and_a_continued_stream_skips_the_refill():
    a, b = _rand(4, 7), _rand(7, 5)
    sim = Simulator(CFG, {"a": a, "b": b})
    out = Tile(3, 4, 5, 5)
    sim.run([MvIn("a", 0, 0, Tile(0, 4, 7, 7)), MvIn("b", 0, 0, Tile(40, 7, 5, 5)),
             ComputeOS(Tile(0, 4, 7, 7), Tile(40, 7, 5, 5), out, accumulate=False)])
    assert_close(sim._view(out, "acc"), a @ b, rtol=1e-6, atol=1e-6, what="os")
    assert sim.stats.compute_cycles == 7 + FILL
    sim.run([ComputeOS(Tile(0, 4, 3, 7), Tile(40, 3, 5, 5), out, accumulate=True)])  # 3 more k steps, same tile
    assert_close(sim._view(out, "acc"), a @ b + a[:, :3] @ b[:3], rtol=1e-6, atol=1e-6, what="os accumulate")
    assert sim.stats.compute_cycles == 7 + FILL + 3


def test_mvout_applies_relu_keeping_nan_and_writes_the_block():
    acc = np.array([[-1.0, 2.0, np.nan], [3.0, -0.0, -5.0]], "float32")
    out = np.full((3, 4), 7.0, "float32")
    sim = Simulator(CFG, {"v": acc, "out": out, "out2": out.copy()})
    sim.run([MvIn("v", 0, 0, Tile(0, 2, 3, 3), "acc"), MvOut(Tile(0, 2, 3, 3), "out", 1, 1, "relu"),
             MvOut(Tile(0, 2, 3, 3), "out2", 0, 0)])
    want = np.full((3, 4), 7.0, "float32")
    want[1:, 1:] = np.where(acc < 0, 0, acc)
    assert_close(out, want, what="relu keeps NaN")
    assert_close(sim.dram["out2"][:2, :3], acc, what="mvout")
    assert sim.stats.dram_write_bytes == 2 * 6 * 4


@pytest.mark.parametrize("program, match", [
    ([ComputeWS(Tile(0, 2, 2, 2), Tile(0, 2, 2, 2))], "no weights preloaded"),
    ([Preload(Tile(0, 5, 5, 5))], "exceeds the 4x5 array"),
    ([MvIn("x", 0, 0, Tile(CFG.spad_words - 3, 1, 4, 4))], "past the"),
    ([MvIn("x", 6, 0, Tile(0, 2, 2, 2))], "outside DRAM tensor 'x'"),
    ([MvIn("nope", 0, 0, Tile(0, 1, 1, 1))], "no DRAM tensor 'nope'"),
    ([ComputeOS(Tile(0, 2, 3, 3), Tile(8, 2, 2, 2), Tile(0, 2, 2, 2))], "do not chain"),
    (["mvin"], "not an NPU instruction"),
])
def test_bad_programs_fail_naming_the_problem(program, match):
    with pytest.raises(ValueError, match=match):
        Simulator(CFG, {"x": _rand(7, 4)}).run(program)


# -- kernels ----------------------------------------------------------------------------------------

def _tilings(M, N, K):
    """A spread of feasible tilings of both dataflows: chunked on every axis and whole."""
    pts = kernels.tilings(M, N, K, CFG)
    assert {t.dataflow for t in pts} == {"ws", "os"}
    return pts[:: max(1, len(pts) // 12)] + [pts[-1]]


@pytest.mark.parametrize("M, N, K", [(17, 23, 29), (1, 7, 3), (9, 1, 13)])
def test_gemm_matches_numpy_and_the_estimate_counts_what_the_simulator_counts(M, N, K):
    a, b, bias = _rand(M, K), _rand(K, N, seed=1), _rand(N, seed=2)
    ref = np.maximum(a.astype("float64") @ b + bias, 0)
    for t in _tilings(M, N, K):
        out, stats = kernels.gemm(a, b, CFG, t, bias, "relu")
        assert_close(out, ref, rtol=1e-5, atol=1e-5 * np.sqrt(K), what=str(t))
        est = kernels.estimate(M, N, K, CFG, t, bias=True)
        assert (stats.compute_cycles, stats.dma_cycles, stats.macs) == (est.compute_cycles, est.dma_cycles, est.macs), t
        assert stats.dram_read_bytes + stats.dram_write_bytes == est.dram_bytes


def test_fold_counts_follow_scalesim_formulas():
    """Whole-operand tiles: ws pays (m + 2R + C - 2) per weight fold, os (k + R + C - 2) per output tile."""
    big = ArrayConfig(4, 5, spad_kib=64, acc_kib=16)
    M, N, K = 17, 23, 29
    R, C = big.rows, big.cols
    folds = -(-K // R) * -(-N // C)
    ws = kernels.estimate(M, N, K, big, kernels.Tiling("ws", M, N, K))
    assert ws.compute_cycles == folds * (M + 2 * R + C - 2)
    tiles = -(-M // R) * -(-N // C)
    os_ = kernels.estimate(M, N, K, big, kernels.Tiling("os", M, N, K))
    assert os_.compute_cycles == tiles * (K + R + C - 2)
    assert 0 < ws.utilization < 1 and ws.utilization == M * N * K / (R * C * ws.compute_cycles)


def test_tiles_that_do_not_fit_are_rejected_with_the_memory_named():
    with pytest.raises(ValueError, match="accumulator"):
        list(kernels.gemm_program(100, 100, 8, CFG, kernels.Tiling("ws", 100, 100, 8)))
    with pytest.raises(ValueError, match="scratchpad"):
        list(kernels.gemm_program(40, 5, 1000, CFG, kernels.Tiling("os", 40, 5, 1000)))
    with pytest.raises(ValueError, match="float32"):
        kernels.gemm(np.ones((2, 2)), np.ones((2, 2)), CFG)


def test_best_tiling_has_the_fewest_cycles():
    ranked = kernels.ranked(17, 23, 29, CFG)
    best, est = kernels.best_tiling(17, 23, 29, CFG)
    assert est.cycles == min(e.cycles for _, e in ranked) and best == ranked[0][0]
    only_os, _ = kernels.best_tiling(17, 23, 29, CFG, dataflows=("os",))
    assert only_os.dataflow == "os"


@pytest.mark.parametrize("stride, pad, dil", [(1, (1, 1, 1, 1), 1), (2, (1, 0, 2, 1), 1), (1, (0, 0, 0, 0), 2)])
def test_conv2d_3x3_with_5_channels_matches_float64_in_both_dataflows(stride, pad, dil):
    import torch
    x, w, bias = _rand(2, 5, 11, 9), _rand(7, 5, 3, 3, seed=3), _rand(7, seed=4)
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    ref = torch.nn.functional.conv2d(torch.from_numpy(xp), torch.from_numpy(w.astype("float64")),
                                     torch.from_numpy(bias.astype("float64")), stride=stride, dilation=dil).numpy()
    g = kernels.conv_geometry(x.shape, w.shape, (stride, stride), pad, (dil, dil))
    for df in ("ws", "os"):
        t, _ = kernels.best_tiling(g["M"], g["O"], g["K"], CFG, bias=True, dataflows=(df,))
        out, stats = kernels.conv2d(x, w, CFG, (stride, stride), pad, (dil, dil), t, bias)
        assert_close(out, ref, rtol=1e-5, atol=1e-5, what=f"{df} stride {stride} pad {pad} dilation {dil}")
        assert stats.macs == g["M"] * g["O"] * g["K"]


# -- the target -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(rows=0), "rows must be a positive integer"), (dict(dataflow="is"), "dataflow must be one of"),
    (dict(cols=-3), "cols"), (dict(acc_kib=0), "acc_kib"), (dict(spad_kib=1), "cannot double-buffer"),
    (dict(rows=True), "rows"),
])
def test_bad_npu_configs_raise_naming_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ext.target.npu(**kwargs)


def test_npu_target_row_round_trips_and_names_its_array_in_the_provenance():
    from ext.target import normalize, target_kind
    from ext.tuning.log import target_info

    t = ext.target.npu(8, 32, "ws", spad_kib=128, acc_kib=32, bandwidth=16)
    assert t.kind.name == "llvm" and target_kind(t).name == "npu" and target_kind(ext.target.cpu()).name == "llvm"
    assert array_config(t) == ArrayConfig(8, 32, "ws", 128, 32, 16)
    assert target_kind(normalize(dict(t.export()))).name == "npu"
    info = target_info(t)
    assert info["kind"] == "npu" and info["npu"] == "npu:r8:c32:ws:spad128:acc32:bw16:mhz1000" and info["mcpu"]
    assert target_info(ext.target.cpu())["npu"] is None
    with pytest.raises(ValueError, match="is not 'npu:r<rows>"):
        parse("npu:16x16")
    with pytest.raises(ValueError, match="is not 'npu:r<rows>"):
        normalize({"kind": "llvm", "keys": ["npu", "cpu"], "model": "bogus"})


# -- candidates, build, report ------------------------------------------------------------------------

NPU = ext.target.npu(4, 5, spad_kib=8, acc_kib=2)


def test_candidates_choose_by_simulated_cycles_and_say_so():
    from ext.strategies import REGISTRY, choose
    from ext.strategies import npu as strat

    wl = Workload("matmul", ((17, 29), (29, 23), (23,)), ("float32",) * 3, "float32",
                  attrs={"out_shape": (17, 23)}, epilogue=("bias", "relu"))
    d = choose(wl, NPU)
    assert d.name == "matmul.npu"
    est = strat.estimate_for(wl, d.config)
    assert est.cycles == kernels.best_tiling(17, 23, 29, CFG, bias=True)[1].cycles
    rep = ext.strategies.SelectionReport()
    rep.add(d)
    assert f"npu: {est.cycles} cycles" in d.reason and d.cost == pytest.approx(est.cycles / 1e9)
    assert not REGISTRY.get("matmul.npu").applies(wl, ext.target.cpu())  # the CPU target never sees it
    half = wl.with_(dtypes=("float16",) * 3, out_dtype="float16")
    assert "float32 only" in REGISTRY.get("matmul.npu").applies(half, NPU).reason
    grouped = Workload("conv2d", ((1, 4, 9, 9), (4, 2, 3, 3)), ("float32",) * 2, "float32",
                       attrs={"groups": 2, "out_shape": (1, 4, 7, 7)})
    assert "groups=2" in REGISTRY.get("conv2d.npu").applies(grouped, NPU).reason
    space = REGISTRY.get("matmul.npu").space(wl, NPU)
    assert {c.dataflow for c in space} == {"ws", "os"} and all(c.array == CFG.model() for c in space)


def _small_model():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(5, 7, 3, padding=1), torch.nn.Conv2d(7, 6, 3, stride=2)
            self.fc = torch.nn.Linear(6 * 5 * 4, 11)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            y = torch.nn.functional.max_pool2d(self.c2(y) + 1.0, 1)
            return torch.nn.functional.gelu(self.fc(y.flatten(1)))

    torch.manual_seed(0)
    net, x = Net().eval(), torch.randn(1, 5, 11, 9)
    return net, x


def test_small_model_on_the_npu_equals_the_cpu_build_and_the_report_says_where_ops_ran():
    from ext.npu import runtime

    net, x = _small_model()
    mod = ext.frontend.from_torch(net, (x,))
    want = run_relax(ext.build(mod, ext.target.cpu(), cache=False, verbose=False), x.numpy())
    ex = ext.build(mod, NPU, cache=False, verbose=False)
    rep = ext.last_report()
    runtime.reset_counters()
    got = run_relax(ex, x.numpy())
    assert_close(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()), what="npu vs cpu build")
    assert_close(got, net(x).detach().numpy(), rtol=1e-4, atol=1e-5, what="npu vs PyTorch")
    summary = ext.npu.report(rep)
    where = {(r.op, r.where) for r in summary.rows}
    assert {("conv2d", "npu"), ("matmul", "npu")} <= where and any(w == "host" for _, w in where)
    assert all(r.candidate.endswith(".npu") for r in summary.rows if r.where == "npu")
    counted = sum(stats.cycles for _, stats in runtime.counters().values())
    assert summary.cycles == counted > 0
    text = summary.table()
    assert "npu" in text and "host" in text and f"model: {summary.cycles} simulated cycles" in text


def test_sim_measurer_measures_npu_points_in_simulated_seconds():
    from ext.strategies import REGISTRY

    wl = Workload("matmul", ((9, 13), (13, 6)), ("float32",) * 2, "float32", attrs={"out_shape": (9, 6)})
    cand = REGISTRY.get("matmul.npu")
    cfg = cand.default_config(wl, NPU)
    m = ext.npu.SimMeasurer()
    try:
        res = m.measure(wl, cand, dict(cfg.__dict__), NPU)
    finally:
        m.close()
    est = kernels.estimate(9, 6, 13, CFG, cfg.tiling)
    assert res.status == "ok" and res.seconds == pytest.approx(est.cycles / 1e9) and res.device == "npu-sim"
