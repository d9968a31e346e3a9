"""Candidate table for reductions (CPU).

Workload convention (built by ``relax_passes.families.reduce``): one input in
the canonical form ``(O, R, I)`` (reduce the middle axis; see
``topi_kernels/reduce.py``), attrs ``kind`` (``sum``/``mean``/``max``/``min``)
and ``out_shape = (O, I)``. Candidates: ``reduce.inner`` (``I == 1``, rows
reduced with lane-wise vector accumulators), ``reduce.outer`` (``I > 1``,
vectorized over the kept inner axis, rows of X streamed) and ``reduce.split``
(``I == 1`` with few rows and a long reduction: threads split the row).
"""
from __future__ import annotations

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import reduce as sched
from ..tir_schedules.cpu.reduce import InnerConfig, OuterConfig, SplitConfig
from ..topi_kernels import reduce as red
from ..workload import Workload
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes

#: a reduction at least this long over fewer rows than threads is split across threads
LONG_ROW = 1 << 14


def _check(wl: Workload, target) -> str | None:
    if wl.attr("kind") not in red.KINDS:
        return f"unknown reduction kind {wl.attr('kind')!r}"
    if wl.dtypes[0] != "float32" or wl.out_dtype != "float32":
        return f"float32 only, got {wl.dtypes[0]} -> {wl.out_dtype}"
    if len(wl.shapes[0]) != 3:
        return "expects the canonical (O, R, I) form"
    if min(wl.shapes[0]) == 0:
        return "zero-size dimension"
    return None


def _dims(wl):
    return wl.shapes[0]


def _cores(target) -> int:
    return cpu_info(target).cores


def _placeholder(wl):
    return te.placeholder(tuple(red._i64(d) for d in _dims(wl)), dtype=wl.dtypes[0], name="X")


# -- reduce.inner --------------------------------------------------------------------------------

def _inner_check(wl, target):
    return _check(wl, target) or (None if _dims(wl)[2] == 1 else "kept axes after the reduced ones: reduce.outer")


def _inner_suits(wl, target):
    O, R, _ = _dims(wl)
    if O < 2 * _cores(target) and R >= LONG_ROW:
        return f"{O} row(s) of {R}: too few rows to keep {_cores(target)} threads busy (reduce.split)"
    return None


def _inner_build(wl, cfg: InnerConfig, target):
    X = _placeholder(wl)
    Y = red.reduce_3d(X, wl.attr("kind"), pad_to=cfg.lanes if _dims(wl)[1] >= 2 * cfg.lanes else 1)
    sch = create_schedule([X, Y])
    sched.schedule_inner(sch, cfg)
    return finish(sch, "reduce.inner")


def _inner_default(wl, target):
    # long rows: 4 vector accumulators, so the adds are not one dependency chain (4-cycle latency)
    lanes = _lanes(target)
    return InnerConfig(1, 4 * lanes if _dims(wl)[1] >= 32 * lanes else lanes)


register(Candidate("reduce.inner", ("llvm",), PLEVEL.BLOCKED, _inner_check, InnerConfig,
                   space=lambda wl, t: [InnerConfig(r, v * _lanes(t)) for r in (1, 2, 4, 8, 16) if r <= _dims(wl)[0]
                                        for v in (1, 4)],
                   default=_inner_default, build=_inner_build, suits=_inner_suits))


# -- reduce.outer --------------------------------------------------------------------------------

def _outer_check(wl, target):
    return _check(wl, target) or (None if _dims(wl)[2] > 1 else "nothing kept inside the reduced axes: reduce.inner")


def _ceil_to(v, m):
    return -(-v // m) * m


def _chunks(R: int, cores: int) -> int:
    """A divisor of R near 2 * cores (1 when R has none but itself)."""
    for c in range(2 * cores, 1, -1):
        if R % c == 0:
            return c
    return 1


def _outer_default(wl, target):
    O, R, I = _dims(wl)
    lanes, cores = _lanes(target), _cores(target)
    if O < cores and R >= 64 and O * R * I >= 1 << 12 and _chunks(R, cores) > 1:
        return OuterConfig(cols=_ceil_to(I, lanes), lanes=lanes, chunks=_chunks(R, cores))
    per_task = I if O >= cores else -(-I // cores)
    return OuterConfig(cols=max(lanes, min(1024, _ceil_to(per_task, lanes))), lanes=lanes)


def _outer_space(wl, target):
    lanes = _lanes(target)
    I = _dims(wl)[2]
    space = [OuterConfig(c, lanes) for c in (lanes, 4 * lanes, 16 * lanes, 64 * lanes) if c < _ceil_to(I, lanes) + lanes]
    R = _dims(wl)[1]
    return space + [OuterConfig(_ceil_to(I, lanes), lanes, c) for c in (2, 4, 8) if R % c == 0 and R >= 2 * c]


def _outer_build(wl, cfg: OuterConfig, target):
    X = _placeholder(wl)
    Y = red.reduce_3d(X, wl.attr("kind"))
    sch = create_schedule([X, Y])
    sched.schedule_outer(sch, cfg)
    return finish(sch, "reduce.outer")


register(Candidate("reduce.outer", ("llvm",), PLEVEL.BLOCKED, _outer_check, OuterConfig, space=_outer_space,
                   default=_outer_default, build=_outer_build))


# -- reduce.split --------------------------------------------------------------------------------

def _split_check(wl, target):
    reason = _inner_check(wl, target)
    if reason:
        return reason
    return None if _dims(wl)[1] >= 4 * _lanes(target) else f"a reduction of {_dims(wl)[1]} is too short to split"


def _split_suits(wl, target):
    O, R, _ = _dims(wl)
    if O >= 2 * _cores(target) or R < LONG_ROW:
        return f"{O} rows of {R}: rows already keep the threads busy (reduce.inner)"
    return None


def _split_default(wl, target):
    O, R, _ = _dims(wl)
    lanes = _lanes(target)
    if R >= 64 * lanes:  # 4 vector accumulators per chunk (independent add chains)
        lanes *= 4
    chunks = max(1, min(8 * _cores(target) // O, R // (4 * lanes)))
    return SplitConfig(chunks=chunks, lanes=lanes)


def _split_build(wl, cfg: SplitConfig, target):
    X = _placeholder(wl)
    Y = red.reduce_split(X, wl.attr("kind"), chunks=cfg.chunks, lanes=cfg.lanes)
    sch = create_schedule([X, Y])
    sched.schedule_split(sch, cfg)
    return finish(sch, "reduce.split")


register(Candidate("reduce.split", ("llvm",), PLEVEL.SPECIALIZED, _split_check, SplitConfig,
                   space=lambda wl, t: [SplitConfig(c, _lanes(t)) for c in (2, 4, 8, 16, 32)
                                        if c * 4 * _lanes(t) <= _dims(wl)[1]],
                   default=_split_default, build=_split_build, suits=_split_suits))
