"""Layout transforms: the batched-transpose candidates against NumPy, the canonical views of
permute_dims / layout_transform, and the Relax family end to end (NCHW <-> NHWC, NCHW <-> NCHW16c)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm.tirx import IndexMap

import ext
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import assert_close, run_relax
from ext.topi_kernels.layout import canonical_permutation, split_axes_form
from ext.workload import Workload


def lt_wl(B, R, S, E, dtype="float32"):
    return Workload("layout_transform", [(B, R, S, E)], [dtype], dtype, attrs={"out_shape": (B, S, R, E)})


CASES = [  # (candidate, B, R, S, E)
    ("layout_transform.blocked", 1, 64, 3136, 1), ("layout_transform.blocked", 1, 3136, 64, 1),
    ("layout_transform.blocked", 3, 5, 7, 1), ("layout_transform.blocked", 1, 1, 1, 1),
    ("layout_transform.blocked", 2, 17, 33, 3), ("layout_transform.blocked", 4, 16, 49, 1),
    ("layout_transform.chunks", 1, 49, 4, 16), ("layout_transform.chunks", 2, 13, 12, 64),
    ("layout_transform.chunks", 3, 5, 7, 3),
]


@pytest.mark.parametrize("name,B,R,S,E", CASES)
def test_candidate_matches_numpy(cpu_target, name, B, R, S, E):
    cand, wl = REGISTRY.get(name), lt_wl(B, R, S, E)
    assert cand.applies(wl, cpu_target)
    x = np.random.default_rng(B * R + S).normal(size=(B, R, S, E)).astype("float32")
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])
    assert_close(got, x.transpose(0, 2, 1, 3), rtol=0, atol=0)  # a copy: exact


def test_space_points_and_other_dtypes(cpu_target):
    cand = REGISTRY.get("layout_transform.blocked")
    for dtype in ("float32", "int8", "float16"):
        wl = lt_wl(2, 37, 19, 1, dtype)
        x = np.random.default_rng(0).integers(-100, 100, size=(2, 37, 19, 1)).astype(dtype)
        for cfg in cand.space(wl, cpu_target):
            got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
            assert np.array_equal(got, x.transpose(0, 2, 1, 3)), (dtype, cfg)


def test_canonical_views():
    assert canonical_permutation((1, 64, 56, 56), [0, 2, 3, 1]) == (1, 64, 3136, 1)  # NCHW -> NHWC
    assert canonical_permutation((1, 56, 56, 64), [0, 3, 1, 2]) == (1, 3136, 64, 1)  # NHWC -> NCHW
    assert canonical_permutation((2, 128, 12, 64), [0, 2, 1, 3]) == (2, 128, 12, 64)  # attention heads
    assert canonical_permutation((4, 8), [1, 0]) == (1, 4, 8, 1)
    assert canonical_permutation((2, 3, 4), [2, 1, 0]) is None  # a full reversal: two swaps
    assert canonical_permutation((2, 3), [0, 1]) is None  # identity
    nchw16c = IndexMap.from_func(lambda n, c, h, w: (n, c // 16, h, w, c % 16))
    pieces, perm = split_axes_form((1, 64, 7, 7), nchw16c)
    assert pieces == (1, 4, 16, 7, 7) and canonical_permutation(pieces, perm) == (4, 16, 49, 1)
    back = IndexMap.from_func(lambda n, c0, h, w, c1: (n, c0 * 16 + c1, h, w))
    pieces, perm = split_axes_form((1, 4, 7, 7, 16), back)
    assert canonical_permutation(pieces, perm) == (4, 49, 16, 1)
    assert split_axes_form((1, 60, 7, 7), nchw16c) is None  # 60 channels need padding: stock


def _module(shape, make):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(make(bb, x)))
        bb.emit_func_output(y)
    return bb.get()


def test_nchw_nhwc_round_trip(cpu_target):
    mod = _module((1, 32, 9, 7), lambda bb, x: relax.op.permute_dims(
        bb.emit(relax.op.multiply(bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1])), relax.const(2.0))), [0, 3, 1, 2]))
    ex = ext.build(mod, cpu_target)
    assert [d.name for d in ext.last_report().find("layout_transform")] == ["layout_transform.blocked"] * 2
    x = np.random.default_rng(1).normal(size=(1, 32, 9, 7)).astype("float32")
    assert_close(run_relax(ex, x), x * 2, rtol=0, atol=0)


@pytest.mark.parametrize("c", [16, 64])
def test_nchw_to_nchwc_and_back(cpu_target, c):
    fwd = IndexMap.from_func(lambda n, ch, h, w: (n, ch // 16, h, w, ch % 16))
    bwd = IndexMap.from_func(lambda n, c0, h, w, c1: (n, c0 * 16 + c1, h, w))

    def make(bb, x):
        packed = bb.emit(relax.op.layout_transform(x, index_map=fwd))
        plus = bb.emit(relax.op.add(packed, relax.const(1.0)))
        return relax.Tuple([packed, bb.emit(relax.op.layout_transform(plus, index_map=bwd))])

    mod = _module((2, c, 5, 6), make)
    ex = ext.build(mod, cpu_target)
    assert len(ext.last_report().find("layout_transform")) == 2
    x = np.random.default_rng(2).normal(size=(2, c, 5, 6)).astype("float32")
    packed, back = run_relax(ex, x)
    assert_close(packed, x.reshape(2, c // 16, 16, 5, 6).transpose(0, 1, 3, 4, 2), rtol=0, atol=0)
    assert_close(back, x + 1, rtol=0, atol=0)


def test_matmul_keeps_its_transposed_weight(cpu_target):
    """permute_dims feeding a matmul stays in the matmul composite (families are tried in name order)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    w = relax.Var("w", relax.TensorType((32, 16), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(relax.op.matmul(x, relax.op.permute_dims(w))))
        bb.emit_func_output(y)
    ext.build(bb.get(), cpu_target)
    rep = ext.last_report()
    assert rep.find("layout_transform") == [] and rep.find("matmul")[0].workload.attr("transpose_b")
