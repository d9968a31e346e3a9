"""Candidate table for conv2d on CUDA (workload convention: ``strategies/conv2d.py``).

Layouts NCHW/OIHW, NHWC/OHWI and NHWC/HWIO; float32, or float16 with fp32 accumulation;
groups == 1 (grouped and depthwise convs go to the dlight fallback).

* ``conv2d.cuda_implicit_gemm`` (BLOCKED): the conv as a GEMM with operands gathered into
  shared memory, SIMT tiles for fp32 and wmma tensor cores for fp16 (NHWC with OHWI weights
  is the natural layout: channels contiguous in both operands);
* ``conv2d.cuda_direct`` (DIRECT): one thread per output, for small layers;
* ``conv2d.cuda_winograd`` (SPECIALIZED, NCHW 3x3 stride 1 fp32): TOPI's
  ``conv2d_winograd_nchw`` compute, stage-per-kernel; unsuited by default until its batched
  GEMM is tiled (tuning may pick it).
"""
from __future__ import annotations


from tvm import topi

from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cuda import conv2d as sched
from ..tir_schedules.cuda.conv2d import SmallConfig, TensorCoreConfig, TiledConfig, WinogradConfig
from ..topi_kernels import conv2d as cv
from ..topi_kernels import conv2d_implicit as cvi
from ..topi_kernels import epilogue as ep
from ..workload import Workload
from .conv2d import check_layout
from .conv2d import geom as cpu_geom
from .conv2d import placeholders
from .cuda_matmul import SMALL_FLOPS, TENSORCORE_MIN_SM, _sm, tensorcore_config_for, tensorcore_space, \
    tiled_config_for, tiled_space
from .registry import PLEVEL, Candidate, register

LAYOUTS = (("NCHW", "OIHW"), ("NHWC", "OHWI"), ("NHWC", "HWIO"))


def geom(wl: Workload) -> cv.ConvGeom:
    """``strategies.conv2d.geom`` (HWIO weights included, which the CPU tables do not take)."""
    return cpu_geom(wl)


def _check_common(wl: Workload, target) -> str | None:
    x, w = wl.dtypes[0], wl.dtypes[1]
    if x != w or x not in ("float16", "float32") or wl.out_dtype not in ("float16", "float32"):
        return f"float16/float32 inputs (alike) and output only, got {x}/{w} -> {wl.out_dtype}"
    reason = check_layout(wl, LAYOUTS)
    if reason:
        return reason
    g = geom(wl)
    if g.groups != 1:
        return f"groups={g.groups}: grouped/depthwise conv goes to the dlight fallback"
    if g.OH < 1 or g.OW < 1:
        return "empty output"
    return None


def _gemm_dims(wl) -> tuple[int, int]:
    g = geom(wl)
    P = g.N * g.OH * g.OW
    return (g.O, P) if wl.attr("data_layout", "NCHW") == "NCHW" else (P, g.O)


def _implicit(wl, name, cfg, pads, schedule):
    g = geom(wl)
    X, W, *extras = placeholders(wl)
    _, D, b_layout, out_map = cvi.implicit_gemm(
        X, W, g, data_layout=wl.attr("data_layout", "NCHW"), kernel_layout=wl.attr("kernel_layout", "OIHW"),
        pads=pads, epilogue=wl.epilogue, extras=extras, out_dtype=wl.out_dtype, acc_dtype="float32")
    sch = create_schedule([X, W, *extras, D])
    schedule(sch, out_map, b_layout)
    return finish(sch, name)


# -- conv2d.cuda_implicit_gemm -----------------------------------------------------------------

def _uses_tensorcore(wl, target) -> bool:
    """fp16 on sm_70+, unless the GEMM is too thin for 16x16 fragments (then SIMT tiles)."""
    return wl.dtypes[0] == "float16" and _sm(target) >= TENSORCORE_MIN_SM and min(_gemm_dims(wl)) >= 16


class _GemmConfig:
    """Config factory: a ``TensorCoreConfig`` or ``TiledConfig`` from its fields."""

    def __new__(cls, **fields):
        return TensorCoreConfig(**fields) if "warps_m" in fields else TiledConfig(**fields)


def _ig_space(wl, target):
    if _uses_tensorcore(wl, target):
        return tensorcore_space(wl.attr("data_layout", "NCHW") == "NHWC" and wl.attr("kernel_layout") == "OHWI")
    return tiled_space(wl.dtypes[0])


def _ig_default(wl, target):
    M, N = _gemm_dims(wl)
    return tensorcore_config_for(M, N) if _uses_tensorcore(wl, target) else tiled_config_for(M, N)


def _ig_build(wl, cfg, target):
    def schedule(sch, out_map, b_layout):
        sched.schedule_implicit_gemm(sch, cfg, out_map, in_dtype=wl.dtypes[0], trans_b=b_layout == "nk")

    return _implicit(wl, "conv2d.cuda_implicit_gemm", cfg, (cfg.block_m, cfg.block_n, cfg.block_k), schedule)


def _ig_suits(wl, target):
    return None if wl.flops > SMALL_FLOPS else f"{wl.flops / 1e3:.0f} KFLOP: launch-bound, conv2d.cuda_direct"


register(Candidate("conv2d.cuda_implicit_gemm", ("cuda",), PLEVEL.BLOCKED, _check_common, _GemmConfig,
                   space=_ig_space, default=_ig_default, build=_ig_build, suits=_ig_suits))


# -- conv2d.cuda_direct ------------------------------------------------------------------------

def _direct_build(wl, cfg: SmallConfig, target):
    return _implicit(wl, "conv2d.cuda_direct", cfg, (1, 1, 1),
                     lambda sch, out_map, _: sched.schedule_direct(sch, cfg, out_map))


def _direct_suits(wl, target):
    return None if wl.flops <= SMALL_FLOPS else f"{wl.flops / 1e6:.1f} MFLOP: conv2d.cuda_implicit_gemm tiles it"


register(Candidate("conv2d.cuda_direct", ("cuda",), PLEVEL.DIRECT, _check_common, SmallConfig,
                   space=lambda wl, t: [SmallConfig(threads=n) for n in (64, 128, 256)],
                   default=lambda wl, t: SmallConfig(threads=128), build=_direct_build, suits=_direct_suits))


# -- conv2d.cuda_winograd ----------------------------------------------------------------------

def _wino_check(wl, target):
    reason = _check_common(wl, target)
    if reason:
        return reason
    g = geom(wl)
    if (wl.attr("data_layout"), wl.attr("kernel_layout")) != ("NCHW", "OIHW"):
        return "Winograd kernel is NCHW/OIHW only"
    if wl.dtypes[0] != "float32" or wl.out_dtype != "float32":
        return "Winograd is float32 only (fp16 transforms lose too much accuracy)"
    if (g.KH, g.KW) != (3, 3) or g.stride != (1, 1) or g.dilation != (1, 1):
        return f"needs 3x3 stride 1 dilation 1, got {g.KH}x{g.KW} stride {g.stride} dilation {g.dilation}"
    if g.pad[:2] != g.pad[2:]:
        return f"asymmetric padding {g.pad} (TOPI's Winograd pads symmetrically)"
    return None


def winograd_tensors(wl) -> list:
    """``[X, W, *extras, D]``: TOPI's Winograd conv (NCHW/OIHW) followed by the fused epilogue."""
    g = geom(wl)
    X, W, *extras = placeholders(wl)
    Y = topi.nn.conv2d_winograd_nchw(X, W, 1, (g.pad[0], g.pad[1]), 1, "float32")
    D = ep.fused_output(tuple(Y.shape), lambda *i: Y[i], wl.epilogue, extras, wl.out_dtype)
    return [X, W, *extras, D]


def _wino_build(wl, cfg: WinogradConfig, target):
    sch = create_schedule(winograd_tensors(wl))
    sched.schedule_winograd(sch, cfg)
    return finish(sch, "conv2d.cuda_winograd")


register(Candidate("conv2d.cuda_winograd", ("cuda",), PLEVEL.SPECIALIZED, _wino_check, WinogradConfig,
                   space=lambda wl, t: [WinogradConfig(threads=n) for n in (64, 128, 256)],
                   default=lambda wl, t: WinogradConfig(), build=_wino_build,
                   suits=lambda wl, t: "untiled batched GEMM: slower than conv2d.cuda_implicit_gemm until tuned",
                   tile_transform=True))
