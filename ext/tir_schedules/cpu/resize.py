"""CPU schedules of ``topi_kernels.resize``: one output row per step, rows in parallel.

Linear (blocks ``T``, ``D``): the row's vertical blend ``T`` is computed just before the row
(``W`` floats, in L1) from two input rows read as contiguous vectors; the row then reads ``T``
at its two columns per output pixel. Nearest (``D``): the row reads its input row at the
picked columns. Every row loop runs as whole vectors plus one narrower vector for the rest
(``vector_row``), so a 28- or 111-wide row has no scalar tail.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent, has_block
from .conv2d import partition_interior


@dataclasses.dataclass(frozen=True)
class ResizeConfig:
    """``rows``: output rows per parallel task (1: every row its own task); ``phases``: a whole
    up-scale's row runs phase by phase (``phase_row``) instead of as gathered vectors."""

    rows: int = 1
    phases: bool = True


def vector_row(sch: s_tir.Schedule, loop, lanes: int) -> None:
    """``loop`` as whole ``lanes``-wide vectors plus one vector of the remainder."""
    n = extent(sch, loop)
    if n <= lanes:
        sch.vectorize(loop)
        return
    if n % lanes:
        whole, tail = sch.loop_partition(loop, [n // lanes * lanes, None])
        sch.vectorize(tail)
    else:
        whole = loop
    _, vec = sch.split(whole, [None, lanes])
    sch.vectorize(vec)


def schedule_resize(sch: s_tir.Schedule, cfg: ResizeConfig, lanes: int, phases: int = 0,
                    interior: tuple = (1, 1)) -> None:
    """``phases``: the whole up-scale factor of the columns of a linear resize (0: none);
    ``interior``: the input columns whose taps need no clamp."""
    d = sch.get_sblock("D")
    n, c, oh, ow = sch.get_loops(d)
    oho, ohi = sch.split(oh, [None, cfg.rows])
    task = sch.fuse(n, c, oho)
    sch.parallel(task)
    if has_block(sch, "T"):  # linear: the row's vertical blend, just before the row
        t = sch.get_sblock("T")
        sch.compute_at(t, ohi)
        vector_row(sch, sch.get_loops(t)[-1], lanes)
    if phases:  # whole up-scale: phases innermost, border-free interior (see phase_row)
        phase_row(sch, ow, phases, interior)
    else:
        vector_row(sch, ow, lanes)


def phase_row(sch: s_tir.Schedule, ow, k: int, interior: tuple) -> None:
    """A row of a whole ``k``-times up-scale as ``i`` (input column) x ``j`` (phase, innermost):
    each phase's taps are input columns ``i + const``, so in the interior ``[lo, hi)``
    of ``i`` the clamps simplify away and LLVM's loop vectorizer turns the taps into contiguous
    loads and the ``k`` phases' stores into one interleaved store."""
    # j stays a loop: unrolled, a phase's weight 0 became a constant and TVM's simplifier folded
    # ``T * 0`` to 0, where IEEE (and the op's lowering) make ``inf * 0`` NaN; LLVM unrolls it
    # without that fold
    i, _ = sch.split(ow, [None, k])
    partition_interior(sch, i, *interior)
