"""Candidate table for the matmul family on CUDA (workload convention: ``strategies/matmul.py``).

Inputs ``float32`` or ``float16`` (both operands alike; fp32 accumulation), output ``float32``
or ``float16``; 2-D operands, except ``cuda_batch`` (batched, NumPy-broadcast). Schedules live in
``tir_schedules/cuda/matmul.py``; the compute is ``topi_kernels.matmul.matmul_padded`` (zero
padding to the tile, so no tile ever needs a bounds check inside its K loop).

Which wins by plevel: ``cuda_small`` for launch-bound sizes, ``cuda_gemv`` when M or N is 1,
``cuda_tensorcore`` for fp16 unless padding to its 16-multiples would more than double the
work, else ``cuda_tiled``; batched problems take ``cuda_batch`` (the tiled schedule with the
flattened batch on ``blockIdx.z``).
"""
from __future__ import annotations

from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cuda import matmul as sched
from ..tir_schedules.cuda.matmul import GemvConfig, SmallConfig, TensorCoreConfig, TiledConfig
from ..topi_kernels import matmul as mm
from ..workload import Workload
from .matmul import _placeholders, dims, not_matrix_vector
from .registry import PLEVEL, Candidate, register

IN_DTYPES = ("float16", "float32")
OUT_DTYPES = ("float16", "float32")
#: below this many flops one thread per output beats tiling (launch and sync overheads dominate)
SMALL_FLOPS = 2 ** 18
#: wmma needs sm_70 or newer
TENSORCORE_MIN_SM = 70


def _check_common(wl: Workload, target) -> str | None:
    a, b = wl.dtypes[0], wl.dtypes[1]
    if a != b or a not in IN_DTYPES:
        why = "bf16 has no wmma intrinsic in TVM 0.27; " if "bfloat16" in (a, b) else ""
        return f"{why}inputs must both be float16 or float32, got {a}/{b}"
    if wl.out_dtype not in OUT_DTYPES:
        return f"output must be float16 or float32, got {wl.out_dtype}"
    if len(wl.shapes[0]) != 2 or len(wl.shapes[1]) != 2:
        return "needs 2-D operands (batched matmuls: matmul.cuda_batch)"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    return None


def _sm(target) -> int:
    arch = str(target.attrs.get("arch", "sm_80"))
    return int(arch[3:]) if arch[3:].isdigit() else 80


def _build(wl: Workload, name: str, pads: tuple, schedule) -> object:
    M, N, K = dims(wl)
    Mp, Np, Kp = (mm.ceil_to(v, p) for v, p in zip((M, N, K), pads))
    A, B, *extras = _placeholders(wl)
    _, D = mm.matmul_padded(A, B, M=M, N=N, K=K, b_layout="nk" if wl.attr("transpose_b") else "kn",
                            Mp=Mp, Np=Np, Kp=Kp, epilogue=wl.epilogue, extras=extras,
                            out_dtype=wl.out_dtype, acc_dtype="float32")
    sch = create_schedule([A, B, *extras, D])
    schedule(sch)
    return finish(sch, name)


def _is_gemv(wl) -> bool:
    M, N, _ = dims(wl)
    return min(M, N) == 1


def _too_small(wl) -> str | None:
    if wl.flops <= SMALL_FLOPS:
        return f"{wl.flops / 1e3:.0f} KFLOP: launch-bound, the direct kernel wins"
    return None


# -- matmul.cuda_tiled -------------------------------------------------------------------------

def _tiled_suits(wl, target):
    if _is_gemv(wl):
        return "matrix-vector shape: tiles would be 1/64 full"
    return _too_small(wl)


def _tiled_config(bm, bn, tm, tn, bk, db=True):
    threads = (bm // tm) * (bn // tn)
    vector = max(1, min(4, bm * bk // threads, bn * bk // threads))
    return TiledConfig(block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn, vector=vector,
                       double_buffer=db)


_TILES = [(128, 128, 8, 8), (64, 64, 4, 4), (128, 64, 8, 4), (64, 128, 4, 8), (32, 32, 2, 2)]


def tiled_space(in_dtype: str = "float32") -> list:
    """Tile shapes that fit the static shared-memory limit for ``in_dtype`` operands."""
    nbytes = 2 if in_dtype == "float16" else 4
    space = [_tiled_config(bm, bn, tm, tn, bk, db) for bm, bn, tm, tn in _TILES for bk in (8, 16, 32)
             for db in (True, False)]
    return [c for c in space if sched.tiled_shared_bytes(c, nbytes) <= sched.STATIC_SHARED_LIMIT]


def _tiled_default(wl, target):
    M, N, _ = dims(wl)
    return tiled_config_for(M, N)


def tiled_config_for(M: int, N: int) -> TiledConfig:
    """Heuristic SIMT tile for an ``M x N`` output (also used by conv2d's implicit GEMM)."""
    if M >= 2048 and N >= 2048:
        return _tiled_config(128, 128, 8, 8, 8)
    if M <= 32 or N <= 32:
        return _tiled_config(32, 32, 2, 2, 16)
    return _tiled_config(64, 64, 4, 4, 16)


def _tiled_build(wl, cfg: TiledConfig, target):
    return _build(wl, "matmul.cuda_tiled", (cfg.block_m, cfg.block_n, cfg.block_k),
                  lambda sch: sched.schedule_tiled(sch, cfg))


register(Candidate("matmul.cuda_tiled", ("cuda",), PLEVEL.BLOCKED, _check_common, TiledConfig,
                   space=lambda wl, t: tiled_space(wl.dtypes[0]), default=_tiled_default, build=_tiled_build, suits=_tiled_suits))


# -- matmul.cuda_tensorcore --------------------------------------------------------------------

def _tc_check(wl, target):
    reason = _check_common(wl, target)
    if reason:
        return reason
    if wl.dtypes[0] != "float16":
        return f"tensor cores need float16 inputs, got {wl.dtypes[0]}"
    if _sm(target) < TENSORCORE_MIN_SM:
        return f"wmma needs sm_{TENSORCORE_MIN_SM}+, target is sm_{_sm(target)}"
    if _is_gemv(wl):
        return "matrix-vector shape: a 16x16 fragment would be 1/16 full"
    return None


def _padding_waste(wl, cfg: TensorCoreConfig) -> float:
    M, N, K = dims(wl)
    padded = mm.ceil_to(M, cfg.block_m) * mm.ceil_to(N, cfg.block_n) * mm.ceil_to(K, cfg.block_k)
    return padded / float(M * N * K)


def _tc_suits(wl, target):
    small = _too_small(wl)
    if small:
        return small
    waste = _padding_waste(wl, _tc_default(wl, target))
    if waste > 2.0:
        return f"padding to the tensor-core tile would do {waste:.1f}x the work"
    return None


def tensorcore_space(trans_b: bool = False) -> list:
    """Warp tilings whose A/B tiles fit the static shared-memory limit."""
    out = []
    for wm, wn, fm, fn in [(2, 2, 2, 4), (2, 4, 4, 2), (2, 2, 4, 4), (1, 2, 2, 4), (2, 2, 2, 2), (1, 1, 2, 2)]:
        for chunk in (1, 2, 4):
            cfg = TensorCoreConfig(warps_m=wm, warps_n=wn, frags_m=fm, frags_n=fn, chunk=chunk)
            if sched.tensorcore_shared_bytes(cfg, trans_b)[0] <= sched.STATIC_SHARED_LIMIT:
                out.append(cfg)
    return out


def _tc_default(wl, target):
    M, N, _ = dims(wl)
    return tensorcore_config_for(M, N)


def tensorcore_config_for(M: int, N: int) -> TensorCoreConfig:
    """Heuristic warp tiling for an ``M x N`` output (also used by conv2d's implicit GEMM)."""
    if M >= 1024 and N >= 1024:
        return TensorCoreConfig(warps_m=2, warps_n=4, frags_m=4, frags_n=2, chunk=2)
    if M <= 32:
        return TensorCoreConfig(warps_m=1, warps_n=2, frags_m=2, frags_n=2, chunk=2)
    return TensorCoreConfig()


def _tc_build(wl, cfg: TensorCoreConfig, target):
    trans_b = bool(wl.attr("transpose_b"))
    return _build(wl, "matmul.cuda_tensorcore", (cfg.block_m, cfg.block_n, cfg.block_k),
                  lambda sch: sched.schedule_tensorcore(sch, cfg, wl.dtypes[0], trans_b))


register(Candidate("matmul.cuda_tensorcore", ("cuda",), PLEVEL.SPECIALIZED, _tc_check, TensorCoreConfig,
                   space=lambda wl, t: tensorcore_space(bool(wl.attr("transpose_b"))), default=_tc_default, build=_tc_build, suits=_tc_suits))


# -- matmul.cuda_gemv --------------------------------------------------------------------------

def _gemv_check(wl, target):
    return _check_common(wl, target) or not_matrix_vector(wl)


def _gemv_form(wl) -> str:
    """``dot`` when the reduction axis is contiguous in the big operand, else ``panel``."""
    M, N, _ = dims(wl)
    return "dot" if (N == 1 or wl.attr("transpose_b")) else "panel"


def _gemv_space(wl, target):
    if _gemv_form(wl) == "dot":
        return [GemvConfig(rows=r, lanes=32) for r in (1, 2, 4, 8)]
    return [GemvConfig(rows=r, lanes=n) for r in (2, 4, 8, 16) for n in (32, 64, 128) if r * n <= 1024]


def _gemv_default(wl, target):
    return GemvConfig(rows=4, lanes=32) if _gemv_form(wl) == "dot" else GemvConfig(rows=4, lanes=64)


def _gemv_build(wl, cfg: GemvConfig, target):
    form = _gemv_form(wl)
    split = cfg.lanes if form == "dot" else cfg.rows
    return _build(wl, "matmul.cuda_gemv", (1, 1, split), lambda sch: sched.schedule_gemv(sch, cfg, form))


register(Candidate("matmul.cuda_gemv", ("cuda",), PLEVEL.SPECIALIZED, _gemv_check, GemvConfig,
                   space=_gemv_space, default=_gemv_default, build=_gemv_build))


# -- matmul.cuda_small -------------------------------------------------------------------------

def _small_suits(wl, target):
    if wl.flops > SMALL_FLOPS:
        return f"{wl.flops / 1e6:.1f} MFLOP is above the {SMALL_FLOPS / 1e6:.2f} MFLOP direct-kernel bound"
    return None


def _small_default(wl, target):
    M, N, _ = dims(wl)
    return SmallConfig(threads=min(256, mm.ceil_to(M * N, 32)))


def _small_build(wl, cfg: SmallConfig, target):
    return _build(wl, "matmul.cuda_small", (1, 1, 1), lambda sch: sched.schedule_small(sch, cfg))


register(Candidate("matmul.cuda_small", ("cuda",), PLEVEL.DIRECT, _check_common, SmallConfig,
                   space=lambda wl, t: [SmallConfig(threads=n) for n in (32, 64, 128, 256)],
                   default=_small_default, build=_small_build, suits=_small_suits))


# -- matmul.cuda_batch -------------------------------------------------------------------------

def _batch_check(wl, target):
    reason = _check_common(wl.with_(shapes=((1, 1), (1, 1)) + tuple(wl.shapes[2:])), target)
    if reason:
        return reason
    a, b = wl.shapes[0], wl.shapes[1]
    if max(len(a), len(b)) < 3 or min(len(a), len(b)) < 2:
        return "needs a batched operand (3-D or more) and no 1-D operand"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    return None


def _batch_build(wl, cfg: TiledConfig, target):
    from ..tir_schedules.common import reindex_block
    from ..topi_kernels.matmul_padded import batch_matmul_padded

    out = [int(d) for d in wl.attr("out_shape")]
    M, N, K = out[-2], out[-1], wl.shapes[0][-1]
    A, B, *extras = _placeholders(wl)
    _, D, out_map = batch_matmul_padded(
        A, B, out_shape=out, transpose_b=bool(wl.attr("transpose_b")), Mp=mm.ceil_to(M, cfg.block_m),
        Np=mm.ceil_to(N, cfg.block_n), Kp=mm.ceil_to(K, cfg.block_k), epilogue=wl.epilogue, extras=extras,
        out_dtype=wl.out_dtype, acc_dtype="float32")
    sch = create_schedule([A, B, *extras, D])
    reindex_block(sch, "D", out_map, len(out))
    sched.schedule_tiled(sch, cfg)
    return finish(sch, "matmul.cuda_batch")


register(Candidate("matmul.cuda_batch", ("cuda",), PLEVEL.BLOCKED, _batch_check, TiledConfig,
                   space=lambda wl, t: tiled_space(wl.dtypes[0]),
                   default=lambda wl, t: tiled_config_for(*[int(d) for d in wl.attr("out_shape")[-2:]]),
                   build=_batch_build))
