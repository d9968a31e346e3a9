"""Build progress: one line per pipeline stage once a build runs past 2 s, and the
stage times recorded in the selection report.

``ext.pipeline`` groups its passes into named stages (``ext.stage.graph``,
``ext.stage.select``...); :class:`BuildProgress` is a pass instrument that
times them. Stages that end before the 2 s mark are printed together when
the first later stage ends, so quick builds stay silent.
"""
from __future__ import annotations

import sys
import time

import tvm
from tvm.ir.instrument import pass_instrument

STAGE_PREFIX = "ext.stage."
QUIET_SECONDS = 2.0


def _kernels(mod) -> int:
    return sum(1 for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


@pass_instrument
class BuildProgress:
    """Times ``ext.stage.*`` passes; ``stages`` is ``[(name, seconds, kernels)]``."""

    def __init__(self, verbose: bool = True, stream=None):
        self.verbose, self.stream = verbose, stream or sys.stderr
        self.start = time.perf_counter()
        self.stages: list = []
        self._open: dict = {}
        self._printed = 0

    def run_before_pass(self, mod, info):
        if info.name.startswith(STAGE_PREFIX):
            self._open[info.name] = time.perf_counter()

    def run_after_pass(self, mod, info):
        if info.name in self._open:
            seconds = time.perf_counter() - self._open.pop(info.name)
            self.add(info.name[len(STAGE_PREFIX):], seconds, _kernels(mod))

    def add(self, name: str, seconds: float, kernels: int) -> None:
        self.stages.append((name, round(seconds, 3), kernels))
        self._flush()

    def _flush(self) -> None:
        if not self.verbose or time.perf_counter() - self.start < QUIET_SECONDS:
            return
        for name, seconds, kernels in self.stages[self._printed:]:
            print(f"ext.build: {name:<12} {seconds:6.2f} s  {kernels:4d} kernels  "
                  f"({time.perf_counter() - self.start:.1f} s so far)", file=self.stream, flush=True)
        self._printed = len(self.stages)


def stage(name: str, passes: list) -> tvm.transform.Pass:
    """``passes`` as one named stage of the pipeline."""
    return tvm.transform.Sequential(passes, name=STAGE_PREFIX + name)
