"""RPC measurement through a stock TVM tracker and two servers on 127.0.0.1; a killed server."""
from __future__ import annotations

import time

import pytest

from ext.strategies import REGISTRY
from ext.strategies.registry import Registry
from ext.tuning.log import TuningLog
from ext.tuning.measure import RPCMeasurer, Settings, make_measurer
from ext.tuning.search import Tuner, task_space
from ext.tuning.tasks import Task
from ext.workload import Workload

KEY = "ext-test"


@pytest.fixture
def cluster():
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=19190, port_end=19290, silent=True)
    servers = [rpc.Server(host="127.0.0.1", port=19300, port_end=19400, key=KEY,
                          tracker_addr=("127.0.0.1", tracker.port), silent=True) for _ in range(2)]
    deadline = time.time() + 20
    while time.time() < deadline:  # wait until both servers registered
        try:
            info = rpc.connect_tracker("127.0.0.1", tracker.port).summary()
            if sum(s["key"] == f"server:{KEY}" for s in info["server_info"]) == 2:
                break
        except Exception:  # noqa: BLE001 - tracker not up yet
            pass
        time.sleep(0.2)
    try:
        yield tracker, servers
    finally:
        for s in servers:
            s.terminate()
        tracker.terminate()


def test_rpc_tuning_survives_a_killed_server(cluster, tmp_path, cpu_target):
    tracker, servers = cluster
    wl = Workload("matmul", [(24, 16), (16, 48), (48,)], ["float32"] * 3, "float32",
                  attrs={"transpose_b": False, "b_const": True, "out_shape": (24, 48)}, epilogue=("bias", "relu"))
    reg = Registry()
    for name in ("matmul.direct", "matmul.packed"):
        reg.register(REGISTRY.get(name))
    log = TuningLog(tmp_path / "rpc.jsonl")
    measurer = make_measurer({"tracker": f"127.0.0.1:{tracker.port}", "key": KEY}, timeout=60,
                             settings=Settings(repeat=2, min_repeat_ms=1))
    assert isinstance(measurer, RPCMeasurer)
    killed = []

    def kill_first_server(rec):
        if not killed:
            servers[0].terminate()
            killed.append(rec)

    try:
        s = Tuner([Task(wl)], cpu_target, log, measurer, trials=6, batch=3, registry=reg,
                  on_record=kill_first_server).run()
    finally:
        measurer.close()
    recs = log.records()
    assert killed and len(recs) == 6 == s.trials
    assert all(r.status == "ok" and r.device == f"rpc:{KEY}" for r in recs), [(r.status, r.error) for r in recs]
    assert all(r.max_error < 1e-4 for r in recs)
    # both servers gone: points are recorded as infrastructure failures and tuning stops cleanly
    servers[1].terminate()
    measurer = make_measurer((f"127.0.0.1:{tracker.port}", KEY), timeout=30, settings=Settings(repeat=1))
    try:
        s2 = Tuner([Task(wl)], cpu_target, log, measurer, trials=4, registry=reg).run()
    finally:
        measurer.close()
    assert "infrastructure" in s2.stopped
    assert {r.status for r in log.records()[6:]} == {"infra"}
    assert len(log.measured(cpu_target)) == 6
    assert len(task_space(wl, cpu_target, reg, remote=True)) == len(task_space(wl, cpu_target, reg))


def test_rpc_arguments_are_validated():
    with pytest.raises(ValueError, match="HOST:PORT"):
        RPCMeasurer("localhost", KEY)
    with pytest.raises(ValueError, match="key"):
        RPCMeasurer("127.0.0.1:9190", "")
    with pytest.raises(ValueError, match="rpc must be"):
        make_measurer("127.0.0.1:9190")
