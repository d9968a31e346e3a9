"""The search loop and the cost model, on a fake benchmark (no hardware timing); resuming after
infrastructure failures, tuners sharing one log, unwritable logs."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from ext.strategies import REGISTRY
from ext.strategies.registry import Registry
from ext.tuning.cost_model import CostModel, features, _hw
from ext.tuning.log import TuningLog, make_record, point_key
from ext.tuning.measure import Result, Settings
from ext.tuning.search import Tuner, task_space
from ext.tuning.tasks import Task
from ext.workload import Workload


def gemm_wl(M, N, K):
    return Workload("matmul", [(M, K), (K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=("bias", "relu"))


def fake_gflops(wl, cand, cfg):
    """A smooth synthetic landscape: packed beats direct, nb=64 & mb=4 best, 'tiles' helps small N."""
    M, N, K = wl.shapes[0][0], wl.shapes[1][1], wl.shapes[0][1]
    g = 200.0 if cand == "matmul.packed" else 120.0
    g /= 1 + 0.6 * abs(np.log2(cfg["nb"] / 64)) + 0.4 * abs(np.log2(cfg["mb"] / 4))
    panels = -(-N // cfg["nb"])
    if cfg["parallel"] == "panels" and panels < 4:
        g *= 0.6
    return g * min(1.0, M / 64)


class FakeMeasurer:
    remote, device = False, "fake"

    def __init__(self, status="ok", delay=0.0):
        self.settings, self.status, self.delay, self.calls = Settings(), status, delay, []

    def measure(self, wl, cand, cfg, target, cutoff=None):
        self.calls.append((wl.key, cand.name, dict(cfg)))
        time.sleep(self.delay)
        if self.status != "ok":
            return Result(self.status, error="fake infrastructure down", device=self.device)
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


def true_best(wl, target, reg):
    return max(fake_gflops(wl, p.cand.name, p.cfg) for p in task_space(wl, target, reg))


def test_search_finds_near_optimum_with_few_trials_and_resumes(tmp_path, cpu_target, reg):
    wl = gemm_wl(256, 512, 256)
    space = task_space(wl, cpu_target, reg)
    assert {p.cand.name for p in space} == {"matmul.direct", "matmul.packed"}
    assert len(space) > 60
    log = TuningLog(tmp_path / "t.jsonl")
    m = FakeMeasurer()
    s = Tuner([Task(wl)], cpu_target, log, m, trials=40, batch=8, registry=reg, seed=1,
              model=CostModel(min_records=8, rounds=60)).run()
    assert s.trials == 40 and len(m.calls) == 40
    first = [c[1] for c in m.calls[:2]]
    assert sorted(first) == ["matmul.direct", "matmul.packed"]  # each candidate's default first
    assert s.tasks[0]["gflops"] >= 0.9 * true_best(wl, cpu_target, reg)
    assert s.tasks[0]["default_seconds"] is not None
    # resume: nothing measured twice, the second run adds new points only
    m2 = FakeMeasurer()
    s2 = Tuner([Task(wl)], cpu_target, log, m2, trials=10, registry=reg).run()
    assert s2.tasks[0]["resumed"] == 40 and len(m2.calls) == 10
    keys = [r.key for r in log.records()]
    assert len(keys) == len(set(keys)) == 50


def test_time_budget_and_trials_per_task(tmp_path, cpu_target, reg):
    tasks = [Task(gemm_wl(64, 64, 64)), Task(gemm_wl(128, 64, 32), uses=3)]
    m = FakeMeasurer(delay=0.05)
    t0 = time.time()
    s = Tuner(tasks, cpu_target, TuningLog(tmp_path / "t.jsonl"), m, seconds=0.6, registry=reg).run()
    assert time.time() - t0 < 1.5 and s.stopped == "time budget spent"
    assert all(t["trials"] >= 1 for t in s.tasks)  # every task got its baseline first
    m = FakeMeasurer()
    s = Tuner(tasks, cpu_target, TuningLog(tmp_path / "u.jsonl"), m, trials=5, registry=reg).run()
    assert [t["trials"] for t in s.tasks] == [5, 5]


def test_infrastructure_failures_stop_tuning_and_are_not_final(tmp_path, cpu_target, reg):
    log = TuningLog(tmp_path / "t.jsonl")
    s = Tuner([Task(gemm_wl(64, 64, 64))], cpu_target, log, FakeMeasurer(status="infra"), registry=reg).run()
    assert s.trials == 3 and "infrastructure" in s.stopped
    assert [r.status for r in log.records()] == ["infra"] * 3
    assert log.measured(cpu_target) == set()


def synthetic_records(target, shapes, reg):
    recs = []
    for M, N, K in shapes:
        wl = gemm_wl(M, N, K)
        for p in task_space(wl, target, reg):
            s = wl.flops / (fake_gflops(wl, p.cand.name, p.cfg) * 1e9)
            recs.append(make_record(wl, target, p.cand, p.cfg, Result("ok", s, [s], 0.0)))
    return recs


def test_cost_model_generalizes_to_held_out_shapes_and_round_trips(tmp_path, cpu_target, reg):
    train = [(64, 64, 64), (256, 256, 256), (128, 512, 64), (512, 128, 256), (32, 256, 128)]
    model = CostModel(rounds=80).fit(synthetic_records(cpu_target, train, reg), cpu_target)
    assert model.trained
    ratios = []
    for M, N, K in [(192, 320, 96), (96, 768, 128)]:
        wl = gemm_wl(M, N, K)
        pts = task_space(wl, cpu_target, reg)
        pred = model.predict(wl, cpu_target, [(p.cand, p.cfg) for p in pts])
        chosen = pts[int(np.argmin(pred))]
        ratios.append(true_best(wl, cpu_target, reg) / fake_gflops(wl, chosen.cand.name, chosen.cfg))
    assert np.mean(ratios) <= 1.25
    path = tmp_path / "model.json"
    model.save(path)
    again = CostModel.load(path)
    wl = gemm_wl(192, 320, 96)
    pts = [(p.cand, p.cfg) for p in task_space(wl, cpu_target, reg)]
    assert again.predict(wl, cpu_target, pts) == model.predict(wl, cpu_target, pts)


def test_cost_model_options_and_untrained(cpu_target, reg):
    with pytest.raises(ValueError, match="loss"):
        CostModel(loss="mse")
    m = CostModel(min_records=1000).fit(synthetic_records(cpu_target, [(64, 64, 64)], reg), cpu_target)
    assert not m.trained
    with pytest.raises(RuntimeError, match="not trained"):
        m.predict(gemm_wl(8, 8, 8), cpu_target, [])
    rank = CostModel(loss="rank", rounds=20).fit(synthetic_records(cpu_target, [(64, 64, 64), (128, 64, 32)], reg),
                                                  cpu_target)
    assert rank.trained
    wl = gemm_wl(64, 64, 64)
    f = features(wl, "matmul.packed", {"mb": 4, "nb": 64, "parallel": "tiles"}, _hw(cpu_target), ["a", "b"])
    assert len(f) == len(features(gemm_wl(3, 5, 7), "matmul.direct", {"rows": 2, "lanes": 16}, _hw(cpu_target),
                                  ["a", "b"]))


def small_space_reg():
    r = Registry()
    r.register(REGISTRY.get("matmul.direct"))
    return r


def test_infra_records_are_measured_again_on_resume(tmp_path, cpu_target, reg):
    from tuning_fakes import FakeMeasurer

    wl = gemm_wl(37, 48, 29)
    log = TuningLog(tmp_path / "t.jsonl")
    m1 = FakeMeasurer(statuses=["infra"])  # the first point (the untuned baseline) hits a dead device
    s1 = Tuner([Task(wl)], cpu_target, log, m1, trials=3, registry=reg).run()
    assert s1.trials == 3 and [r.status for r in log.records()] == ["infra", "ok", "ok"]
    lost = m1.calls[0]
    assert lost not in log.measured(cpu_target)
    m2 = FakeMeasurer()
    s2 = Tuner([Task(wl)], cpu_target, log, m2, trials=2, registry=reg).run()
    assert m2.calls[0] == lost and s2.tasks[0]["resumed"] == 2  # measured again, first (it is the baseline)
    assert lost in log.measured(cpu_target) and len(set(m2.calls) & set(m1.calls[1:])) == 0


def test_tuners_sharing_a_log_measure_no_point_twice(tmp_path, cpu_target):
    from tuning_fakes import FakeMeasurer

    reg = small_space_reg()
    wl = gemm_wl(3, 9, 7)  # matmul.direct only: a space of a few points (9 with AVX2 or AVX-512)
    space = [p.key for p in task_space(wl, cpu_target, reg)]
    assert 4 <= len(space) <= 12
    path = tmp_path / "shared.jsonl"
    other_log, theirs = TuningLog(path), []

    def other_tuner(wl_, cand, cfg):  # while we measure, another process records one point it measured
        done = other_log.measured(cpu_target, reg) | {point_key(wl_.key, cand.name, cfg)}  # ours is in flight
        todo = [p for p in reversed(task_space(wl, cpu_target, reg)) if p.key not in done]
        if todo:
            p = todo[0]
            other_log.append(make_record(wl, cpu_target, p.cand, p.cfg, Result("ok", 1e-3, [1e-3], 0.0)))
            theirs.append(p.key)

    m1 = FakeMeasurer(hook=other_tuner)
    s1 = Tuner([Task(wl)], cpu_target, TuningLog(path), m1, batch=8, registry=reg).run()
    keys = [r.key for r in TuningLog(path).records()]
    assert len(keys) == len(set(keys)) == len(space), "a point was measured twice"
    assert set(m1.calls).isdisjoint(theirs) and len(m1.calls) + len(theirs) == len(space)
    assert s1.trials == len(m1.calls) and s1.tasks[0]["resumed"] == len(theirs)
    m2 = FakeMeasurer()  # a second (sequential) tuner on the same log: nothing left to measure
    s2 = Tuner([Task(wl)], cpu_target, TuningLog(path), m2, registry=reg).run()
    assert m2.calls == [] and s2.tasks[0]["resumed"] == len(space)


def test_unwritable_log_fails_before_measuring(tmp_path, cpu_target, reg, monkeypatch):
    from tuning_fakes import FakeMeasurer

    import ext

    wl = gemm_wl(37, 48, 29)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    m = FakeMeasurer()
    with pytest.raises(NotADirectoryError, match="not_a_dir"):
        Tuner([Task(wl)], cpu_target, TuningLog(blocker / "t.jsonl"), m, registry=reg).run()
    log = tmp_path / "t.jsonl"
    log.write_text("")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) == str(log) else real(p, mode, **kw))
    with pytest.raises(PermissionError, match="t.jsonl"):
        Tuner([Task(wl)], cpu_target, TuningLog(log), m, registry=reg).run()
    t0 = time.time()
    with pytest.raises(PermissionError, match="t.jsonl"):
        ext.tune(wl, cpu_target, log=log)  # a real (local) measurer: fails before starting a worker
    assert time.time() - t0 < 5 and m.calls == [] and log.read_text() == ""
