"""CPU schedules for reductions (computes in ``topi_kernels.reduce``).

``inner`` (``I == 1``: the reduced axes are innermost and contiguous)::

    parallel for o0 in O / rows_per_task: for o1:
        acc[lanes] = identity; for k0: acc = acc (op) X[o, k0*lanes : +lanes]   # rfactor, vectorized
        Y[o] = hreduce(acc)

``outer`` (``I > 1``: reduce along a strided axis, vectorize the kept inner axis)::

    parallel for i0 in I / cols:
        acc[cols] = identity                       # cols floats, L1
        for k in [0, R): for i1 (lanes-wide vectors): acc[i1] = acc[i1] (op) X[o, k, i0*cols + i1]
        Y[o, i0*cols : +cols] = acc                # every row of X streamed contiguously

``split`` (``I == 1``, few rows, one long reduction): every thread reduces
whole ``lanes``-vectors of one chunk of the row, then the ``chunks * lanes``
partials are combined serially::

    parallel for (o, t): acc[lanes] = identity; for c: acc = acc (op) X[o, (t*C + c)*lanes : +lanes]
    for o: Y[o] = reduce over (t, l) of P[o, t, l]
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent
from .softmax import rfactor_lanes, vectorize_rf


@dataclasses.dataclass(frozen=True)
class InnerConfig:
    rows_per_task: int = 1
    lanes: int = 16


@dataclasses.dataclass(frozen=True)
class OuterConfig:
    """``cols`` kept inner elements per parallel task (a multiple of ``lanes``)."""

    cols: int = 64
    lanes: int = 16


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """``chunks`` parallel partial reductions of ``lanes``-wide vectors each."""

    chunks: int = 8
    lanes: int = 16


def _vectorize(sch, loop, lanes: int) -> None:
    n = extent(sch, loop)
    if n > lanes:
        _, loop = sch.split(loop, [None, lanes])
    sch.vectorize(loop)


def schedule_inner(sch: s_tir.Schedule, cfg: InnerConfig) -> None:
    acc = sch.get_sblock("acc")
    rf = rfactor_lanes(sch, acc, cfg.lanes)
    out = sch.get_sblock("out")
    o, _ = sch.get_loops(out)
    o0, o1 = sch.split(o, [None, cfg.rows_per_task])
    sch.compute_at(acc, o1)
    sch.parallel(o0)  # before decompose_reduction, which leaves blocks parallel() rejects
    if rf is not None:
        sch.compute_at(rf, o1)
        vectorize_rf(sch, rf)


def schedule_outer(sch: s_tir.Schedule, cfg: OuterConfig) -> None:
    out = sch.get_sblock("out")
    o, i = sch.get_loops(out)
    i0, i1 = sch.split(i, [None, cfg.cols])
    sch.parallel(sch.fuse(o, i0))
    acc = sch.get_sblock("acc")
    sch.compute_at(acc, sch.get_loops(out)[0], preserve_unit_loops=True)
    ai, ak = sch.get_loops(acc)[-2:]
    sch.reorder(ak, ai)
    _vectorize(sch, ai, cfg.lanes)
    sch.decompose_reduction(acc, ak)
    _vectorize(sch, i1, cfg.lanes)


def schedule_split(sch: s_tir.Schedule, cfg: SplitConfig) -> None:
    part = sch.get_sblock("part")
    o, t, l, c = sch.get_loops(part)
    sch.reorder(o, t, c, l)
    sch.parallel(sch.fuse(o, t))
    sch.vectorize(l)
    sch.decompose_reduction(part, c)
