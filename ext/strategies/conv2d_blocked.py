"""Conv2d candidates on blocked activations (CPU): ``conv2d.depthwise_nchwc``.

Workload: ``data_layout = "NCHW{lanes}c"`` (``x`` is ``(N, C/lanes, H, W, lanes)``, the output
too), ``kernel_layout = "OIHW"``; made by ``relax_passes.block_channels`` for a depthwise conv
between blocked convs. The blocked direct conv is ``conv2d.direct_nchwc`` itself (its
``block`` form, ``strategies/conv2d.py``).
"""
from __future__ import annotations

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import conv2d as sched
from ..tir_schedules.cpu.conv2d import TileConfig
from ..topi_kernels import conv2d_blocked as cb
from ..topi_kernels import host
from ..topi_kernels.matmul import _i64
from . import conv2d_cost as cost
from .conv2d import blocked_layouts, check_common, geom, lanes, pick_reg_n, placeholders
from .registry import PLEVEL, Candidate, register


def _check(wl, target):
    reason = check_common(wl, blocked_layouts(target))
    if reason:
        return reason
    g = geom(wl)
    if not (g.groups == g.C == g.O):
        return f"not depthwise with multiplier 1 (groups={g.groups}, C={g.C}, O={g.O})"
    if g.C % lanes(target):
        return f"channels {g.C} not whole {lanes(target)}-blocks"
    return None


def tile_default(g, target, order: str = "channels") -> TileConfig:
    """The register tile of a blocked sliding window (depthwise conv, pooling): one row of up to 14
    pixel vectors, two rows on narrow planes, 4 x 4 when dilated; ``order`` the parallel split
    (``TileConfig``)."""
    acc = cpu_info(target).accumulators
    if max(g.dilation) > 1 and min(g.OH, g.OW) >= 4:
        # dilated (DeepLab's atrous layers): 4 x 4 tiles. One row of 8 ran 2x slower: 960 channels
        # at 64x64, dilation 4: 1.66-2.02 ms against 0.80-0.85; 576, dilation 2: 0.91 against 0.35
        return TileConfig(reg_n=4, rows=4, order=order)
    if g.OW <= acc // 2 and g.OH > 1:  # narrow planes: two rows for more independent FMA chains
        return TileConfig(reg_n=g.OW, rows=2, order=order)
    return TileConfig(reg_n=pick_reg_n(g.OW, min(14, acc)), rows=1, order=order)


def tile_space(g, target) -> list[TileConfig]:
    acc = cpu_info(target).accumulators
    out = []
    for order in ("channels", "rows"):
        for rows in (1, 2, 4):
            for reg_n in sorted({4, 7, 8, 14, pick_reg_n(g.OW, acc // rows), min(g.OW, acc // rows)}):
                cfg = TileConfig(reg_n=reg_n, rows=rows, order=order)
                if reg_n * rows <= acc and reg_n <= max(g.OW, 4) and cfg not in out:
                    out.append(cfg)
    return out


def _wshape(wl, target):
    g = geom(wl)
    return (g.O // lanes(target), g.KH, g.KW, lanes(target))


def _build(wl, cfg: TileConfig, target):
    g, ln = geom(wl), lanes(target)
    X, Wb, *extras = placeholders(wl, _wshape(wl, target))
    _, _, D = cb.depthwise_nchwc(X, Wb, g, ln, ow_pad=cfg.reg_n, oh_pad=cfg.rows, epilogue=wl.epilogue,
                                 extras=extras, out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wb, *extras, D])
    sched.schedule_depthwise_nchwc(sch, cfg, ln)
    return finish(sch, "conv2d.depthwise_nchwc")


def _transforms(wl, cfg, target):
    g, ln = geom(wl), lanes(target)
    Wt = te.placeholder(tuple(_i64(d) for d in wl.shapes[1]), dtype=wl.dtypes[1], name="W")
    Wb = cb.pack_weight_depthwise(Wt, g, ln)
    sch = create_schedule([Wt, Wb])
    sched.schedule_pack(sch, "Wb", ln, 1)
    return {1: host.attach(finish(sch, "conv2d.pack_depthwise"), "conv2d.pack_depthwise", block=ln)}


register(Candidate("conv2d.depthwise_nchwc", ("llvm",), PLEVEL.SPECIALIZED, _check, TileConfig,
                   space=lambda wl, t: tile_space(geom(wl), t), added_knobs=("order",),
                   default=lambda wl, t: tile_default(geom(wl), t), build=_build, transforms=_transforms,
                   estimate=lambda wl, t: cost.depthwise(geom(wl), t)))
