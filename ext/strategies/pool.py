"""Candidate table for pooling on CPU: ``pool2d.rows`` (max/avg, NCHW) and ``pool2d.nchwc``
(max/avg on NCHW{lanes}c activations, which ``relax_passes.block_channels`` keeps between convs).

``pool2d.rows``: parallel over (n, c, output row), the output row in vector-width tiles with
the window taps unrolled (the depthwise conv schedule: same block structure).
``pool2d.nchwc``: the blocked depthwise conv's stages and schedule (each thread pads the rows
its tiles read; every tap one vector load along the channels, for any stride).
Global / adaptive average pooling stays with the fallback schedule, whose
parallel row reduction already runs at memory speed on ResNet's 7x7 maps.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.conv2d import RowConfig, TileConfig, schedule_depthwise, schedule_depthwise_nchwc
from ..topi_kernels import pool
from ..topi_kernels.conv2d import ConvGeom, phase_interior
from ..workload import channel_block
from .conv2d import lanes, placeholders
from .conv2d_blocked import tile_default, tile_space
from .conv2d_rows import dw_default, dw_space
from .registry import PLEVEL, Candidate, register


def geom(wl) -> ConvGeom:
    n, c, h, w = wl.shapes[0][:4]
    block = channel_block(wl.attr("layout"))
    c = c * block if block else c
    kh, kw = wl.attr("pool_size")
    out = wl.attr("out_shape")
    g = ConvGeom(n, c, h, w, c, kh, kw, tuple(wl.attr("strides")), tuple(wl.attr("padding")),
                 tuple(wl.attr("dilation")), c)
    if (g.OH, g.OW) != (out[2], out[3]):  # ceil_mode: extra bottom/right padding reaches the last window
        t, l, b, r = g.pad
        g = ConvGeom(n, c, h, w, c, kh, kw, g.stride, (t, l, b + (out[2] - g.OH) * g.stride[0],
                                                       r + (out[3] - g.OW) * g.stride[1]), g.dilation, c)
    return g


def _check(wl, target, layout: str = "NCHW"):
    if wl.dtypes[0] not in ("float32", "float16") or wl.out_dtype != wl.dtypes[0]:
        return f"float32/float16 only, got {wl.dtypes[0]} -> {wl.out_dtype}"
    if wl.attr("layout") != layout:
        return f"layout {wl.attr('layout')} not handled (needs {layout})"
    if any(d == 0 for d in wl.shapes[0]):
        return "zero-size dimension"
    if wl.attr("kind") == "avg" and wl.attr("ceil_mode"):
        return "avg pooling with ceil_mode: window counts differ between frameworks; stock lowering"
    return None


def _default(wl, target):
    return dw_default(geom(wl), cpu_info(target).lanes_f32)


def _space(wl, target):
    return dw_space(geom(wl), cpu_info(target).lanes_f32)


def _build(wl, cfg: RowConfig, target):
    g = geom(wl)
    (X,) = placeholders(wl)
    _, _, D = pool.pool2d_nchw(X, g, kind=wl.attr("kind"), count_include_pad=bool(wl.attr("count_include_pad")),
                               ow_pad=cfg.reg_n, oh_pad=cfg.rows)
    sch = create_schedule([X, D])
    schedule_depthwise(sch, cfg, cpu_info(target).lanes_f32, phase_interior(g))
    return finish(sch, "pool2d.rows")


register(Candidate("pool2d.rows", ("llvm",), PLEVEL.BLOCKED, _check, RowConfig, space=_space, default=_default,
                   build=_build, version=2, added_knobs=("rows",)))


def _nchwc_check(wl, target):
    return _check(wl, target, f"NCHW{lanes(target)}c")


def _nchwc_build(wl, cfg: TileConfig, target):
    g, ln = geom(wl), lanes(target)
    (X,) = placeholders(wl)
    _, _, D = pool.pool2d_nchwc(X, g, ln, kind=wl.attr("kind"), count_include_pad=bool(wl.attr("count_include_pad")),
                                ow_pad=cfg.reg_n, oh_pad=cfg.rows)
    sch = create_schedule([X, D])
    schedule_depthwise_nchwc(sch, cfg, ln)
    return finish(sch, "pool2d.nchwc")


register(Candidate("pool2d.nchwc", ("llvm",), PLEVEL.BLOCKED, _nchwc_check, TileConfig,
                   space=lambda wl, t: tile_space(geom(wl), t),
                   default=lambda wl, t: tile_default(geom(wl), t),
                   build=_nchwc_build, added_knobs=("order",)))
