"""Candidate table for layout transforms (CPU): ``layout_transform.blocked`` and
``layout_transform.chunks``.

Workload convention (built by ``relax_passes.families.transpose``): one input
viewed as ``(B, R, S, E)`` (see ``topi_kernels/layout.py``), ``out_shape =
(B, S, R, E)`` and attr ``src`` (the original input shape, for the report).
Other issues (conv2d layout policy) find these kernels by the registry names
``layout_transform.*``.
"""
from __future__ import annotations

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import layout as sched
from ..tir_schedules.cpu.layout import BlockedConfig, ChunkConfig
from ..topi_kernels import layout as lay
from ..workload import Workload
from .registry import PLEVEL, Candidate, register


def _check(wl: Workload, target) -> str | None:
    if len(wl.shapes[0]) != 4:
        return "expects the canonical (B, R, S, E) view"
    if wl.dtypes[0] != wl.out_dtype:
        return f"a layout change keeps the dtype ({wl.dtypes[0]} -> {wl.out_dtype})"
    if min(wl.shapes[0]) == 0:
        return "zero-size dimension"
    return None


def _lanes(wl, target) -> int:
    bits = {"float32": 32, "int32": 32, "float16": 16, "bfloat16": 16, "int8": 8, "uint8": 8}.get(wl.dtypes[0], 32)
    return max(1, cpu_info(target).vector_bits // bits)


def _build(schedule, name):
    def build(wl, cfg, target):
        X = te.placeholder(tuple(lay._i64(d) for d in wl.shapes[0]), dtype=wl.dtypes[0], name="X")
        Y = lay.batched_transpose(X)
        sch = create_schedule([X, Y])
        schedule(sch, cfg)
        return finish(sch, name)

    return build


def _blocked_suits(wl, target):
    E = wl.shapes[0][3]
    return None if E < _lanes(wl, target) else f"chunks of {E} elements: layout_transform.chunks copies vectors"


def _chunks_check(wl, target):
    return _check(wl, target) or (None if wl.shapes[0][3] > 1 else "single elements: layout_transform.blocked")


def _chunks_suits(wl, target):
    E = wl.shapes[0][3]
    return None if E >= _lanes(wl, target) else f"chunks of {E} are shorter than a vector"


register(Candidate("layout_transform.blocked", ("llvm",), PLEVEL.BLOCKED, _check, BlockedConfig,
                   space=lambda wl, t: [BlockedConfig(ts, _lanes(wl, t)) for ts in (4, 8, 16, 32, 64)],
                   default=lambda wl, t: BlockedConfig(16, _lanes(wl, t)),
                   build=_build(sched.schedule_blocked, "layout_transform.blocked"), suits=_blocked_suits))
register(Candidate("layout_transform.chunks", ("llvm",), PLEVEL.BLOCKED, _chunks_check, ChunkConfig,
                   space=lambda wl, t: [ChunkConfig(_lanes(wl, t))], default=lambda wl, t: ChunkConfig(_lanes(wl, t)),
                   build=_build(sched.schedule_chunks, "layout_transform.chunks"), suits=_chunks_suits))
