"""RPC measurement through a stock TVM tracker and two servers on 127.0.0.1; a killed server; an
unreachable or silent tracker fails fast naming its address; a worker stuck connecting gives ``infra``."""
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
    # both servers gone: a new run fails before measuring, naming the tracker and the key ...
    servers[1].terminate()
    from tvm import rpc

    deadline = time.time() + 20
    while time.time() < deadline and rpc.connect_tracker("127.0.0.1", tracker.port).summary()["server_info"]:
        time.sleep(0.2)  # until the tracker noticed
    measurer = make_measurer((f"127.0.0.1:{tracker.port}", KEY), timeout=30, settings=Settings(repeat=1))
    try:
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{tracker.port} lists no server with key '{KEY}'"):
            Tuner([Task(wl)], cpu_target, log, measurer, trials=4, registry=reg).run()
        # ... and when the devices vanish mid-run, points are recorded as infra and tuning stops cleanly
        measurer.preflight = lambda: None
        s2 = Tuner([Task(wl)], cpu_target, log, measurer, trials=4, registry=reg).run()
    finally:
        measurer.close()
    assert "infrastructure" in s2.stopped
    assert {r.status for r in log.records()[6:]} == {"infra"}
    assert len(log.measured(cpu_target)) == 6
    assert len(task_space(wl, cpu_target, reg, remote=True)) == len(task_space(wl, cpu_target, reg))
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{tracker.port} lists no server with key 'nope'"):
        RPCMeasurer(f"127.0.0.1:{tracker.port}", "nope").preflight()


def test_rpc_arguments_are_validated():
    with pytest.raises(ValueError, match="HOST:PORT"):
        RPCMeasurer("localhost", KEY)
    with pytest.raises(ValueError, match="key"):
        RPCMeasurer("127.0.0.1:9190", "")
    with pytest.raises(ValueError, match="rpc must be"):
        make_measurer("127.0.0.1:9190")


def small_wl():
    return Workload("matmul", [(5, 7), (7, 3), (3,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (5, 3)}, epilogue=("bias", "relu"))


def test_unreachable_tracker_fails_fast_naming_the_address(tmp_path, cpu_target):
    import ext

    log = tmp_path / "rpc.jsonl"
    t0 = time.time()
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1\b"):
        ext.tune(small_wl(), cpu_target, log=log, trials=1, seconds=20, rpc={"tracker": "127.0.0.1:1", "key": KEY})
    assert time.time() - t0 < 5
    assert log.read_text() == ""  # created (it is writable), nothing measured, no point recorded as a timeout


def test_silent_tracker_times_out_within_the_connect_timeout():
    import socket

    with socket.socket() as listener:  # accepts connections (kernel backlog) but never answers the handshake
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
        m = RPCMeasurer(addr, KEY, connect_timeout=0.5)
        t0 = time.time()
        with pytest.raises(ConnectionError, match=f"{addr} did not answer within 0.5 s"):
            m.preflight()
        assert time.time() - t0 < 3
        m.close()
    with pytest.raises(ValueError, match="connect_timeout"):
        RPCMeasurer("127.0.0.1:9190", KEY, connect_timeout=0)


@pytest.fixture
def stuck_fakes():
    """tests/tuning_fakes.py under the module name measurement workers give it (functions pickle by name)."""
    import importlib.util
    import os
    import sys

    path = os.path.join(os.path.dirname(__file__), "tuning_fakes.py")
    spec = importlib.util.spec_from_file_location("_ext_plugin_tuning_fakes", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert mod.PLUGIN_MODULE == spec.name
    try:
        yield mod, path
    finally:
        sys.modules.pop(spec.name, None)


def test_worker_killed_while_connecting_is_infra_not_timeout(stuck_fakes, cpu_target):
    fakes, path = stuck_fakes

    class Stuck(RPCMeasurer):
        _fn = staticmethod(fakes.stuck_connecting)

    wl, cand = small_wl(), REGISTRY.get("matmul.direct")
    cfg = {"mb": 1, "nb": 16, "parallel": "none"}
    m = Stuck("127.0.0.1:9", KEY, timeout=2, plugins=[f"{path}:"])
    try:
        res = m.measure(wl, cand, cfg, cpu_target)
        assert res.status == "infra" and "127.0.0.1:9" in res.error and "connect" in res.error, res
        Stuck._fn = staticmethod(fakes.stuck_building)  # the kernel's own build hangs: its timeout
        res = m.measure(wl, cand, cfg, cpu_target)
        assert res.status == "timeout", res
    finally:
        m.close()
