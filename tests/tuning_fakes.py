"""Test-only matmul candidates for the tuner: one crashes, one hangs, one computes the wrong result.

They are registered explicitly (``register_all``), in the test process by a
fixture that unregisters them afterwards, and in each measurement worker
through ``ext.tune(..., plugins=[f"{__file__}:register_all"])``.

Also: ``FakeMeasurer`` (no hardware: scripted statuses, a hook run in each
measurement, e.g. another tuner appending to a shared log) and RPC worker
functions that get stuck in one stage (``stuck_connecting``, ``stuck_building``;
loaded in the worker with ``plugins=[f"{__file__}:"]``, and in the test process
under the worker's module name ``PLUGIN_MODULE`` so they pickle by reference).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time

from ext.strategies import REGISTRY
from ext.strategies.registry import PLEVEL, Candidate
from ext.tuning.log import point_key
from ext.tuning.measure import Result, Settings

NAMES = ("matmul.test_crash", "matmul.test_hang", "matmul.test_wrong")


@dataclasses.dataclass(frozen=True)
class NoKnobs:
    variant: int = 0


def _two_d(wl, target):
    return None if len(wl.shapes[0]) == 2 and len(wl.shapes[1]) == 2 and wl.dtypes[0] == "float32" else "2-D f32"


def _crash_build(wl, cfg, target):
    os.kill(os.getpid(), signal.SIGSEGV)  # dies like a kernel that segfaults


def _hang_build(wl, cfg, target):
    time.sleep(3600)


def _wrong_build(wl, cfg, target):
    """The direct kernel for the workload without its epilogue: fast, and wrong wherever relu clips."""
    direct = REGISTRY.get("matmul.direct")
    shapes, dtypes = list(wl.shapes), list(wl.dtypes)
    wrong = wl.with_(epilogue=tuple(e for e in wl.epilogue if e in ("bias", "residual")))
    return direct.build(wrong.with_(shapes=shapes, dtypes=dtypes), direct.default_config(wl, target), target)


def _space(wl, target):
    return [NoKnobs(0)]


def candidates():
    mk = lambda name, build: Candidate(name, ("llvm",), PLEVEL.DIRECT, _two_d, NoKnobs, space=_space,  # noqa: E731
                                       default=lambda wl, t: NoKnobs(0), build=build)
    return [mk("matmul.test_crash", _crash_build), mk("matmul.test_hang", _hang_build),
            mk("matmul.test_wrong", _wrong_build)]


def register_all() -> None:
    for c in candidates():
        if c.name not in REGISTRY:
            REGISTRY.register(c)


def unregister_all() -> None:
    for n in NAMES:
        REGISTRY.unregister(n)


# -- a measurer without hardware ---------------------------------------------------------------------

class FakeMeasurer:
    """Records the points it is asked to measure; ``statuses`` are returned in order (then ``"ok"``),
    ``hook(wl, cand, cfg)`` runs inside every measurement (e.g. another tuner appending to the log)."""

    remote, device = False, "fake"

    def __init__(self, statuses=(), hook=None):
        self.settings, self.statuses, self.hook, self.calls = Settings(), list(statuses), hook, []

    def measure(self, wl, cand, cfg, target, cutoff=None) -> Result:
        self.calls.append(point_key(wl.key, cand.name, dict(cfg)))
        if self.hook is not None:
            self.hook(wl, cand, cfg)
        status = self.statuses.pop(0) if self.statuses else "ok"
        if status != "ok":
            return Result(status, error=f"fake {status}", device=self.device)
        seconds = 1e-4 * (1 + len(self.calls) % 7)
        return Result("ok", seconds, [seconds], 0.0, device=self.device)

    def close(self) -> None:
        pass


# -- RPC worker functions stuck in one stage (the parent's time limit kills them) -----------------------

#: the module name ``ext.tuning.measure._load_plugins`` gives this file in a worker
PLUGIN_MODULE = "_ext_plugin_tuning_fakes"


def _stuck(task: dict, stage: str) -> dict:
    from ext.tuning.rpc import _stage

    _stage(task, stage)
    time.sleep(3600)
    return {"status": "ok", "seconds": 1.0}


def stuck_connecting(task: dict) -> dict:
    """An RPC measurement whose tracker/server connection never completes."""
    return _stuck(task, "connect")


def stuck_building(task: dict) -> dict:
    """An RPC measurement whose kernel build never finishes (the candidate's fault)."""
    return _stuck(task, "build")
