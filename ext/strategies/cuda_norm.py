"""Candidate tables for softmax, layer_norm and reductions on CUDA.

Workload conventions are those of the CPU tables (``strategies/softmax.py``,
``layer_norm.py``, ``reduce.py``); the computes are shared (``topi_kernels``),
the schedules are ``tir_schedules/cuda/{softmax,norm,reduce}.py``. float32 only
(other dtypes go to dlight's reduction rules, which the fallback applies).

* ``softmax.cuda_rows``, ``layer_norm.cuda_rows``, ``reduce.cuda_rows``: one thread block per
  row, warp-shuffle trees (plus a shared-memory stage across warps) for the row statistics;
* ``reduce.cuda_cols``: reductions over an outer axis (``I > 1``), one thread per kept element.
"""
from __future__ import annotations

from ..tir_schedules.common import WARP_SIZE, create_schedule, finish
from ..tir_schedules.cuda import norm as norm_sched
from ..tir_schedules.cuda import reduce as red_sched
from ..tir_schedules.cuda import softmax as sm_sched
from ..tir_schedules.cuda.reduce import ThreadsConfig
from ..tir_schedules.cuda.softmax import RowConfig
from ..topi_kernels import reduce as red
from .layer_norm import _check as _ln_check
from .layer_norm import layer_norm_tensors
from .reduce import _check as _red_check
from .reduce import _placeholder
from .registry import PLEVEL, Candidate, register
from .softmax import _builder as _softmax_builder
from .softmax import check_rows

THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)


def _threads_for(n: int, cap: int = 256) -> int:
    """Enough warps to cover ``n`` elements in one pass, at most ``cap`` threads."""
    return min(cap, max(WARP_SIZE, -(-n // WARP_SIZE) * WARP_SIZE))


def _row_space(cfg_type, n):
    return [cfg_type(threads=t) for t in THREAD_CHOICES if t <= max(WARP_SIZE, 4 * n)]


# -- softmax.cuda_rows ---------------------------------------------------------------------------

register(Candidate("softmax.cuda_rows", ("cuda",), PLEVEL.BLOCKED, check_rows, RowConfig,
                   space=lambda wl, t: _row_space(RowConfig, wl.shapes[0][1]),
                   default=lambda wl, t: RowConfig(threads=_threads_for(wl.shapes[0][1])),
                   build=_softmax_builder(sm_sched.schedule_rowwise, "softmax.cuda_rows")))


# -- layer_norm.cuda_rows ------------------------------------------------------------------------

def _ln_build(wl, cfg: RowConfig, target):
    sch = create_schedule(layer_norm_tensors(wl))
    norm_sched.schedule_layer_norm(sch, cfg)
    return finish(sch, "layer_norm.cuda_rows")


# dropout after layer_norm is the identity at inference: the same kernel serves the pair
register(Candidate("layer_norm.cuda_rows", ("cuda",), PLEVEL.BLOCKED, _ln_check, RowConfig,
                   space=lambda wl, t: _row_space(RowConfig, wl.shapes[0][1]),
                   default=lambda wl, t: RowConfig(threads=_threads_for(wl.shapes[0][1])), build=_ln_build))


# -- reduce.cuda_rows / reduce.cuda_cols -------------------------------------------------------

def _rows_check(wl, target):
    return _red_check(wl, target) or (None if wl.shapes[0][2] == 1 else "kept axes after the reduced ones: "
                                      "reduce.cuda_cols")


def _cols_check(wl, target):
    return _red_check(wl, target) or (None if wl.shapes[0][2] > 1 else "nothing kept inside the reduced axes: "
                                      "reduce.cuda_rows")


def _red_builder(schedule, name):
    def build(wl, cfg: ThreadsConfig, target):
        X = _placeholder(wl)
        Y = red.reduce_3d(X, wl.attr("kind"))
        sch = create_schedule([X, Y])
        schedule(sch, cfg)
        return finish(sch, name)

    return build


register(Candidate("reduce.cuda_rows", ("cuda",), PLEVEL.BLOCKED, _rows_check, ThreadsConfig,
                   space=lambda wl, t: _row_space(ThreadsConfig, wl.shapes[0][1]),
                   default=lambda wl, t: ThreadsConfig(threads=_threads_for(wl.shapes[0][1])),
                   build=_red_builder(red_sched.schedule_inner, "reduce.cuda_rows")))
register(Candidate("reduce.cuda_cols", ("cuda",), PLEVEL.BLOCKED, _cols_check, ThreadsConfig,
                   space=lambda wl, t: [ThreadsConfig(threads=n) for n in (64, 128, 256, 512)],
                   default=lambda wl, t: ThreadsConfig(threads=_threads_for(wl.shapes[0][0] * wl.shapes[0][2])),
                   build=_red_builder(red_sched.schedule_outer, "reduce.cuda_cols")))
