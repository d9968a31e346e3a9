"""The search loop and the cost model, on a fake benchmark (no hardware timing)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from ext.strategies import REGISTRY
from ext.strategies.registry import Registry
from ext.tuning.cost_model import CostModel, features, _hw
from ext.tuning.log import TuningLog, make_record
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
    s = Tuner([Task(wl)], cpu_target, log, m, trials=24, batch=8, registry=reg, seed=1,
              model=CostModel(min_records=8, rounds=60)).run()
    assert s.trials == 24 and len(m.calls) == 24
    first = [c[1] for c in m.calls[:2]]
    assert sorted(first) == ["matmul.direct", "matmul.packed"]  # each candidate's default first
    assert s.tasks[0]["gflops"] >= 0.9 * true_best(wl, cpu_target, reg)
    assert s.tasks[0]["default_seconds"] is not None
    # resume: nothing measured twice, the second run adds new points only
    m2 = FakeMeasurer()
    s2 = Tuner([Task(wl)], cpu_target, log, m2, trials=10, registry=reg).run()
    assert s2.tasks[0]["resumed"] == 24 and len(m2.calls) == 10
    keys = [r.key for r in log.records()]
    assert len(keys) == len(set(keys)) == 34


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
