"""CPU schedules for the matmul family (AVX-512 / AVX2, multithreaded).

Tiled (direct, packed, batch; ``D``/``C`` from ``topi_kernels.matmul``)::

    parallel for panel j0 (nb columns) [x batch]:
      for row tile i0 (mb rows):
        acc[mb][nb] = 0                       # mb * nb/lanes vector registers
        for k in [0, K):                      # A[i, k] broadcast, B panel row k streamed
          for i1 in mb (unrolled): for j1 in nb (vectorized): acc[i1][j1] += A * B
        for i1, j1: D[..] = epilogue(acc)     # fused write-back

With nb = 64 and mb = 4 the accumulators take 16 of the 32 zmm registers
(AVX-512). A panel of packed B (K * nb * 4 bytes) stays in L2 while every row
tile streams through it. While the first row tiles of a panel run, they
prefetch the next panel of packed B into L2 (:func:`prefetch_next_panel`).
With ``order="rows"`` the two outer loops swap: each row tile of A stays in L1 while
every panel of B passes, so A (too large for L2) is read once instead of once per panel,
and B must be the one that stays in L2.

GEMV dot form (reduction axis contiguous): rows split across threads, the K
axis split into ``lanes``-wide vectors with one partial-sum vector per row
(rfactor), then a horizontal sum and the fused epilogue.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from tvm import s_tir, tirx

from ..common import extent
from .prefetch import LINE_FLOATS, i64, prefetch_lines


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """Register tile ``mb x nb`` (nb a multiple of the vector width) and how threads split work.

    parallel: ``"panels"`` splits column panels; ``"tiles"`` splits (panel, row tile) pairs;
    ``"rows"`` gives each thread one contiguous block of rows (every batch and panel of it), so a
    thread reads only the rows it produced in an earlier stage of the same kernel (Winograd);
    ``"none"`` runs on the calling thread (tiny problems: a thread-pool launch costs more).

    order: ``"panels"``: the panel loop outside the row tiles (a panel of B stays in L2 while
    all of A streams past it, once per panel); ``"rows"``: the row tiles outside (a row tile of
    A stays in L1 while all of B, kept in L2, passes; threads split the row tiles, with the
    batch, whatever ``parallel`` says but ``"none"``). ``"rows"`` pays when A is larger than L2
    and B fits: attention's P @ V over 1500 tokens (P 9 MB a head, V 384 KB) 0.85x the time.
    """

    mb: int = 4
    nb: int = 64
    parallel: str = "panels"
    order: str = "panels"
    #: knobs tuning records may lack (written before the knob existed): see ``Candidate.added_knobs``
    added_knobs: ClassVar[tuple] = ("order",)

    def __post_init__(self):
        if self.order not in ("panels", "rows"):
            raise ValueError(f"TileConfig.order must be 'panels' or 'rows', got {self.order!r}")
        if self.order == "rows" and self.parallel == "rows":
            raise ValueError("TileConfig: parallel='rows' (per-thread row blocks) needs order='panels'")


@dataclasses.dataclass(frozen=True)
class DotConfig:
    """GEMV dot form: ``rows`` outputs per inner step (unrolled), K vectors of ``lanes``."""

    rows: int = 4
    lanes: int = 16
    parallel: bool = True


@dataclasses.dataclass(frozen=True)
class TiledLoops:
    """Loop variables of a scheduled tiled matmul: the panel loop (None when fused with batch
    or row tiles), the row-tile loop and the reduction loop of the register tile."""

    panel: object
    row_tile: object
    k: object


def schedule_tiled(sch: s_tir.Schedule, cfg: TileConfig, lanes: int, nbatch: int = 0, *, threads: int) -> TiledLoops:
    """Schedule blocks ``C`` (padded accumulation) and ``D`` (fused output), see module doc;
    ``threads`` is the number of row blocks of ``parallel="rows"``."""
    d = sch.get_sblock("D")
    loops = sch.get_loops(d)
    batch, i, j = loops[:nbatch], loops[nbatch], loops[nbatch + 1]
    i0, i1 = sch.split(i, [None, cfg.mb])
    ragged = extent(sch, j) % cfg.nb  # the last panel's write-back is predicated column by column
    j0, j1 = sch.split(j, [None, cfg.nb])
    row_block = []
    if cfg.parallel == "rows":
        rb, i0 = sch.split(i0, [max(1, min(threads, extent(sch, i0))), None])
        row_block = [rb]
    rows_outer = cfg.order == "rows"
    sch.reorder(*row_block, *batch, *((i0, j0) if rows_outer else (j0, i0)), i1, j1)
    c, ck = accumulate_tile(sch, j0 if rows_outer else i0, cfg, lanes)
    if not ragged:
        _vectorize_store(sch, j1, cfg.nb, lanes)
    # else the write-back stays a scalar loop for LLVM to vectorize: TVM scalarizes a vector
    # loop whose predicate reads the lane, in every panel (attention scores 12x197x197: 0.59 ->
    # 0.46 ms); LLVM masks only what the predicate needs
    panel = j0 if not batch and not rows_outer and cfg.parallel in ("panels", "none") else None
    if cfg.parallel == "rows":
        sch.parallel(row_block[0])
    elif cfg.parallel != "none":
        outer = [*batch, i0] if rows_outer else [*batch, j0] if cfg.parallel == "panels" else [*batch, j0, i0]
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    sch.decompose_reduction(c, ck)
    return TiledLoops(sch.get(panel).loop_var if panel is not None else None,
                      sch.get(i0).loop_var if panel is not None else None, sch.get(ck).loop_var)


def prefetch_next_panel(func, loops: TiledLoops, *, K: int, nb: int, rows: int, buffer_index: int = 1):
    """``func`` (a packed matmul scheduled by :func:`schedule_tiled`) with a software prefetch
    of the next panel of B into L2, spread over the first row tiles of each panel: step ``k``
    of row tile ``i0`` prefetches line ``i0 * K + k`` of panel ``p + 1`` (one line per step
    and 24 FMAs; ``nb / 16`` row tiles cover the panel), or ``s`` lines per step when a
    panel has fewer row tiles than that. The other row tiles skip it (a test on ``i0``, which
    LLVM hoists out of the k loop).

    Why: in a model every weight is cold when its kernel starts, and a weight larger than L2
    is streamed from L3 or DRAM panel by panel; the hardware prefetchers stop at 4 KB page
    boundaries, and the first row tile of each panel waits on the misses. Measured on an
    Emerald Rapids VM (interleaved, one kernel): 128 x 768 x 50257 (GPT-2's head) 0.88x the
    time without, 197 x 768 x 2304 0.92x, 16 x 4096 x 4096 0.77x, shapes whose B fits L2
    1.00x; BERT-base 0.89-0.94x, GPT-2 0.94x. ``rows``: the row tiles per panel; none with
    one row tile (a GEMV streams B at memory speed and prefetches only add traffic:
    1 x 4096 x 4096 took 1.7x as long)."""
    panels, lines = int(func.params[buffer_index].shape[0]), K * nb // LINE_FLOATS
    if loops.panel is None or rows < 2 or panels < 2:
        return func
    tiles = -(-lines // K)  # row tiles that prefetch, one line per step each
    per_step = -(-tiles // min(rows, tiles))
    start = tirx.min(loops.panel + i64(1), i64(panels - 1)) * i64(K * nb)
    step = (loops.row_tile * i64(K) + loops.k) * i64(per_step)
    return prefetch_lines(func, loops.k, buffer_index, start,
                          [tirx.min(step + i64(r), i64(lines - 1)) for r in range(per_step)],
                          guard=loops.row_tile < i64(-(-tiles // per_step)))


def accumulate_tile(sch: s_tir.Schedule, i0, cfg: TileConfig, lanes: int, block: str = "C"):
    """The ``mb x nb`` accumulator tile of ``block`` (``C``) in registers under loop ``i0``
    (see :func:`register_tile`). Returns ``(block, reduction loop)`` for ``decompose_reduction``.
    ``cfg.nb`` is unused: the tile is the block's region there."""
    c = sch.get_sblock(block)
    sch.compute_at(c, i0, preserve_unit_loops=True)
    sch.set_scope(c, 0, "local")
    return c, register_tile(sch, c, lanes)


def register_tile(sch: s_tir.Schedule, c, lanes: int):
    """Block ``c``'s last three loops (rows, columns, reduction) as a register tile: the
    reduction outermost, rows unrolled, columns vectorized; returns the reduction loop."""
    ci, cj, ck = sch.get_loops(c)[-3:]
    sch.reorder(ck, ci, cj)
    sch.unroll(ci)
    nb = extent(sch, cj)
    if nb % lanes == 0 and nb // lanes in (1, 2, 4):
        sch.vectorize(cj)
        return ck
    # 48 or 96 lanes in one vector loop spill, and a width that is not whole vectors (an
    # attention head of 24) ran 4x slower as one 24-lane loop: unrolled vectors of the widest
    # power of two dividing it
    width = min(lanes, nb & -nb)
    cj0, cj1 = sch.split(cj, [None, width])
    sch.unroll(cj0)
    sch.vectorize(cj1)
    return ck


def _vectorize_store(sch, loop, nb: int, lanes: int) -> None:
    """Vectorize the fused write-back in ``lanes``-wide pieces."""
    if nb > lanes and nb % lanes == 0:
        _, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)
    else:
        sch.vectorize(loop)


def schedule_pack(sch: s_tir.Schedule, lanes: int) -> None:
    """Weight packing ``Bp[p, k, l]``: parallel over panels, vectorized over ``l``."""
    b = sch.get_sblock("Bp")
    p, k, l = sch.get_loops(b)
    sch.parallel(p)
    if extent(sch, l) % lanes == 0:
        _vectorize_store(sch, l, extent(sch, l), lanes)


def schedule_dot(sch: s_tir.Schedule, cfg: DotConfig) -> None:
    """GEMV dot form over blocks ``C`` (rows x K) and ``D`` (fused output)."""
    c = sch.get_sblock("C")
    r, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [None, cfg.lanes])
    rf = sch.rfactor(k1, factor_axis=1)
    r_rf, k0_rf, k1_rf = sch.get_loops(rf)
    r0, r1 = sch.split(r_rf, [None, cfg.rows])
    sch.reorder(r0, k0_rf, r1, k1_rf)
    sch.vectorize(k1_rf)
    sch.unroll(r1)
    if cfg.parallel:
        sch.parallel(r0)
    sch.reverse_compute_at(c, r0)
    sch.decompose_reduction(rf, k0_rf)
    d = sch.get_sblock("D")
    loops = sch.get_loops(d)
    if cfg.parallel:
        sch.parallel(sch.fuse(*loops))


def schedule_transpose(sch: s_tir.Schedule, block_name: str, lanes: int) -> None:
    """``Bt[.., k, j] = B[.., j, k]``: tile (k, j) so reads and writes both stay within a few
    cache lines, vectorize the contiguous write along j, parallelize the outer tiles."""
    b = sch.get_sblock(block_name)
    loops = sch.get_loops(b)
    *batch, k, j = loops
    tk = min(lanes, extent(sch, k))
    tj = lanes if extent(sch, j) % lanes == 0 else 1
    k0, k1 = sch.split(k, [None, tk])
    j0, j1 = sch.split(j, [None, tj])
    sch.reorder(*batch, k0, j0, k1, j1)
    if tj > 1:
        sch.vectorize(j1)
    sch.parallel(sch.fuse(*batch, k0) if batch else k0)


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """A run-time weight read in place (``matmul.stream``): ``mb`` rows of A per register tile;
    ``nb`` columns of B per tile (kn layout; a multiple of the vector width) or rows of the
    ``(N, K)`` weight per tile (nk layout); ``parallel`` splits the tiles of B across threads."""

    mb: int = 1
    nb: int = 64
    parallel: bool = True


#: below this many output elements the epilogue pass stays on the calling thread
_SERIAL_OUTPUT = 1 << 16


def schedule_stream_kn(sch: s_tir.Schedule, cfg: StreamConfig, lanes: int, out_elems: int, contiguous: bool) -> None:
    """``stream_kn``: per tile of ``nb`` columns (parallel) and ``mb`` rows, the accumulators
    ``mb x nb`` stay in registers while k walks B's rows (each read once, ``nb`` floats
    contiguous); then the fused epilogue ``D`` (vectorized when ``contiguous``: no overlapping
    last vector)."""
    c = sch.get_sblock("C")
    wb = sch.cache_write(c, 0, "local")
    i, v, l, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, cfg.mb])
    v0, v1 = sch.split(v, [None, max(1, cfg.nb // lanes)])
    sch.reorder(v0, i0, k, i1, v1, l)
    sch.reverse_compute_at(wb, i0)
    sch.unroll(i1)
    sch.unroll(v1)
    sch.vectorize(l)
    sch.vectorize(sch.get_loops(wb)[-1])
    if cfg.parallel:
        sch.parallel(v0)
    sch.decompose_reduction(c, k)
    _schedule_epilogue(sch, lanes, out_elems, contiguous)


def schedule_dot_nk(sch: s_tir.Schedule, cfg: StreamConfig, out_elems: int, lanes: int, contiguous: bool) -> None:
    """``dot_nk``: per tile of ``nb`` weight rows (parallel) and ``mb`` rows of A, ``mb x nb``
    partial-sum vectors stay in registers while k walks both operands' contiguous rows; then the
    horizontal sums and the scalar K tail; then the fused epilogue (``lanes``-wide vectors when
    ``contiguous``: N a multiple of ``lanes``)."""
    c = sch.get_sblock("C")
    ci, cj, cl = sch.get_loops(c)
    i0, i1 = sch.split(ci, [None, cfg.mb])
    j0, j1 = sch.split(cj, [None, cfg.nb])
    sch.reorder(j0, i0, i1, j1, cl)
    p = sch.get_sblock("P")
    sch.compute_at(p, i0, preserve_unit_loops=True)
    sch.set_scope(p, 0, "local")
    pi, pj, pl, pk = sch.get_loops(p)[-4:]
    sch.reorder(pk, pj, pi, pl)
    sch.unroll(pj)
    sch.unroll(pi)
    sch.vectorize(pl)
    if cfg.parallel:
        sch.parallel(j0)
    sch.decompose_reduction(p, pk)
    _schedule_epilogue(sch, lanes, out_elems, contiguous)


def _schedule_epilogue(sch: s_tir.Schedule, lanes: int, out_elems: int, contiguous: bool) -> None:
    """The fused epilogue ``D`` (M x N) as its own pass: vectorized rows when ``contiguous``,
    across threads when large."""
    d = sch.get_sblock("D")
    i, j = sch.get_loops(d)
    outer = [i]
    if contiguous and extent(sch, j) % lanes == 0:
        j0, j1 = sch.split(j, [None, lanes])
        sch.vectorize(j1)
        outer.append(j0)
    if out_elems >= _SERIAL_OUTPUT:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else i)
