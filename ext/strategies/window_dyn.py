"""Sliding-window kernels for a run-time batch, image height or width (CPU):
``conv2d.depthwise_dyn`` and ``pool2d.rows_dyn``.

They are ``conv2d.depthwise`` and ``pool2d.rows`` (the same computes and row-tiled schedule:
a thread per (image, channel) plane, its padded input split by column phase, register tiles of
``rows`` x ``reg_n`` outputs) with the symbolic extents as ``tirx.Var`` expressions: the rows
and columns are padded to whole tiles by expression, the pad is written per row block, and the
interior/border split of the pad is left out (its cut points are run-time values). Tiles are
chosen as their static twins choose them for the map a 224x224 input gives each layer
(``dynamic.at_size``).

Before them a symbolic-size model ran its depthwise convs on ``conv2d.direct_nchwc_dyn``
(a dense kernel's blocking over one-channel groups) and its pools on TVM's unscheduled
lowering: ResNet-50's stem max pool took 5.9 ms there against 0.1 ms static.
"""
from __future__ import annotations

from ..relax_passes.symbolic import SymbolTable
from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.conv2d import RowConfig, schedule_depthwise
from ..topi_kernels import conv2d as cv
from ..topi_kernels import dynamic as dyn
from ..topi_kernels import pool
from ..workload import Workload
from . import conv2d as conv
from . import conv2d_rows as rows
from . import pool as pool_static
from .dynamic import _at_size, _placeholders, _static_suits, symbolic_geom
from .registry import PLEVEL, Candidate, register


def _interior(g: cv.ConvGeom) -> tuple:
    """``phase_interior`` where the width is static; a run-time width has no static interior."""
    return cv.phase_interior(g) if dyn.is_static(g.W) else (0, 0, g.stride[1])


# -- conv2d.depthwise_dyn ------------------------------------------------------------------------

def _dw_build(wl: Workload, cfg: RowConfig, target):
    table = SymbolTable()
    g = symbolic_geom(conv.geom(wl), table)
    X, Wt, *extras = _placeholders(wl, table)
    _, _, D = cv.depthwise_nchw(X, Wt, g, ow_pad=cfg.reg_n, oh_pad=cfg.rows, epilogue=wl.epilogue,
                                extras=[dyn.Broadcastable(e) for e in extras], out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wt, *extras, D])
    schedule_depthwise(sch, cfg, conv.lanes(target), _interior(g))
    return finish(sch, "conv2d.depthwise_dyn")


register(Candidate("conv2d.depthwise_dyn", ("llvm",), PLEVEL.SPECIALIZED,
                   lambda wl, t: rows._dw_check(_at_size(wl), t), RowConfig,
                   space=lambda wl, t: rows._dw_space(_at_size(wl), t),
                   default=lambda wl, t: rows._dw_default(_at_size(wl), t), build=_dw_build,
                   suits=_static_suits, dynamic=("batch", "spatial")))


# -- pool2d.rows_dyn ----------------------------------------------------------------------------

def _pool_geom(wl: Workload, table: SymbolTable | None = None) -> cv.ConvGeom:
    """The window of a floor-mode NCHW pool; ``table``: symbolic extents as expressions."""
    n, c, h, w = wl.shapes[0][:4]
    if table is not None:
        n, h, w = table.dim(n), table.dim(h), table.dim(w)
    kh, kw = wl.attr("pool_size")
    return cv.ConvGeom(n, c, h, w, c, kh, kw, tuple(wl.attr("strides")), tuple(wl.attr("padding")),
                       tuple(wl.attr("dilation")), c)


def _pool_check(wl: Workload, target):
    reason = pool_static._check(wl, target)
    if reason:
        return reason
    if wl.attr("ceil_mode"):  # SettleComputedDims turns a symbolic ceil-mode pool into a floor-mode one
        return "ceil_mode with a symbolic size: its extent is not the floor formula the kernel computes"
    return None


def _pool_default(wl: Workload, target):
    return rows.dw_default(_pool_geom(_at_size(wl)), cpu_info(target).lanes_f32)


def _pool_space(wl: Workload, target):
    return rows.dw_space(_pool_geom(_at_size(wl)), cpu_info(target).lanes_f32)


def _pool_build(wl: Workload, cfg: RowConfig, target):
    table = SymbolTable()
    g = _pool_geom(wl, table)
    (X,) = _placeholders(wl, table)
    _, _, D = pool.pool2d_nchw(X, g, kind=wl.attr("kind"), count_include_pad=bool(wl.attr("count_include_pad")),
                               ow_pad=cfg.reg_n, oh_pad=cfg.rows)
    sch = create_schedule([X, D])
    schedule_depthwise(sch, cfg, cpu_info(target).lanes_f32, _interior(g))
    return finish(sch, "pool2d.rows_dyn")


register(Candidate("pool2d.rows_dyn", ("llvm",), PLEVEL.BLOCKED, _pool_check, RowConfig, space=_pool_space,
                   default=_pool_default, build=_pool_build, suits=_static_suits, dynamic=("batch", "spatial")))
