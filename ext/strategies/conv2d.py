"""Candidate table for the conv2d family (CPU).

Workload convention (``relax_passes/families/conv2d.py``): inputs ``x``, ``w``
in ``data_layout`` / ``kernel_layout`` then the epilogue tensors; attrs
``strides``, ``padding`` (t, l, b, r), ``dilation``, ``groups``,
``out_shape``, ``w_const``. Every candidate reads and writes the workload's
own layout (NCHW activations for all but ``direct_nhwc``); ``direct_nchwc`` and
``winograd`` also take NCHW{lanes}c activations on either side (``data_layout``,
and attr ``out_layout`` where the output's differs), which ``BlockChannels`` gives
the convs between convs (grouped ones when each group is whole channel blocks), so that no
kernel unpacks what the next one packs again.

Selection without a tuning log: every candidate declares its estimated time
(``conv2d_cost.py``, the family's one preference) and the Selector takes the
lowest among those that suit the shape: Winograd for 3x3 stride-1 layers where
its analytic work is below 0.8x the direct kernel's; the blocked direct kernel
for the rest, 1x1 included (``conv2d.pointwise`` measured slower and is
unsuited, like im2col: both stay available to tuning); depthwise for groups ==
channels (the direct kernel calls itself unsuited there); NHWC direct serves
NHWC workloads (the layout policy converts CPU graphs to NCHW first).
"""
from __future__ import annotations

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish, pick_divisor
from ..tir_schedules.cpu import conv2d as sched
from ..tir_schedules.cpu.conv2d import DirectConfig
from ..tir_schedules.cpu.winograd import WinogradConfig, schedule_winograd
from ..topi_kernels import conv2d as cv
from ..topi_kernels import host
from ..topi_kernels import winograd as wg
from ..topi_kernels.matmul import _i64, ceil_to
from ..workload import Workload, channel_block, conv_dims
from . import conv2d_cost as cost
from .matmul_tiles import fit_rows, pick_nb
from .conv2d_cost import wino_tile  # noqa: F401 - the Winograd default config and tests use it
from .registry import PLEVEL, Candidate, register
from ._util import lanes  # noqa: F401 - re-exported to the conv tables


def geom(wl: Workload) -> cv.ConvGeom:
    """The ``ConvGeom`` of a conv2d workload (any layouts ``workload.conv_dims`` reads)."""
    d = conv_dims(wl)
    return cv.ConvGeom(d["N"], d["C"], d["H"], d["W"], d["O"], d["KH"], d["KW"], tuple(wl.attr("strides", (1, 1))),
                       tuple(wl.attr("padding", (0, 0, 0, 0))), tuple(wl.attr("dilation", (1, 1))),
                       int(wl.attr("groups", 1)))


def placeholders(wl: Workload, w_shape=None) -> list[te.Tensor]:
    names = ["X", "W"] + [f"E{i}" for i in range(len(wl.shapes) - 2)]
    shapes = list(wl.shapes)
    if w_shape is not None:
        shapes[1] = w_shape
    return [te.placeholder(tuple(_i64(d) for d in s), dtype=dt, name=n) for n, s, dt in zip(names, shapes, wl.dtypes)]


def check_layout(wl: Workload, layouts, out_layouts=()) -> str | None:
    """Why a conv2d workload's (data, kernel) layout pair, its output layout (the data's, or one
    of ``out_layouts``) or a zero-size dimension rules it out."""
    lay = (wl.attr("data_layout", "NCHW"), wl.attr("kernel_layout", "OIHW"))
    if lay not in layouts:
        return f"layout {lay[0]}/{lay[1]} not handled (needs {', '.join('/'.join(p) for p in layouts)})"
    out = wl.attr("out_layout", lay[0])
    if out != lay[0] and out not in out_layouts:
        return f"output layout {out} differs from the data's {lay[0]}"
    b, x = channel_block(lay[0]), wl.shapes[0]
    if b and (len(x) != 5 or x[4] != b):
        return f"layout {lay[0]} needs a (N, C/{b}, H, W, {b}) input, got {tuple(x)}"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    return None


def check_common(wl: Workload, layouts=(("NCHW", "OIHW"),), out_layouts=()) -> str | None:
    if any(d != "float32" for d in wl.dtypes) or wl.out_dtype != "float32":
        return f"float32 only, got {'/'.join(sorted(set(wl.dtypes)))} -> {wl.out_dtype}"
    reason = check_layout(wl, layouts, out_layouts)
    if reason:
        return reason
    g = geom(wl)
    if g.groups < 1 or g.C % g.groups or g.O % g.groups:
        return f"groups={g.groups} does not divide C={g.C} and O={g.O}"
    if g.OH < 1 or g.OW < 1:
        return "empty output"
    return None


def pick_reg_n(ow: int, limit: int) -> int:
    """Output columns per register tile: the width in ``[limit//2, limit]`` wasting the fewest
    padded columns (the kernel pads OW up to a multiple), or all of ``ow`` when it is small."""
    if ow <= limit:
        return ow
    return min(range(max(1, limit // 2), limit + 1), key=lambda r: (ceil_to(ow, r) - ow, -r))


# -- conv2d.direct_nchwc --------------------------------------------------------------------------

def _direct_blocks(g: cv.ConvGeom, ln: int, ocb_want: int) -> tuple[int, int] | None:
    """(icb, ocb) for the blocked kernel, or None when groups make blocking impossible."""
    if g.groups == 1:
        icb = ln if g.C >= ln else g.C
        return icb, min(ocb_want, ceil_to(g.O, ln))
    icb = pick_divisor(g.Cg, ln)
    if g.Og % ln == 0:
        return icb, ln * pick_divisor(g.Og // ln, ocb_want // ln)
    return (icb, g.Og) if g.Og < ln else None


def blocked_layouts(target) -> tuple:
    """The (data, kernel) layout pair of a blocked conv (``BlockChannels``): NCHW{lanes}c / OIHW."""
    return ((f"NCHW{lanes(target)}c", "OIHW"),)


def io_blocks(wl) -> tuple[int, int]:
    """The channel blocks of a conv workload's input and output (0: NCHW)."""
    data = wl.attr("data_layout", "NCHW")
    return channel_block(data), channel_block(wl.attr("out_layout", data))


def blockable(g: cv.ConvGeom, ln: int, in_block: bool = True, out_block: bool = True) -> bool:
    """A conv the blocked kernel runs on NCHW{ln}c: the blocked sides' channels in whole blocks,
    and with groups each group's channels too (a group is then whole channel blocks: RegNet-X's
    16-wide groups, ResNeXt's later stages)."""
    return not ((in_block and g.Cg % ln) or (out_block and g.Og % ln))  # whole groups: whole channels


def _direct_check(wl, target, blocked: bool = True):
    """``blocked``: also NCHW{lanes}c activations on either side (the static kernel; not ``_dyn``)."""
    ln = lanes(target)
    both = (("NCHW", "OIHW"),) + blocked_layouts(target)
    reason = check_common(wl, both if blocked else both[:1], ("NCHW", f"NCHW{ln}c") if blocked else ())
    if reason:
        return reason
    g = geom(wl)
    in_block, out_block = io_blocks(wl)
    if (in_block or out_block) and not blockable(g, ln, in_block, out_block):
        return f"blocked activations need channels (per group) in whole {ln}-blocks"
    if _direct_blocks(g, lanes(target), 2 * lanes(target)) is None:
        return f"per-group output channels {g.Og} neither < {lanes(target)} nor a multiple of it"
    return None


def _direct_suits(wl, target):
    g = geom(wl)
    if g.groups > 1 and g.groups == g.C:
        return "depthwise: one input channel per output channel leaves the channel blocks empty"
    return None


def direct_order(g: cv.ConvGeom, target, ocb: int = 32) -> str:
    """Loop order of the blocked kernel, from the bytes each order re-reads.

    ``"rows"`` (threads split the image by rows; every channel block of a row before the next
    row) reads the whole weight once per output row unless it fits in L2; ``"channels"`` (every
    row of one output-channel block before the next) reads the input once per channel block
    unless it fits. Channels first wins only at half the traffic or less: rows first measured
    equal or up to 22% faster where both are small (1024->256 at 14x14: 0.56 against 0.71 ms).
    ResNet-50's 7x7 layers hold 4-9 MB of weights for 100-400 kB of input: rows first
    re-read the weights 7 times (1024->2048 stride 2: 2.7 ms against onnxruntime's 0.95)."""
    l2 = cpu_info(target).l2_bytes
    w_bytes = g.O * g.Cg * g.KH * g.KW * 4
    x_bytes = g.C * g.H * g.W * 4
    rows = w_bytes if w_bytes <= l2 else g.OH * w_bytes
    channels = x_bytes if x_bytes <= l2 else -(-g.O // ocb) * x_bytes
    return "channels" if 2 * channels < rows else "rows"


def _direct_default(wl, target) -> DirectConfig:
    g, ln = geom(wl), lanes(target)
    # a 1x1 conv over fewer than two channel blocks: one-vector tiles. Its reduction is too short for
    # wider ones: 16->96 at 112x112 0.25-0.27 ms against 1.14 with 4-vector tiles, 24->144 at 56x56
    # 0.15 against 0.43 (4 vectors) and 0.28-0.34 (2 vectors; the whole knob space timed)
    short = g.KH * g.KW == 1 and g.Cg < 2 * ln
    # many columns: 4 x 4-vector tiles (56x56 layers), unless they pad more output channels than
    # 2-vector ones: SqueezeNet 1.0's 3->96 7x7 stem at 109x109 computed 128 channels, 1.30 ms
    # against 0.76 with 2 x 11 tiles. With AVX2's 12 accumulators 6 x 2-vector tiles instead:
    # 4 x 4 spilled (MobileViTv2's and ResNet-50's 1x1 layers on Zen 4: 1.35-1.6x the time)
    acc = cpu_info(target).accumulators
    wide_vecs = 4 if acc >= 16 else 2
    wide = (g.OW >= 32 and g.O >= wide_vecs * ln and not short
            and (g.groups > 1 or ceil_to(g.O, wide_vecs * ln) == ceil_to(g.O, 2 * ln)))
    icb, ocb = _direct_blocks(g, ln, ln if short else wide_vecs * ln if wide else 2 * ln)
    o_pad = ceil_to(g.O, ln)
    if g.groups == 1 and o_pad % ocb and o_pad <= 3 * ln and 4 * (o_pad // ln) <= acc:
        # channels that fill three vectors where the tile takes two (24 with AVX2): one block of all
        # three by 4 columns, not 32 padded channels: MobileNetV2's and EfficientNet's 96->24 and
        # 144->24 layers at 56x56 ran 0.54-0.55x the time (the whole knob space timed in place)
        ocb = o_pad
    vecs = max(1, ocb // ln)
    if wide:
        reg_n = 4 if vecs == 4 else acc // vecs
    else:
        reg_n = pick_reg_n(g.OW, min(14, acc // vecs))
    return DirectConfig(icb=icb, ocb=ocb, reg_n=reg_n, order=direct_order(g, target, ocb))


def _direct_space(wl, target):
    g, ln = geom(wl), lanes(target)
    out, acc = [], cpu_info(target).accumulators
    for want in (ln, 2 * ln, 4 * ln):
        icb, ocb = _direct_blocks(g, ln, want)
        vecs = max(1, ocb // ln)
        for reg_n in sorted({4, 6, 7, 8, 14, pick_reg_n(g.OW, acc // vecs)}):
            if reg_n * vecs <= acc and reg_n <= max(g.OW, 4):
                for order in ("rows", "channels"):
                    cfg = DirectConfig(icb=icb, ocb=ocb, reg_n=reg_n, order=order)
                    if cfg not in out:
                        out.append(cfg)
    return out


def _direct_wshape(g, cfg):
    rc, ob = cv.nchwc_blocks(g, cfg.icb, cfg.ocb)
    return (ob, rc, g.KH, g.KW, cfg.icb, cfg.ocb)


def _direct_build(wl, cfg: DirectConfig, target):
    g = geom(wl)
    X, Wp, *extras = placeholders(wl, _direct_wshape(g, cfg))
    in_block, out_block = io_blocks(wl)
    P, C, D = cv.conv2d_nchwc(X, Wp, g, icb=cfg.icb, ocb=cfg.ocb, ow_pad=cfg.reg_n, epilogue=wl.epilogue,
                              extras=extras, out_dtype=wl.out_dtype, in_block=in_block, out_block=out_block)
    sch = create_schedule([X, Wp, *extras, D])
    sched.schedule_direct_nchwc(sch, cfg, lanes(target))
    return finish(sch, "conv2d.direct_nchwc")


def _direct_transforms(wl, cfg: DirectConfig, target):
    """The weight packed into ``(OB, RC, KH, KW, icb, ocb)`` blocks; reads the weight's shape only
    (``conv2d.direct_nchwc_dyn`` shares it with a symbolic batch)."""
    g = geom(wl)
    Wt = te.placeholder(tuple(_i64(d) for d in wl.shapes[1]), dtype=wl.dtypes[1], name="W")
    Wp = cv.pack_weight_nchwc(Wt, g, cfg.icb, cfg.ocb)
    sch = create_schedule([Wt, Wp])
    sched.schedule_pack(sch, "Wp", lanes(target), 2)
    RC, OB = cv.nchwc_blocks(g, cfg.icb, cfg.ocb)
    return {1: host.attach(finish(sch, "conv2d.pack_nchwc"), "conv2d.pack_nchwc", OB=OB, RC=RC, icb=cfg.icb,
                           ocb=cfg.ocb)}


register(Candidate("conv2d.direct_nchwc", ("llvm",), PLEVEL.BLOCKED, _direct_check, DirectConfig,
                   space=_direct_space, default=_direct_default, build=_direct_build,
                   transforms=_direct_transforms, suits=_direct_suits, added_knobs=("order",),
                   estimate=lambda wl, t: cost.direct(geom(wl), t, blocks=io_blocks(wl))))


# -- conv2d.winograd ----------------------------------------------------------------------------------

def _wino_blocks(g, ln):
    return (ln if g.C >= ln else g.C), ln


def _wino_check(wl, target):
    ln = lanes(target)
    reason = check_common(wl, (("NCHW", "OIHW"),) + blocked_layouts(target), ("NCHW", f"NCHW{ln}c"))
    if reason:
        return reason
    g = geom(wl)
    in_block, out_block = io_blocks(wl)
    if (in_block and g.C % ln) or (out_block and g.O % ln):
        return f"blocked activations need channels in whole {ln}-blocks"
    if (g.KH, g.KW) != (3, 3):
        return f"Winograd here is F(m, 3x3); kernel is {g.KH}x{g.KW}"
    if g.stride != (1, 1):
        return f"Winograd needs stride 1, got {g.stride}"
    if g.dilation != (1, 1):
        return f"Winograd needs dilation 1, got {g.dilation}"
    if g.groups != 1:
        return f"Winograd needs groups 1, got {g.groups}"
    return None


def wino_parallel(g, m: int) -> str:
    """``"tiles"`` (each thread keeps its block of tiles through every stage, but reads all of
    the transformed filter U) when U is smaller than the transformed data V plus the GEMM
    output, i.e. ``C*O < T*(C+O)``; else ``"stages"`` (threads split U's panels)."""
    T = wg.tiles(g, m)[2]
    return "tiles" if g.C * g.O < T * (g.C + g.O) else "stages"


def _wino_default(wl, target):
    """The batched GEMM's register tile as ``matmul.packed`` picks it (O columns, C deep): 4 x 64
    with AVX-512; 4 x 24 or 2 x 32 with AVX2's 16 registers (4 x 64 there spilled: 1.6-4x the
    time of any of 6x16, 4x24, 2x32 on ResNet-18's layers on Zen 4)."""
    g, info = geom(wl), cpu_info(target)
    m = wino_tile(g, info.lanes_f32)
    nb = pick_nb(g.O, g.C, info)
    return WinogradConfig(tile=m, mb=fit_rows(nb // info.lanes_f32, info), nb=nb,
                          parallel=wino_parallel(g, m))


def _wino_space(wl, target):
    g, ln = geom(wl), lanes(target)
    return [WinogradConfig(tile=m, mb=mb, nb=nb, parallel=par) for m in (2, 4) for nb in (16, 24, 32, 64)
            if nb % ln == 0 and nb <= max(ln, ceil_to(g.O, ln)) for mb in (2, 3, 4, 6) for par in ("tiles", "stages")]


def _wino_build(wl, cfg, target):
    g, ln = geom(wl), lanes(target)
    kb, ob = _wino_blocks(g, ln)
    E, Cp = (cfg.tile + 2) ** 2, ceil_to(g.C, kb)
    X, U, *extras = placeholders(wl, (E, ceil_to(g.O, cfg.nb) // cfg.nb, Cp, cfg.nb))
    in_block, out_block = io_blocks(wl)
    _, _, V = wg.data_transform(X, g, cfg.tile, kb, in_block=in_block)
    _, MM = wg.batched_gemm(V, U, O=g.O, mb=cfg.mb, nb=cfg.nb, out_dtype=wl.out_dtype)
    _, _, out = wg.inverse_transform(MM, g, cfg.tile, wl.epilogue, extras, wl.out_dtype, out_block=out_block)
    sch = create_schedule([X, U, *extras, out])
    schedule_winograd(sch, cfg, ln, kb, ob, threads=cpu_info(target).cores)
    return finish(sch, "conv2d.winograd")


def _wino_transforms(wl, cfg, target):
    g, ln = geom(wl), lanes(target)
    Wt = placeholders(wl)[1]
    U = wg.filter_transform(Wt, g, cfg.tile, cfg.nb, _wino_blocks(g, ln)[0])
    sch = create_schedule([Wt, U])
    b = sch.get_sblock("U")
    e, jb, k, jl = sch.get_loops(b)
    sch.reorder(jb, k, e, jl)
    sch.parallel(sch.fuse(jb, k))
    sch.vectorize(jl)  # e stays a loop: unrolling its Select chain makes LLVM take ~40 s
    return {1: host.attach(finish(sch, "conv2d.winograd_filter"), "conv2d.winograd_filter", m=cfg.tile, nb=cfg.nb,
                           kb=_wino_blocks(g, ln)[0])}


register(Candidate("conv2d.winograd", ("llvm",), PLEVEL.SPECIALIZED, _wino_check, WinogradConfig,
                   space=_wino_space, default=_wino_default, build=_wino_build, transforms=_wino_transforms,
                   added_knobs=("parallel",), estimate=lambda wl, t: cost.winograd(geom(wl), t, blocks=io_blocks(wl)),
                   tile_transform=True))
