"""SIGKILL scripts/autotune.py mid-run, start it again: no finished record lost, none measured twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "autotune.py")


def complete_records(path, measured_only: bool = True):
    """The log's whole records; ``measured_only``: without the end-to-end check's ``dropped``
    records (a verdict on a measured point, appended when the tuned build ran slower in place:
    on a loaded machine it can drop the resumed run's pick)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:  # a line torn by the kill
                continue
            if not (measured_only and rec.get("status") == "dropped"):
                out.append(rec)
    return out


def key(r):
    return (r["workload"], r["candidate"], json.dumps(r["config"], sort_keys=True))


def test_sigkill_then_resume_loses_nothing_and_remeasures_nothing(tmp_path):
    log = str(tmp_path / "kill.jsonl")
    cmd = [sys.executable, SCRIPT, "--model", "gemm", "--shape", "32x48x16", "--log", log, "--quiet",
           "--seconds", "600"]
    proc = subprocess.Popen(cmd + ["--trials", "40"], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while len(complete_records(log)) < 4 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and its measurement workers
        proc.wait()
    before = complete_records(log)
    assert len(before) >= 4, "the tuner did not get going before the deadline"
    done = subprocess.run(cmd + ["--trials", "6"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = complete_records(log)
    keys_after = [key(r) for r in after]
    assert len(keys_after) == len(set(keys_after)), "a point was measured twice"
    assert {key(r) for r in before} <= set(keys_after), "a finished record was lost"
    assert len(after) == len(before) + 6
    assert f"(+{len(before)})" in done.stdout  # the table reports the resumed points
    from ext.tuning.log import TuningLog

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a record torn by the kill is reported, not fatal
        assert len(TuningLog(log).records()) == len(complete_records(log, measured_only=False))
