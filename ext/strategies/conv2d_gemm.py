"""conv2d as GEMM on CPU: ``conv2d.pointwise`` (1x1) and ``conv2d.im2col``.

Both reuse the matmul family's tiled compute and schedule unchanged
(``topi_kernels.matmul.matmul_tiled`` with ``b_layout="packed"`` and
``tir_schedules.cpu.matmul.schedule_tiled``): rows are output channels
(``A`` = the weight as an ``O x C*KH*KW`` matrix, reshaped once by a
compile-time transform), columns are output pixels, and the activation is
packed into ``nb``-wide panels by an in-kernel stage. For a 1x1 conv that
stage is a plain (strided for stride 2) copy, no patch expansion; for im2col
it expands the ``KH*KW`` taps. The GEMM's write-back applies the fused
epilogue (bias and residual read through ``(O, pixels)`` views), then a
parallel copy lays the ``O x pixels`` result out as NCHW (batch 1 only).
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.matmul import TileConfig, schedule_tiled
from ..topi_kernels import conv2d as cv
from ..topi_kernels import host
from ..topi_kernels import matmul as mm
from ..topi_kernels.matmul import ceil_to
from . import conv2d_cost as cost
from .conv2d import check_common, geom, lanes, placeholders
from .matmul_tiles import ROW_OPTIONS, widest_tile
from .registry import PLEVEL, Candidate, register


def _check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if g.groups != 1:
        return f"GEMM form needs groups 1, got {g.groups}"
    if g.N != 1:
        return f"GEMM form runs batch 1 (the pixel axis is the GEMM's columns), got batch {g.N}"
    return None


def _pointwise_check(wl, target):
    reason = _check(wl, target)
    if reason:
        return reason
    g = geom(wl)
    if (g.KH, g.KW) != (1, 1) or any(g.pad):
        return f"pointwise needs a 1x1 kernel without padding, got {g.KH}x{g.KW} pad {g.pad}"
    return None


def _default(wl, target) -> TileConfig:
    g = geom(wl)
    _, P, _ = cv.gemm_dims(g)
    mb, nb = widest_tile(g.O, P, cpu_info(target))
    panels = ceil_to(P, nb) // nb
    return TileConfig(mb=mb, nb=nb, parallel="panels" if panels >= 4 else "tiles")


def _space(wl, target):
    g, ln = geom(wl), lanes(target)
    _, P, _ = cv.gemm_dims(g)
    return [TileConfig(mb=mb, nb=nb, parallel=par) for nb in (16, 24, 32, 64, 96)
            if nb % ln == 0 and nb <= max(ln, ceil_to(P, ln))
            for mb in ROW_OPTIONS if mb <= max(1, g.O) for par in ("panels", "tiles")]


def _build(name):
    def build(wl, cfg: TileConfig, target):
        g = geom(wl)
        M, P, K = cv.gemm_dims(g)
        X, W2, *extras = placeholders(wl, (M, K))
        Bp = cv.im2col_packed(X, g, cfg.nb)
        Np = ceil_to(P, cfg.nb)  # D keeps the padded columns: no predicate in the vectorized write-back
        views = [cv.as_gemm_operand(e, g, f"V{i}", Np) for i, e in enumerate(extras)]
        _, D = mm.matmul_tiled(W2, Bp, M=M, N=Np, K=K, b_layout="packed", nb=cfg.nb, epilogue=wl.epilogue,
                               extras=views, out_dtype=wl.out_dtype, pad_rows=cfg.mb, pad_cols=cfg.nb)
        out = cv.gemm_to_nchw(D, g)
        sch = create_schedule([X, W2, *extras, out])
        for i in range(len(views)):
            sch.compute_inline(sch.get_sblock(f"V{i}"))
        schedule_tiled(sch, cfg, lanes(target), threads=cpu_info(target).cores)
        b = sch.get_sblock("Bp")
        pb, k, pl = sch.get_loops(b)
        sch.parallel(sch.fuse(pb, k))
        o = sch.get_sblock("out")
        n, oc, oh, ow = sch.get_loops(o)
        sch.parallel(sch.fuse(n, oc))
        return finish(sch, name)

    return build


def _transforms(wl, cfg, target):
    """The OIHW weight as the ``O x C*KH*KW`` row-major matrix (a reshape; folded for constants)."""
    from tvm import te

    g = geom(wl)
    Wt = placeholders(wl)[1]
    M, _, K = cv.gemm_dims(g)
    hw = g.KH * g.KW
    W2 = te.compute((mm._i64(M), mm._i64(K)), lambda o, k: Wt[o, k // hw, (k % hw) // g.KW, k % g.KW], name="W2")
    sch = create_schedule([Wt, W2])
    o, k = sch.get_loops(sch.get_sblock("W2"))
    sch.parallel(o)
    return {1: host.attach(finish(sch, "conv2d.weight_matrix"), "conv2d.weight_matrix")}


def _im2col_suits(wl, target):
    g = geom(wl)
    _, P, K = cv.gemm_dims(g)
    return f"patch matrix of {P * K * 4 / 2**20:.1f} MiB: the direct kernel reads the input in place" \
        if g.KH * g.KW > 1 else "1x1: conv2d.pointwise packs without expansion"


def _pointwise_suits(wl, target):
    # measured (scripts/bench_conv2d.py --candidates, 1 thread): on ResNet-18/50 1x1 layers the blocked
    # direct kernel took 0.57-1.0x pointwise's time (it reads the input in place, pointwise packs it first)
    return "the blocked direct kernel measured as fast or faster on ResNet 1x1 layers (no input packing)"


register(Candidate("conv2d.pointwise", ("llvm",), PLEVEL.BLOCKED, _pointwise_check, TileConfig,
                   space=_space, default=_default, build=_build("conv2d.pointwise"), transforms=_transforms,
                   suits=_pointwise_suits, estimate=lambda wl, t: cost.gemm_lowered(geom(wl), t, "pointwise")))
register(Candidate("conv2d.im2col", ("llvm",), PLEVEL.DIRECT, _check, TileConfig, space=_space, default=_default,
                   build=_build("conv2d.im2col"), transforms=_transforms, suits=_im2col_suits,
                   estimate=lambda wl, t: cost.gemm_lowered(geom(wl), t, "im2col")))
