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
budget; 14x14 and 7x7 layers (whose widths fill no vector) stay with the
blocked direct kernel.
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


def _tile_rows(g: cv.ConvGeom, ln: int) -> list[int]:
    """Row counts that divide OH and whose rows fill whole vectors, at most ``MAX_VECTORS``."""
    out = []
    for r in range(1, g.OH + 1):
        w = vector_width(r * g.OW, ln)
        if g.OH % r == 0 and w >= 8 and r * g.OW // w <= MAX_VECTORS:
            out.append(r)
    return out


def _check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if (g.KH, g.KW) != (1, 1) or g.stride != (1, 1) or any(g.pad) or g.groups != 1:
        return "1x1 stride-1 unpadded groups-1 convs only"
    if not _tile_rows(g, lanes(target)):
        return f"no whole number of {g.OW}-wide rows fills whole vectors (<= {MAX_VECTORS})"
    return None


def _vectors(g, rows, ln) -> int:
    return rows * g.OW // vector_width(rows * g.OW, ln)


def _space(wl, target):
    g, ln = geom(wl), lanes(target)
    budget = cpu_info(target).accumulators - MAX_VECTORS + 4  # loads of the tile's input share the file
    return [Conv1x1Config(rows=r, ob=ob) for r in _tile_rows(g, ln) for ob in (1, 2, 3, 4, 6)
            if g.O % ob == 0 and ob * _vectors(g, r, ln) <= budget]


def _default(wl, target):
    g, ln = geom(wl), lanes(target)
    space = _space(wl, target)
    # the most accumulators, then the widest row tile (fewer tiles, longer contiguous runs)
    return max(space, key=lambda c: (c.ob * _vectors(g, c.rows, ln), c.rows)) if space else \
        Conv1x1Config(rows=_tile_rows(g, ln)[0], ob=pick_divisor(g.O, 1))


def _build(wl, cfg: Conv1x1Config, target):
    g = geom(wl)
    X, Wt, *extras = placeholders(wl)
    _, D = cv.conv1x1_nchw(X, Wt, g, epilogue=wl.epilogue, extras=extras, out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    sched.schedule_conv1x1(sch, cfg, lanes(target))
    return finish(sch, "conv2d.conv1x1")


def _estimate(wl, target):
    g, cfg = geom(wl), _default(wl, target)
    return cost.conv1x1(g, target, cfg.rows * g.OW, cfg.ob)


register(Candidate("conv2d.conv1x1", ("llvm",), PLEVEL.BLOCKED, _check, Conv1x1Config, space=_space,
                   default=_default, build=_build,
                   estimate=_estimate))
