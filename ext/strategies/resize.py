"""Candidate table for 2-D resize on CPU: ``resize2d.rows`` (NCHW, linear and nearest).

The stock lowering computes every output pixel from its four clamped taps and the fallback
schedule vectorizes the pixel loop, whose gathered loads LLVM issues lane by lane. This kernel
splits linear into a vertical blend of two whole input rows (contiguous vectors, once per
output row) and a horizontal one read from that row in L1 (``topi_kernels/resize.py``). A whole
power-of-two up-scale (x2, x4, x8: the decoders' and segmentation heads' case) in a half-pixel or asymmetric
mode runs that row phase by phase (``tir_schedules/cpu/resize.phase_row``): each phase's taps are
contiguous, the clamps leave the interior, and LLVM vectorizes the loads and the interleaved
stores (alone: 21x28x28 -> 224x224 0.372 -> 0.059 ms, 256x32x32 -> 64x64 0.376 -> 0.128 ms,
64x56x56 -> 112x112 asymmetric 0.280 -> 0.059 ms; knob ``phases``).
Cubic, ``tf_crop_and_resize`` and NHWC stay with the stock lowering.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.resize import ResizeConfig, schedule_resize
from ..topi_kernels import resize
from .conv2d import placeholders
from .registry import PLEVEL, Candidate, register


def _check(wl, target):
    if wl.dtypes[0] != "float32" or wl.out_dtype != "float32":
        return f"float32 only, got {wl.dtypes[0]} -> {wl.out_dtype}"
    if wl.attr("layout") != "NCHW":
        return f"layout {wl.attr('layout')} not handled (needs NCHW)"
    if wl.attr("method") not in ("linear", "nearest_neighbor"):
        return f"method {wl.attr('method')} not handled (linear, nearest_neighbor)"
    if wl.attr("coordinate_transformation_mode") not in resize.MODES:
        return f"coordinate_transformation_mode {wl.attr('coordinate_transformation_mode')} not handled"
    if wl.attr("method") == "nearest_neighbor" and wl.attr("rounding_method") not in resize.ROUNDING:
        return f"rounding_method {wl.attr('rounding_method')} not handled"
    if any(not isinstance(d, int) or d == 0 for d in (*wl.shapes[0], *wl.attr("out_shape"))):
        return "symbolic or zero-size dimension"
    return None


def _phased(wl) -> bool:
    """Whether the rows may run phase by phase: a linear whole power-of-two up-scale of the width."""
    return wl.attr("method") == "linear" and bool(resize.whole_upscale(
        wl.shapes[0][3], wl.attr("out_shape")[3], wl.attr("coordinate_transformation_mode")))


def _space(wl, target):
    phases = (True, False) if _phased(wl) else (False,)
    return [ResizeConfig(rows=r, phases=p) for r in (1, 2, 4, 8) if r <= wl.attr("out_shape")[2] for p in phases]


def _default(wl, target):
    return ResizeConfig(rows=1, phases=_phased(wl))  # N * C * OH tasks: plenty on every shape measured


def _build(wl, cfg: ResizeConfig, target):
    (X,) = placeholders(wl)
    out_hw = tuple(wl.attr("out_shape")[2:])
    mode = wl.attr("coordinate_transformation_mode")
    if wl.attr("method") == "linear":
        _, D = resize.linear_nchw(X, out_hw, mode, wl.out_dtype)
    else:
        D = resize.nearest_nchw(X, out_hw, mode, wl.attr("rounding_method"), wl.out_dtype)
    sch = create_schedule([X, D])
    W = wl.shapes[0][3]
    k = resize.whole_upscale(W, out_hw[1], mode) if cfg.phases and _phased(wl) else 0
    schedule_resize(sch, cfg, cpu_info(target).lanes_f32, k, (1, W - 1))
    return finish(sch, "resize2d.rows")


register(Candidate("resize2d.rows", ("llvm",), PLEVEL.BLOCKED, _check, ResizeConfig, space=_space, default=_default,
                   build=_build))
