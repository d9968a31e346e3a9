"""``conv2d.conv1x1``: 1x1 stride-1 convs as a GEMM on NCHW in place (CPU).

MobileNet/EfficientNet spend most of their time in 1x1 convs with few channels
(16-160) on large images. The blocked direct kernel packs the input into
NCHWc and unpacks its output, two extra passes over tensors that are large
next to the work (16->96 at 112x112: 4.8 MB of output for 19 M multiply-adds).
This kernel reads ``X`` and writes ``D`` where they lie: a register tile is
``rows`` whole output rows (a run of ``rows*W/lanes`` vectors per channel) by
``ob`` output channels, so no layout change happens at all.

Applies to groups 1, no padding, stride 1, any batch, when a whole number of
rows fills whole vectors (``rows * W`` a multiple of 8) within the register
budget, or a row wider than the budget splits into column tiles that do (``cols``:
MobileNetV2's 16->96 at 160x160, from a 320x320 image, took the blocked kernel
without them, 0.73-0.94 ms against 0.26 ms); 14x14 and 7x7 layers (whose widths fill
no vector) stay with the blocked direct kernel.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish, pick_divisor
from ..tir_schedules.cpu import conv2d as sched
from ..tir_schedules.cpu.conv2d import Conv1x1Config, vector_width
from ..topi_kernels import conv2d as cv
from . import conv2d_cost as cost
from .conv2d import check_common, geom, lanes, placeholders
from .registry import PLEVEL, Candidate, register

#: the most vectors one tile's rows may span (each is loaded once per input channel)
MAX_VECTORS = 8


def _fits(px: int, ln: int) -> bool:
    """A run of ``px`` pixels is whole vectors of 8 or more lanes, at most ``MAX_VECTORS`` of them."""
    w = vector_width(px, ln)
    return w >= 8 and px // w <= MAX_VECTORS


def _tiles(g: cv.ConvGeom, ln: int) -> list[tuple[int, int]]:
    """``(rows, cols)`` register tiles: whole rows (``cols`` 0) whose count divides OH, then, when
    there are none, column tiles of one row whose width divides OW; each a run of whole vectors."""
    rows = [(r, 0) for r in range(1, g.OH + 1) if g.OH % r == 0 and _fits(r * g.OW, ln)]
    return rows or [(1, c) for c in range(1, g.OW) if g.OW % c == 0 and _fits(c, ln)]


def _check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if (g.KH, g.KW) != (1, 1) or g.stride != (1, 1) or any(g.pad) or g.groups != 1:
        return "1x1 stride-1 unpadded groups-1 convs only"
    if not _tiles(g, lanes(target)):
        return f"no whole number of {g.OW}-wide rows nor a part of one fills whole vectors (<= {MAX_VECTORS})"
    return None


def _px(g, cfg) -> int:
    """Pixels per register tile."""
    return cfg.cols or cfg.rows * g.OW


def _vectors(g, cfg, ln) -> int:
    return _px(g, cfg) // vector_width(_px(g, cfg), ln)


def _space(wl, target):
    g, ln = geom(wl), lanes(target)
    tiles = [Conv1x1Config(rows=r, ob=ob, cols=c) for r, c in _tiles(g, ln) for ob in (1, 2, 3, 4, 6)
             if g.O % ob == 0]
    # the accumulators and the tile's input vectors (each loaded once per input channel, read by
    # every output channel) share the register file: 3 x 8 vectors and the 8 inputs spilled
    # (16->96 at 256x256: 2.93 ms, against 0.61 as 2 x 8)
    regs = cpu_info(target).accumulators
    return [cfg for cfg in tiles if (cfg.ob + 1) * _vectors(g, cfg, ln) <= regs]


def _default(wl, target):
    g, ln = geom(wl), lanes(target)
    space = _space(wl, target)
    # the most accumulators, then the widest tile (fewer tiles, longer contiguous runs)
    return max(space, key=lambda c: (c.ob * _vectors(g, c, ln), _px(g, c))) if space else \
        Conv1x1Config(*_tiles(g, ln)[0][:1], ob=pick_divisor(g.O, 1), cols=_tiles(g, ln)[0][1])


def _build(wl, cfg: Conv1x1Config, target):
    g = geom(wl)
    X, Wt, *extras = placeholders(wl)
    _, D = cv.conv1x1_nchw(X, Wt, g, epilogue=wl.epilogue, extras=extras, out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    sched.schedule_conv1x1(sch, cfg, lanes(target))
    return finish(sch, "conv2d.conv1x1")


def _estimate(wl, target):
    g, cfg = geom(wl), _default(wl, target)
    return cost.conv1x1(g, target, _px(g, cfg), cfg.ob)


register(Candidate("conv2d.conv1x1", ("llvm",), PLEVEL.BLOCKED, _check, Conv1x1Config, space=_space,
                   default=_default, build=_build, added_knobs=("cols",),
                   estimate=_estimate))
