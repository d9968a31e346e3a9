"""Tuning log: append-only JSONL, malformed/torn lines, provenance (stale counts), best record, resume set."""
from __future__ import annotations

import json
import warnings

import pytest

from ext.strategies import REGISTRY
from ext.tuning.log import History, Record, TuningLog, TuningLogWarning, make_record, target_info, versions
from ext.tuning.measure import Result
from ext.workload import Workload


def gemm_wl(M=16, N=32, K=8):
    return Workload("matmul", [(M, K), (K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)}, epilogue=("bias", "relu"))


def rec(target, wl, cfg, status="ok", seconds=1e-3, cand="matmul.packed", **over):
    r = make_record(wl, target, REGISTRY.get(cand), cfg, Result(status, seconds if status == "ok" else None,
                                                                [seconds] if status == "ok" else [], 1e-6))
    for k, v in over.items():
        setattr(r, k, v)
    return r


CFG = {"mb": 4, "nb": 32, "parallel": "panels"}


def test_record_fields_and_round_trip(tmp_path, cpu_target):
    log = TuningLog(tmp_path / "log.jsonl")
    r = rec(cpu_target, gemm_wl(), CFG)
    log.append(r)
    data = json.loads((tmp_path / "log.jsonl").read_text())
    for field in ("workload", "workload_json", "target", "candidate", "candidate_version", "config", "times",
                  "error", "tvm_version", "ext_version", "timestamp", "status", "max_error"):
        assert field in data
    assert data["target"]["isa"] == target_info(cpu_target)["isa"] and data["target"]["kind"] == "llvm"
    back = log.records()
    assert len(back) == 1 and back[0].key == r.key and back[0].line == 1


def test_malformed_and_torn_lines_are_skipped_with_line_numbers(tmp_path, cpu_target):
    path = tmp_path / "log.jsonl"
    log = TuningLog(path)
    log.append(rec(cpu_target, gemm_wl(), CFG))
    with open(path, "a") as f:
        f.write("not json at all\n")
        f.write('{"workload": "x"}\n')  # JSON but not a record
    log.append(rec(cpu_target, gemm_wl(), dict(CFG, mb=2)))
    with open(path, "a") as f:
        f.write('{"workload": "torn')  # a writer killed mid-line
    log.append(rec(cpu_target, gemm_wl(), dict(CFG, mb=8)))  # must start on a fresh line
    with pytest.warns(TuningLogWarning) as caught:
        recs = log.records()
    msgs = " ".join(str(w.message) for w in caught)
    assert ":2: malformed" in msgs and ":3: malformed" in msgs and ":5: malformed" in msgs
    assert [r.config["mb"] for r in recs] == [4, 2, 8]
    assert [r.line for r in recs] == [1, 4, 6]


def test_stale_records_are_counted_not_used(tmp_path, cpu_target):
    wl = gemm_wl()
    log = TuningLog(tmp_path / "log.jsonl")
    good = rec(cpu_target, wl, CFG, seconds=2e-3)
    other_cpu = rec(cpu_target, wl, dict(CFG, mb=2), seconds=1e-4)
    other_cpu.target = dict(other_cpu.target, mcpu="skylake-avx512")
    old_tvm = rec(cpu_target, wl, dict(CFG, mb=1), seconds=1e-4, tvm_version="0.26.0")
    old_cand = rec(cpu_target, wl, dict(CFG, mb=6), seconds=1e-4, candidate_version=0)
    gone = rec(cpu_target, wl, {}, seconds=1e-4)
    gone.candidate = "matmul.removed"
    log.extend([good, other_cpu, old_tvm, old_cand, gone])
    with pytest.warns(TuningLogWarning, match="4 stale tuning records"):
        valid, stale = log.split(cpu_target)
    assert [r.config["mb"] for r in valid] == [4]
    assert stale.total == 4 and any("mcpu" in k for k in stale.counts) and any("TVM" in k for k in stale.counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = log.history(cpu_target)
    assert hist.best(wl, cpu_target) == ("matmul.packed", CFG, pytest.approx(2e-3))
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 5  # nothing dropped from the file


def test_best_ignores_wrong_failed_and_infra_and_resume_set(tmp_path, cpu_target):
    wl = gemm_wl()
    recs = [rec(cpu_target, wl, CFG, seconds=3e-3),
            rec(cpu_target, wl, dict(CFG, mb=2), status="wrong"),
            rec(cpu_target, wl, dict(CFG, mb=1), status="failed", error="boom"),
            rec(cpu_target, wl, dict(CFG, mb=8), status="infra", error="no server"),
            rec(cpu_target, wl, dict(CFG, mb=6), seconds=1e-3),
            rec(cpu_target, wl, dict(CFG, mb=6), status="wrong")]  # same point later wrong: never trusted
    hist = History(recs)
    assert hist.best(wl, cpu_target)[1] == CFG
    log = TuningLog(tmp_path / "log.jsonl")
    log.extend(recs)
    measured = log.measured(cpu_target)
    assert {json.loads(k[2])["mb"] for k in measured} == {4, 2, 1, 6}  # infra is measured again


def test_record_validation():
    with pytest.raises(ValueError, match="status"):
        Record("w", {}, {}, "matmul.packed", 1, {}, "great")
    with pytest.raises(ValueError, match="positive seconds"):
        Record("w", {}, {}, "matmul.packed", 1, {}, "ok", seconds=None)
    assert set(versions()) == {"tvm_version", "ext_version"}
