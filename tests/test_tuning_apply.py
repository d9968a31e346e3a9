"""Applying a tuning log: ext.build(tuning_log=), apply_history_best, model for unseen workloads;
records outside the knob space are skipped (warned, counted in the report), never built."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import ext
from ext.models.gemm import dense, numpy_reference
from ext.strategies import REGISTRY
from ext.strategies.registry import config_to_dict
from ext.testing import assert_close, run_relax
from ext.tuning.log import TuningLog, TuningLogWarning, make_record
from ext.tuning.measure import Result
from ext.tuning.tasks import extract_tasks
from ext.workload import Workload


def write(log, target, wl, cand, cfg, seconds, status="ok"):
    res = Result(status, seconds if status == "ok" else None, [seconds] if status == "ok" else [], 0.0)
    log.append(make_record(wl, target, REGISTRY.get(cand), cfg, res))


def gemm_wl(M, N, K):
    return Workload("matmul", [(M, K), (K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=("bias", "relu"))


def test_extract_tasks_counts_uses(cpu_target):
    from ext.models.gemm import mlp

    tasks = extract_tasks(mlp(batch=8, sizes=(64, 64, 64, 64, 16)), cpu_target)
    uses = {t.workload.key: t.uses for t in tasks}
    assert sorted(uses.values()) == [1, 3] and len(tasks) == 2  # three identical 64->64 relu layers
    assert all(t.weight() > 0 for t in tasks)
    with pytest.raises(ValueError, match="IRModule"):
        extract_tasks("not a module", cpu_target)


def test_build_uses_best_valid_record_and_report_says_log(tmp_path, cpu_target):
    mod, params = dense(48, 80, 32)
    (task,) = extract_tasks(mod, cpu_target)
    log = TuningLog(tmp_path / "t.jsonl")
    picked = {"mb": 2, "nb": 16, "parallel": "tiles"}
    write(log, cpu_target, task.workload, "matmul.direct", picked, 1e-5)
    write(log, cpu_target, task.workload, "matmul.packed", {"mb": 4, "nb": 32, "parallel": "panels"}, 2e-5)
    write(log, cpu_target, task.workload, "matmul.packed", {"mb": 1, "nb": 16, "parallel": "panels"}, None,
          status="wrong")
    x = np.random.default_rng(0).standard_normal((48, 32)).astype("float32")
    for use_context in (False, True):
        if use_context:
            with ext.apply_history_best(log.path):
                ex = ext.build(mod, cpu_target)
        else:
            ex = ext.build(mod, cpu_target, tuning_log=log.path)
        (d,) = ext.last_report().find("matmul")
        # a record written before the ``order`` knob existed loads with its default
        assert (d.source, d.name, d.to_json()["config"]) == ("log", "matmul.direct", dict(picked, order="panels"))
        assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=1e-4, what="tuned build")
    ext.build(mod, cpu_target)
    assert ext.last_report().find("matmul")[0].source != "log"  # outside the context: no log


def test_unseen_workload_uses_model_trained_on_log(tmp_path, cpu_target):
    log = TuningLog(tmp_path / "t.jsonl")
    rng = np.random.default_rng(0)
    # a clear landscape (nb=32 and parallel tiles 3x better), so the model beats its held-out error
    for M, N, K in [(64, 64, 64), (128, 128, 64), (96, 64, 128), (64, 256, 32)]:
        wl = gemm_wl(M, N, K)
        for cand in ("matmul.packed", "matmul.direct"):
            for nb in (16, 32, 64):
                for mb in (2, 4):
                    for par in ("tiles", "none"):
                        write(log, cpu_target, wl, cand, {"mb": mb, "nb": nb, "parallel": par},
                              1e-5 * (1 + abs(nb - 32) / 16 + rng.random() * 0.1) * (3 if par == "none" else 1))
    mod, params = dense(80, 96, 48)
    x = rng.standard_normal((80, 48)).astype("float32")
    ex = ext.build(mod, cpu_target, tuning_log=log.path)
    (d,) = ext.last_report().find("matmul")
    assert d.source == "model" and d.cost is not None and d.cost > 0, d.reason
    assert "beyond its held-out error" in d.reason and d.to_json()["config"]["parallel"] != "none"
    assert "model" in ext.last_report().table()
    assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=1e-4, what="model-chosen build")


def test_bad_logs_give_clear_errors_and_warnings(tmp_path, cpu_target):
    mod, _ = dense(16, 16, 16)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        ext.build(mod, cpu_target, tuning_log=tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        with ext.apply_history_best(tmp_path / "missing.jsonl"):
            pass
    path = tmp_path / "bad.jsonl"
    path.write_text("garbage\n")
    (task,) = extract_tasks(mod, cpu_target)
    log = TuningLog(path)
    write(log, cpu_target, task.workload, "matmul.direct", {"mb": 1, "nb": 16, "parallel": "tiles"}, 1e-6)
    with pytest.warns(TuningLogWarning, match=r"bad.jsonl:1: malformed"):
        ext.build(mod, cpu_target, tuning_log=path)
    assert ext.last_report().find("matmul")[0].source == "log"
    with pytest.raises(ValueError, match="log="):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ext.tune(mod, cpu_target, log=None)


def test_out_of_space_record_is_skipped_and_the_build_uses_the_default(tmp_path, cpu_target):
    mod, params = dense(64, 96, 80)
    (task,) = extract_tasks(mod, cpu_target)
    path = tmp_path / "huge.jsonl"
    log = TuningLog(path)
    # a corrupted record: built as the "best" it would pad the 64x96 output to 100000^2 (tens of GB)
    write(log, cpu_target, task.workload, "matmul.packed", {"mb": 100000, "nb": 100000, "parallel": "tiles"}, 1e-7)
    write(log, cpu_target, task.workload, "matmul.direct", {"mb": 4, "nb": 32, "parallel": "bogus"}, 1e-7)
    with pytest.warns(TuningLogWarning) as caught:
        ex = ext.build(mod, cpu_target, tuning_log=path)
    msgs = " ".join(str(w.message) for w in caught)
    assert "huge.jsonl:1: invalid tuning record skipped (knob mb=100000 is not in the space" in msgs
    assert 'huge.jsonl:2: invalid tuning record skipped (knob parallel="bogus"' in msgs
    (d,) = ext.last_report().find("matmul")
    assert d.source != "log"
    assert d.to_json()["config"] == config_to_dict(d.candidate.default_config(task.workload, cpu_target))
    assert ext.last_report().tuning_log["invalid"] == 2
    assert "2 invalid" in ext.last_report().table()
    x = np.random.default_rng(0).standard_normal((64, 80)).astype("float32")
    assert_close(run_relax(ex, x), numpy_reference(x, params), rtol=1e-5, atol=1e-4, what="default build")
