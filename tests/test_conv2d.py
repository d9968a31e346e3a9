"""Every CPU conv2d candidate against an independent float64 NumPy conv on awkward shapes."""
from __future__ import annotations

import pytest

import ext
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies.conv2d import lanes
from ext.strategies import REGISTRY
from ext.target import cpu_info
from ext.testing import assert_close

from conv2d_helpers import conv_tol, conv_wl, reference

CANDIDATES = ["conv2d.direct_nchwc", "conv2d.direct_nhwc", "conv2d.winograd", "conv2d.im2col",
              "conv2d.pointwise", "conv2d.depthwise", "conv2d.conv1x1", "conv2d.rows"]

# (N, C, H, W, O, K, stride, pad, dilation, groups)
SHAPES = [
    (1, 3, 7, 9, 5, 3, 1, 1, 1, 1),        # odd everything, C < vector width
    (2, 17, 11, 13, 19, 3, 2, 2, 1, 1),    # batch 2, stride 2, pad 2, prime channels
    (1, 16, 14, 14, 32, 3, 1, 1, 2, 1),    # dilation 2
    (1, 32, 9, 9, 33, 3, 1, 0, 1, 1),      # pad 0, O one past a block
    (1, 1, 1, 1, 1, 1, 1, 0, 1, 1),        # all size 1
    (1, 8, 10, 10, 12, 3, 1, 1, 1, 4),     # grouped
    (1, 6, 12, 11, 6, 3, 1, 1, 1, 6),      # depthwise
    (1, 12, 13, 13, 24, 3, 2, 1, 1, 12),   # depthwise, multiplier 2, stride 2
    (2, 7, 15, 13, 7, 5, 2, 2, 1, 7),      # depthwise 5x5 stride 2, batch 2, odd sizes
    (1, 5, 11, 17, 5, 7, 1, 3, 1, 5),      # depthwise 7x7
    (1, 9, 13, 12, 9, 3, 1, 2, 2, 9),      # depthwise dilation 2
    (1, 3, 10, 9, 6, 3, 3, 1, 1, 3),       # depthwise stride 3 (three column phases), multiplier 2
    (1, 8, 9, 40, 8, 3, 2, (0, 0, 1, 1), 1, 8),  # depthwise stride 2, pad right/bottom only (TF SAME), wide row
    (1, 4, 6, 33, 4, 3, 2, 0, 1, 4),       # depthwise stride 2 unpadded, odd width: the last column phase ends the row
    (1, 13, 5, 7, 29, 1, 1, 0, 1, 1),      # 1x1
    (1, 24, 17, 17, 40, 1, 2, 0, 1, 1),    # 1x1 stride 2 (ResNet downsample)
    (2, 20, 6, 6, 18, 1, 1, 0, 1, 1),      # 1x1 batch 2
    (1, 32, 9, 9, 40, 1, 1, 0, 1, 1),      # 1x1 reading X in place (C a multiple of the block)
    (2, 16, 7, 5, 24, 1, 1, 0, 1, 1),      # the same, batch 2, odd width
    (1, 64, 14, 14, 64, 3, 1, 1, 1, 1),    # a ResNet layer (smaller)
    (1, 19, 8, 16, 21, 1, 1, 0, 1, 1),     # 1x1 in place (conv1x1): prime channels, one-vector rows
    (2, 5, 4, 12, 7, 1, 1, 0, 1, 1),       # 1x1 in place, batch 2, two rows fill three 8-lane vectors
    (1, 7, 3, 112, 13, 1, 1, 0, 1, 1),     # 1x1 in place, 112-wide rows (7 vectors)
    (1, 5, 3, 160, 11, 1, 1, 0, 1, 1),     # 1x1 in place, 160-wide rows: column tiles (conv1x1 cols)
    (2, 3, 2, 264, 7, 1, 1, 0, 1, 1),      # the same, batch 2, rows of 33 8-lane vectors
    # few input channels (conv2d.rows: image stems)
    (1, 3, 23, 29, 8, 7, 2, 3, 1, 1),      # 7x7 stride 2 pad 3 (ResNet's stem), odd sizes
    (2, 3, 17, 19, 10, 3, 2, (0, 0, 1, 1), 1, 1),  # stride 2, pad right/bottom only, batch 2, O=10
    (1, 4, 9, 37, 6, 3, 1, 1, 2, 1),       # dilation 2, rows of 37 (3 vectors, padded)
    (1, 15, 11, 13, 7, 5, 3, 2, 1, 1),     # 5x5 stride 3, 15 channels (one short of a vector)
    (1, 3, 111, 111, 64, 3, 2, 0, 1, 1),   # SqueezeNet's stem shape (smaller plane), unpadded
]


def shape_seed(shape) -> int:
    """A seed per SHAPES row (a padding may be a 4-tuple)."""
    return sum(v if isinstance(v, int) else sum(v) for v in shape)


def _id(s):
    return "n{}c{}h{}w{}o{}k{}s{}p{}d{}g{}".format(*s)


@pytest.mark.parametrize("name", CANDIDATES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_candidate_matches_numpy(cpu_target, name, shape):
    assert name in REGISTRY, f"{name} is not registered"
    N, C, H, W, O, K, s, p, d, g = shape
    layout = "NHWC" if name == "conv2d.direct_nhwc" else "NCHW"
    wl = conv_wl(N, C, H, W, O, K, stride=s, pad=p, dil=d, groups=g, layout=layout,
                 epilogue=("bias", "residual", "relu"))
    cand = REGISTRY.get(name)
    verdict = cand.applies(wl, cpu_target)
    if not verdict:
        pytest.skip(f"{name} declines: {verdict.reason}")
    xs = random_inputs(wl, seed=shape_seed(shape))
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    tol = conv_tol(wl)
    if name == "conv2d.winograd":
        # Winograd's error bound (see topi_kernels/winograd.py): <= 1e-4 of the largest output;
        # measured ~4e-6 relative for F(4x4,3x3)
        tol = dict(rtol=0, atol=1e-4 * max(1.0, float(abs(reference(wl, xs)).max())))
    assert_close(out, reference(wl, xs), **tol, what=f"{name} {shape}")


@pytest.mark.parametrize("name", CANDIDATES)
def test_space_points_are_correct(cpu_target, name):
    """A few points of each knob space on an odd shape: tuning may pick any of them."""
    assert name in REGISTRY, f"{name} is not registered"
    cand = REGISTRY.get(name)
    layout = "NHWC" if name == "conv2d.direct_nhwc" else "NCHW"
    if name == "conv2d.pointwise":
        wl = conv_wl(1, 19, 9, 11, 35, 1, pad=0, layout=layout, epilogue=("bias", "sigmoid"))
    elif name == "conv2d.conv1x1":
        wl = conv_wl(1, 19, 8, 16, 35, 1, pad=0, layout=layout, epilogue=("bias", "sigmoid"))
    elif name == "conv2d.depthwise":
        wl = conv_wl(1, 21, 9, 11, 21, 3, groups=21, layout=layout, epilogue=("bias", "sigmoid"))
    elif name == "conv2d.rows":
        wl = conv_wl(1, 5, 9, 37, 12, 3, stride=2, layout=layout, epilogue=("bias", "sigmoid"))
    else:
        wl = conv_wl(1, 19, 9, 11, 35, 3, layout=layout, epilogue=("bias", "sigmoid"))
    assert cand.applies(wl, cpu_target), cand.applies(wl, cpu_target).reason
    xs = random_inputs(wl, seed=5)
    ref = reference(wl, xs)
    space = cand.space(wl, cpu_target)
    assert space, f"{name} has an empty space"
    for cfg in space[:: max(1, len(space) // 4)]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, rtol=1e-5, atol=2e-4, what=f"{name} {cfg}")


def test_conv1x1_column_tiles(cpu_target):
    """Rows wider than a register tile (MobileNetV2's 160x160 layers at 320x320) split into column
    tiles of whole vectors; every point of that space is right, and whole-row shapes keep cols=0."""
    cand = REGISTRY.get("conv2d.conv1x1")
    wl = conv_wl(1, 6, 3, 176, 10, 1, pad=0, epilogue=("bias", "residual", "sigmoid"))
    space = cand.space(wl, cpu_target)
    assert space and all(c.cols and 176 % c.cols == 0 and c.rows == 1 for c in space), space
    assert cand.default_config(wl, cpu_target).cols > 0
    xs = random_inputs(wl, seed=11)
    ref = reference(wl, xs)
    for cfg in space:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, rtol=1e-5, atol=2e-5, what=f"conv1x1 {cfg}")
    row = 7 * lanes(cpu_target)  # 7 vectors of the host's ISA: a whole row fits a register tile
    assert all(c.cols == 0 for c in cand.space(conv_wl(1, 16, 8, row, 96, 1, pad=0), cpu_target))


def test_candidates_decline_with_reasons(cpu_target):
    int_wl = conv_wl(1, 4, 6, 6, 4, 3).with_(dtypes=("int32",) * 3, out_dtype="int32")
    blocked = conv_wl(1, 4, 6, 6, 4, 3)
    blocked = blocked.with_(attrs=dict(dict(blocked.attrs), data_layout="NCHW16c"))
    for cand in REGISTRY.for_op("conv2d", "llvm"):  # CUDA-only candidates (conv2d.cudnn) serve no CPU target
        v = cand.applies(int_wl, cpu_target)
        assert not v and "float32" in v.reason
        v = cand.applies(blocked, cpu_target)
        assert not v and "layout" in v.reason, (cand.name, v.reason)


def test_selection_explains_winograd(cpu_target):
    """Winograd wins ResNet's 3x3 stride-1 layers and the report says why; small ones keep direct."""
    from ext.strategies import choose

    d = choose(conv_wl(1, 64, 56, 56, 64, 3), cpu_target)
    assert (d.name, d.source) == ("conv2d.winograd", "estimate")
    direct = next(a for a in d.alternatives if a.candidate == "conv2d.direct_nchwc")
    assert direct.status == "lost" and "the winner's" in direct.reason and direct.cost > d.cost
    d = choose(conv_wl(1, 16, 9, 9, 16, 3), cpu_target)
    assert (d.name, d.source) == ("conv2d.direct_nchwc", "estimate")
    wino = next(a for a in d.alternatives if a.candidate == "conv2d.winograd")
    assert wino.status == "lost" and wino.cost > d.cost
    # fewer input channels than a vector: along the rows, no unpack (an image's stem)
    d = choose(conv_wl(1, 3, 224, 224, 32, 3, stride=2), cpu_target)
    assert (d.name, d.source) == ("conv2d.rows", "estimate")
    direct = next(a for a in d.alternatives if a.candidate == "conv2d.direct_nchwc")
    assert direct.status == "lost" and direct.cost > d.cost
    rows = next(a for a in choose(conv_wl(1, 16, 9, 9, 16, 3), cpu_target).alternatives if a.candidate == "conv2d.rows")
    assert rows.status == "declined" and "fill channel vectors" in rows.reason
    # 1x1: the blocked direct kernel measured faster than the GEMM form (see conv2d_gemm.py)
    assert choose(conv_wl(1, 64, 56, 56, 128, 1, stride=2, pad=0), cpu_target).name == "conv2d.direct_nchwc"
    assert choose(conv_wl(1, 32, 28, 28, 32, 3, groups=32), cpu_target).name == "conv2d.depthwise"


def test_unsupported_conv_falls_back_with_reason(cpu_target):
    """A float64 conv: every CPU candidate declines (float32 only); stock lowering builds it correctly."""
    import numpy as np
    from tvm import relax

    import ext
    from ext.testing import run_relax

    from conv2d_helpers import conv_ref_nchw

    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (4, 3, 3, 3))
    x = relax.Var("x", relax.TensorType((1, 3, 6, 6), "float64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w, "float64"), padding=1)))
        bb.emit_func_output(out)
    ex = ext.build(bb.get(), cpu_target, libraries=False)  # ext's own candidates only
    (dec,) = ext.last_report().find("conv2d")
    assert dec.candidate is None and dec.source == "fallback"
    assert any("float32" in a.reason for a in dec.alternatives)
    xv = rng.uniform(-1, 1, (1, 3, 6, 6))
    assert_close(run_relax(ex, xv), np.maximum(conv_ref_nchw(xv, w, pad=(1, 1, 1, 1)), 0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,knob,values", [("conv2d.direct_nchwc", "order", ("rows", "channels")),
                                              ("conv2d.winograd", "parallel", ("tiles", "stages"))])
@pytest.mark.parametrize("shape", [(2, 17, 11, 13, 19, 3, 1, 1, 1, 1), (1, 32, 23, 9, 33, 3, 2, 1, 1, 1)],
                         ids=_id)
def test_thread_split_knobs_agree(cpu_target, name, knob, values, shape):
    """Both ways of splitting work between threads give the reference result (odd sizes,
    batch 2, stride 2 where the candidate takes it)."""
    import dataclasses

    N, C, H, W, O, K, s, p, d, g = shape
    wl = conv_wl(N, C, H, W, O, K, stride=s, pad=p, dil=d, groups=g, epilogue=("bias", "residual", "relu"))
    cand = REGISTRY.get(name)
    if not cand.applies(wl, cpu_target):
        pytest.skip(cand.applies(wl, cpu_target).reason)
    xs = random_inputs(wl, seed=11)
    ref = reference(wl, xs)
    tol = dict(rtol=0, atol=1e-4 * max(1.0, float(abs(ref).max()))) if name == "conv2d.winograd" else conv_tol(wl)
    for value in values:
        cfg = dataclasses.replace(cand.default_config(wl, cpu_target), **{knob: value})
        assert_close(CompiledCandidate(cand, wl, cfg, cpu_target).run(xs), ref, **tol, what=f"{name} {cfg}")


def test_1x1_stride1_reads_input_in_place():
    """1x1 stride-1 unpadded convs whose channels fill whole blocks skip the pack stage;
    stride 2, padding or a partial channel block keep it."""
    from tvm import te

    from ext.topi_kernels import conv2d as cv

    def pack_of(C, stride=(1, 1), pad=(0, 0, 0, 0)):
        g = cv.ConvGeom(1, C, 9, 9, 40, 1, 1, stride=stride, pad=pad)
        X = te.placeholder((1, C, 9, 9), name="X")
        Wp = te.placeholder((2, -(-C // 16), 1, 1, 16, 32), name="Wp")
        return cv.conv2d_nchwc(X, Wp, g, icb=16, ocb=32, ow_pad=g.OW)[0]

    assert pack_of(32) is None
    assert pack_of(32, stride=(2, 2)) is not None
    assert pack_of(32, pad=(1, 1, 1, 1)) is not None
    assert pack_of(20) is not None


@pytest.mark.parametrize("O", [64, 96, 128, 144])
def test_direct_default_tiles_pad_no_more_channels_than_needed(cpu_target, O):
    """Wide 4-vector tiles only where they pad no more output channels than 2-vector ones
    (SqueezeNet 1.0's 3->96 7x7 stem computed 128 channels: 1.30 ms against 0.76)."""
    cand = REGISTRY.get("conv2d.direct_nchwc")
    wl = conv_wl(1, 3, 15, 71, O, 7, stride=2, pad=0)  # 33 output columns: wide tiles considered
    cfg = cand.default_config(wl, cpu_target)
    ln = lanes(cpu_target)
    padded = -(-O // cfg.ocb) * cfg.ocb
    assert padded == -(-O // (2 * ln)) * (2 * ln), cfg
    out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs := random_inputs(wl, seed=O))
    assert_close(out, reference(wl, xs), **conv_tol(wl))


@pytest.mark.parametrize("O", [20, 24, 40, 48])
@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512"])
def test_direct_default_takes_three_vector_channels_as_one_block(mcpu, O):
    """Channels filling three vectors where the tile would take two (24 with AVX2) are one block:
    blocks of 16 padded 24 to 32 (96->24 at 56x56: 0.54x the time as one 24-channel block)."""
    target = ext.target.cpu(mcpu)
    cand = REGISTRY.get("conv2d.direct_nchwc")
    wl = conv_wl(1, 96, 9, 56, O, 1, pad=0)
    cfg = cand.default_config(wl, target)
    ln = lanes(target)
    o_pad = -(-O // ln) * ln
    if o_pad <= 3 * ln:
        assert -(-O // cfg.ocb) * cfg.ocb == o_pad, cfg  # no channel block past the last vector
    assert cfg.reg_n * cfg.ocb // ln <= cpu_info(target).accumulators, cfg
    if mcpu == "haswell" and o_pad == 24:
        assert (cfg.ocb, cfg.reg_n) == (24, 4), cfg
        xs = random_inputs(wl, seed=O)  # AVX2 code: runs on any host the suite runs on
        assert_close(CompiledCandidate(cand, wl, cfg, target).run(xs), reference(wl, xs), **conv_tol(wl))


@pytest.mark.parametrize("W", [96, 112, 128, 160, 256])
def test_conv1x1_tiles_fit_the_register_file(cpu_target, W):
    """Accumulators plus the tile's input vectors fit the registers (16->96 at 256x256 defaulted
    to 3 x 8 vectors and 8 inputs, which spilled: 2.93 ms against 0.61 as 2 x 8)."""
    from ext.target import cpu_info
    from ext.tir_schedules.cpu.conv2d import vector_width

    cand = REGISTRY.get("conv2d.conv1x1")
    wl = conv_wl(1, 16, 2, W, 96, 1, pad=0)
    regs = cpu_info(cpu_target).accumulators
    for cfg in cand.space(wl, cpu_target):
        px = cfg.cols or cfg.rows * W
        assert (cfg.ob + 1) * (px // vector_width(px, lanes(cpu_target))) <= regs, cfg
    cfg = cand.default_config(wl, cpu_target)
    xs = random_inputs(wl, seed=W)
    assert_close(CompiledCandidate(cand, wl, cfg, cpu_target).run(xs), reference(wl, xs), **conv_tol(wl))
