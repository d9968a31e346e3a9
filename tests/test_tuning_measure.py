"""Measurement in subprocesses: crashing, hanging and wrong candidates are recorded and never chosen."""
from __future__ import annotations

import os

import pytest

from ext.strategies import REGISTRY
from ext.strategies.registry import Registry
from ext.tuning.log import TuningLog
from ext.tuning.measure import LocalMeasurer, Settings, check_output
from ext.tuning.search import Tuner
from ext.tuning.tasks import Task
from ext.workload import Workload

import numpy as np

FAKES = os.path.join(os.path.dirname(__file__), "tuning_fakes.py")


def gemm_wl(M, N, K, epilogue=("bias", "relu")):
    shapes = [(M, K), (K, N)] + ([(N,)] if "bias" in epilogue else [])
    return Workload("matmul", shapes, ["float32"] * len(shapes), "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=epilogue)


@pytest.fixture
def fakes():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("tuning_fakes_parent", FAKES)
    mod = sys.modules.setdefault("tuning_fakes_parent", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)
    mod.register_all()
    try:
        yield mod
    finally:
        mod.unregister_all()


def test_check_output_flags_nan_shape_and_error():
    ref = np.ones((2, 3))
    assert check_output(np.ones((2, 3), "float32"), ref, 0, 0) == (True, 0.0)
    assert not check_output(np.ones((3, 2), "float32"), ref, 1, 1)[0]
    assert not check_output(np.full((2, 3), np.nan, "float32"), ref, 1, 1)[0]
    ok, err = check_output(np.full((2, 3), 1.5, "float32"), ref, 0, 0.1)
    assert not ok and err == pytest.approx(0.5)


def test_crash_hang_wrong_are_recorded_and_tuning_finishes(fakes, tmp_path, cpu_target):
    wl = gemm_wl(24, 40, 16)
    reg = Registry()  # only the direct kernel and the fakes compete (keeps the test small)
    for name in ("matmul.direct",) + fakes.NAMES:
        reg.register(REGISTRY.get(name))
    log = TuningLog(tmp_path / "t.jsonl")
    measurer = LocalMeasurer(timeout=6, settings=Settings(repeat=2, min_repeat_ms=1), plugins=[f"{FAKES}:register_all"])
    try:
        summary = Tuner([Task(wl)], cpu_target, log, measurer, trials=6, batch=6, registry=reg).run()
    finally:
        measurer.close()
    recs = {r.candidate: r for r in log.records()}
    assert recs["matmul.test_crash"].status == "failed" and "died" in recs["matmul.test_crash"].error
    assert recs["matmul.test_hang"].status == "timeout"
    wrong = recs["matmul.test_wrong"]
    assert wrong.status == "wrong" and wrong.max_error > 0 and wrong.seconds is None
    assert recs["matmul.direct"].status == "ok" and recs["matmul.direct"].max_error < 1e-4
    assert summary.tasks[0]["candidate"] == "matmul.direct"
    assert summary.tasks[0]["failures"] == 3
    hist = log.history(cpu_target, registry=reg)
    assert hist.best(wl, cpu_target)[0] == "matmul.direct"


def test_local_measurer_checks_every_point_against_numpy(tmp_path, cpu_target):
    wl = gemm_wl(7, 33, 13, epilogue=("bias",))
    m = LocalMeasurer(timeout=60, settings=Settings(repeat=2, min_repeat_ms=1))
    try:
        for name in ("matmul.direct", "matmul.packed"):
            cand = REGISTRY.get(name)
            res = m.measure(wl, cand, {"mb": 2, "nb": 16, "parallel": "tiles"}, cpu_target)
            assert res.status == "ok", res.error
            assert 0 <= res.max_error < 1e-4 and res.seconds > 0 and len(res.times) == 2
    finally:
        m.close()


def _family_modules():
    from tvm import relax

    def module(fn, *shapes):
        bb = relax.BlockBuilder()
        xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
        with bb.function("main", xs):
            with bb.dataflow():
                out = bb.emit_output(bb.emit(fn(*xs)))
            bb.emit_func_output(out)
        return bb.get()

    op = __import__("tvm").relax.op
    return {
        "conv2d": module(lambda x, w, b: op.nn.relu(op.add(op.nn.conv2d(x, w, padding=1), b)),
                         (1, 16, 10, 10), (16, 16, 3, 3), (1, 16, 1, 1)),
        "softmax": module(lambda x: op.nn.softmax(x, axis=-1), (12, 70)),
        "layer_norm": module(lambda x, g, b: op.nn.layer_norm(x, g, b, axes=[-1]), (9, 48), (48,), (48,)),
        "reduce": module(lambda x: op.sum(x, axis=[1]), (6, 50, 3)),
    }


@pytest.mark.parametrize("family", ["conv2d", "softmax", "layer_norm", "reduce"])
def test_every_family_has_a_reference_that_its_candidates_pass(family, cpu_target):
    from ext.tuning.measure import measure_in_worker
    from ext.tuning.references import REFERENCES
    from ext.tuning.search import task_space
    from ext.tuning.tasks import extract_tasks

    (task,) = extract_tasks(_family_modules()[family], cpu_target)
    wl = task.workload
    assert wl.op in REFERENCES
    m = LocalMeasurer(settings=Settings(repeat=1, min_repeat_ms=1))
    seen = set()
    for p in task_space(wl, cpu_target):
        if p.cand.name in seen or getattr(p.cand, "library", None):
            continue  # each of our candidates' default config, in this process
        seen.add(p.cand.name)
        out = measure_in_worker(dict(m.task(wl, p.cand, p.cfg, cpu_target), cutoff=None))
        assert out["status"] == "ok", (p.cand.name, out)
        assert out["max_error"] is not None and out["max_error"] < 1e-3
    m.close()
    assert seen
