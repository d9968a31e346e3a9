"""Candidates for workloads with symbolic (run-time) outer dimensions (CPU).

A server batches requests dynamically and a language model's sequence grows,
so the batch / row / sequence extent of a workload is often a symbol
(``Workload.shapes`` holds its string). Without these candidates every kernel
declines such a workload and stock lowering runs (57x slower than the static
kernel on a matmul with 64 rows). Each candidate here declares the roles it
takes symbolic (``Candidate.dynamic``, roles in ``_symbolic.py``); its kernel
keeps the static kernel's tiling and vectorization, with the symbolic loop
split by the tile size over an extent padded by a PrimExpr (no tail loop,
no bounds check in the hot loop) and threads over it.

* ``matmul.packed_dyn``: ``x @ W`` with M (every leading axis of ``x``)
  symbolic and a 2-D weight: ``matmul.packed``'s panels and register tiles.
* ``matmul.batch_dyn``: batched pairs with any extent symbolic (attention:
  ``q @ k^T`` has M and N symbolic, ``p @ v`` M and K): B is copied into
  zero-padded panels inside the kernel.
* ``softmax.rowwise_dyn``, ``layer_norm.fused_dyn``: the static row kernels
  (their computes take a symbolic row count) over a parallel symbolic row loop.
* ``conv2d.direct_nchwc_dyn``: ``conv2d.direct_nchwc`` with a symbolic batch (the images
  one more axis of its parallel loop) or image size (rows of the parallel loop, the width
  padded to whole register tiles; tiles chosen for the map a 224x224 input would give).
* ``reduce.inner_dyn`` / ``reduce.outer_dyn`` (``strategies/reduce_dyn.py``): ``reduce.inner`` / ``reduce.outer``
  with the rows ``O`` of the canonical ``(O, R, I)`` symbolic (a batch before the
  reduced axes: a CNN's global average pool).
* ``softmax.cols_dyn``: softmax over rows of symbolic length too (attention
  scores, ``(b, h, s, s)``): reductions padded to whole vectors, vector passes
  with a predicated tail (``suits`` leaves static row lengths to the others).

The others also take static workloads (``test_candidates`` checks them there) but
``suits`` leaves those to the static kernels, which see every extent.
"""
from __future__ import annotations

import dataclasses
import re

from tvm import te

from ..relax_passes.symbolic import SymbolTable, out_shape, parse_dim
from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import dynamic as sched
from ..tir_schedules.cpu import matmul as cpu_mm
from ..tir_schedules.cpu.dynamic import RowConfig, TileConfig
from ..topi_kernels import dynamic as dyn
from ..topi_kernels import host
from ..topi_kernels import matmul as mm
from ..topi_kernels import norm, softmax as sm
from ..tir_schedules.cpu import conv2d as conv_sched
from ..tir_schedules.cpu.conv2d import DirectConfig
from ..topi_kernels import conv2d as cv
from ..workload import Workload
from . import conv2d as conv
from .matmul_tiles import ROW_OPTIONS, fit_rows, pick_nb, widest_tile
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes


def _static_suits(wl: Workload, target) -> str | None:
    return "static shape: the static kernels see every extent" if wl.is_static else None


def _float32(wl: Workload) -> str | None:
    if any(d != "float32" for d in wl.dtypes) or wl.out_dtype != "float32":
        return f"float32 only, got {'/'.join(sorted(set(wl.dtypes)))} -> {wl.out_dtype}"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    return None


def _placeholders(wl: Workload, table: SymbolTable, b_shape=None) -> list[te.Tensor]:
    names = ["A", "B"] + [f"E{i}" for i in range(len(wl.shapes) - 2)]
    shapes = list(wl.shapes)
    if b_shape is not None:
        shapes[1] = b_shape
    return [te.placeholder(table.shape(s), dtype=dt, name=n) for n, s, dt in zip(names, shapes, wl.dtypes)]


def _tile_space(N: int, target, pars=("panels", "tiles")) -> list[TileConfig]:
    lanes = _lanes(target)
    return [TileConfig(mb=mb, nb=nb, parallel=par) for nb in (16, 24, 32, 48, 64) if nb % lanes == 0
            and nb <= max(lanes, mm.ceil_to(N, lanes)) for mb in ROW_OPTIONS for par in pars]


def _tile_default(N: int, K, target) -> TileConfig:
    """``matmul.packed``'s heuristic without M: its panel width (``matmul.pick_nb``; a symbolic K
    counts as 1024), ``matmul.fit_rows`` rows per tile, threads over panels when
    there are enough of them."""
    info = cpu_info(target)
    lanes = info.lanes_f32
    best = pick_nb(N, K if isinstance(K, int) else 1024, info)
    mb = fit_rows(max(1, best // lanes), info)
    panels = mm.ceil_to(N, best) // best
    return TileConfig(mb=mb, nb=best, parallel="panels" if panels >= 4 * info.cores else "tiles")


# -- matmul.packed_dyn ---------------------------------------------------------------------------

def _packed_dims(wl: Workload) -> tuple[int, int]:
    b = wl.shapes[1]
    return (b[0], b[1]) if wl.attr("transpose_b") else (b[1], b[0])  # (N, K)


def _packed_check(wl, target):
    reason = _float32(wl)
    if reason:
        return reason
    if len(wl.shapes[1]) != 2 or len(wl.shapes[0]) < 2:
        return "needs a 2-D weight and an operand of rank >= 2 (batched pairs: matmul.batch_dyn)"
    return None


def _pack_func(wl: Workload, nb: int, target):
    N, K = _packed_dims(wl)
    layout = "nk" if wl.attr("transpose_b") else "kn"
    B = te.placeholder(tuple(mm._i64(d) for d in wl.shapes[1]), dtype=wl.dtypes[1], name="B")
    Bp = mm.pack_weight(B, N=N, K=K, nb=nb, b_layout=layout)
    sch = create_schedule([B, Bp])
    cpu_mm.schedule_pack(sch, _lanes(target))
    return host.attach(finish(sch, "matmul.pack"), "matmul.pack", N=N, nb=nb, layout=layout)


def _packed_build(wl, cfg: TileConfig, target):
    N, K = _packed_dims(wl)
    table = SymbolTable()
    A, Bp, *extras = _placeholders(wl, table, b_shape=(mm.ceil_to(N, cfg.nb) // cfg.nb, K, cfg.nb))
    _, D = dyn.matmul_rows(A, Bp, N=N, nb=cfg.nb, epilogue=wl.epilogue, extras=extras, out_dtype=wl.out_dtype,
                           pad_rows=cfg.mb)
    sch = create_schedule([A, Bp, *extras, D])
    sched.schedule_rows_gemm(sch, cfg, _lanes(target), nbatch=len(wl.shapes[0]) - 2, threads=cpu_info(target).cores)
    return finish(sch, "matmul.packed_dyn")


def _packed_suits(wl, target):
    if not wl.attr("b_const"):
        return "run-time weight: packing it on every call (a symbolic M may be 1)"
    return _static_suits(wl, target)


register(Candidate("matmul.packed_dyn", ("llvm",), PLEVEL.BLOCKED, _packed_check, TileConfig,
                   space=lambda wl, t: _tile_space(_packed_dims(wl)[0], t),
                   default=lambda wl, t: _tile_default(*_packed_dims(wl), t), build=_packed_build,
                   transforms=lambda wl, cfg, t: {1: _pack_func(wl, cfg.nb, t)}, suits=_packed_suits,
                   dynamic=("rows",)))


# -- matmul.batch_dyn ----------------------------------------------------------------------------

def _batch_check(wl, target):
    reason = _float32(wl)
    if reason:
        return reason
    ra, rb = len(wl.shapes[0]), len(wl.shapes[1])
    if max(ra, rb) < 3 or min(ra, rb) < 2:
        return "needs a batched operand (3-D or more) and no 1-D operand"
    return None


def _batch_out(wl) -> tuple:
    return out_shape(wl)


def _batch_N(wl) -> int:
    """N for the panel width; a symbolic N (attention scores) is taken as 64: whole 4-vector panels."""
    n = _batch_out(wl)[-1]
    return n if isinstance(n, int) else 64


def _batch_default(wl, target):
    mb, nb = widest_tile(1 << 30, _batch_N(wl), cpu_info(target))
    return TileConfig(mb=mb, nb=nb, parallel="panels")


def _batch_build(wl, cfg: TileConfig, target):
    table = SymbolTable()
    A, B, *extras = _placeholders(wl, table)
    out = table.shape(_batch_out(wl))
    _, _, D = dyn.batch_matmul(A, B, out_shape=out, transpose_b=bool(wl.attr("transpose_b")), epilogue=wl.epilogue,
                               extras=extras, out_dtype=wl.out_dtype, pad_rows=cfg.mb, pad_cols=cfg.nb)
    sch = create_schedule([A, B, *extras, D])
    sched.schedule_batch(sch, cfg, _lanes(target), nbatch=len(out) - 2, threads=cpu_info(target).cores,
                         symbolic_cols=not isinstance(_batch_out(wl)[-1], int))
    return finish(sch, "matmul.batch_dyn")


register(Candidate("matmul.batch_dyn", ("llvm",), PLEVEL.BLOCKED, _batch_check, TileConfig,
                   space=lambda wl, t: _tile_space(_batch_N(wl), t, pars=("panels",)), default=_batch_default,
                   build=_batch_build, suits=_static_suits, dynamic=("rows", "cols", "reduction", "batch")))


# -- softmax.rowwise_dyn / layer_norm.fused_dyn --------------------------------------------------

def _rows_check(wl, target):
    reason = _float32(wl)
    if reason:
        return reason
    if len(wl.shapes[0]) != 2:
        return f"expects (rows, n) after flattening, got rank {len(wl.shapes[0])}"
    n = wl.shapes[0][1]
    if wl.op == "layer_norm" and any(tuple(s) != (n,) for s in wl.shapes[1:]):
        return f"gamma/beta must be ({n},), got {wl.shapes[1:]}"
    return None


def _rows_space(wl, target):
    lanes = _lanes(target)
    return [RowConfig(rows_per_task=r, lanes=l) for r in (1, 2, 4, 8) for l in sorted({lanes, max(4, lanes // 2)})]


def _rows_default(wl, target):
    return RowConfig(rows_per_task=1, lanes=_lanes(target))


def _pad(n: int, cfg: RowConfig) -> int:
    return cfg.lanes if n >= 2 * cfg.lanes else 1


def _cols_suits(wl, target):
    if isinstance(wl.shapes[0][1], int):
        return "static row length: softmax.rowwise_dyn (or the static kernels) see it"
    return None


def _softmax_cols_build(wl, cfg: RowConfig, target):
    rows, n = SymbolTable().shape(wl.shapes[0])
    X = te.placeholder((rows, n), dtype=wl.dtypes[0], name="X")
    Y = dyn.softmax_cols(X, cfg.lanes, wl.out_dtype)
    sch = create_schedule([X, Y])
    sched.schedule_softmax_cols(sch, cfg)
    return finish(sch, "softmax.cols_dyn")


def _softmax_build(wl, cfg: RowConfig, target):
    rows, n = SymbolTable().shape(wl.shapes[0])
    X = te.placeholder((rows, n), dtype=wl.dtypes[0], name="X")
    Y = sm.softmax_rows(X, rows, int(n), wl.out_dtype, pad_to=_pad(int(n), cfg))
    sch = create_schedule([X, Y])
    sched.schedule_softmax(sch, cfg)
    return finish(sch, "softmax.rowwise_dyn")


def _layer_norm_build(wl, cfg: RowConfig, target):
    rows, n = SymbolTable().shape(wl.shapes[0])
    X = te.placeholder((rows, n), dtype=wl.dtypes[0], name="X")
    G = te.placeholder((n,), dtype=wl.dtypes[1], name="gamma")
    B = te.placeholder((n,), dtype=wl.dtypes[2], name="beta")
    Y = norm.layer_norm_rows(X, G, B, rows, int(n), eps=float(wl.attr("eps", 1e-5)),
                             center=bool(wl.attr("center", True)), scale=bool(wl.attr("scale", True)),
                             pad_to=_pad(int(n), cfg))
    sch = create_schedule([X, G, B, Y])
    sched.schedule_layer_norm(sch, cfg)
    return finish(sch, "layer_norm.fused_dyn")


register(Candidate("softmax.rowwise_dyn", ("llvm",), PLEVEL.BLOCKED, _rows_check, RowConfig, space=_rows_space,
                   default=_rows_default, build=_softmax_build, suits=_static_suits, dynamic=("rows",)))
register(Candidate("softmax.cols_dyn", ("llvm",), PLEVEL.BLOCKED, _rows_check, RowConfig, space=_rows_space,
                   default=_rows_default, build=_softmax_cols_build, suits=_cols_suits, dynamic=("rows", "cols")))
register(Candidate("layer_norm.fused_dyn", ("llvm",), PLEVEL.BLOCKED, _rows_check, RowConfig, space=_rows_space,
                   default=_rows_default, build=_layer_norm_build, suits=_static_suits, dynamic=("rows",)))


# -- conv2d.direct_nchwc_dyn ---------------------------------------------------------------------
# ``conv2d.direct_nchwc``'s checks, knob space and default, read at a representative image size
# where the height or width is symbolic (they pick tiles from the output width; the kernel pads
# the width to whole register tiles by an expression, so any size runs).

#: the input side the static heuristics assume for a symbolic image height or width (ImageNet's);
#: each layer's map follows from its size expression, so a ResNet's last 7x7 maps get 7-wide
#: register tiles (one 28-wide guess for every layer padded those to 14 columns: ResNet-50's
#: symbolic build ran at 2x the static build's time)
REPRESENTATIVE_SIDE = 224


def representative(d) -> int | None:
    """A static extent, or a symbolic one (a workload string) evaluated with every symbol at
    ``REPRESENTATIVE_SIDE``; None where the expression cannot be evaluated."""
    if isinstance(d, int):
        return d
    names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", d)) - {"T"}
    try:
        return max(1, int(parse_dim(d, {n: REPRESENTATIVE_SIDE for n in names})))
    except (ValueError, TypeError, AttributeError):
        return None


def _side(d) -> int:
    """``representative(d)``, a mid-network map's side where it cannot be evaluated."""
    side = representative(d)
    return REPRESENTATIVE_SIDE // 8 if side is None else side


def _at_size(wl: Workload) -> Workload:
    """``wl`` with the data's symbolic height and width (NCHW) at representative sizes."""
    x = wl.shapes[0]
    if len(x) != 4 or all(isinstance(d, int) for d in x[2:]):
        return wl
    data = tuple(x[:2]) + tuple(_side(d) for d in x[2:])
    return dataclasses.replace(wl, shapes=(data,) + tuple(wl.shapes[1:]))


def symbolic_geom(g: cv.ConvGeom, table: SymbolTable) -> cv.ConvGeom:
    """``g`` with its batch, height and width as expressions (``tirx.Var`` where symbolic)."""
    return cv.ConvGeom(table.dim(g.N), g.C, table.dim(g.H), table.dim(g.W), g.O, g.KH, g.KW, g.stride, g.pad,
                       g.dilation, g.groups)


def _conv_build(wl, cfg: DirectConfig, target):
    """``conv2d.direct_nchwc``'s kernel with the batch, height and width ``tirx.Var`` expressions
    where symbolic: its fused parallel loop (image x channel block x row) runs over every image
    and row of the call, the output width padded to whole register tiles."""
    table = SymbolTable()
    g = symbolic_geom(conv.geom(wl), table)
    X, Wp, *extras = _placeholders(wl, table, b_shape=conv._direct_wshape(g, cfg))
    _, _, D = cv.conv2d_nchwc(X, Wp, g, icb=cfg.icb, ocb=cfg.ocb, ow_pad=cfg.reg_n, epilogue=wl.epilogue,
                              extras=[dyn.Broadcastable(e) for e in extras], out_dtype=wl.out_dtype)
    sch = create_schedule([X, Wp, *extras, D])
    conv_sched.schedule_direct_nchwc(sch, cfg, _lanes(target))
    return finish(sch, "conv2d.direct_nchwc_dyn")


register(Candidate("conv2d.direct_nchwc_dyn", ("llvm",), PLEVEL.BLOCKED,
                   lambda wl, t: conv._direct_check(_at_size(wl), t, blocked=False), DirectConfig,
                   space=lambda wl, t: conv._direct_space(_at_size(wl), t),
                   default=lambda wl, t: conv._direct_default(_at_size(wl), t), build=_conv_build,
                   transforms=conv._direct_transforms, suits=_static_suits, dynamic=("batch", "spatial")))
