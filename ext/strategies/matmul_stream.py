"""``matmul.stream`` (CPU): a run-time weight (``b_const`` false: an input of every call) read
once where it lies, for up to ``STREAM_MAX_M`` rows of ``a``; see ``matmul.py`` for the family's
workload convention. Split from ``matmul.py`` by concern: the other candidates pack or transform
B, this one never does.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import matmul as cpu_sched
from ..tir_schedules.cpu.matmul import StreamConfig
from ..topi_kernels import matmul as mm
from .matmul import SERIAL_FLOPS, SMALL_FLOPS, STREAM_MAX_M, _check_common, _placeholders, dims
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes

# -- matmul.stream -----------------------------------------------------------------------------



def _runtime_weight(wl) -> bool:
    return not wl.attr("b_const")


def _stream_lanes(wl, target) -> int:
    """Vector width along B's contiguous axis (N for kn, K for nk), at most that axis' length."""
    M, N, K = dims(wl)
    return max(1, min(_lanes(target), K if wl.attr("transpose_b") else N))


def _stream_check(wl, target):
    reason = _check_common(wl, target)
    if reason:
        return reason
    M, N, _ = dims(wl)
    if N == 1:
        return "a single output column (matmul.gemv's dot form)"
    return None


def _stream_suits(wl, target):
    M, _, _ = dims(wl)
    if not _runtime_weight(wl):
        return "the weight is known before the first call: packed once, matmul.packed/gemv read it faster"
    if M > STREAM_MAX_M:
        return f"M={M} > {STREAM_MAX_M}: enough rows to repay packing the weight on every call"
    if wl.flops <= SMALL_FLOPS:
        return (f"{wl.flops / 1e6:.2f} MFLOP: matmul.direct reads the weight in place too, "
                "without a separate epilogue pass")
    return None


def _stream_regs(target) -> int:
    return cpu_info(target).vector_registers


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _stream_default(wl, target):
    """``mb`` up to 4 rows; tiles of 4 vectors (kn) or 4 weight rows (nk) while ``mb x width``
    accumulators fit half the vector registers, a power of two (so common N divide them).
    Measured single-threaded on 1x2048x1000 (time / NumPy's): kn 2/4/8 vectors 0.92/0.91/1.16,
    nk 4/8 rows 0.74/1.11; 17x1024x1000 nk: (mb, rows) = (4, 4) 0.65, (4, 2) 0.87, (2, 4) 0.71:
    more concurrent row streams than that stall on memory."""
    M, N, K = dims(wl)
    lanes = _stream_lanes(wl, target)
    mb = min(M, 4)
    par = wl.flops >= SERIAL_FLOPS
    width = _pow2_at_most(min(4, (_stream_regs(target) // 2) // mb))
    if wl.attr("transpose_b"):  # nb weight rows: mb x nb partial-sum vectors, nb + mb loads per step
        return StreamConfig(mb=mb, nb=min(N, width), parallel=par)
    return StreamConfig(mb=mb, nb=min(-(-N // lanes), width) * lanes, parallel=par)


def _stream_space(wl, target):
    M, N, K = dims(wl)
    lanes = _stream_lanes(wl, target)
    regs = _stream_regs(target)
    nk = bool(wl.attr("transpose_b"))
    limit = N if nk else -(-N // lanes)  # weight rows (nk) or vectors of a row of B (kn)
    out = []
    for mb in (m for m in (1, 2, 4, 8) if m <= max(1, M)):
        for width in (1, 2, 4, 8, 16):
            if mb * width + width + 1 > regs or width > limit:
                continue
            out += [StreamConfig(mb=mb, nb=width if nk else width * lanes, parallel=p) for p in (True, False)]
    return out


def _stream_build(wl, cfg: StreamConfig, target):
    M, N, K = dims(wl)
    lanes = _stream_lanes(wl, target)
    A, B, *extras = _placeholders(wl)
    if wl.attr("transpose_b"):
        _, D = mm.dot_nk(A, B, M=M, N=N, K=K, lanes=lanes, pad_rows=cfg.mb, pad_cols=cfg.nb, epilogue=wl.epilogue,
                         extras=extras, out_dtype=wl.out_dtype)
        sch = create_schedule([A, B, *extras, D])
        vec = _lanes(target)
        cpu_sched.schedule_dot_nk(sch, cfg, M * N, vec, contiguous=N % vec == 0)
    else:
        vectors = max(1, cfg.nb // lanes)
        _, D = mm.stream_kn(A, B, M=M, N=N, K=K, lanes=lanes, pad_rows=cfg.mb, pad_vectors=vectors,
                            epilogue=wl.epilogue, extras=extras, out_dtype=wl.out_dtype)
        sch = create_schedule([A, B, *extras, D])
        cpu_sched.schedule_stream_kn(sch, cfg, lanes, M * N, contiguous=N % lanes == 0)
    return finish(sch, "matmul.stream")


register(Candidate("matmul.stream", ("llvm",), PLEVEL.SPECIALIZED, _stream_check, StreamConfig,
                   space=_stream_space, default=_stream_default, build=_stream_build, suits=_stream_suits))
