"""Estimated seconds of each CPU conv2d candidate: the family's one declared preference.

Without a tuning log the Selector compares these estimates among the candidates
that suit a workload (``select.py``); no candidate's ``suits`` consults a
sibling. An estimate is the kernel's flops at a fraction of the target's peak
(``CPUInfo.peak_flops``) plus the bytes it streams (``stream_bytes_per_s``):
tensors in and out, and the layout passes of the blocked kernels (pack,
unpack). The fractions were fitted to single-kernel times on this machine
class (``scripts/bench_conv2d.py --candidates``; 1x1 layers of MobileNetV2 and
ResNet-50 within ~25%), so the estimates rank kernels; they are not
predictions to the microsecond.

=======================  =================================================  ==========
candidate                flops / bytes                                      efficiency
=======================  =================================================  ==========
conv2d.direct_nchwc      2*N*OH*OW*O*Cg*KH*KW; in/out + pack + unpack        0.75
conv2d.direct_nhwc       same                                               0.55
conv2d.winograd          ``winograd_ratio`` x the direct kernel's            0.60
conv2d.depthwise         direct flops; in/out                               0.45
conv2d.conv1x1           direct flops; in/out (NCHW in place)               0.90, 0.4
                                                                            past L1
conv2d.pointwise         GEMM; in/out + input packing + output copy         0.65
conv2d.im2col            GEMM; in/out + patch matrix + output copy          0.65
=======================  =================================================  ==========

Winograd's 0.60 = 0.8 x the direct kernel's 0.75: it is chosen where its analytic
work is below 0.8x the direct kernel's (the transforms are memory-bound and the
batched GEMMs short), which is the rule ResNet-18/50 were tuned with.
"""
from __future__ import annotations

from ..target import cpu_info
from ..topi_kernels import conv2d as cv
from ..topi_kernels import winograd as wg
from ..topi_kernels.matmul import ceil_to

EFFICIENCY = {"direct_nchwc": 0.75, "direct_nhwc": 0.55, "winograd": 0.60, "depthwise": 0.45,
              "pointwise": 0.65, "im2col": 0.65, "conv1x1": 0.90, "rows": 0.60}

#: transformed filters above this size stream from memory in F(4,3) (L3 is 32 MiB): use F(2,3)
WINOGRAD_U_BYTES = 24 * 2 ** 20


def macs(g: cv.ConvGeom) -> int:
    """Multiply-adds of the direct algorithm."""
    return g.N * g.OH * g.OW * g.O * g.Cg * g.KH * g.KW


def io_bytes(g: cv.ConvGeom) -> int:
    """float32 bytes of input, weights and output (each touched once)."""
    return 4 * (g.N * g.C * g.H * g.W + g.O * g.Cg * g.KH * g.KW + g.N * g.O * g.OH * g.OW)


def seconds(flops: float, target, efficiency: float, moved_bytes: float = 0.0) -> float:
    """Compute time at ``efficiency`` x peak plus the time to stream ``moved_bytes`` (the
    layout passes of a kernel do not overlap its arithmetic)."""
    info = cpu_info(target)
    return flops / (info.peak_flops * efficiency) + moved_bytes / info.stream_bytes_per_s


def layout_bytes(g: cv.ConvGeom, blocks: tuple = (0, 0)) -> int:
    """The blocked kernels' extra traffic: the input packed (written and read once more) unless a
    1x1 stride-1 unpadded conv reads it in place or it comes blocked (``blocks[0]``, NCHW{b}c:
    ``BlockChannels``), and the output unpacked unless it stays blocked (``blocks[1]``)."""
    packed = not (g.KH == g.KW == 1 and g.stride == (1, 1) and not any(g.pad)) and not blocks[0]
    return 8 * (g.N * g.C * g.H * g.W * packed + g.N * g.O * g.OH * g.OW * (not blocks[1]))


def direct(g: cv.ConvGeom, target, variant: str = "direct_nchwc", blocks: tuple = (0, 0)) -> float:
    return seconds(2 * macs(g), target, EFFICIENCY[variant], io_bytes(g) + layout_bytes(g, blocks))


#: below this efficiency a conv1x1 tile works from L2: measured 170-280 GFLOPS against the blocked
#: kernel's 300-430 on 33 1x1 layers of MobileViT(V2), MobileNetV2 and EfficientNet (AMD Zen 5)
CONV1X1_L2_EFFICIENCY = 0.4


def conv1x1(g: cv.ConvGeom, target, tile_px: int, ob: int) -> float:
    """Reads and writes NCHW in place. Each tile's input (``C x tile_px`` floats) is read once per
    block of ``ob`` output channels and all weights (``O x C``) once per tile: while both fit in
    twice L1, each input vector it loads feeds ``ob`` multiply-adds from L1 (0.9 of peak at
    ``ob >= 3``, 0.3 per output channel below: 144->24 at 56x56, 16->96 at 112x112). Past that the
    loads come from L2 and the kernel runs at ``CONV1X1_L2_EFFICIENCY`` whatever ``ob``: 384->768
    at 16x16 ran 196 GFLOPS, the blocked kernel 395 (``tile_px`` 128, 1.2 MB of weights); the
    rule without the weights picked conv1x1 on 31 of those 33 layers, 1.36x the fastest
    kernels' total time, with them 1.15x."""
    eff = EFFICIENCY["conv1x1"] if ob >= 3 else 0.3 * ob
    if 4 * g.C * (tile_px + g.O) > 2 * cpu_info(target).l1_bytes:
        eff = CONV1X1_L2_EFFICIENCY
    return seconds(2 * macs(g), target, eff, io_bytes(g))


def wino_tile(g: cv.ConvGeom, lanes: int) -> int:
    """F(4x4,3x3) unless the output is small (its 6x6 tiles would mostly be padding) or its
    transformed filter (36 * C * O floats, channels padded to ``lanes``) would not stay in L3;
    then F(2x2,3x3)."""
    u4 = 36 * ceil_to(g.C, lanes) * ceil_to(g.O, lanes) * 4
    return 2 if min(g.OH, g.OW) < 8 or u4 > WINOGRAD_U_BYTES else 4


def winograd_ratio(g: cv.ConvGeom, m: int, lanes: int) -> float:
    """Winograd F(m x m, 3x3) work over the direct kernel's: the batched GEMMs' multiply-adds
    (channels padded to ``lanes``) plus the input/output transforms (~8 multiply-add
    equivalents per transformed element, they are memory-bound)."""
    E, (_, _, T) = (m + 2) ** 2, wg.tiles(g, m)
    cp, op = ceil_to(g.C, lanes), ceil_to(g.O, lanes)
    work = E * T * (cp * op + 8 * cp + 8 * op) + 8 * g.N * g.O * g.OH * g.OW
    return work / (g.N * g.OH * g.OW * g.O * g.C * 9)


def winograd(g: cv.ConvGeom, target, blocks: tuple = (0, 0)) -> float:
    lanes = cpu_info(target).lanes_f32
    work = 2 * macs(g) * winograd_ratio(g, wino_tile(g, lanes), lanes)
    return seconds(work, target, EFFICIENCY["winograd"], io_bytes(g) + layout_bytes(g, blocks))


def depthwise(g: cv.ConvGeom, target) -> float:
    return seconds(2 * macs(g), target, EFFICIENCY["depthwise"], io_bytes(g))


def rows(g: cv.ConvGeom, target) -> float:
    """Dense conv along the output rows (few input channels): NCHW in and out, no pack or unpack."""
    return seconds(2 * macs(g), target, EFFICIENCY["rows"], io_bytes(g))


def gemm_lowered(g: cv.ConvGeom, target, variant: str) -> float:
    """pointwise / im2col: the patch (or packed input) matrix is written and read once more."""
    _, P, K = cv.gemm_dims(g)
    extra = 8 * g.N * g.C * g.H * g.W if variant == "pointwise" else 8 * P * K
    return seconds(2 * macs(g), target, EFFICIENCY[variant], io_bytes(g) + extra + 8 * g.N * g.O * g.OH * g.OW)
