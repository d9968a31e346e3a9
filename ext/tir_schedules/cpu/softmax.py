"""CPU schedules for row softmax (blocks ``max``, ``exp``, ``sum``, ``out`` of
``topi_kernels.softmax``).

``rowwise`` (rows of at least one vector)::

    parallel for r0 in rows / rows_per_task:
      for r1 in rows_per_task:
        acc[lanes] = -inf; for k0: acc = max(acc, X[r, k0*lanes : +lanes])   # rfactor, vectorized
        m = hmax(acc)
        for k (vectorized): E[k] = exp(X[r, k] - m)        # E: n floats, L1
        acc[lanes] = 0; for k0: acc += E[k0*lanes : +lanes]; s = hsum(acc)
        for k (vectorized): Y[r, k] = E[k] / s

``short`` (rows shorter than a vector or of odd length): the same passes,
scalar and unrolled per row, with many rows per parallel task.

A tail (``n`` not a multiple of ``lanes``) runs as a predicated vector loop in
the element-wise passes; the reductions then stay scalar (an rfactor over a
predicated split miscompiled in TVM 0.27, so it is not used).
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent, has_block


#: below this many elements a kernel runs on one thread: waking the pool costs a few us
MIN_PARALLEL_ELEMS = 16384


def maybe_parallel(sch, loop, elems: int) -> None:
    """``parallel(loop)`` when the kernel touches at least ``MIN_PARALLEL_ELEMS`` elements."""
    if elems >= MIN_PARALLEL_ELEMS and extent(sch, loop) > 1:
        sch.parallel(loop)


def _elems(sch, block) -> int:
    n = 1
    for loop in sch.get_loops(block):
        n *= extent(sch, loop)
    return n


@dataclasses.dataclass(frozen=True)
class RowConfig:
    """``rows_per_task`` rows per parallel iteration; ``lanes`` vector width of the row loops."""

    rows_per_task: int = 1
    lanes: int = 16


def vectorize_inner(sch, block, lanes: int) -> None:
    """Vectorize ``block``'s innermost loop by ``lanes``. A tail (extent not a multiple of
    ``lanes``) becomes its own loop, so the whole vectors carry no predicate: a predicated
    vector loop is scalarized (or gathers) by TVM's codegen, 2.4x the time of a softmax row."""
    loop = sch.get_loops(block)[-1]
    n = extent(sch, loop)
    if n <= lanes:
        sch.vectorize(loop) if n == lanes else sch.unroll(loop)
        return
    outer, inner = sch.split(loop, [None, lanes])
    sch.vectorize(inner)
    if n % lanes:
        sch.loop_partition(outer, [n // lanes, None])


def rfactor_lanes(sch, block, lanes: int):
    """Split ``block``'s (innermost) reduction loop into lanes and rfactor it: returns the
    per-lane partial block (``None`` when the loop is too short). Call before compute_at."""
    loop = sch.get_loops(block)[-1]
    n = extent(sch, loop)
    if n < 2 * lanes or n % lanes:  # a predicated rfactor tail miscompiles: keep it scalar
        return None
    _, k1 = sch.split(loop, [None, lanes])
    return sch.rfactor(k1, factor_axis=len(sch.get_loops(block)) - 2)


def vectorize_rf(sch, rf, valid: int | None = None) -> None:
    """Vectorize a partial block from ``rfactor_lanes`` (after compute_at) and split its init.
    ``valid``: the reduction's true length when the compute padded it to whole vectors
    (``pad_to``); the last vector, the only one that reads padding, gets its own loop."""
    k1, k0 = sch.get_loops(rf)[-2:]  # compute_at orders the spatial lane loop first
    lanes = extent(sch, k1)
    sch.reorder(k0, k1)
    sch.vectorize(k1)
    sch.decompose_reduction(rf, k0)
    if valid is not None and valid % lanes:
        sch.loop_partition(sch.get_loops(rf)[-2], [valid // lanes, None])


def row_loops(sch, cfg: RowConfig, blocks=("sum", "exp", "max"), symbolic: bool = False):
    """Parallel row loop; ``blocks`` (consumers first) and their rfactor partials at the row.
    ``symbolic``: the row count is a variable, so the loop is always parallel (a row is a task)."""
    out = sch.get_sblock("cast") if has_block(sch, "cast") else sch.get_sblock("out")
    elems = None if symbolic else _elems(sch, out)
    r, _ = sch.get_loops(out)
    r0, r1 = sch.split(r, [None, cfg.rows_per_task])
    if has_block(sch, "cast"):
        sch.compute_at(sch.get_sblock("out"), r1)
    for name in blocks:
        sch.compute_at(sch.get_sblock(name), r1)
        if has_block(sch, name + "_rf"):
            sch.compute_at(sch.get_sblock(name + "_rf"), r1)
    if symbolic:
        sch.parallel(r0)
    else:
        maybe_parallel(sch, r0, elems)


def row_length(sch, block: str = "out") -> int:
    """The true row length: the innermost extent of an element-wise ``block`` (the row
    reductions may run to a padded length, see ``pad_to`` in the computes)."""
    return extent(sch, sch.get_loops(sch.get_sblock(block))[-1])


def schedule_rowwise(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    n = row_length(sch)
    rfs = [rfactor_lanes(sch, sch.get_sblock(name), cfg.lanes) for name in ("max", "sum")]
    row_loops(sch, cfg)
    for rf in rfs:
        if rf is not None:
            vectorize_rf(sch, rf, n)
    for name in ("out", "exp") + (("cast",) if has_block(sch, "cast") else ()):
        vectorize_inner(sch, sch.get_sblock(name), cfg.lanes)


def schedule_short(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    row_loops(sch, cfg)
    for name in ("out", "exp", "max", "sum"):
        loop = sch.get_loops(sch.get_sblock(name))[-1]
        if extent(sch, loop) <= 32:
            sch.unroll(loop)
