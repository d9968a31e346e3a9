"""CPU schedules for reductions (computes in ``topi_kernels.reduce``).

``inner`` (``I == 1``: the reduced axes are innermost and contiguous)::

    parallel for o0 in O / rows_per_task: for o1:
        acc[lanes] = identity; for k0: acc = acc (op) X[o, k0*lanes : +lanes]   # rfactor, vectorized
        Y[o] = hreduce(acc)

``outer`` (``I > 1``: reduce along a strided axis, vectorize the kept inner axis)::

    parallel for i0 in I / cols:
        acc[cols] = identity                       # cols floats, L1
        for k in [0, R): for i1 (lanes-wide vectors): acc[i1] = acc[i1] (op) X[o, k, i0*cols + i1]
        Y[o, i0*cols : +cols] = acc

  or, with ``chunks > 1`` (few outputs, a long reduced axis), every thread streams
  whole rows of its slice of ``k`` into a partial row, then the partial rows are
  combined: splitting columns instead reads one page-sized piece per row, which
  defeats the hardware prefetcher (3x slower measured on 4096x4096 over axis 0).

``split`` (``I == 1``, few rows, one long reduction): every thread reduces
whole ``lanes``-vectors of one chunk of the row, then the ``chunks * lanes``
partials are combined serially::

    parallel for (o, t): acc[lanes] = identity; for c: acc = acc (op) X[o, (t*C + c)*lanes : +lanes]
    for o: Y[o] = reduce over (t, l) of P[o, t, l]
"""
from __future__ import annotations

import dataclasses
import math

from tvm import s_tir

from ..common import extent
from .softmax import maybe_parallel, rfactor_lanes, vectorize_rf


@dataclasses.dataclass(frozen=True)
class InnerConfig:
    rows_per_task: int = 1
    lanes: int = 16


@dataclasses.dataclass(frozen=True)
class OuterConfig:
    """``cols`` kept inner elements per parallel task (a multiple of ``lanes``); ``chunks > 1``
    (a divisor of R) splits the reduced axis across threads instead (partial rows, then a sum)."""

    cols: int = 64
    lanes: int = 16
    chunks: int = 1


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """``chunks`` parallel partial reductions of ``lanes``-wide vectors each."""

    chunks: int = 8
    lanes: int = 16


def _input_elems(sch) -> int:
    """Elements of the reduced input X (the kernel's first parameter)."""
    return math.prod(int(d) for d in sch.mod["main"].params[0].ty.shape)


def reduced_length(sch) -> int:
    """``R`` of the reduced input ``X (O, R, I)``: the reduction's true length (``pad_to``)."""
    return int(sch.mod["main"].params[0].ty.shape[1])


def _vectorize(sch, loop, lanes: int) -> None:
    n = extent(sch, loop)
    if n > lanes:
        _, loop = sch.split(loop, [None, lanes])
    sch.vectorize(loop)


def schedule_inner(sch: s_tir.Schedule, cfg: InnerConfig) -> None:
    acc = sch.get_sblock("acc")
    elems = _input_elems(sch)
    rf = rfactor_lanes(sch, acc, cfg.lanes)
    out = sch.get_sblock("out")
    o, _ = sch.get_loops(out)
    o0, o1 = sch.split(o, [None, cfg.rows_per_task])
    sch.compute_at(acc, o1)
    maybe_parallel(sch, o0, elems)  # before decompose_reduction, which leaves blocks parallel() rejects
    if rf is not None:
        sch.compute_at(rf, o1)
        vectorize_rf(sch, rf, reduced_length(sch))


def schedule_outer(sch: s_tir.Schedule, cfg: OuterConfig, symbolic: bool = False) -> None:
    """``symbolic``: the row count is a variable: no chunks, rows always parallel."""
    if cfg.chunks > 1 and not symbolic:
        _outer_chunked(sch, cfg)
        return
    out = sch.get_sblock("out")
    o, i = sch.get_loops(out)
    i0, i1 = sch.split(i, [None, cfg.cols])
    if symbolic:
        sch.parallel(sch.fuse(o, i0))
    else:
        maybe_parallel(sch, sch.fuse(o, i0), _input_elems(sch))
    acc = sch.get_sblock("acc")
    sch.compute_at(acc, sch.get_loops(out)[0], preserve_unit_loops=True)
    ai, ak = sch.get_loops(acc)[-2:]
    sch.reorder(ak, ai)
    _vectorize(sch, ai, cfg.lanes)
    sch.decompose_reduction(acc, ak)
    _vectorize(sch, i1, cfg.lanes)


def _outer_chunked(sch: s_tir.Schedule, cfg: OuterConfig) -> None:
    """Threads take ``chunks`` slices of the reduced axis, each streaming whole rows of X into a
    partial row (prefetch-friendly: a column split reads one page-sized piece per row)."""
    acc = sch.get_sblock("acc")
    elems = _input_elems(sch)
    o, i, k = sch.get_loops(acc)
    k0, k1 = sch.split(k, [cfg.chunks, None])
    rf = sch.rfactor(k0, factor_axis=0)  # acc_rf[chunk, o, i]
    ro, ri, rk0, rk1 = sch.get_loops(rf)
    sch.reorder(rk0, ro, rk1, ri)
    maybe_parallel(sch, sch.fuse(rk0, ro), elems)
    _vectorize(sch, ri, cfg.lanes)
    sch.decompose_reduction(rf, rk1)
    fo, fi, fk = sch.get_loops(acc)
    sch.reorder(fo, fk, fi)
    _vectorize(sch, fi, cfg.lanes)
    sch.decompose_reduction(acc, fk)
    out = sch.get_sblock("out")
    _vectorize(sch, sch.get_loops(out)[-1], cfg.lanes)


def schedule_split(sch: s_tir.Schedule, cfg: SplitConfig) -> None:
    part = sch.get_sblock("part")
    elems = _input_elems(sch)
    o, t, l, c = sch.get_loops(part)
    sch.reorder(o, t, c, l)
    maybe_parallel(sch, sch.fuse(o, t), elems)
    sch.vectorize(l)
    sch.decompose_reduction(part, c)
