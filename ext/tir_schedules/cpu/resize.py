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


@dataclasses.dataclass(frozen=True)
class ResizeConfig:
    """``rows``: output rows per parallel task (1: every row its own task)."""

    rows: int = 1


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


def schedule_resize(sch: s_tir.Schedule, cfg: ResizeConfig, lanes: int) -> None:
    d = sch.get_sblock("D")
    n, c, oh, ow = sch.get_loops(d)
    oho, ohi = sch.split(oh, [None, cfg.rows])
    task = sch.fuse(n, c, oho)
    sch.parallel(task)
    if has_block(sch, "T"):  # linear: the row's vertical blend, just before the row
        t = sch.get_sblock("T")
        sch.compute_at(t, ohi)
        vector_row(sch, sch.get_loops(t)[-1], lanes)
    vector_row(sch, ow, lanes)
