"""Tuning log: append-only JSONL, malformed/torn lines, provenance (stale counts), best record, resume set;
configs outside the knob space (invalid, warned, counted), incremental reads, unwritable logs."""
from __future__ import annotations

import dataclasses
import json
import os
import warnings

import pytest

from ext.strategies import REGISTRY
from ext.tuning.history import History
from ext.tuning.log import Record, TuningLog, TuningLogWarning, make_record, target_info, versions
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
    with pytest.warns(TuningLogWarning) as caught:
        valid, stale = log.split(cpu_target)
    msgs = " ".join(str(w.message) for w in caught)
    assert "3 stale tuning records" in msgs and ":5: invalid tuning record skipped (unknown candidate" in msgs
    assert [r.config["mb"] for r in valid] == [4] and log.invalid == [(5, "unknown candidate 'matmul.removed'")]
    assert stale.total == 3 and any("mcpu" in k for k in stale.counts) and any("TVM" in k for k in stale.counts)
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


BAD_CONFIGS = [  # (config, what the warning must name)
    (dict(CFG, mb=100000, nb=100000), "knob mb=100000 is not in the space"),
    (dict(CFG, nb=7), "knob nb=7 is not in the space"),
    (dict(CFG, parallel="bogus"), 'knob parallel="bogus" is not in the space'),
    ({"mb": 4, "parallel": "panels"}, "missing knob(s) ['nb']"),
    (dict(CFG, mb=-3), "knob mb=-3 is not in the space"),
    (dict(CFG, mb="4"), "knob mb=\"4\" has type str, expected int"),
    (dict(CFG, mb=4.0), "knob mb=4.0 has type float, expected int"),
    (dict(CFG, unroll=2), "unknown knob(s) ['unroll']"),
]


@pytest.mark.parametrize("cfg,why", BAD_CONFIGS, ids=[w.split(" ")[1] + str(i) for i, (_, w) in enumerate(BAD_CONFIGS)])
def test_configs_outside_the_knob_space_are_skipped_with_a_warning(tmp_path, cpu_target, cfg, why):
    wl = gemm_wl(13, 37, 11)
    log = TuningLog(tmp_path / "log.jsonl")
    log.append(rec(cpu_target, wl, CFG, seconds=5e-3))
    log.append(rec(cpu_target, wl, cfg, seconds=1e-6))  # "faster": would be the best record if trusted
    with pytest.warns(TuningLogWarning) as caught:
        valid, stale = log.split(cpu_target)
    msgs = [str(w.message) for w in caught]
    assert any(f"log.jsonl:2: invalid tuning record skipped" in m and why in m for m in msgs), msgs
    assert [r.line for r in valid] == [1] and stale.total == 0 and [n for n, _ in log.invalid] == [2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = log.history(cpu_target)
    assert hist.best(wl, cpu_target)[1] == CFG and hist.invalid == 1
    assert hist.skipped() == {"path": log.path, "invalid": 1, "stale": 0, "malformed": 0}


def test_record_of_a_candidate_that_does_not_apply_is_invalid(tmp_path, cpu_target):
    wl = gemm_wl(1, 37, 11)  # M = 1: matmul.batch declines 2-D operands
    log = TuningLog(tmp_path / "log.jsonl")
    log.append(rec(cpu_target, wl, CFG, cand="matmul.batch"))
    with pytest.warns(TuningLogWarning, match=r"log.jsonl:1: invalid .*matmul.batch does not apply"):
        valid, _ = log.split(cpu_target)
    assert valid == []


def test_knobs_added_later_take_their_default_other_missing_knobs_do_not():
    from ext.strategies.registry import Candidate, PLEVEL

    @dataclasses.dataclass(frozen=True)
    class Knobs:
        tile: int = 4
        order: str = "old"  # added after records without it were written

    def make(added):
        return Candidate("matmul.test_knobs", ("llvm",), PLEVEL.DIRECT, lambda wl, t: None, Knobs,
                         space=lambda wl, t: [Knobs(t_, o) for t_ in (2, 4) for o in ("old", "new")],
                         default=lambda wl, t: Knobs(), build=None, added_knobs=added)

    pts = make(()).space_points(None, None)
    assert len(pts) == 4 and pts[0] == {"tile": 4, "order": "old"}  # default first, no duplicates
    assert make(("order",)).config_problem({"tile": 2}, None, None, points=pts) is None
    assert make(()).config_problem({"tile": 2}, None, None, points=pts) == "missing knob(s) ['order'] for " \
                                                                           "matmul.test_knobs"
    assert "missing knob(s) ['tile']" in make(("order",)).config_problem({"order": "new"}, None, None, points=pts)
    assert "not in the space" in make(("order",)).config_problem({"tile": 3}, None, None, points=pts)
    assert make(()).config_problem([2, "old"], None, None, points=pts) == "config is a list, not a JSON object"


def test_incremental_reads_see_only_new_complete_lines(tmp_path, cpu_target):
    wl = gemm_wl(13, 37, 11)
    path = tmp_path / "log.jsonl"
    ours, theirs = TuningLog(path), TuningLog(path)
    theirs.append(rec(cpu_target, wl, CFG))
    assert [r.line for r in ours.records()] == [1]
    assert ours.new_records() == []
    theirs.append(rec(cpu_target, wl, dict(CFG, mb=2)))
    with open(path, "a") as f:
        f.write('{"workload": "half a rec')  # still being written (or torn)
    assert [(r.line, r.config["mb"]) for r in ours.new_records()] == [(2, 2)]
    theirs.append(rec(cpu_target, wl, dict(CFG, mb=8)))  # completes the torn line, then a record
    with pytest.warns(TuningLogWarning, match=r"log.jsonl:3: malformed"):
        new = ours.new_records()
    assert [(r.line, r.config["mb"]) for r in new] == [(4, 8)]
    theirs.append(rec(cpu_target, wl, dict(CFG, nb=7)))
    with pytest.warns(TuningLogWarning, match=r"log.jsonl:5: invalid .*nb=7"):
        valid, _ = ours.split_new(cpu_target)
    assert valid == [] and ours.invalid == [(5, ours.invalid[0][1])]


def test_unwritable_logs_fail_naming_the_path(tmp_path, monkeypatch):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="file.txt"):
        TuningLog(a_file / "log.jsonl").check_writable()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        TuningLog(tmp_path).check_writable()
    with pytest.raises(FileNotFoundError, match="missing"):
        TuningLog(tmp_path / "missing" / "log.jsonl").check_writable()
    log = tmp_path / "log.jsonl"
    log.write_text("")
    TuningLog(log).check_writable()  # writable: no error
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) in (str(log), str(tmp_path))
                        else real(p, mode, **kw))  # root ignores chmod: simulate a read-only file / directory
    with pytest.raises(PermissionError, match="log.jsonl.* is not writable"):
        TuningLog(log).check_writable()
    with pytest.raises(PermissionError, match="new.jsonl.*cannot be created"):
        TuningLog(tmp_path / "new.jsonl").check_writable()
