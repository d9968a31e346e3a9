"""``matmul.batch_dot_dyn`` (CPU): batched ``a @ b^T`` with ``b`` read in place along its
contiguous, static K while the other extents are symbolic -- a decode step's attention scores
``q @ k^T`` against a key cache of run-time length. ``matmul.batch_dyn`` would first copy the
whole cache transposed into panels (a strided gather of every key, every step); here each
output is ``K / lanes`` vector FMAs over two contiguous rows and one horizontal sum, threads
over the batch (heads) and rows. Split from ``dynamic.py`` by concern (a reading order, not a
tiling).
"""
from __future__ import annotations

from ..relax_passes.symbolic import SymbolTable, out_shape
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import dynamic as sched
from ..tir_schedules.cpu.dynamic import BatchDotConfig
from ..topi_kernels import dynamic as dyn
from .dynamic import _batch_check, _placeholders, _static_suits
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes

#: at most this many rows of ``a`` per batch: beyond, ``matmul.batch_dyn``'s register tiles reuse
#: each loaded key for several queries
MAX_ROWS = 4


def _lanes_for(K: int, target) -> int:
    """The widest vector (a power of two, at most the target's) that divides K."""
    lanes = _lanes(target)
    while lanes > 1 and K % lanes:
        lanes //= 2
    return lanes


def _check(wl, target):
    reason = _batch_check(wl, target)
    if reason:
        return reason
    if not wl.attr("transpose_b"):
        return "b is not transposed (its reduction axis is not contiguous)"
    K, M = wl.shapes[0][-1], wl.shapes[0][-2]
    if not isinstance(K, int) or wl.shapes[1][-1] != K:
        return f"needs a static reduction length, got K={K}"
    if _lanes_for(K, target) < 4:
        return f"K={K} has no vector-width divisor of 4 or more"
    if not isinstance(M, int) or M > MAX_ROWS:
        return f"M={M}: more than {MAX_ROWS} rows (or symbolic), matmul.batch_dyn reuses each key across rows"
    return None


def _space(wl, target):
    K = wl.shapes[0][-1]
    return [BatchDotConfig(lanes=v) for v in (4, 8, 16, 32) if v <= _lanes_for(K, target) * 2 and K % v == 0]


def _build(wl, cfg: BatchDotConfig, target):
    table = SymbolTable()
    A, B, *extras = _placeholders(wl, table)
    out = table.shape(out_shape(wl))
    _, _, D = dyn.batch_dot(A, B, out_shape=out, lanes=cfg.lanes, epilogue=wl.epilogue, extras=extras,
                            out_dtype=wl.out_dtype)
    sch = create_schedule([A, B, *extras, D])
    sched.schedule_batch_dot(sch, nbatch=len(out) - 2)
    return finish(sch, "matmul.batch_dot_dyn")


register(Candidate("matmul.batch_dot_dyn", ("llvm",), PLEVEL.SPECIALIZED, _check, BatchDotConfig,
                   space=_space, default=lambda wl, t: BatchDotConfig(lanes=_lanes_for(wl.shapes[0][-1], t)),
                   build=_build, suits=_static_suits, dynamic=("cols", "batch")))
