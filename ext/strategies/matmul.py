"""Candidate table for the matmul family (CPU).

Workload convention (built by ``relax_passes.lower_to_candidates``): inputs
``a`` ``(M, K)`` (or batched), ``b`` ``(K, N)`` or ``(N, K)`` when attr
``transpose_b``; then the epilogue's tensors (bias, residual). Attrs:
``transpose_b``, ``b_const`` (b is known before the first call -- a constant,
or a weight parameter whose transforms are lifted into
``main_transform_params`` -- so layout changes of b are free) and ``out_shape``.

A run-time ``b`` (``b_const`` false: an input of every call) with few rows of
``a`` goes to ``matmul.stream``, which reads it once where it lies; packing it
per call (``matmul.packed``, ``matmul.gemv``'s panel form) is for larger M.
"""
from __future__ import annotations

import math

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import matmul as cpu_sched
from ..tir_schedules.cpu.matmul import DotConfig, TileConfig
from ..topi_kernels import host
from ..topi_kernels import matmul as mm
from ..workload import Workload
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes
from .matmul_tiles import ROW_OPTIONS, ordered, pick_mb, pick_nb, rows_order_points, widest_tile

#: below this many flops the direct kernel wins: packing and threading overheads dominate
SMALL_FLOPS = 2 ** 21
#: below this many flops one thread is faster than waking the pool (~5 us at 200 GFLOPS)
SERIAL_FLOPS = 2 ** 20
#: up to this many rows of A, a run-time weight is read in place: packing it on every call moves
#: B through memory three times (read, write, read back) against once, and a few rows of A give
#: too little reuse of a packed panel to win that back
STREAM_MAX_M = 32


def dims(wl: Workload) -> tuple[int, int, int]:
    """(M, N, K) of a 2-D matmul workload."""
    a, b = wl.shapes[0], wl.shapes[1]
    n = b[0] if wl.attr("transpose_b") else b[1]
    return a[0], n, a[1]


def _placeholders(wl: Workload, b_shape=None, b_dtype=None):
    names = ["A", "B"] + [f"E{i}" for i in range(len(wl.shapes) - 2)]
    shapes = list(wl.shapes)
    dtypes = list(wl.dtypes)
    if b_shape is not None:
        shapes[1], dtypes[1] = b_shape, b_dtype or dtypes[1]
    return [te.placeholder(tuple(mm._i64(d) for d in s), dtype=dt, name=n) for n, s, dt in zip(names, shapes, dtypes)]


def _check_common(wl: Workload, target, two_d: bool = True) -> str | None:
    if any(d != "float32" for d in wl.dtypes) or wl.out_dtype != "float32":
        return f"float32 only, got {'/'.join(sorted(set(wl.dtypes)))} -> {wl.out_dtype}"
    if two_d and (len(wl.shapes[0]) != 2 or len(wl.shapes[1]) != 2):
        return "needs 2-D operands (batched shapes go to matmul.batch)"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    return None


def _b_layout(wl: Workload) -> str:
    return "nk" if wl.attr("transpose_b") else "kn"


# -- matmul.direct -----------------------------------------------------------------------------

def _direct_check(wl, target):
    return _check_common(wl, target)


def _direct_suits(wl, target):
    if wl.flops > SMALL_FLOPS:
        return f"{wl.flops / 1e6:.1f} MFLOP is above the {SMALL_FLOPS / 1e6:.1f} MFLOP small-problem bound"
    return None


def _tile_space(wl, target, nbs=(16, 24, 32, 48, 64, 96), mbs=ROW_OPTIONS):
    M, N, K = dims(wl)
    lanes, info = _lanes(target), cpu_info(target)
    out = []
    for nb in nbs:
        if nb % lanes or nb > max(lanes, mm.ceil_to(N, lanes)):
            continue
        for mb in (m for m in mbs if m <= max(1, M)):
            out += [TileConfig(mb=mb, nb=nb, parallel=par) for par in ("panels", "tiles", "none")]
            out += rows_order_points(mb, nb, N, K, info)
    return out


def _tile_default(wl, target, nb_max: int = 64):
    M, N, K = dims(wl)
    info = cpu_info(target)
    nb = pick_nb(N, K, info, nb_max)
    mb = pick_mb(M, nb, info)
    panels = mm.ceil_to(N, nb) // nb
    # too few panels to keep every core busy: split row tiles across threads too
    par = "panels" if panels >= 4 * info.cores else "tiles"
    return ordered(TileConfig(mb=mb, nb=nb, parallel="none" if wl.flops < SERIAL_FLOPS else par), M, N, K, info)


def _direct_build(wl, cfg: TileConfig, target):
    M, N, K = dims(wl)
    A, B, *extras = _placeholders(wl)
    _, D = mm.matmul_tiled(A, B, M=M, N=N, K=K, b_layout=_b_layout(wl), epilogue=wl.epilogue,
                           extras=extras, out_dtype=wl.out_dtype, pad_rows=cfg.mb, pad_cols=cfg.nb)
    sch = create_schedule([A, B, *extras, D])
    cpu_sched.schedule_tiled(sch, cfg, _lanes(target), threads=cpu_info(target).cores)
    return finish(sch, "matmul.direct")


register(Candidate("matmul.direct", ("llvm",), PLEVEL.DIRECT, _direct_check, TileConfig,
                   space=_tile_space, default=_tile_default, build=_direct_build, suits=_direct_suits))


# -- matmul.packed -----------------------------------------------------------------------------

def _packed_check(wl, target):
    return _check_common(wl, target)


def _pack_func(wl, nb, target):
    M, N, K = dims(wl)
    B = te.placeholder(tuple(mm._i64(d) for d in wl.shapes[1]), dtype=wl.dtypes[1], name="B")
    Bp = mm.pack_weight(B, N=N, K=K, nb=nb, b_layout=_b_layout(wl))
    sch = create_schedule([B, Bp])
    cpu_sched.schedule_pack(sch, _lanes(target))
    return host.attach(finish(sch, "matmul.pack"), "matmul.pack", N=N, nb=nb, layout=_b_layout(wl))


def _packed_shape(wl, nb):
    M, N, K = dims(wl)
    return (mm.ceil_to(N, nb) // nb, K, nb)


def _packed_build(wl, cfg: TileConfig, target):
    M, N, K = dims(wl)
    A, Bp, *extras = _placeholders(wl, b_shape=_packed_shape(wl, cfg.nb))
    _, D = mm.matmul_tiled(A, Bp, M=M, N=N, K=K, b_layout="packed", nb=cfg.nb, epilogue=wl.epilogue,
                           extras=extras, out_dtype=wl.out_dtype, pad_rows=cfg.mb, pad_cols=cfg.nb)
    sch = create_schedule([A, Bp, *extras, D])
    loops = cpu_sched.schedule_tiled(sch, cfg, _lanes(target), threads=cpu_info(target).cores)
    return cpu_sched.prefetch_next_panel(finish(sch, "matmul.packed"), loops, K=K, nb=cfg.nb,
                                         rows=mm.ceil_to(M, cfg.mb) // cfg.mb)


def _packed_suits(wl, target):
    M, N, _ = dims(wl)
    if min(M, N) == 1:
        return "matrix-vector shape: a GEMV streams the weight once without packing"
    if not wl.attr("b_const") and M <= STREAM_MAX_M:
        return f"run-time weight and M={M}: packing it on every call costs more than matmul.stream's read in place"
    if wl.flops <= SMALL_FLOPS:
        return f"{wl.flops / 1e6:.2f} MFLOP: too small for panels to pay off"
    return None


register(Candidate("matmul.packed", ("llvm",), PLEVEL.BLOCKED, _packed_check, TileConfig,
                   space=_tile_space, default=_tile_default, build=_packed_build, suits=_packed_suits,
                   transforms=lambda wl, cfg, t: {1: _pack_func(wl, cfg.nb, t)}))


# -- matmul.gemv -------------------------------------------------------------------------------

def not_matrix_vector(wl) -> str | None:
    """Why a 2-D matmul workload is not a GEMV (None when M or N is 1); shared by CPU and CUDA."""
    M, N, _ = dims(wl)
    return None if min(M, N) == 1 else f"not a matrix-vector product (M={M}, N={N})"


def _gemv_check(wl, target):
    return _check_common(wl, target) or not_matrix_vector(wl)


def _gemv_form(wl) -> str:
    """``dot`` when the reduction axis is contiguous in the big operand, else ``panel``."""
    M, N, _ = dims(wl)
    if N == 1 and M > 1:
        return "dot"
    return "dot" if (wl.attr("transpose_b") and not wl.attr("b_const")) else "panel"


def _gemv_space(wl, target):
    lanes = _lanes(target)
    if _gemv_form(wl) == "dot":
        return [DotConfig(rows=r, lanes=lanes * u, parallel=p) for r in (1, 2, 4, 8) for u in (1, 2)
                for p in (True, False)]
    return [TileConfig(mb=1, nb=nb, parallel="panels") for nb in (lanes, 2 * lanes, 4 * lanes, 8 * lanes)]


def _gemv_default(wl, target):
    lanes = _lanes(target)
    if _gemv_form(wl) == "dot":
        return DotConfig(rows=4, lanes=lanes, parallel=wl.flops >= SERIAL_FLOPS)
    M, N, K = dims(wl)
    par = "none" if wl.flops < SERIAL_FLOPS else "panels"
    return TileConfig(mb=1, nb=min(4 * lanes, mm.ceil_to(N, lanes)), parallel=par)


def _gemv_build(wl, cfg, target):
    M, N, K = dims(wl)
    if isinstance(cfg, DotConfig):
        A, B, *extras = _placeholders(wl)
        big, vec, rows = (A, B, M) if N == 1 and M > 1 else (B, A, N)
        _, D = mm.gemv_dot(big, vec, rows=rows, K=K, epilogue=wl.epilogue, extras=extras,
                           out_dtype=wl.out_dtype, out_shape=(M, N))
        sch = create_schedule([A, B, *extras, D])
        cpu_sched.schedule_dot(sch, cfg)
        return finish(sch, "matmul.gemv")
    return _packed_build(wl, cfg, target).with_attr("ext.kernel", "matmul.gemv")


def _gemv_suits(wl, target):
    M, N, _ = dims(wl)
    if not wl.attr("b_const") and N > 1:
        return "run-time weight: matmul.stream (matmul.direct when small) reads it in place, no per-call pack"
    return None


def _gemv_transforms(wl, cfg, target):
    return {1: _pack_func(wl, cfg.nb, target)} if isinstance(cfg, TileConfig) else {}


class _GemvConfig:
    """Config factory: a ``DotConfig`` or ``TileConfig`` from its fields."""

    added_knobs = TileConfig.added_knobs

    def __new__(cls, **fields):
        return DotConfig(**fields) if "rows" in fields else TileConfig(**fields)


register(Candidate("matmul.gemv", ("llvm",), PLEVEL.SPECIALIZED, _gemv_check, _GemvConfig,
                   space=_gemv_space, default=_gemv_default, build=_gemv_build, transforms=_gemv_transforms,
                   suits=_gemv_suits))


# -- matmul.batch ------------------------------------------------------------------------------

def _batch_check(wl, target):
    reason = _check_common(wl, target, two_d=False)
    if reason:
        return reason
    if max(len(wl.shapes[0]), len(wl.shapes[1])) < 3 or min(len(wl.shapes[0]), len(wl.shapes[1])) < 2:
        return "needs a batched operand (3-D or more) and no 1-D operand"
    return None


def _batch_dims(wl):
    out = wl.attr("out_shape")
    return out[-2], out[-1], wl.shapes[0][-1], math.prod(out[:-2])


def _batch_default(wl, target):
    M, N, K, nbatch = _batch_dims(wl)
    info = cpu_info(target)
    mb, nb = widest_tile(M, N, info)
    return ordered(TileConfig(mb=mb, nb=nb, parallel="none" if wl.flops < SERIAL_FLOPS else "panels"), M, N, K, info)


def _batch_space(wl, target):
    M, N, K, _ = _batch_dims(wl)
    lanes, info = _lanes(target), cpu_info(target)
    out = []
    for nb in (n for n in (16, 24, 32, 64) if n % lanes == 0 and n <= max(lanes, mm.ceil_to(N, lanes))):
        for mb in (m for m in ROW_OPTIONS if m <= max(M, 1)):
            out += [TileConfig(mb=mb, nb=nb, parallel=par) for par in ("panels", "none")]
            out += rows_order_points(mb, nb, N, K, info)
    return out


def _batch_cols(wl, cfg) -> int:
    return mm.ceil_to(_batch_dims(wl)[1], cfg.nb)


def _batch_transforms(wl, cfg, target):
    """B made contiguous along N and padded with zeros to whole ``nb`` panels first (one copy of
    B, folded when it is constant): a transposed B read in place, or a clamped index at the
    N tail, would make every vector load a gather (QK^T of DeiT-S, N = 198: 3.3 ms against
    0.19 ms for the same flops with N = 64)."""
    transposed, cols = bool(wl.attr("transpose_b")), _batch_cols(wl, cfg)
    if not transposed and cols == _batch_dims(wl)[1]:
        return {}
    B = te.placeholder(tuple(mm._i64(d) for d in wl.shapes[1]), dtype=wl.dtypes[1], name="B")
    Bt = mm.batch_operand(B, transpose=transposed, cols=cols)
    sch = create_schedule([B, Bt])
    cpu_sched.schedule_transpose(sch, "Bt", _lanes(target))
    return {1: host.attach(finish(sch, "matmul.batch_operand"), "matmul.batch_operand", transpose=transposed,
                           cols=cols)}


def _batch_build(wl, cfg: TileConfig, target):
    shape, cols = list(wl.shapes[1]), _batch_cols(wl, cfg)
    if wl.attr("transpose_b") or cols != _batch_dims(wl)[1]:
        K = shape[-1] if wl.attr("transpose_b") else shape[-2]
        shape = shape[:-2] + [K, cols]
    A, B, *extras = _placeholders(wl, b_shape=tuple(shape))
    out = wl.attr("out_shape")
    _, D = mm.batch_matmul(A, B, out_shape=out, transpose_b=False, epilogue=wl.epilogue, extras=extras,
                           out_dtype=wl.out_dtype, pad_rows=cfg.mb, pad_cols=cfg.nb, b_cols=cols)
    sch = create_schedule([A, B, *extras, D])
    cpu_sched.schedule_tiled(sch, cfg, _lanes(target), nbatch=len(out) - 2, threads=cpu_info(target).cores)
    return finish(sch, "matmul.batch")


register(Candidate("matmul.batch", ("llvm",), PLEVEL.BLOCKED, _batch_check, TileConfig,
                   space=_batch_space, default=_batch_default, build=_batch_build, transforms=_batch_transforms,
                   version=2))
