"""``conv2d.fft``: FFT (overlap-save) convolution for stride-1 layers with large kernels (CPU).

Dense (groups == 1) and depthwise (groups == C == O), NCHW / OIHW, any kernel size. The
filter's spectrum ``U`` is a compile-time transform of constant weights (like Winograd's);
the kernel transforms input tiles, multiplies per frequency bin (dense: a complex GEMM over
input channels; depthwise: one complex product), transforms back, crops and applies the
epilogue (``topi_kernels/conv2d_fft.py``, ``tir_schedules/cpu/conv2d_fft.py``).

Selection is by estimate (``fft_seconds``), like the family's other candidates
(``conv2d_cost.py``): the transforms' and the GEMM's multiply-adds at fractions of the
target's peak (``EFFICIENCY``: set from the register tiling of the generated code, not yet
from measurements -- ``scripts/bench_fft.py`` is the calibration), the per-bin products
bounded by the bytes they move (the transformed filter streams once per call). The work per
output pixel hardly grows with the kernel while the direct kernel's grows with ``KH * KW``:
dense 64->64 at 56x56 estimates FFT below the direct kernel from 5x5 on (Winograd stays ahead
at 3x3); depthwise (no GEMM to amortize the transforms) only at 31x31. The default config is
the transform size with the lowest estimate.
"""
from __future__ import annotations

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.conv2d_fft import FFTConfig, schedule_fft, schedule_filter
from ..topi_kernels import conv2d as cv
from ..topi_kernels import conv2d_fft as ft
from ..topi_kernels.matmul import ceil_to
from .conv2d import check_common, geom, lanes, placeholders
from .registry import PLEVEL, Candidate, register

#: fractions of the target's peak the stages reach: the DFT passes and the GEMM are register-tiled
#: (16-24 accumulators; the passes load ~1 vector or twiddle per 2 FMAs, the GEMM 3 per 8); the
#: depthwise product is one streaming pass (3 loads and a store per 4 FMAs)
EFFICIENCY = {"transform": 0.40, "gemm": 0.50, "product": 0.15}
#: seconds per parallel stage launch (pack, forward, product, inverse, output): what keeps
#: tiny layers on the two-stage direct kernel
LAUNCH_SECONDS = 3e-6
STAGES = 5
#: largest transform considered (F x F tiles), and the largest transformed filter (bytes)
MAX_TILE = 128
MAX_U_BYTES = 256 * 2 ** 20


def is_depthwise(g: cv.ConvGeom) -> bool:
    return g.groups > 1 and g.groups == g.C and g.Cg == 1 and g.O == g.C


def _check(wl, target):
    reason = check_common(wl)
    if reason:
        return reason
    g = geom(wl)
    if g.stride != (1, 1):
        return f"FFT conv needs stride 1, got {g.stride}"
    if g.dilation != (1, 1):
        return f"FFT conv needs dilation 1, got {g.dilation}"
    if g.groups != 1 and not is_depthwise(g):
        return f"FFT conv is dense (groups 1) or depthwise (groups == C == O), got groups={g.groups}"
    if not tile_choices(g, lanes(target)):
        return f"no FFT size <= {MAX_TILE} with a transformed filter <= {MAX_U_BYTES >> 20} MiB"
    return None


def _suits(wl, target):
    g = geom(wl)
    if g.KH * g.KW == 1:
        return "1x1 kernel: nothing for a transform to save"
    if not wl.attr("w_const", True):
        return "filter is not a constant: its transform would run on every call"
    return None


def blocks(g: cv.ConvGeom, ln: int) -> tuple[int, int]:
    """(input channel block kb, output channel block ob) of the transforms' vectors."""
    kb = ln if g.C >= ln else g.C
    if is_depthwise(g):
        return kb, kb
    return kb, (ln if g.O >= ln else g.O)


def u_bytes(g: cv.ConvGeom, F: int, nb: int, ln: int) -> int:
    """float32 bytes of the transformed filter for transform size ``F``."""
    kb, _ = blocks(g, ln)
    E = F * (F // 2 + 1)
    if is_depthwise(g):
        return E * 2 * ceil_to(g.C, kb) * 4
    return E * ceil_to(g.O, nb) * ceil_to(g.C, kb) * 2 * 4


def dft_cost(F: int) -> int:
    """Complex multiply-adds of one length-``F`` DFT split as ``F = A * B``: ``F * (A + B)``."""
    A = ft.factor(F)
    return F * (A + F // A)


def tile_choices(g: cv.ConvGeom, ln: int, nb: int = 0) -> list[int]:
    """Transform sizes for 1, 2, 3... (up to 16) tiles per side: from the smallest ``F`` that covers
    the output with that many tiles (``ceil(OH / t) + KH - 1``) up to 1/8 larger, the one with the
    cheapest split DFT per point (``dft_cost``; a prime ``F`` costs ``F^2``), within ``MAX_TILE``
    and ``MAX_U_BYTES``."""
    k, size = max(g.KH, g.KW), max(g.OH, g.OW)
    nb = nb or _nb_default(g, ln)
    out = []
    for t in range(1, 17):
        lo = max(-(-size // t) + k - 1, k + 1)
        F = min(range(lo, lo + max(2, lo // 8) + 1), key=lambda f: (dft_cost(f) / f, f))
        if F <= MAX_TILE and F not in out and u_bytes(g, F, nb, ln) <= MAX_U_BYTES:
            out.append(F)
    return out


def _nb_default(g, ln):
    return min(2 * ln, ceil_to(g.O, ln))


def fft_seconds(g: cv.ConvGeom, cfg: FFTConfig, target) -> float:
    """Estimated seconds of the FFT kernel: forward transforms (per tile and input channel
    ``2 F^2 B + 8 F Fh A + 4 F Fh B`` multiply-adds, ``F = A * B``), the per-bin products (dense:
    ``4 Cp Np`` per bin and tile, register tiles padded to ``mb``), inverse transforms (per tile
    and output channel ``4 F Fh B + 4 mh Fh A + 2 mh mw Fh``); the products take the longer of
    their compute and their DRAM traffic (transformed filter, spectra written and read back);
    plus the input and output traffic and ``STAGES`` thread-pool launches."""
    info, ln = cpu_info(target), lanes(target)
    peak, bw = info.peak_flops, info.dram_bytes_per_s
    fg = ft.fft_geom(g, cfg.tile)
    F, Fh, E, T = fg.F, fg.Fh, fg.E, fg.T
    kb, ob = blocks(g, ln)
    cp, op = ceil_to(g.C, kb), ceil_to(g.O, ob)
    spectra = 4 * E * T * 2 * (cp + op)  # V and MM, each written once and read once
    A, B = fg.A, fg.B
    fwd = T * cp * (2 * F * F * B + 8 * F * Fh * A + 4 * F * Fh * B)
    inv = T * op * (4 * F * Fh * B + 4 * fg.mh * Fh * A + 2 * fg.mh * fg.mw * Fh)
    t_tr = 2 * (fwd + inv) / (peak * EFFICIENCY["transform"])
    io = 4 * (g.N * g.C * g.H * g.W + 2 * g.N * g.O * g.OH * g.OW)
    if is_depthwise(g):
        prod = 2 * 4 * E * T * cp / (peak * EFFICIENCY["product"])
    else:
        prod = 2 * 4 * E * ceil_to(T, cfg.mb) * cp * ceil_to(g.O, cfg.nb) / (peak * EFFICIENCY["gemm"])
    u = u_bytes(g, F, cfg.nb, ln)
    return t_tr + max(prod, (u + spectra) / bw) + io / bw + STAGES * LAUNCH_SECONDS


def _default_for(g: cv.ConvGeom, F: int, ln: int, acc: int, T: int) -> FFTConfig:
    nb = _nb_default(g, ln)
    mb = max(1, min(4, acc * ln // (2 * nb), T))
    return FFTConfig(tile=F, mb=mb, nb=nb)


def _default(wl, target):
    g, ln = geom(wl), lanes(target)
    acc = cpu_info(target).accumulators
    cfgs = [_default_for(g, F, ln, acc, ft.fft_geom(g, F).T) for F in tile_choices(g, ln)]
    return min(cfgs, key=lambda c: fft_seconds(g, c, target))


def _space(wl, target):
    g, ln = geom(wl), lanes(target)
    acc = cpu_info(target).accumulators
    if is_depthwise(g):
        nb = _nb_default(g, ln)
        return [FFTConfig(tile=F, mb=4, nb=nb) for F in tile_choices(g, ln)]
    out = []
    for F in tile_choices(g, ln):
        for nb in (ln, 2 * ln, 4 * ln):
            if nb > max(ln, ceil_to(g.O, ln)):
                continue
            for mb in (1, 2, 3, 4, 6):  # 3: the default with 12 AVX2 accumulators and nb = 2 vectors
                if 2 * mb * nb // ln <= acc and u_bytes(g, F, nb, ln) <= MAX_U_BYTES:
                    out.append(FFTConfig(tile=F, mb=mb, nb=nb))
    return out


def _u_shape(g: cv.ConvGeom, cfg: FFTConfig, ln: int) -> tuple:
    kb, _ = blocks(g, ln)
    E = cfg.tile * (cfg.tile // 2 + 1)
    if is_depthwise(g):
        return (E, 2, ceil_to(g.C, kb))
    return (E, ceil_to(g.O, cfg.nb) // cfg.nb, ceil_to(g.C, kb), 2, cfg.nb)


def _build(wl, cfg: FFTConfig, target):
    g, ln = geom(wl), lanes(target)
    dense = not is_depthwise(g)
    kb, ob = blocks(g, ln)
    fg = ft.fft_geom(g, cfg.tile)
    X, U, *extras = placeholders(wl, _u_shape(g, cfg, ln))
    _, TB, TF, INV = ft.tables(fg.F, fg.mw)
    *_, V = ft.forward(X, g, fg, kb, TB, TF)
    if dense:
        _, MM = ft.complex_gemm(V, U, fg, O=g.O, ob=ob, mb=cfg.mb, nb=cfg.nb)
        m_at = ft.dense_product(MM, fg)
    else:
        _, m_at = ft.depthwise_product(V, U)
    *_, out = ft.inverse(m_at, g, fg, ob, ceil_to(g.O, ob), TB, TF, INV, wl.epilogue, extras, wl.out_dtype)
    sch = create_schedule([X, U, *extras, out])
    schedule_fft(sch, cfg, ln, kb, ob, dense, fg.mh, fg.mw)
    return finish(sch, "conv2d.fft")


def _transforms(wl, cfg: FFTConfig, target):
    g, ln = geom(wl), lanes(target)
    kb, _ = blocks(g, ln)
    Wt = placeholders(wl)[1]
    U = ft.filter_transform(Wt, g, cfg.tile, nb=0 if is_depthwise(g) else cfg.nb, kb=kb)
    sch = create_schedule([Wt, U])
    schedule_filter(sch)
    return {1: finish(sch, "conv2d.fft_filter")}


def _estimate(wl, target):
    return fft_seconds(geom(wl), _default(wl, target), target)


register(Candidate("conv2d.fft", ("llvm",), PLEVEL.BLOCKED, _check, FFTConfig, space=_space, default=_default,
                   build=_build, transforms=_transforms, suits=_suits, estimate=_estimate, tile_transform=True))
