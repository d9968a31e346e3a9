"""Measurement on devices behind a TVM RPC tracker.

``RPCMeasurer`` builds locally (in the worker), exports a shared library, asks
a stock ``tvm.rpc`` tracker for a device under ``key``, uploads and times it
there. A connection that breaks (a server killed mid-run) is retried on
another session; only when every try fails is the point recorded, as
``infra`` when the machinery failed (no tracker or device reachable, a session
lost while connecting or uploading: re-measured on resume) and ``failed`` only
when the kernel broke every session while running.

Failing fast: stock ``connect_tracker`` retries a refused connection for 60 s,
which cost a minute per point (and the point was then recorded as the
candidate's ``timeout``). Here every tracker connection has a short timeout
(``connect_timeout``, 3 s), ``preflight`` (called by the tuner before the first
measurement) raises ``ConnectionError`` naming the address when the tracker is
unreachable or lists no server for the key, and a worker killed by the time
limit while connecting or uploading (the worker writes its stage to a file the
parent reads) is recorded as ``infra``, never as the candidate's ``timeout``.
"""
from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
import traceback

import numpy as np

from ..target import target_kind
from .measure import LocalMeasurer, Result, Settings, _reference, _resolve, _short, check_output

#: seconds to connect to (and hear back from) a tracker before it counts as unreachable
CONNECT_TIMEOUT_S = 3.0
#: stages of an RPC measurement that are the machinery's, not the kernel's (failures there: ``infra``)
INFRA_STAGES = ("connect", "upload")


def tracker_socket(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A socket to the tracker at ``host:port`` after the tracker handshake, in blocking mode.

    Raises ``ConnectionError`` naming the address when nothing answers within ``timeout`` seconds
    (or what answers is not a TVM RPC tracker).
    """
    from tvm.rpc import base

    addr = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as err:
        raise ConnectionError(f"cannot connect to the RPC tracker at {addr} within {timeout:g} s: "
                              f"{err.strerror or err}") from None
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except OSError as err:
        sock.close()
        raise ConnectionError(f"the RPC tracker at {addr} did not answer within {timeout:g} s: "
                              f"{err.strerror or err or type(err).__name__}") from None
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise ConnectionError(f"{addr} is not a TVM RPC tracker (wrong handshake)")
    sock.settimeout(None)  # a request may wait for a busy device: the measurement's time limit bounds it
    return sock


def tracker_summary(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> dict:
    """The tracker's ``summary()`` (servers and queue), every step within ``timeout`` seconds."""
    from tvm.rpc import base

    sock = tracker_socket(host, port, timeout)
    try:
        sock.settimeout(timeout)
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(sock)
    except OSError as err:
        raise ConnectionError(f"the RPC tracker at {host}:{port} did not send its summary within {timeout:g} s: "
                              f"{err.strerror or err or type(err).__name__}") from None
    finally:
        sock.close()
    if not value or value[0] != base.TrackerCode.SUCCESS:
        raise ConnectionError(f"the RPC tracker at {host}:{port} answered {value!r} to a summary request")
    return value[1]


def servers_for(summary: dict, key: str) -> list:
    return [s for s in summary.get("server_info", []) if s.get("key") == f"server:{key}"]


def _tracker_session(host: str, port: int, timeout: float):
    """A stock ``TrackerSession`` whose (re)connections fail within ``timeout`` instead of retrying 60 s."""
    from tvm.rpc.client import TrackerSession

    class _Session(TrackerSession):
        def _connect(self):
            self._sock = tracker_socket(self._addr[0], self._addr[1], timeout)

    return _Session((host, int(port)))


def _stage(task: dict, name: str) -> None:
    """Tell the parent which stage the worker is in (read when the time limit kills the worker)."""
    path = task.get("stage_file")
    if path:
        with open(path, "w") as f:
            f.write(name)


def build_library(task: dict, path: str) -> dict:
    """Build kernel + input transforms into one shared library at ``path`` (for RPC devices).

    Returns ``{index: transform output shape}`` for the transformed inputs.
    """
    import tvm

    from ..target import compile_tir
    from ..tir_schedules.common import param_shape

    wl, target, cand, config = _resolve(task)
    kernel, transforms = cand.build_all(wl, config, target)
    funcs = {"kernel": kernel.with_attr("global_symbol", "kernel")}
    shapes = {}
    for i, f in transforms.items():
        funcs[f"transform{i}"] = f.with_attr("global_symbol", f"transform{i}")
        shapes[i] = param_shape(f, -1)
    compile_tir(tvm.IRModule(funcs), target).export_library(path)
    return shapes


class _InfraError(Exception):
    """The RPC machinery (tracker, server, connection) failed, not the kernel."""


def measure_rpc_in_worker(task: dict) -> dict:
    """Build here, run and time on a device from the RPC tracker (runs inside the worker)."""
    import tvm

    from ..runner import random_inputs

    settings = Settings(**task["settings"])
    _stage(task, "build")
    wl, target, cand, config = _resolve(task)
    host, port, key = task["rpc"]["host"], task["rpc"]["port"], task["rpc"]["key"]
    connect_timeout = float(task["rpc"].get("connect_timeout", CONNECT_TIMEOUT_S))
    tmp = tempfile.mkdtemp(prefix="ext_rpc_")
    lib = os.path.join(tmp, "kernel.so")
    try:
        shapes = build_library(task, lib)
    except Exception:  # noqa: BLE001
        return {"status": "failed", "error": "build: " + _short(traceback.format_exc())}
    xs = random_inputs(wl, seed=settings.seed)
    ref, rtol, atol, source = _reference(wl, xs, target, settings.seed, cand.name)
    errors = []
    for attempt in range(int(task["rpc"].get("retries", 3))):
        stage = "connect"
        _stage(task, stage)
        try:
            if not servers_for(tracker_summary(host, port, connect_timeout), key):
                raise _InfraError(f"the tracker lists no server with key {key!r}")  # request() would wait forever
            tracker = _tracker_session(host, port, connect_timeout)
            remote = tracker.request(key, priority=1, session_timeout=task["rpc"].get("session_timeout", 60))
            stage = "upload"
            _stage(task, stage)
            remote.upload(lib)
            rlib = remote.load_module("kernel.so")
            dev = remote.device(target_kind(target).device(0).dlpack_device_type(), 0)
            stage = "run"
            _stage(task, stage)
            args = []
            for i, x in enumerate(xs):
                t = tvm.runtime.tensor(np.asarray(x, order="C"), dev)
                if i in shapes:
                    dst = tvm.runtime.empty(shapes[i], x.dtype, dev)
                    rlib[f"transform{i}"](t, dst)
                    t = dst
                args.append(t)
            out = tvm.runtime.empty(tuple(wl.attr("out_shape")), wl.out_dtype, dev)
            rlib["kernel"](*args, out)
            ok, err = check_output(out.numpy(), ref, rtol, atol) if ref is not None else (True, None)
            if not ok:
                return {"status": "wrong", "max_error": err, "device": f"rpc:{key}",
                        "error": f"max abs error {err:.3g} vs {source} exceeds atol {atol:.3g} + rtol {rtol:.3g}*|ref|"}
            ev = rlib.time_evaluator("kernel", dev, number=settings.number, repeat=settings.repeat,
                                     min_repeat_ms=settings.min_repeat_ms)
            times = list(ev(*args, out).results)
            return {"status": "ok", "seconds": min(times), "times": times, "max_error": err,
                    "device": f"rpc:{key}"}
        except Exception as exc:  # noqa: BLE001 - a dead server or session: try another one
            errors.append((stage, f"{type(exc).__name__}: {_short(str(exc), 300)}"))
            time.sleep(0.5)
    if all(stage == "run" for stage, _ in errors):  # every session broke while the kernel ran: its fault
        return {"status": "failed", "device": f"rpc:{key}",
                "error": f"rpc: the kernel broke {len(errors)} sessions; last: {errors[-1][1]}"}
    stages = "/".join(dict.fromkeys(stage for stage, _ in errors))
    return {"status": "infra", "device": f"rpc:{key}",
            "error": f"RPC {stages} failed {len(errors)} times (tracker {host}:{port}, key {key!r}): {errors[-1][1]}"}



class RPCMeasurer(LocalMeasurer):
    """Measure on devices registered with a TVM RPC tracker (``tvm.rpc`` tracker + servers).

    Parameters
    ----------
    tracker : ``"HOST:PORT"`` of the tracker.
    key : the device key the servers registered with.
    retries : sessions tried per point before giving up on it.
    """

    remote = True
    _fn = staticmethod(measure_rpc_in_worker)

    def __init__(self, tracker: str, key: str, timeout: float = 60.0, settings: Settings | None = None,
                 plugins=(), retries: int = 3, session_timeout: float = 60.0,
                 connect_timeout: float = CONNECT_TIMEOUT_S):
        host, sep, port = str(tracker).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"rpc tracker must be 'HOST:PORT', got {tracker!r}")
        if not key:
            raise ValueError("rpc key must be a non-empty string")
        if not float(connect_timeout) > 0:
            raise ValueError(f"rpc connect_timeout must be positive seconds, got {connect_timeout!r}")
        super().__init__(timeout=timeout, settings=settings, plugins=plugins)
        self.rpc = {"host": host, "port": int(port), "key": str(key), "retries": int(retries),
                    "session_timeout": float(session_timeout), "connect_timeout": float(connect_timeout)}
        self.device = f"rpc:{key}"
        self._stage_file: str | None = None

    @property
    def address(self) -> str:
        return f"{self.rpc['host']}:{self.rpc['port']}"

    def preflight(self) -> None:
        """Raise ``ConnectionError`` naming the tracker's address (within ``connect_timeout`` seconds)
        when the tracker is unreachable or lists no server for the key: before any measurement."""
        host, port, key = self.rpc["host"], self.rpc["port"], self.rpc["key"]
        summary = tracker_summary(host, port, self.rpc["connect_timeout"])
        if not servers_for(summary, key):
            keys = sorted({s.get("key", "?").split(":", 1)[-1] for s in summary.get("server_info", [])})
            raise ConnectionError(f"the RPC tracker at {host}:{port} lists no server with key {key!r} "
                                  f"(keys: {keys or 'none'})")

    def task(self, wl, cand, config, target) -> dict:
        return dict(super().task(wl, cand, config, target), rpc=self.rpc, stage_file=self._stage_file)

    def measure(self, wl, cand, config: dict, target, cutoff: float | None = None) -> Result:
        """As ``LocalMeasurer.measure``; a worker killed or dead while connecting or uploading gives ``infra``."""
        fd, self._stage_file = tempfile.mkstemp(prefix="ext_rpc_stage_")
        os.close(fd)
        try:
            res = super().measure(wl, cand, config, target, cutoff=cutoff)
            with open(self._stage_file) as f:
                stage = f.read().strip()
        finally:
            os.unlink(self._stage_file)
            self._stage_file = None
        if res.status in ("timeout", "failed") and stage in INFRA_STAGES:
            return Result("infra", device=self.device,
                          error=f"RPC {stage} to tracker {self.address} (key {self.rpc['key']!r}) did not finish: "
                                f"{res.error}")
        return res
