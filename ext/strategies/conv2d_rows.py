"""Row-tiled conv2d candidates on CPU: ``conv2d.depthwise`` (NCHW, groups == C)
and ``conv2d.direct_nhwc`` (NHWC/OHWI, any groups).

Depthwise has no channel reduction, so it vectorizes along the output row
(contiguous for stride 1) with the taps unrolled; NHWC direct vectorizes over
output channels (contiguous in NHWC) with ``reg_n`` output columns unrolled.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish, pick_divisor
from ..tir_schedules.cpu import conv2d as sched
from ..tir_schedules.cpu.conv2d import RowConfig
from ..topi_kernels import conv2d as cv
from ..topi_kernels.matmul import ceil_to
from . import conv2d_cost as cost
from .conv2d import check_common, geom, lanes, pick_reg_n, placeholders
from .registry import PLEVEL, Candidate, register

# -- conv2d.depthwise -----------------------------------------------------------------------------


def _dw_check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if not (g.groups == g.C and g.Cg == 1):
        return f"not depthwise (groups={g.groups}, C={g.C})"
    return None


def dw_vector(ow: int, ln: int) -> int:
    """The vector width for an output row of ``ow`` columns: the fewest vectors per row, then
    the fewest padded columns (a 7-wide row takes one 8-lane vector, a 14-wide one 16 lanes)."""
    return min((ln, ln // 2), key=lambda w: (-(-ow // w), ceil_to(ow, w)))


#: the output rows of a small plane's tile (9-16 rows, each one vector): a row gives one
#: accumulator, and 4-8 independent FMA chains hide the FMA latency (depthwise 3x3 576x14x14:
#: 7 rows 0.039 ms against 2 rows 0.065; 5x5 672x14x14 0.065 against 0.093). At 7x7 and below,
#: 7 rows measured no better than 4 (0.030 against 0.026 ms), so those keep the general rule
SMALL_PLANE_ROWS = (8, 7, 6, 5, 4)


def dw_default(g, ln: int) -> RowConfig:
    """Row-tiled sliding windows (depthwise conv, pooling): vectors along the row; up to 4 rows,
    or 4-8 on a small plane (9-16 rows) whose row is one vector tile."""
    w = dw_vector(g.OW, ln)
    vecs = 2 if g.OW >= 4 * w else 1  # wide rows: two vectors per tile for more independent FMAs
    small = 8 < g.OH <= 16 and g.OW <= vecs * w
    rows = min(SMALL_PLANE_ROWS if small else (4, 3, 2), key=lambda r: (ceil_to(g.OH, r) - g.OH, -r))
    return RowConfig(reg_n=vecs * w, rows=rows)


def dw_space(g, ln: int) -> list[RowConfig]:
    w = dw_vector(g.OW, ln)
    rows = sorted({1, 2, 4, dw_default(g, ln).rows})
    return [RowConfig(reg_n=v * w, rows=r) for v in (1, 2) for r in rows if v * w <= ceil_to(g.OW, w)]


def _dw_default(wl, target):
    return dw_default(geom(wl), lanes(target))


def _dw_space(wl, target):
    return dw_space(geom(wl), lanes(target))


def _dw_build(wl, cfg: RowConfig, target):
    g = geom(wl)
    X, Wt, *extras = placeholders(wl)
    _, _, D = cv.depthwise_nchw(X, Wt, g, ow_pad=cfg.reg_n, oh_pad=cfg.rows, epilogue=wl.epilogue,
                                extras=extras, out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    sched.schedule_depthwise(sch, cfg, lanes(target), cv.phase_interior(g))
    return finish(sch, "conv2d.depthwise")


register(Candidate("conv2d.depthwise", ("llvm",), PLEVEL.SPECIALIZED, _dw_check, RowConfig,
                   space=_dw_space, default=_dw_default, build=_dw_build, version=2, added_knobs=("rows",),
                   estimate=lambda wl, t: cost.depthwise(geom(wl), t)))


# -- conv2d.rows ----------------------------------------------------------------------------------


def _rows_check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if g.groups != 1:
        return f"dense convs only (groups={g.groups})"
    if g.C >= lanes(target):
        return f"{g.C} input channels fill channel vectors: the blocked kernel's reduction"
    return None


def _rows_suits(wl, target):
    g = geom(wl)
    if g.OW < lanes(target):  # a squeeze-excitation conv on a pooled vector: 1 of 8 lanes busy
        return f"output rows of {g.OW} fill no vector"
    return None


def _rows_default(wl, target):
    g = geom(wl)
    # one vector of 4 output channels: the fastest or within 5% of it on every stem of the space's
    # sweep (3->32 3x3/2 at 224: 116 us against 140 with 8 channels x 2 vectors; 3->64 7x7/2
    # 1.06 ms against 1.58; 3->16 3x3/2 64 against 75; 3->32 3x3 at 64x64 42 against 36-39)
    return RowConfig(reg_n=dw_vector(g.OW, lanes(target)), ocb=pick_divisor(g.O, 4), rows=1)


def _rows_space(wl, target):
    g, ln = geom(wl), lanes(target)
    w, acc = dw_vector(g.OW, ln), cpu_info(target).accumulators
    out = []
    for vecs in (1, 2):
        for rows in (1, 2):
            for want in (4, 6, 8, 12):
                ocb = pick_divisor(g.O, want)
                cfg = RowConfig(reg_n=vecs * w, ocb=ocb, rows=rows)
                if ocb * rows * vecs <= acc and vecs * w <= ceil_to(g.OW, w) and cfg not in out:
                    out.append(cfg)
    return out


def _rows_build(wl, cfg: RowConfig, target):
    g = geom(wl)
    X, Wt, *extras = placeholders(wl)
    _, _, D = cv.rows_nchw(X, Wt, g, ow_pad=cfg.reg_n, oh_pad=cfg.rows, epilogue=wl.epilogue, extras=extras,
                           out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    sched.schedule_rows(sch, cfg, lanes(target), cv.phase_interior(g))
    return finish(sch, "conv2d.rows")


register(Candidate("conv2d.rows", ("llvm",), PLEVEL.SPECIALIZED, _rows_check, RowConfig,
                   space=_rows_space, default=_rows_default, build=_rows_build, suits=_rows_suits,
                   estimate=lambda wl, t: cost.rows(geom(wl), t)))


# -- conv2d.direct_nhwc ---------------------------------------------------------------------------

def _nhwc_check(wl, target):
    return check_common(wl, layouts=(("NHWC", "OHWI"),))


def _nhwc_cfg(g, ln, reg_n, ocb_want, acc: int):
    if g.O % ln == 0:
        ocb = ln * pick_divisor(g.O // ln, ocb_want // ln)
    else:
        ocb = pick_divisor(g.O, ocb_want)
    vecs = max(1, ocb // ln)
    return RowConfig(reg_n=pick_divisor(g.OW, min(reg_n, acc // vecs)), ocb=ocb)


def _nhwc_default(wl, target):
    g, ln = geom(wl), lanes(target)
    return _nhwc_cfg(g, ln, 8, 2 * ln, cpu_info(target).accumulators)


def _nhwc_space(wl, target):
    g, ln = geom(wl), lanes(target)
    out = []
    for reg_n in (4, 7, 8, 14):
        for want in (ln, 2 * ln, 4 * ln):
            cfg = _nhwc_cfg(g, ln, reg_n, want, cpu_info(target).accumulators)
            if cfg not in out:
                out.append(cfg)
    return out


def _nhwc_build(wl, cfg: RowConfig, target):
    g = geom(wl)
    X, Wt, *extras = placeholders(wl)
    _, _, D = cv.conv2d_nhwc(X, Wt, g, kernel_layout="OHWI", epilogue=wl.epilogue, extras=extras,
                             out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    sched.schedule_nhwc(sch, cfg, lanes(target))
    return finish(sch, "conv2d.direct_nhwc")


register(Candidate("conv2d.direct_nhwc", ("llvm",), PLEVEL.BLOCKED, _nhwc_check, RowConfig,
                   space=_nhwc_space, default=_nhwc_default, build=_nhwc_build,
                   estimate=lambda wl, t: cost.direct(geom(wl), t, "direct_nhwc")))
