"""Candidate table for softmax (CPU).

Workload convention (built by ``relax_passes.families.softmax``): one input
``(rows, n)`` (N-D inputs flattened, softmax over the last axis), attr
``out_shape``. Candidates: ``softmax.rowwise`` (vectorized passes with lane
reductions) and ``softmax.short`` (rows shorter than a vector).
"""
from __future__ import annotations

from tvm import te

from ..relax_passes.inplace import ROW_INPLACE
from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import softmax as sched
from ..tir_schedules.cpu.softmax import RowConfig
from ..topi_kernels import softmax as sm
from ..workload import Workload
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes


def check_rows(wl: Workload, target) -> str | None:
    """Shared check of row-wise (rows, n) float32 workloads (softmax, layer_norm)."""
    if wl.dtypes[0] != "float32" or wl.out_dtype != "float32":
        return f"float32 only, got {wl.dtypes[0]} -> {wl.out_dtype}"
    if len(wl.shapes[0]) != 2:
        return f"expects (rows, n) after flattening, got rank {len(wl.shapes[0])}"
    if min(wl.shapes[0]) == 0:
        return "zero-size dimension"
    return None


def _space(wl, target):
    rows = wl.shapes[0][0]
    return [RowConfig(rows_per_task=r, lanes=l) for r in (1, 2, 4, 8, 16) if r <= rows
            for l in sorted({_lanes(target), max(4, _lanes(target) // 2)})]


def _default_rowwise(wl, target):
    return RowConfig(rows_per_task=1, lanes=_lanes(target))


def _default_short(wl, target):
    rows, n = wl.shapes[0]
    # a task of at least ~1024 elements amortizes the per-task overhead
    return RowConfig(rows_per_task=max(1, min(rows // (4 * cpu_info(target).cores) or 1, -(-1024 // n))),
                     lanes=_lanes(target))


def _builder(schedule, name, vector_rows: bool = False):
    def build(wl, cfg: RowConfig, target):
        rows, n = wl.shapes[0]
        X = te.placeholder((sm._i64(rows), sm._i64(n)), dtype=wl.dtypes[0], name="X")
        pad = cfg.lanes if vector_rows and n >= 2 * cfg.lanes else 1  # whole vectors for the row reductions
        Y = sm.softmax_rows(X, rows, n, wl.out_dtype, pad_to=pad)
        sch = create_schedule([X, Y])
        schedule(sch, cfg)
        # each row is read whole (max, exp) before that row is written: safe over a dying input
        return finish(sch, name).with_attr(ROW_INPLACE, [0])

    return build


def _rowwise_suits(wl, target):
    n = wl.shapes[0][1]
    return None if n >= _lanes(target) else f"rows of {n} are shorter than one vector"


def _short_suits(wl, target):
    n = wl.shapes[0][1]
    return None if n < _lanes(target) else f"rows of {n} fill vectors: softmax.rowwise"


register(Candidate("softmax.rowwise", ("llvm",), PLEVEL.BLOCKED, check_rows, RowConfig, space=_space,
                   default=_default_rowwise, build=_builder(sched.schedule_rowwise, "softmax.rowwise", True),
                   suits=_rowwise_suits))
register(Candidate("softmax.short", ("llvm",), PLEVEL.DIRECT, check_rows, RowConfig, space=_space,
                   default=_default_short, build=_builder(sched.schedule_short, "softmax.short", False),
                   suits=_short_suits))
