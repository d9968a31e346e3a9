"""Test-only matmul candidates for the tuner: one crashes, one hangs, one computes the wrong result.

They are registered explicitly (``register_all``), in the test process by a
fixture that unregisters them afterwards, and in each measurement worker
through ``ext.tune(..., plugins=[f"{__file__}:register_all"])``.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time

from ext.strategies import REGISTRY
from ext.strategies.registry import PLEVEL, Candidate

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
