"""Whole-model tuning (issue 18): the task scheduler spends where the estimated end-to-end gain is
largest, the cost model decides only when confident, the end-to-end check drops tuned choices that
slow the model down, and ``scripts/autotune.py`` takes any model. Fakes only: no real timing."""
from __future__ import annotations

import importlib.util
import io
import math
import os

import numpy as np
import pytest

from ext.strategies import REGISTRY
from ext.strategies.registry import Registry, config_to_dict
from ext.strategies.select import Selector
from ext.tuning.cost_model import CostModel
from ext.tuning.e2e import Comparison, check, decisions, find_slow_choices
from ext.tuning.log import TuningLog, make_record, point_key
from ext.tuning.measure import Result, Settings
from ext.tuning.scheduler import TaskScheduler
from ext.tuning.search import ProgressPrinter, task_space
from ext.tuning.tasks import Task
from ext.workload import Workload


def gemm_wl(M, N, K):
    return Workload("matmul", [(M, K), (K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=("bias", "relu"))


def fake_gflops(wl, cand, cfg):
    """A smooth landscape: packed beats direct, nb=64 and mb=4 best."""
    g = 200.0 if cand == "matmul.packed" else 120.0
    return g / (1 + 0.6 * abs(math.log2(cfg["nb"] / 64)) + 0.4 * abs(math.log2(cfg["mb"] / 4)))


class KnownTimes:
    """A measurer whose every point has a known time (``fake_gflops``); remembers what it measured."""

    remote, device = False, "fake"

    def __init__(self):
        self.settings, self.calls = Settings(), []

    def measure(self, wl, cand, cfg, target, cutoff=None):
        self.calls.append(wl.key)
        s = wl.flops / (fake_gflops(wl, cand.name, cfg) * 1e9)
        return Result("ok", s, [s], 0.0, device=self.device)

    def close(self):
        pass


@pytest.fixture
def reg():
    r = Registry()
    for name in ("matmul.direct", "matmul.packed"):
        r.register(REGISTRY.get(name))
    return r


@pytest.mark.parametrize("heavy", [0, 1])
def test_scheduler_measures_baselines_then_spends_on_the_largest_estimated_gain(tmp_path, cpu_target, reg, heavy):
    big, small = gemm_wl(253, 509, 251), gemm_wl(61, 67, 59)  # ~64 MFLOP vs ~0.5 MFLOP
    uses = (3, 1) if heavy == 0 else (3, 100_000)  # 100000 uses make the small GEMM the model's bulk
    tasks = [Task(big, uses=uses[0]), Task(small, uses=uses[1])]
    m, out = KnownTimes(), io.StringIO()
    sched = TaskScheduler(tasks, cpu_target, TuningLog(tmp_path / "t.jsonl"), m, batch=4, registry=reg, seed=3,
                          total_trials=26, model=CostModel(rounds=30), progress=ProgressPrinter(out))
    s = sched.run()
    assert s.trials == 26 and s.stopped == "26 trials measured"
    assert m.calls[:2] == [big.key, small.key]  # every task's untuned choice first
    for st in sched.states:  # the baselines are exactly the untuned choices
        d = Selector(cpu_target, registry=reg).choose(st.task.workload)
        assert st.default_key == point_key(st.task.workload.key, d.name, config_to_dict(d.config))
        assert st.default_seconds is not None
    weighty = (big, small)[heavy].key
    assert m.calls[2] == weighty  # the first round goes to the larger uses x time
    assert m.calls.count(weighty) >= 4 * (26 - m.calls.count(weighty))
    tuned, untuned, missing = sched.estimated_latency()
    assert missing == 0 and tuned <= untuned
    assert s.estimate["tuned_s"] == pytest.approx(tuned) and "estimated model latency" in s.table()
    text = out.getvalue()
    assert "baselines measured: estimated model latency" in text and f"round {len(sched.rounds)} on task" in text


def test_scheduler_resumes_without_measuring_anything_twice(tmp_path, cpu_target, reg):
    tasks = [Task(gemm_wl(253, 509, 251)), Task(gemm_wl(61, 67, 59), uses=2)]
    log = TuningLog(tmp_path / "t.jsonl")
    s1 = TaskScheduler(tasks, cpu_target, log, KnownTimes(), batch=3, registry=reg, total_trials=7).run()
    m2 = KnownTimes()
    s2 = TaskScheduler(tasks, cpu_target, TuningLog(log.path), m2, batch=3, registry=reg, total_trials=5).run()
    keys = [r.key for r in TuningLog(log.path).records()]
    assert s1.trials == 7 and s2.trials == len(m2.calls) == 5 and len(keys) == len(set(keys)) == 12
    assert sum(t["resumed"] for t in s2.tasks) == 7 and all(t["default_seconds"] for t in s2.tasks)


def test_scheduler_moves_on_from_a_task_that_stopped_improving(tmp_path, cpu_target, reg):
    a, b = gemm_wl(253, 509, 251), gemm_wl(251, 503, 241)  # similar weight: gains decide
    sched = TaskScheduler([Task(a), Task(b)], cpu_target, TuningLog(tmp_path / "t.jsonl"), KnownTimes(), batch=4,
                          registry=reg, total_trials=18, model=CostModel(rounds=30))
    sched.run()
    assert all(i.rounds >= 1 for i in sched.info.values())  # neither task got every round
    st = sched.states[0]
    info = sched.info[st.index]
    info.idle_rounds = 5
    assert sched.expected_gain(st) >= sched.prior_gain * 0.5 ** 6  # decays, never zero
    sched.model, sched.rounds = CostModel(), sched.rounds + [(0, 0.0)]  # no model view: recent history only
    info.history, info.rounds = [1e-3, 1e-3, 0.8e-3], 2  # the last round cut its best by 20%
    assert sched.expected_gain(st) == pytest.approx(0.1)  # 20% over the window of 2 rounds
    base = sched.score(st)
    st.task.uses *= 10
    assert sched.score(st) == pytest.approx(10 * base)  # gain per second scales with uses x time
    with pytest.raises(ValueError, match="prior_gain"):
        TaskScheduler([], cpu_target, TuningLog(tmp_path / "u.jsonl"), KnownTimes(), prior_gain=0)


class FakeModel:
    """Predicts the untuned choice at 1.0 and every other point at ``1 / (1 + gain)``."""

    def __init__(self, gain, margin, default):
        self.gain, self.margin, self.default = gain, margin, default

    def predict(self, wl, target, points):
        return [1.0 if (c.name, config_to_dict(cfg)) == self.default else 1 / (1 + self.gain) for c, cfg in points]


def test_model_pick_is_refused_unless_the_gain_beats_its_held_out_error(cpu_target):
    wl = gemm_wl(97, 131, 67)
    plain = Selector(cpu_target).choose(wl)
    default = (plain.name, config_to_dict(plain.config))
    d = Selector(cpu_target, model=FakeModel(0.05, 0.18, default)).choose(wl)
    assert d.source != "model" and (d.name, config_to_dict(d.config)) == default
    (note,) = [a for a in d.alternatives if a.candidate == "cost model"]
    assert note.status == "declined" and "not confident: predicted gain 5% < margin 18%" in note.reason
    d = Selector(cpu_target, model=FakeModel(0.40, 0.18, default)).choose(wl)
    assert d.source == "model" and "40% faster than the default" in d.reason and "18%" in d.reason
    assert (d.name, config_to_dict(d.config)) != default
    assert all(a.candidate != "cost model" for a in d.alternatives)


class FavoursIm2col:
    """A confident model (margin 10%) predicting the GEMM-form conv kernels (NCHW, never blocked)
    10x faster than anything else."""

    margin = 0.10
    favoured = ("conv2d.im2col", "conv2d.pointwise")

    def predict(self, wl, target, points):
        return [0.1 if c.name in self.favoured else 1.0 for c, _ in points]


def test_layout_plan_ignores_the_cost_model(cpu_target):
    """The blocked-layout plan is the graph the tuner measured: a confident model's picks for the
    plan's NCHW probes (workloads nobody measured) must not change it (a tuned ResNet-18 ran 1.19x
    the untuned time with its stride-2 convs left NCHW for an unmeasured im2col kernel)."""
    import tvm

    from ext.frontend import from_torch
    from ext.relax_passes.block_channels import BlockChannels

    class Recording(Selector):
        asked: list = []

        def choose(self, wl, failed=None):
            Recording.asked.append(wl)
            return super().choose(wl, failed)

    import torch

    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1),
                        nn.ReLU(), nn.Conv2d(32, 64, 1, stride=2), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1)).eval()
    mod = from_torch(net, (torch.randn(1, 16, 28, 28),))
    model = FavoursIm2col()
    with cpu_target:
        plain = BlockChannels(cpu_target, Selector(cpu_target))(mod)
        modeled = BlockChannels(cpu_target, Recording(cpu_target, model=model))(mod)
    tvm.ir.assert_structural_equal(plain, modeled)
    assert "NCHW8c" in plain.script() or "NCHW16c" in plain.script()  # a plan was made
    # the model would have decided the plan's conv probes: the plan had a pick to ignore
    assert Recording.asked and any(Selector(cpu_target, model=model).choose(wl).name in model.favoured
                                   for wl in Recording.asked)


def synthetic(target, shapes, reg):
    recs = []
    for M, N, K in shapes:
        wl = gemm_wl(M, N, K)
        for p in task_space(wl, target, reg)[::3]:
            s = wl.flops / (fake_gflops(wl, p.cand.name, p.cfg) * 1e9)
            recs.append(make_record(wl, target, p.cand, p.cfg, Result("ok", s, [s], 0.0)))
    return recs


def test_cost_model_reports_its_held_out_error(tmp_path, cpu_target, reg):
    one = CostModel(rounds=30).fit(synthetic(cpu_target, [(64, 96, 80)], reg), cpu_target)
    assert one.trained and one.error == math.inf and one.margin == math.inf  # nothing to hold out
    wl = gemm_wl(97, 131, 67)
    d = Selector(cpu_target, model=one).choose(wl)
    assert d.source != "model" and any("no held-out error" in a.reason for a in d.alternatives)
    many = CostModel(rounds=30).fit(synthetic(cpu_target, [(64, 96, 80), (128, 64, 96), (33, 257, 65),
                                                            (200, 100, 50)], reg), cpu_target)
    assert 0 < many.error < 1.0 and many.n_heldout > 10 and many.margin == pytest.approx(math.exp(many.error) - 1)
    many.save(tmp_path / "m.json")
    assert CostModel.load(tmp_path / "m.json").error == many.error
    assert CostModel(rounds=30).fit(synthetic(cpu_target, [(64, 96, 80), (128, 64, 96)], reg), cpu_target,
                                    validate=False).error == math.inf


# -- the end-to-end check ------------------------------------------------------------------------------

def fake_compare(factors: dict, noise=(1.0, 1.004, 0.996, 1.002, 0.998)):
    """Model time = product of the factors of the tuned tasks (untuned: 10 ms), a little noise per round."""
    def compare(keys):
        r = math.prod(factors[k] for k in keys)
        return Comparison([1e-2 * r * n for n in noise], [1e-2] * len(noise))
    return compare


def test_bisection_finds_the_choice_that_slows_the_model():
    f = {"a": 0.9, "b": 1.3, "c": 0.97, "d": 1.0, "e": 0.95}
    dropped, whole, final, n = find_slow_choices(list(f), fake_compare(f))
    assert set(dropped) == {"b"} and "1.300x the untuned time" in dropped["b"]
    assert whole.ratio > 1.02 and final.ratio < 1 and n <= 2 * len(f)
    fine = {"a": 0.9, "b": 1.05}  # slower alone, outweighed by the other: the model is faster, nothing dropped
    assert find_slow_choices(list(fine), fake_compare(fine))[0] == {}
    noisy = {"a": 1.01}  # within the 2% tolerance
    assert find_slow_choices(["a"], fake_compare(noisy))[0] == {}


def test_a_noisy_machine_keeps_no_choice_measured_slower():
    """Rounds spread 0.9-1.4 (a slow spell): bisection's noise tolerance is large, but choices whose
    model runs 1.08x at the median are not kept: the build falls back to the untuned one."""
    f = {"a": 1.04, "b": 1.04}
    spread = (0.9, 1.1, 1.0, 1.4, 0.95, 1.3, 1.05)
    assert fake_compare(f, spread)(frozenset(f)).tol() > 0.08  # bisection alone would call it noise
    dropped, whole, final, _ = find_slow_choices(list(f), fake_compare(f, spread))
    assert whole.ratio > 1.02 and set(dropped) == {"a", "b"} and final is None
    faster = {"a": 0.9, "b": 1.0}
    assert find_slow_choices(list(faster), fake_compare(faster, spread))[0] == {}


def test_end_to_end_check_drops_a_slow_choice_and_the_build_uses_the_default(tmp_path, cpu_target):
    from ext.tuning.history import History

    shapes = [(37, 48, 29), (53, 64, 31), (61, 80, 47)]
    tasks = [Task(gemm_wl(*s)) for s in shapes]
    log = TuningLog(tmp_path / "t.jsonl")
    for t in tasks:  # the untuned choice at 1 ms, two faster configurations of the same candidate
        wl = t.workload
        base = Selector(cpu_target).choose(wl)
        log.append(make_record(wl, cpu_target, base.candidate, config_to_dict(base.config),
                               Result("ok", 1e-3, [1e-3], 0.0)))
        others = [p for p in task_space(wl, cpu_target) if p.cand is base.candidate
                  and p.cfg != config_to_dict(base.config)]
        for p, s in zip(others[:2], (5e-4, 7e-4)):
            log.append(make_record(wl, cpu_target, p.cand, p.cfg, Result("ok", s, [s], 0.0)))
    slow = tasks[1].workload.key
    res = check(None, cpu_target, log.path, tasks=tasks,
                compare=fake_compare({tasks[0].workload.key: 0.9, slow: 1.25, tasks[2].workload.key: 0.95}))
    assert res.changed == [t.workload.key for t in tasks] and set(res.dropped) == {slow}
    assert res.ratio < 1 and res.before_ratio > 1.02 and "dropped 1 of 3" in res.summary
    recs = TuningLog(log.path).records()
    dropped = [r for r in recs if r.status == "dropped"]
    assert len(dropped) == 2 and {r.workload for r in dropped} == {slow} and "end-to-end check" in dropped[0].error
    hist = History(recs)
    assert {r.workload for r in recs if r.status == "ok"} == {t.workload.key for t in tasks}
    tuned, untuned = decisions(tasks, cpu_target, log.path)
    assert tuned[slow].source == "log" and tuned[slow].cost == pytest.approx(1e-3)  # the baseline record
    assert config_to_dict(tuned[slow].config) == config_to_dict(untuned[slow].config)
    assert hist.best(tasks[0].workload, cpu_target)[2] == pytest.approx(5e-4)  # the others keep their best
    again = check(None, cpu_target, log.path, tasks=tasks, compare=fake_compare(
        {tasks[0].workload.key: 0.9, tasks[2].workload.key: 0.95}))
    assert again.dropped == {} and again.changed == [tasks[0].workload.key, tasks[2].workload.key]


# -- the script ----------------------------------------------------------------------------------------

def autotune_script():
    path = os.path.join(os.path.dirname(__file__), "..", "scripts", "autotune.py")
    spec = importlib.util.spec_from_file_location("autotune_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((13, 7)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal((7,)).astype("float32"), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 13])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_cli_accepts_an_onnx_path_and_a_saved_export(tmp_path, capsys):
    script = autotune_script()
    onnx_path = str(tmp_path / "tiny.onnx")
    tiny_onnx(onnx_path)
    assert script.main(["--model", onnx_path, "--dry-run", "--log", str(tmp_path / "t.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "1 tasks" in out and "matmul" in out and "budget" in out
    with pytest.raises(SystemExit, match="no such model"):
        script.main(["--model", str(tmp_path / "missing.onnx"), "--dry-run"])
    with pytest.raises(SystemExit, match="unknown model 'resnet17'"):
        script.main(["--model", "resnet17", "--dry-run"])

    import torch

    lin = torch.nn.Sequential(torch.nn.Linear(11, 6), torch.nn.ReLU()).eval()
    pt2 = str(tmp_path / "tiny.pt2")
    torch.export.save(torch.export.export(lin, (torch.randn(3, 11),)), pt2)
    assert script.main(["--model", pt2, "--dry-run"]) == 0
    assert "1 tasks" in capsys.readouterr().out


def test_pinned_builds_use_the_tuned_choice_only_where_asked(tmp_path, cpu_target):
    import ext
    from ext.models.gemm import dense
    from ext.tuning.e2e import ModelTimer, model_inputs
    from ext.tuning.tasks import extract_tasks

    mod, _ = dense(37, 53, 29)
    (task,) = extract_tasks(mod, cpu_target)
    wl = task.workload
    base = Selector(cpu_target).choose(wl)
    other = next(p for p in task_space(wl, cpu_target)
                 if p.cand is base.candidate and p.cfg != config_to_dict(base.config))
    log = TuningLog(tmp_path / "t.jsonl")
    log.append(make_record(wl, cpu_target, other.cand, other.cfg, Result("ok", 1e-6, [1e-6], 0.0)))
    tuned, untuned = decisions([task], cpu_target, log.path)
    assert not (tuned[wl.key].name == untuned[wl.key].name and tuned[wl.key].config == untuned[wl.key].config)
    timer = ModelTimer(mod, cpu_target, tuned, model_inputs(mod), rounds=1, min_seconds=1e-4, settle=0.0)
    got = timer.run(frozenset({wl.key})).numpy()
    (d,) = ext.last_report().find("matmul")
    assert d.source == "log" and config_to_dict(d.config) == other.cfg
    want = timer.run(frozenset()).numpy()
    (d,) = ext.last_report().find("matmul")
    assert d.source != "log" and config_to_dict(d.config) == config_to_dict(base.config)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    c = timer.compare(frozenset({wl.key}))
    assert len(c.tuned) == len(c.untuned) == 1 and c.ratio > 0
    lines = []  # the whole check on real builds (its verdict depends on timing: only its shape is checked)
    res = check(mod, cpu_target, log.path, tasks=[task], rounds=3, min_seconds=1e-3, say=lines.append)
    assert res.changed == [wl.key] and res.comparisons >= 1 and lines[-1] == res.summary
    assert (res.ratio is not None and res.max_abs_diff < 1e-4) or set(res.dropped) == {wl.key}
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    x = relax.Var("x", R.Tensor((tvm.tirx.Var("n", "int64"), 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(relax.op.nn.relu(x))
    with pytest.raises(ValueError, match="input 'x' has no static shape"):
        model_inputs(bb.get())
