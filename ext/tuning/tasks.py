"""Task extraction: the distinct workloads of a Relax module, with use counts.

Runs ext's pipeline on the module (graph passes, selection, weights, legalize,
lowering; not LLVM codegen) with a fresh ``SelectionReport`` and reads its
decisions: the tasks are exactly the workloads the build looks up, with the
build's use counts. Why the whole pipeline: the graph passes before selection
change the workloads (``FoldBatchNorm`` gives a conv a bias epilogue,
``FoldPadIntoConv`` and ``LayoutPolicy`` change its attributes); extracting
after ``Canonicalize`` + ``FuseEpilogues`` alone tuned ResNet-18's unfolded
convolutions, and 11 of its 14 tasks never matched a workload of the build
(issue 18: the build then asked the cost model instead of the log).

A task's ``weight`` is ``uses x estimated seconds``; the estimate is the
best measured time when known, else ``flops / 100 GFLOPS``.

Example
-------
>>> tasks = extract_tasks(ext.models.gemm.mlp(), ext.target.cpu())  # doctest: +SKIP
>>> [(t.workload.key, t.uses) for t in tasks]                        # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses

import tvm

from ..workload import Workload

#: throughput assumed for a workload nobody has measured (only orders tasks)
NOMINAL_FLOPS_PER_S = 100e9


@dataclasses.dataclass
class Task:
    """One workload to tune and how often the model runs it."""

    workload: Workload
    uses: int = 1

    def estimated_seconds(self, measured: float | None = None) -> float:
        if measured:
            return measured
        flops = self.workload.flops
        return flops / NOMINAL_FLOPS_PER_S if flops == flops else 1e-3  # NaN: symbolic

    def weight(self, measured: float | None = None) -> float:
        return self.uses * self.estimated_seconds(measured)


def extract_tasks(mod: tvm.IRModule, target) -> list[Task]:
    """Distinct ``Workload`` s of ``mod`` with use counts, in first-use order.

    Parameters
    ----------
    mod : a Relax IRModule (as given to ``ext.build``).
    target : the target it will be compiled for.

    Returns
    -------
    ``[Task]``: every workload the build's selector decides (module doc), except those with
    symbolic shapes and those no candidate applies to (stock lowering: nothing to tune).
    """
    from ..pipeline import _LAST, pipeline
    from ..strategies.report import SelectionReport
    from ..target import normalize

    if not isinstance(mod, tvm.IRModule):
        raise ValueError(f"extract_tasks needs a Relax IRModule, got {type(mod).__name__}")
    tgt = normalize(target)
    rep, last = SelectionReport(), _LAST.get("report")
    try:
        with tgt:
            pipeline(tgt, report=rep)(mod)
    finally:
        _LAST["report"] = last  # extraction is no build: ext.last_report() stays the last build's
    return [Task(d.workload, rep.uses[d.workload.key]) for d in rep.decisions
            if d.source != "fallback" and d.workload.is_static]
