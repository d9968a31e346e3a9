"""CPU schedules for kernels with a symbolic outer extent (``topi_kernels.dynamic``,
row-wise softmax / layer norm over symbolic rows).

The static schedules are reused where they only split the symbolic loop
(``matmul.schedule_tiled``: a row loop of ``ceildiv(M, mb) * mb`` splits
exactly); what differs is the threading decision, which the static schedules
take from the loop extents (no threads under ~16K elements): with a symbolic
extent the row loop is always parallel (a call with one row pays one wake-up
of the thread pool, a few us).

A loop of symbolic length split by the vector width keeps a predicate in the
vector loop, which TVM scalarizes (3.3x slower on ``exp``); loops over a
symbolic extent are therefore either padded to whole vectors by the compute
or left plain for LLVM to vectorize with a run-time tail (the write-back of a
symbolic N, softmax's element-wise passes).
"""
from __future__ import annotations

import dataclasses

import tvm
from tvm import s_tir

from ..common import has_block
from .matmul import TileConfig, accumulate_tile, schedule_tiled
from .softmax import RowConfig, rfactor_lanes, row_length, row_loops, vectorize_inner, vectorize_rf
from .reduce import reduced_length

__all__ = ["TileConfig", "RowConfig", "BatchDotConfig", "schedule_batch_dot", "lane_partials_at", "schedule_rows_gemm", "schedule_batch", "schedule_softmax",
           "schedule_softmax_cols", "schedule_layer_norm", "schedule_reduce_inner", "schedule_reduce_outer"]


def schedule_rows_gemm(sch: s_tir.Schedule, cfg: TileConfig, lanes: int, nbatch: int, threads: int) -> None:
    """``matmul_rows``: the static tiled schedule over the symbolic row loop."""
    schedule_tiled(sch, cfg, lanes, nbatch=nbatch, threads=threads)


def _tiled_plain_store(sch: s_tir.Schedule, cfg: TileConfig, lanes: int, nbatch: int) -> None:
    """``matmul.schedule_tiled`` (parallel ``panels``/``none``) with the write-back's column loop
    left plain: with a symbolic N it carries a predicate, which a TIR vector loop would scalarize
    and LLVM vectorizes with masked stores."""
    d = sch.get_sblock("D")
    loops = sch.get_loops(d)
    batch, i, j = loops[:nbatch], loops[nbatch], loops[nbatch + 1]
    i0, i1 = sch.split(i, [None, cfg.mb])
    j0, j1 = sch.split(j, [None, cfg.nb])
    sch.reorder(*batch, j0, i0, i1, j1)
    c, ck = accumulate_tile(sch, i0, cfg, lanes)
    if cfg.parallel != "none":
        outer = [*batch, j0] if cfg.parallel == "panels" else [*batch, j0, i0]
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    sch.decompose_reduction(c, ck)


def schedule_batch(sch: s_tir.Schedule, cfg: TileConfig, lanes: int, nbatch: int, threads: int,
                   symbolic_cols: bool = False) -> None:
    """``batch_matmul``: the in-kernel copy ``Bt`` parallel over its batch axes (or K when
    unbatched), its contiguous axis vectorized; then the tiled schedule of ``C``/``D``."""
    if has_block(sch, "Bt"):
        bt = sch.get_sblock("Bt")
        loops = sch.get_loops(bt)
        outer = loops[:-1] if len(loops) > 2 else loops[:1]
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        _, j1 = sch.split(loops[-1], [None, lanes])
        sch.vectorize(j1)
    if symbolic_cols:
        _tiled_plain_store(sch, cfg, lanes, nbatch)
    else:
        schedule_tiled(sch, cfg, lanes, nbatch=nbatch, threads=threads)


def _row_loops(sch: s_tir.Schedule, cfg: RowConfig, blocks) -> None:
    row_loops(sch, cfg, blocks, symbolic=True)


def schedule_softmax(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    """``softmax.schedule_rowwise`` with the symbolic row loop."""
    n = row_length(sch)
    rfs = [rfactor_lanes(sch, sch.get_sblock(name), cfg.lanes) for name in ("max", "sum")]
    _row_loops(sch, cfg, ("sum", "exp", "max"))
    for rf in rfs:
        if rf is not None:
            vectorize_rf(sch, rf, n)
    for name in ("out", "exp") + (("cast",) if has_block(sch, "cast") else ()):
        vectorize_inner(sch, sch.get_sblock(name), cfg.lanes)


def schedule_layer_norm(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    """``norm.schedule_layer_norm`` with the symbolic row loop."""
    n = row_length(sch)
    rfs = [rfactor_lanes(sch, sch.get_sblock(name), cfg.lanes) for name in ("s1", "s2")]
    _row_loops(sch, cfg, ("rstd", "mean", "s2", "s1"))
    for rf in rfs:
        if rf is not None:
            vectorize_rf(sch, rf, n)
    vectorize_inner(sch, sch.get_sblock("out"), cfg.lanes)


def _rfactor_symbolic(sch: s_tir.Schedule, block, lanes: int):
    """``softmax.rfactor_lanes`` for a reduction over whole vectors (``n // lanes * lanes``);
    ``None`` for a static length of one vector, whose vector loop would fold away (a plain
    loop of ``lanes`` steps; a length of zero vectors keeps its empty partials)."""
    loop = sch.get_loops(block)[-1]
    n = sch.get(loop).extent
    if isinstance(n, tvm.tirx.IntImm) and n.value == lanes:
        return None
    _, k1 = sch.split(loop, [None, lanes])
    return sch.rfactor(k1, factor_axis=len(sch.get_loops(block)) - 2)


def schedule_softmax_cols(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    """``softmax_cols``: rows in parallel, the whole-vector halves of both reductions as lane-wise
    partials; the element-wise passes and the tails stay plain loops (see the compute)."""
    rfs = [_rfactor_symbolic(sch, sch.get_sblock(name), cfg.lanes) for name in ("max_v", "sum_v")]
    _row_loops(sch, cfg, ("inv", "sum_t", "sum_v", "exp", "max", "max_t", "max_v"))
    for rf in rfs:
        if rf is not None:
            vectorize_rf(sch, rf)
    for name in ("max_t", "sum_t"):  # the tail may be empty: its init must not sit inside its loop
        block = sch.get_sblock(name)
        sch.decompose_reduction(block, sch.get_loops(block)[-1])


def schedule_reduce_inner(sch: s_tir.Schedule, cfg) -> None:
    """``reduce.schedule_inner`` (``I == 1``) over a symbolic row count: rows always parallel."""
    acc = sch.get_sblock("acc")
    rf = rfactor_lanes(sch, acc, cfg.lanes)
    out = sch.get_sblock("out")
    o, _ = sch.get_loops(out)
    o0, o1 = sch.split(o, [None, cfg.rows_per_task])
    sch.compute_at(acc, o1)
    sch.parallel(o0)
    if rf is not None:
        sch.compute_at(rf, o1)
        vectorize_rf(sch, rf, reduced_length(sch))


def schedule_reduce_cols(sch: s_tir.Schedule, cfg) -> None:
    """``reduce_cols``: rows in parallel, the whole-vector part as lane-wise partials, the tail a
    plain loop (its init out of its possibly empty loop)."""
    rf = _rfactor_symbolic(sch, sch.get_sblock("acc_v"), cfg.lanes)
    _row_loops(sch, cfg, ("acc", "acc_t", "acc_v"))
    vectorize_rf(sch, rf)
    tail = sch.get_sblock("acc_t")
    sch.decompose_reduction(tail, sch.get_loops(tail)[-1])


def schedule_reduce_outer(sch: s_tir.Schedule, cfg) -> None:
    """``reduce.schedule_outer`` (``I > 1``, no chunks) over a symbolic row count."""
    from .reduce import schedule_outer

    schedule_outer(sch, cfg, symbolic=True)



@dataclasses.dataclass(frozen=True)
class BatchDotConfig:
    """``batch_dot``: ``lanes`` partial sums per output (the K split; K a multiple of it)."""

    lanes: int = 16


def schedule_batch_dot(sch: s_tir.Schedule, nbatch: int) -> None:
    """``batch_dot``: threads over the batch axes and rows; per output, the ``lanes`` partial
    sums in one register (vectorized), then their total and the epilogue, in place."""
    c = sch.get_sblock("C")
    d = sch.get_sblock("D") if has_block(sch, "D") else None
    loops = sch.get_loops(c)
    outer, j = loops[:nbatch + 1], loops[nbatch + 1]
    p, pk = lane_partials_at(sch, "P", j)
    if d is not None:
        sch.reverse_compute_at(d, j)
        sch.set_scope(c, 0, "local")
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    sch.decompose_reduction(p, pk)


def lane_partials_at(sch: s_tir.Schedule, name: str, loop):
    """The ``lanes`` partial sums ``name[..., l]`` of one dot product computed under ``loop`` in
    one vector register (the K step outside, the lanes vectorized); returns ``(block, K loop)``
    for the caller's ``decompose_reduction`` (after its ``parallel``)."""
    p = sch.get_sblock(name)
    sch.compute_at(p, loop, preserve_unit_loops=True)
    sch.set_scope(p, 0, "local")
    pl, pk = sch.get_loops(p)[-2:]
    sch.reorder(pk, pl)
    sch.vectorize(pl)
    return p, pk
