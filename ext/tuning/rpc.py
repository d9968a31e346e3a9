"""Measurement on devices behind a TVM RPC tracker.

``RPCMeasurer`` builds locally (in the worker), exports a shared library, asks
a stock ``tvm.rpc`` tracker for a device under ``key``, uploads and times it
there. A connection that breaks (a server killed mid-run) is retried on
another session; only when every try fails is the point recorded, as
``infra`` when no device could be reached (re-measured on resume) and
``failed`` when the kernel itself kept breaking its sessions.
"""
from __future__ import annotations

import os
import tempfile
import time
import traceback

import numpy as np

from .measure import LocalMeasurer, Settings, _reference, _resolve, _short, check_output


def build_library(task: dict, path: str) -> dict:
    """Build kernel + input transforms into one shared library at ``path`` (for RPC devices).

    Returns ``{index: transform output shape}`` for the transformed inputs.
    """
    import tvm

    from ..tir_schedules.common import param_shape

    wl, target, cand, config = _resolve(task)
    funcs = {"kernel": cand.build(wl, config, target).with_attr("global_symbol", "kernel")}
    shapes = {}
    for i, f in cand.input_transforms(wl, config, target).items():
        funcs[f"transform{i}"] = f.with_attr("global_symbol", f"transform{i}")
        shapes[i] = param_shape(f, -1)
    tvm.compile(tvm.IRModule(funcs), target=target).export_library(path)
    return shapes


class _InfraError(Exception):
    """The RPC machinery (tracker, server, connection) failed, not the kernel."""


def measure_rpc_in_worker(task: dict) -> dict:
    """Build here, run and time on a device from the RPC tracker (runs inside the worker)."""
    import tvm
    from tvm import rpc

    from ..runner import random_inputs

    settings = Settings(**task["settings"])
    wl, target, cand, config = _resolve(task)
    host, port, key = task["rpc"]["host"], task["rpc"]["port"], task["rpc"]["key"]
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
        try:
            tracker = rpc.connect_tracker(host, port)
            servers = [s for s in tracker.summary().get("server_info", []) if s.get("key") == f"server:{key}"]
            if not servers:  # request() would wait forever for a device that is not there
                raise _InfraError(f"the tracker lists no server with key {key!r}")
            remote = tracker.request(key, priority=1, session_timeout=task["rpc"].get("session_timeout", 60))
            stage = "upload"
            remote.upload(lib)
            rlib = remote.load_module("kernel.so")
            dev = remote.cpu() if target.kind.name == "llvm" else remote.cuda(0)
            stage = "run"
            args = []
            for i, x in enumerate(xs):
                t = tvm.runtime.tensor(np.ascontiguousarray(x), dev)
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
    if all(stage == "connect" for stage, _ in errors):
        return {"status": "infra", "device": f"rpc:{key}",
                "error": f"no RPC device for key {key!r} at {host}:{port}: {errors[-1][1]}"}
    return {"status": "failed", "device": f"rpc:{key}",
            "error": f"rpc: broke {len(errors)} sessions; last at {errors[-1][0]}: {errors[-1][1]}"}



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
                 plugins=(), retries: int = 3, session_timeout: float = 60.0):
        host, sep, port = str(tracker).rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"rpc tracker must be 'HOST:PORT', got {tracker!r}")
        if not key:
            raise ValueError("rpc key must be a non-empty string")
        super().__init__(timeout=timeout, settings=settings, plugins=plugins)
        self.rpc = {"host": host, "port": int(port), "key": str(key), "retries": int(retries),
                    "session_timeout": float(session_timeout)}
        self.device = f"rpc:{key}"

    def task(self, wl, cand, config, target) -> dict:
        return dict(super().task(wl, cand, config, target), rpc=self.rpc)
