"""CPU schedules for the batched transpose ``Y[b, s, r, e] = X[b, r, s, e]``
(block ``T`` of ``topi_kernels.layout``).

``blocked`` (``E`` small; NCHW <-> NHWC, NCHW <-> NCHWc)::

    parallel for (b, s0):                       # tile of tile_s output rows
      for r0 in R / lanes:
        for s1 in tile_s: for e:
          Y[b, s0*tile_s + s1, r0*lanes : +lanes, e] = X[b, r0*lanes : +lanes, s, e]   # vector store,
                                                                                         # strided gather
    (a tile_s x lanes block of X is read from tile_s consecutive floats of lanes rows:
     the rows stay in L1 while the tile is written)

``chunks`` (``E`` at least one vector; NHWC <-> NCHWc, attention head swaps)::

    parallel for (b, s): for r: Y[b, s, r, 0:E] = X[b, r, s, 0:E]        # vector copies
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent
from .softmax import maybe_parallel


@dataclasses.dataclass(frozen=True)
class BlockedConfig:
    """``tile_s`` output rows per task; the ``r`` axis is vectorized in ``lanes``."""

    tile_s: int = 16
    lanes: int = 16


@dataclasses.dataclass(frozen=True)
class ChunkConfig:
    lanes: int = 16


def schedule_blocked(sch: s_tir.Schedule, cfg: BlockedConfig) -> None:
    t = sch.get_sblock("T")
    b, s, r, e = sch.get_loops(t)
    elems = extent(sch, b) * extent(sch, s) * extent(sch, r) * extent(sch, e)
    s0, s1 = sch.split(s, [None, cfg.tile_s])
    if extent(sch, r) >= cfg.lanes:
        r0, r1 = sch.split(r, [None, cfg.lanes])
        if extent(sch, e) == 1:
            sch.reorder(b, s0, r0, s1, e, r1)
            sch.vectorize(r1)
        else:
            sch.reorder(b, s0, r0, s1, r1, e)
            sch.unroll(r1)
    else:
        sch.reorder(b, s0, s1, r, e)
    maybe_parallel(sch, sch.fuse(b, s0), elems)


def schedule_chunks(sch: s_tir.Schedule, cfg: ChunkConfig) -> None:
    t = sch.get_sblock("T")
    b, s, r, e = sch.get_loops(t)
    elems = extent(sch, b) * extent(sch, s) * extent(sch, r) * extent(sch, e)
    if extent(sch, e) > cfg.lanes:
        _, e1 = sch.split(e, [None, cfg.lanes])
        sch.vectorize(e1)
    else:
        sch.vectorize(e)
    maybe_parallel(sch, sch.fuse(b, s), elems)
