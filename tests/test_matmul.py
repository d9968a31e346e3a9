"""Every CPU matmul candidate against NumPy on awkward shapes, default and non-default configs."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY
from ext.target import cpu_info
from ext.workload import Workload

from ext.testing import assert_close


def matmul_wl(M, N, K, *, transpose_b=False, epilogue=("bias", "relu"), b_const=True, batch=None):
    a = (*batch, M, K) if batch else (M, K)
    b = (N, K) if transpose_b else (K, N)
    out = (*batch, M, N) if batch else (M, N)
    shapes = [a, b]
    if "bias" in epilogue:
        shapes.append((N,))
    if "residual" in epilogue:
        shapes.append(out)
    return Workload("matmul", shapes, ["float32"] * len(shapes), "float32",
                    attrs={"transpose_b": transpose_b, "b_const": b_const, "out_shape": out}, epilogue=epilogue)


ACT = {"relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
       "silu": lambda x: x / (1 + np.exp(-x))}


def reference(wl, xs):
    a, b, *extras = [x.astype("float64") for x in xs]
    if wl.attr("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    y = a @ b
    for op in wl.epilogue:
        y = y + extras.pop(0) if op in ("bias", "residual") else ACT[op](y)
    return y


def tol(K):
    # float32 sums of K products in [-1, 1]: error grows ~ sqrt(K) ulps; 4e-6*K covers K up to 4096
    return dict(rtol=1e-5, atol=4e-6 * max(K, 16))


SHAPES = [(1, 1, 1), (7, 13, 5), (1, 100, 37), (37, 1, 50), (17, 31, 64), (64, 64, 64), (33, 97, 129),
          (128, 200, 96), (777, 333, 1000)]


@pytest.mark.parametrize("name", ["matmul.direct", "matmul.packed", "matmul.gemv"])
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_candidate_matches_numpy(cpu_target, name, M, N, K, transpose_b):
    cand = REGISTRY.get(name)
    wl = matmul_wl(M, N, K, transpose_b=transpose_b, epilogue=("bias", "relu", "residual"))
    if not cand.applies(wl, cpu_target):
        pytest.skip(f"{name} declines: {cand.applies(wl, cpu_target).reason}")
    xs = random_inputs(wl, seed=M * 7 + N)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, reference(wl, xs), **tol(K), what=f"{name} {M}x{N}x{K}")


@pytest.mark.parametrize("name", ["matmul.direct", "matmul.packed", "matmul.gemv", "matmul.batch"])
def test_every_space_point_is_correct_on_odd_shape(cpu_target, name):
    """Pin the whole knob space (a few points each) on an odd shape: tuning may pick any of them."""
    cand = REGISTRY.get(name)
    if name == "matmul.gemv":
        wl = matmul_wl(1, 45, 29, epilogue=("bias",))
    elif name == "matmul.batch":
        wl = matmul_wl(11, 23, 9, epilogue=("bias", "tanh"), batch=(3,))
    else:
        wl = matmul_wl(11, 45, 29, epilogue=("bias", "sigmoid"))
    xs = random_inputs(wl, seed=3)
    ref = reference(wl, xs)
    space = cand.space(wl, cpu_target)
    assert space, f"{name} has an empty space"
    for cfg in space[:: max(1, len(space) // 6)]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, rtol=1e-5, atol=1e-4, what=f"{name} {cfg}")


@pytest.mark.parametrize("batch_a,batch_b", [((4,), (4,)), ((2, 3), (3,)), ((5,), None), ((1,), (6,))])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul_broadcasting(cpu_target, batch_a, batch_b, transpose_b):
    M, N, K = 13, 19, 7
    a = (*batch_a, M, K)
    b = ((*batch_b, N, K) if transpose_b else (*batch_b, K, N)) if batch_b else ((N, K) if transpose_b else (K, N))
    out = np.broadcast_shapes(batch_a, batch_b or ()) + (M, N)
    wl = Workload("matmul", [a, b, (N,)], ["float32"] * 3, "float32",
                  attrs={"transpose_b": transpose_b, "out_shape": out}, epilogue=("bias",))
    cand = REGISTRY.get("matmul.batch")
    assert cand.applies(wl, cpu_target)
    xs = random_inputs(wl, seed=1)
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(got, reference(wl, xs), rtol=1e-5, atol=1e-5)


def test_candidates_decline_with_reasons(cpu_target):
    int_wl = Workload("matmul", [(8, 8), (8, 8)], ["int32", "int32"], "int32", attrs={"out_shape": (8, 8)})
    for cand in REGISTRY.for_op("matmul", "llvm"):
        verdict = cand.applies(int_wl, cpu_target)
        assert not verdict and ("float32" in verdict.reason or "dtype" in verdict.reason), (cand.name, verdict)
    big = matmul_wl(64, 64, 64)
    gemv = REGISTRY.get("matmul.gemv").applies(big, cpu_target)
    assert not gemv and "matrix-vector" in gemv.reason


def test_default_config_depends_on_shape(cpu_target):
    packed = REGISTRY.get("matmul.packed")
    wide = packed.default_config(matmul_wl(1024, 1024, 1024), cpu_target)
    lanes = cpu_info(cpu_target).lanes_f32
    narrow = packed.default_config(matmul_wl(1024, 2 * lanes, 1024), cpu_target)
    vectors = 4 if cpu_info(cpu_target).vector_registers == 32 else 3
    assert wide.nb == vectors * lanes and wide.parallel == "panels"
    # two vectors are one panel: split row tiles across threads
    assert narrow.nb == 2 * lanes and narrow.parallel == "tiles"


@pytest.mark.parametrize("mcpu, mb, nb", [("znver4", 4, 64), ("haswell", 4, 24)])
def test_register_tile_holds_the_most_accumulators(mcpu, mb, nb):
    """4 x 4 vectors (16 of 28 accumulators) with AVX-512; with AVX2's 16 registers 4 x 3 (12),
    not 2 x 4 (8: 4 x 4 would spill), for GEMMs, batch matmuls and Winograd's batched GEMM."""
    from tvm.target import Target

    from conv2d_helpers import conv_wl

    t = Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    for name, wl in (("matmul.packed", matmul_wl(1024, 1024, 1024)),
                     ("conv2d.winograd", conv_wl(1, 256, 14, 14, 256, 3))):
        cfg = REGISTRY.get(name).default_config(wl, t)
        assert (cfg.mb, cfg.nb) == (mb, nb), (name, cfg)


@pytest.mark.parametrize("N, haswell, znver4", [(64, (6, 16), (4, 64)), (128, (6, 16), (4, 64)),
                                                 (768, (4, 24), (4, 64)), (256, (4, 24), (4, 64))])
def test_sixteen_registers_take_six_by_two_vectors_where_three_pad(N, haswell, znver4):
    """With 16 registers 4 x 3 and 6 x 2 vectors both hold 12 accumulators: 6 x 2 where 3-vector
    panels pad N by 5% or more (64 -> 72 columns: attention's P @ V ran 0.82x the time as 6 x 16).
    The 6 x 16 kernel is checked against NumPy with a partial row tile."""
    from tvm.target import Target

    for mcpu, want in (("haswell", haswell), ("znver4", znver4)):
        t = Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
        for name, wl in (("matmul.packed", matmul_wl(512, N, 256)), ("matmul.batch", matmul_wl(300, N, 64, batch=(2,)))):
            cfg = REGISTRY.get(name).default_config(wl, t)
            assert (cfg.mb, cfg.nb) == want, (mcpu, name, cfg)
    if N == 64:  # AVX2 code: runs on any host the suite runs on
        t = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
        packed = REGISTRY.get("matmul.packed")
        wl = matmul_wl(197, 64, 61)
        xs = random_inputs(wl, seed=5)
        cfg = packed.default_config(wl, t)
        assert (cfg.mb, cfg.nb) == (6, 16)
        assert_close(CompiledCandidate(packed, wl, cfg, t).run(xs), reference(wl, xs), **tol(61), what="6x16")


def test_six_row_tiles_with_two_fma512_units(cpu_target):
    """Xeons with two 512-bit FMA units take 6 x 64 tiles where padding M to sixes pays; Zen 4
    keeps 4 rows. The 6-row kernel is checked against NumPy on rows that leave a partial tile."""
    from tvm.target import Target

    packed = REGISTRY.get("matmul.packed")
    xeon = Target({"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 2})
    zen4 = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    assert cpu_info(xeon).two_fma512 and not cpu_info(zen4).two_fma512
    rows = {M: packed.default_config(matmul_wl(M, 768, 768), xeon).mb for M in (5, 13, 32, 49, 128, 197)}
    assert rows == {5: 4, 13: 4, 32: 4, 49: 6, 128: 6, 197: 6}  # 13 -> 18 rows, 32 -> 36: padding costs more
    assert packed.default_config(matmul_wl(128, 768, 768), zen4).mb == 4
    assert packed.default_config(matmul_wl(128, 96, 384), xeon).mb == 4  # 3-vector panels: 4 rows
    four_vectors = 4 * cpu_info(cpu_target).lanes_f32  # 6 x 4-vector tiles on this host's ISA
    for M, N, K in ((49, 75, 33), (197, 130, 61)):
        wl = matmul_wl(M, N, K, epilogue=("bias", "silu"))
        xs = random_inputs(wl, seed=M)
        cfg = dataclasses.replace(packed.default_config(wl, cpu_target), mb=6, nb=four_vectors)
        out = CompiledCandidate(packed, wl, cfg, cpu_target).run(xs)
        assert_close(out, reference(wl, xs), **tol(K), what=f"6x64 {M}x{N}x{K}")


@pytest.mark.parametrize("M,N,K,mb,steps", [(8, 200, 300, 4, 2), (13, 130, 97, 4, 1), (200, 129, 64, 6, 1)])
def test_packed_prefetches_the_next_panel(cpu_target, M, N, K, mb, steps):
    """With two or more row tiles and panels, matmul.packed prefetches the next panel of B in its
    first row tiles (``steps`` lines per step: 64-column panels are 4 lines per k, so two row
    tiles take two each); the results are those of NumPy. A GEMV (one row tile) does not."""
    from ext.tir_schedules.cpu.matmul import TileConfig

    cand = REGISTRY.get("matmul.packed")
    wl = matmul_wl(M, N, K, epilogue=("bias", "relu"))
    cfg = TileConfig(mb=mb, nb=64, parallel="panels")
    assert cand.build(wl, cfg, cpu_target).script().count("T.prefetch(") == steps
    xs = random_inputs(wl, seed=K)
    out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
    assert_close(out, reference(wl, xs), **tol(K), what=f"prefetching matmul.packed {M}x{N}x{K} {cfg}")
    gemv = REGISTRY.get("matmul.gemv")
    vec = matmul_wl(1, N, K, epilogue=("bias",))
    assert "T.prefetch(" not in gemv.build(vec, gemv.default_config(vec, cpu_target), cpu_target).script()


@pytest.mark.parametrize("name, wl", [
    ("matmul.packed", matmul_wl(131, 45, 29, epilogue=("bias", "relu", "residual"))),
    ("matmul.direct", matmul_wl(37, 53, 17, transpose_b=True, epilogue=("bias",))),
    ("matmul.batch", matmul_wl(67, 19, 23, epilogue=("bias", "tanh"), batch=(3,))),
    ("matmul.batch", matmul_wl(29, 70, 31, transpose_b=True, epilogue=("bias",), batch=(2,))),
])
@pytest.mark.parametrize("parallel", ["tiles", "none"])
def test_rows_order_matches_numpy(cpu_target, name, wl, parallel):
    """Row tiles outside the panels (``order="rows"``), with partial row tiles and a ragged last
    panel, threaded over (batch, row tile) or not."""
    cand = REGISTRY.get(name)
    cfg = dataclasses.replace(cand.default_config(wl, cpu_target), parallel=parallel, order="rows")
    xs = random_inputs(wl, seed=11)
    assert_close(CompiledCandidate(cand, wl, cfg, cpu_target).run(xs), reference(wl, xs),
                 **tol(wl.shapes[0][-1]), what=f"{name} {cfg}")


def test_rows_order_where_a_outgrows_l2_and_b_fits():
    """``order="rows"`` by default where A is larger than half of L2 and B fits the other half
    (Whisper's P @ V: P 9 MB a head, V 384 KB; ConvNeXt's 3136 x 96 x 384), panels where A fits
    (BERT's 128 x 768 x 768), where B does not (784 x 192 x 768: 590 KB) or where B is one panel.
    Both orders are in the tuner's spaces only where B fits."""
    from tvm.target import Target

    from ext.tir_schedules.cpu.matmul import TileConfig

    t = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    packed, batch = REGISTRY.get("matmul.packed"), REGISTRY.get("matmul.batch")
    pv = matmul_wl(1500, 64, 1500, epilogue=(), b_const=False, batch=(6,))
    assert batch.default_config(pv, t).order == "rows"
    assert batch.default_config(matmul_wl(197, 64, 197, epilogue=(), b_const=False, batch=(12,)), t).order == "panels"
    assert packed.default_config(matmul_wl(3136, 384, 96), t).order == "rows"
    for M, N, K in ((128, 768, 768), (784, 768, 192), (3136, 16, 512)):
        assert packed.default_config(matmul_wl(M, N, K), t).order == "panels", (M, N, K)
    assert {c.order for c in batch.space(pv, t)} == {"panels", "rows"}
    assert {c.order for c in packed.space(matmul_wl(784, 768, 192), t)} == {"panels"}
    with pytest.raises(ValueError, match="order"):
        TileConfig(order="columns")


def test_records_from_before_the_order_knob_stay_valid(cpu_target):
    """Every candidate whose configs are ``TileConfig`` accepts a logged config without ``order``
    (written before the knob existed) as the ``order="panels"`` point."""
    from conv2d_helpers import conv_wl

    from ext.strategies.registry import config_to_dict
    from ext.tir_schedules.cpu.matmul import TileConfig

    cases = {"matmul.direct": matmul_wl(40, 50, 30), "matmul.packed": matmul_wl(40, 50, 30),
             "matmul.gemv": matmul_wl(1, 50, 30), "matmul.batch": matmul_wl(40, 50, 30, batch=(2,)),
             "conv2d.pointwise": conv_wl(1, 16, 9, 9, 24, 1, pad=0), "conv2d.im2col": conv_wl(1, 16, 9, 9, 24, 3),
             "matmul.packed_dyn": matmul_wl("n", 50, 30), "matmul.batch_dyn": matmul_wl("m", "n", 30, batch=(2,))}
    seen = set()
    for cand in REGISTRY:
        if cand.name not in cases:
            continue
        wl = cases[cand.name]
        cfg = cand.default_config(wl, cpu_target)
        assert isinstance(cfg, TileConfig) and cfg.order == "panels", (cand.name, cfg)
        old = {k: v for k, v in config_to_dict(cfg).items() if k != "order"}
        assert cand.config_problem(old, wl, cpu_target) is None, cand.name
        assert cand.config_problem(dict(old, order="diagonal"), wl, cpu_target) is not None, cand.name
        seen.add(cand.name)
    assert seen == set(cases)
