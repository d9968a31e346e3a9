"""CUDA schedules for the matmul family (blocks ``C`` (padded accumulation) and ``D``
(fused epilogue) from ``topi_kernels.matmul.matmul_padded`` / ``matmul_tiled``).

Tiled (SIMT, fp32 or fp16 with fp32 accumulation)::

    for block (bi, bj) of BM x BN outputs:             # blockIdx.y, blockIdx.x
      thread (ty, tx) owns a TM x TN register tile     # (BM/TM) x (BN/TN) threads
      for k0 in Kp / BK:                               # [double-buffered: load k0+1 while computing k0]
        A_sh[BM][BK], B_sh[BK][BN] <- global           # cooperative, `vector`-wide loads
        sync; for k1 in BK: acc[TM][TN] += A_sh[., k1] * B_sh[k1, .]; sync
      D[tile] = epilogue(acc)                          # fused write-back, masked to (M, N)

    2*M*N*K flops; global traffic ~ M*K*Np/BN + K*N*Mp/BM elements (each tile reloaded once per
    block column / row); shared memory (BM + BN) * BK * bytes (x2 when double-buffered).

Tensor core (wmma 16x16x16, fp16 in, fp32 accumulate)::

    block of (warps_m * frags_m * 16) x (warps_n * frags_n * 16) outputs, warps_m * warps_n warps;
    for k0: A_sh, B_sh <- global (vectorized); for k1 in chunk: load fragments, mma_sync
    accumulators -> shared (C_sh) -> epilogue -> global (masked)

    Requires M, N, K padded to the block tile / 16 (``matmul_padded`` pads with zeros).

Small: one thread per output, serial K loop (launch-bound problems).
GEMV: ``dot`` form (reduction axis contiguous): one warp per output, lanes stride K, the
partials reduced by warp shuffles (``rfactor`` + a threadIdx.x-bound reduction); ``panel``
form (B is (K, N)): threads own columns (coalesced), K split over threadIdx.y and reduced
through shared memory.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import WARP_SIZE, bind_elementwise, cooperative_fetch, inline_producers


@dataclasses.dataclass(frozen=True)
class TiledConfig:
    """SIMT tile: block ``block_m x block_n``, per-thread ``thread_m x thread_n``, K chunk ``block_k``."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    thread_m: int = 4
    thread_n: int = 4
    vector: int = 4
    double_buffer: bool = True

    @property
    def threads(self) -> int:
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)


@dataclasses.dataclass(frozen=True)
class TensorCoreConfig:
    """Warp tiling for wmma: ``warps_m x warps_n`` warps, each ``frags_m x frags_n`` 16x16 fragments."""

    warps_m: int = 2
    warps_n: int = 2
    frags_m: int = 2
    frags_n: int = 4
    chunk: int = 2  # 16-wide K steps per shared-memory stage
    vector: int = 8
    double_buffer: bool = True

    @property
    def block_m(self) -> int:
        return self.warps_m * self.frags_m * 16

    @property
    def block_n(self) -> int:
        return self.warps_n * self.frags_n * 16

    @property
    def block_k(self) -> int:
        return self.chunk * 16

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * WARP_SIZE


@dataclasses.dataclass(frozen=True)
class SmallConfig:
    threads: int = 128


@dataclasses.dataclass(frozen=True)
class GemvConfig:
    """``rows`` outputs per block (one warp each in the dot form); ``lanes`` threads over K."""

    rows: int = 4
    lanes: int = 32
    vector: int = 1


#: static shared memory per block (CUDA's limit without opt-in, every arch)
STATIC_SHARED_LIMIT = 48 * 1024


def tiled_shared_bytes(cfg: TiledConfig, in_bytes: int) -> int:
    """Static shared memory of ``schedule_tiled``: A and B tiles, twice when double-buffered."""
    return (cfg.block_m + cfg.block_n) * cfg.block_k * in_bytes * (2 if cfg.double_buffer else 1)


def _skewed(extent: int) -> int:
    """Row stride after ``storage_align(factor=32, offset=8)``."""
    return extent + (8 - extent) % 32


def tensorcore_shared_bytes(cfg: TensorCoreConfig, trans_b: bool) -> tuple[int, int]:
    """(static bytes of the fp16 A/B tiles, dynamic bytes of the fp32 staging tile)."""
    a = cfg.block_m * _skewed(cfg.block_k)
    b = cfg.block_n * _skewed(cfg.block_k) if trans_b else cfg.block_k * _skewed(cfg.block_n)
    return (a + b) * 2 * (2 if cfg.double_buffer else 1), cfg.block_m * cfg.block_n * 4


def _pipeline(sch: s_tir.Schedule, loop, stages: list[int]) -> None:
    sch.annotate(loop, "software_pipeline_stage", stages)
    sch.annotate(loop, "software_pipeline_order", list(range(len(stages))))


def schedule_tiled(sch: s_tir.Schedule, cfg: TiledConfig) -> None:
    """Shared-memory tiles + register tiles + fused epilogue (see module doc)."""
    c = sch.get_sblock("C")
    ty_n, tx_n = cfg.block_m // cfg.thread_m, cfg.block_n // cfg.thread_n
    *batch, i, j, k = sch.get_loops(c)  # a batched C (bt, i, j) puts bt on blockIdx.z
    bi, ty, ii = sch.split(i, [None, ty_n, cfg.thread_m])
    bj, tx, jj = sch.split(j, [None, tx_n, cfg.thread_n])
    k0, k1 = sch.split(k, [None, cfg.block_k])
    sch.reorder(*batch, bi, bj, ty, tx, k0, k1, ii, jj)
    if batch:
        sch.bind(batch[0], "blockIdx.z")
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    threads = ((ty_n, "threadIdx.y"), (tx_n, "threadIdx.x"))
    for idx in (0, 1):
        sh = sch.cache_read(c, idx, "shared")
        sch.compute_at(sh, k0)
        inline_producers(sch, sh)
        cooperative_fetch(sch, sh, threads, cfg.vector, under=k0)
    sch.unroll(k1)
    sch.unroll(ii)
    sch.unroll(jj)
    sch.set_scope(c, 0, "local")
    d = sch.get_sblock("D")
    sch.reverse_compute_at(d, tx)
    if cfg.double_buffer:
        _pipeline(sch, k0, [0, 0, 1])
    sch.decompose_reduction(c, k0)


def schedule_small(sch: s_tir.Schedule, cfg: SmallConfig) -> None:
    """One thread per output element; the accumulator lives in a register."""
    c = sch.get_sblock("C")
    inline_producers(sch, c)
    d = sch.get_sblock("D")
    bind_elementwise(sch, d, cfg.threads)
    sch.compute_at(c, sch.get_loops(d)[-1], preserve_unit_loops=True)
    sch.set_scope(c, 0, "local")
    sch.decompose_reduction(c, sch.get_loops(c)[-1])


def schedule_tensorcore(sch: s_tir.Schedule, cfg: TensorCoreConfig, in_dtype: str, trans_b: bool) -> None:
    """wmma 16x16x16 tensorization with warp tiling (see module doc). ``C`` must be padded to the
    block tile; ``trans_b`` when B is ``(N, K)``. Raises when tensorization fails."""
    from .wmma import intrin_group  # registered in milliseconds, not TVM's ~20-100 s import

    # A/B tiles in static shared memory, the fp32 staging tile in dynamic shared memory: TVM
    # 0.27 fails ("tvm_access_ptr element type must match") when it merges fp16 and fp32
    # buffers into one dynamic allocation, so the two never share a scope.
    intrin = intrin_group(in_dtype, trans_b, "shared")
    c = sch.get_sblock("C")
    i, j, k = sch.get_loops(c)
    i, i16 = sch.split(i, [None, 16])
    j, j16 = sch.split(j, [None, 16])
    k, k16 = sch.split(k, [None, 16])
    sch.reorder(i, j, k, i16, j16, k16)
    mma = sch.blockize(i16)  # one 16x16x16 wmma step per block instance
    bi, wi, fi = sch.split(i, [None, cfg.warps_m, cfg.frags_m])
    bj, wj, fj = sch.split(j, [None, cfg.warps_n, cfg.frags_n])
    k0, k1 = sch.split(k, [None, cfg.chunk])
    sch.reorder(bi, bj, wi, wj, k0, k1, fi, fj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    warp = sch.fuse(wi, wj)
    sch.bind(warp, "threadIdx.y")
    threads = ((cfg.warps_m * cfg.warps_n, "threadIdx.y"), (WARP_SIZE, "threadIdx.x"))
    for idx in (0, 1):
        sh = sch.cache_read(mma, idx, "shared")
        sch.compute_at(sh, k0)
        inline_producers(sch, sh)
        sch.storage_align(sh, 0, axis=-2, factor=32, offset=8)  # skew rows against bank conflicts
        cooperative_fetch(sch, sh, threads, cfg.vector, under=k0)
    for idx, name in ((0, "load_a"), (1, "load_b")):
        frag = sch.cache_read(mma, idx, "wmma.matrix_" + "ab"[idx])
        sch.compute_at(frag, k1, preserve_unit_loops=True)
        r, s = sch.get_loops(frag)[-2:]
        r0, r1 = sch.split(r, [None, 16])
        s0, s1 = sch.split(s, [None, 16])
        sch.reorder(r0, s0, r1, s1)
        sch.tensorize(r1, intrin[name])
    staged = sch.cache_write(mma, 0, "shared.dyn")  # accumulators -> shared -> epilogue
    acc = sch.cache_write(mma, 0, "wmma.accumulator")
    sch.reverse_compute_at(acc, warp)
    r, s = sch.get_loops(acc)[-2:]
    r0, r1 = sch.split(r, [None, 16])
    s0, s1 = sch.split(s, [None, 16])
    sch.reorder(r0, s0, r1, s1)
    sch.tensorize(r1, intrin["store"])
    if cfg.double_buffer:
        _pipeline(sch, k0, [0, 0, 1])
    init = sch.decompose_reduction(mma, k0)
    sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], intrin["init"])
    sch.tensorize(sch.get_loops(c)[-3], intrin["compute"])
    # C (global, padded) would be a plain copy of the staged tile: D reads the tile directly.
    sch.compute_inline(staged)
    d = sch.get_sblock("D")
    sch.reverse_compute_at(d, warp, preserve_unit_loops=True)
    fused = sch.fuse(*sch.get_loops(d)[-2:])
    _, tx = sch.split(fused, [None, WARP_SIZE])
    sch.bind(tx, "threadIdx.x")


def schedule_gemv(sch: s_tir.Schedule, cfg: GemvConfig, form: str) -> None:
    """Matrix-vector product over block ``C`` ``(M, N)`` with ``min(M, N) == 1``.

    ``form="dot"``: the reduction axis is contiguous; ``cfg.lanes`` threads (a warp) stride K and
    are reduced by shuffles, ``cfg.rows`` outputs per block (threadIdx.y).
    ``form="panel"``: B is ``(K, N)``; ``cfg.lanes`` threads own consecutive columns (coalesced
    rows of B), ``cfg.rows`` threads split K and are reduced through shared memory.

    K must be padded to a multiple of the reduction split (``matmul_padded``): ``rfactor`` over a
    split with a tail dropped the tail predicate in TVM 0.27; zero padding makes it exact.
    """
    c = sch.get_sblock("C")
    inline_producers(sch, c)
    i, j, k = sch.get_loops(c)
    out = sch.fuse(i, j)
    if form == "dot":
        k0, red = sch.split(k, [None, cfg.lanes])
        red_tag, out_tag, out_threads = "threadIdx.x", "threadIdx.y", cfg.rows
    else:
        k0, red = sch.split(k, [None, cfg.rows])
        red_tag, out_tag, out_threads = "threadIdx.y", "threadIdx.x", cfg.lanes
    rf = sch.rfactor(red, factor_axis=0)  # per-thread partial sums over k0
    o, r = sch.get_loops(c)
    bo, to = sch.split(o, [None, out_threads])
    sch.bind(bo, "blockIdx.x")
    sch.bind(to, out_tag)
    sch.bind(r, red_tag)
    split = cfg.lanes if form == "dot" else cfg.rows
    sch.compute_at(rf, to)
    sch.set_scope(rf, 0, "local")
    loops = sch.get_loops(rf)
    inner = loops[[i for i, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(to))][0] + 1:]
    # the thread split of K; the serial k0 loop is gone when K fits one pass (unit loops vanish)
    red_loop = next(lp for lp in inner if int(sch.get(lp).extent) == split)
    sch.bind(red_loop, red_tag)
    serial = [lp for lp in inner if not sch.get(lp).same_as(sch.get(red_loop))]
    sch.set_scope(c, 0, "local")
    d = sch.get_sblock("D")
    sch.reverse_compute_at(d, to)
    sch.decompose_reduction(rf, serial[0] if serial else red_loop)
