"""Every registered CPU candidate against the one NumPy reference (``ext.tuning.references``).

The cases come from the registry, not from a hand-written list: a candidate registered
anywhere is run on the standard shapes of its family that it applies to, so a new kernel is
tested without editing this file. A family without standard shapes, or a candidate that
applies to none of them, fails (add a shape here). The last two tests show the two
extension points of issue 16: a test-only conv2d candidate and a test-only target kind,
each registered in this file alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tvm import te, topi

import ext
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import PLEVEL, REGISTRY, Candidate, Selector
from ext.testing import assert_close
from ext.tir_schedules.common import create_schedule, finish
from ext.tuning.references import REFERENCES
from ext.workload import Workload

from conv2d_helpers import blocked_wl, conv_wl
from ext.strategies._util import lanes


def _mm(M, N, K, *, transpose_b=False, epilogue=("bias", "relu"), batch=None):
    a = (*batch, M, K) if batch else (M, K)
    out = (*batch, M, N) if batch else (M, N)
    shapes = [a, (N, K) if transpose_b else (K, N)] + ([(N,)] if "bias" in epilogue else [])
    return Workload("matmul", shapes, ["float32"] * len(shapes), "float32",
                    attrs={"transpose_b": transpose_b, "b_const": True, "out_shape": out}, epilogue=epilogue)


def _rows(op, rows, n, **attrs):
    shapes = [(rows, n)] + ([(n,), (n,)] if op == "layer_norm" else [])
    if op == "layer_norm":
        attrs = {"eps": 1e-5, "center": True, "scale": True, **attrs}
    return Workload(op, shapes, ["float32"] * len(shapes), "float32", attrs={**attrs, "out_shape": (rows, n)})


def _red(O, R, I, kind):
    return Workload("reduce", [(O, R, I)], ["float32"], "float32", attrs={"kind": kind, "out_shape": (O, I)})


def _pool(kind, C, H, W, k, s, p, *, count_include_pad=False, block=0):
    """``block``: NCHW{block}c activations (``C`` a multiple of it)."""
    oh, ow = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    x, out = ((1, C // block, H, W, block), (1, C // block, oh, ow, block)) if block else ((1, C, H, W), (1, C, oh, ow))
    attrs = {"kind": kind, "pool_size": (k, k), "strides": (s, s), "padding": (p,) * 4, "dilation": (1, 1),
             "ceil_mode": False, "count_include_pad": count_include_pad,
             "layout": f"NCHW{block}c" if block else "NCHW", "out_shape": out}
    return Workload("pool2d", [x], ["float32"], "float32", attrs=attrs)


def _resize(C, H, W, OH, OW, method, mode, rounding=""):
    attrs = {"method": method, "coordinate_transformation_mode": mode, "rounding_method": rounding, "layout": "NCHW",
             "out_shape": (1, C, OH, OW)}
    return Workload("resize2d", [(1, C, H, W)], ["float32"], "float32", attrs=attrs)


def _att(B, M, N, d, dv, *, layout="nk", scale=0.125, scale_op="multiply", mask=None, keep=None):
    """``mask``, ``keep``: ``(G, Mm, Nn)``, or None (``keep``: a masked_fill with -2.0)."""
    shapes = [(B, M, d), (B, N, d) if layout == "nk" else (B, d, N), (B, N, dv)] + [s for s in (mask, keep) if s]
    attrs = {"k_layout": layout, "scale": scale, "scale_op": scale_op, "out_shape": (B, M, dv)}
    if keep:
        attrs["fill"] = -2.0
    return Workload("attention", shapes, ["float32"] * len(shapes), "float32", attrs=attrs)


def _lt(B, R, S, E):
    return Workload("layout_transform", [(B, R, S, E)], ["float32"], "float32", attrs={"out_shape": (B, S, R, E)})


#: standard shapes per family: odd and prime sizes, each kernel form at least once
_LN = lanes(ext.target.cpu())
STANDARD = {
    "matmul": [_mm(7, 13, 11), _mm(1, 37, 19, epilogue=("bias",)), _mm(67, 131, 129), _mm(13, 17, 11, transpose_b=True),
               _mm(5, 7, 9, epilogue=(), batch=(3,)), _mm(2, 9, 12, transpose_b=True, epilogue=(), batch=(3,))],
    "conv2d": [conv_wl(1, 7, 11, 11, 13, 3), conv_wl(1, 16, 13, 13, 32, 3), conv_wl(1, 19, 9, 9, 23, 1, pad=0),
               conv_wl(1, 19, 8, 16, 23, 1, pad=0),
               conv_wl(1, 16, 11, 11, 16, 3, groups=16), conv_wl(1, 7, 11, 11, 13, 3, layout="NHWC"),
               conv_wl(1, 5, 13, 13, 11, 3, stride=2, epilogue=()),
               # NCHW{lanes}c activations (BlockChannels): depthwise, and a dense conv writing them
               blocked_wl(1, 32, 11, 9, 32, 3, groups=32, b_in=_LN, b_out=_LN),
               blocked_wl(1, 13, 9, 11, 32, 3, b_in=0, b_out=_LN, epilogue=("bias",))],
    "softmax": [_rows("softmax", 5, 37), _rows("softmax", 3, 1031)],
    "layer_norm": [_rows("layer_norm", 5, 37), _rows("layer_norm", 3, 67, dropout=0.1)],
    "reduce": [_red(5, 7, 3, "sum"), _red(5, 7, 1, "max"), _red(1, 4099, 1, "mean"), _red(3, 5, 37, "min")],
    "resize2d": [_resize(3, 7, 9, 15, 20, "linear", "half_pixel"), _resize(2, 13, 11, 5, 6, "linear", "align_corners"),
                 _resize(3, 5, 7, 17, 23, "nearest_neighbor", "asymmetric", "floor"),
                 _resize(2, 8, 9, 13, 4, "nearest_neighbor", "half_pixel", "round_prefer_ceil")],
    "pool2d": [_pool("max", 7, 13, 11, 3, 2, 1), _pool("avg", 5, 9, 9, 3, 1, 1, count_include_pad=True),
               _pool("max", 2 * _LN, 13, 11, 3, 2, 1, block=_LN), _pool("avg", _LN, 9, 7, 2, 2, 0, block=_LN)],
    "layout_transform": [_lt(2, 7, 5, 3), _lt(1, 16, 9, 4)],
    "attention": [_att(2, 13, 37, 16, 8, mask=(1, 1, 37)), _att(3, 5, 7, 9, 11, layout="kn", scale=None),
                  _att(4, 17, 53, 33, 24, scale=8.0, scale_op="divide", mask=(2, 17, 53)),
                  _att(1, 1, 67, 64, 64, mask=(1, 1, 1)), _att(2, 7, 41, 8, 16, scale=None, keep=(1, 7, 41)),
                  _att(3, 5, 19, 16, 8, layout="kn", mask=(3, 1, 19), keep=(1, 5, 19))],
}


def own_cpu_candidates(registry=REGISTRY) -> list[Candidate]:
    """ext's own kernels for the host CPU kind (library calls left out), in registry order."""
    return [c for c in registry if c.library is None and "llvm" in c.targets]


def check_candidate(cand: Candidate, target, shapes=None) -> int:
    """Run ``cand``'s default config on every standard shape of its family it applies to and
    compare with the family's reference at its tolerance; returns how many shapes ran."""
    assert cand.op in REFERENCES, f"no reference for {cand.op} in ext.tuning.references"
    cases = [wl for wl in (shapes if shapes is not None else STANDARD.get(cand.op, [])) if cand.applies(wl, target)]
    assert cases, f"{cand.name} applies to none of the standard {cand.op} shapes: add one to STANDARD"
    ref, tol = REFERENCES[cand.op]
    for wl in cases:
        xs = random_inputs(wl, seed=3)
        out = CompiledCandidate(cand, wl, cand.default_config(wl, target), target).run(xs)
        rtol, atol = tol(wl)
        assert_close(out.astype("float64"), np.asarray(ref(wl, xs), "float64").reshape(out.shape), rtol=rtol,
                     atol=atol, what=f"{cand.name} on {wl.key}")
    return len(cases)


@pytest.mark.parametrize("name", [c.name for c in own_cpu_candidates()])
def test_every_registered_cpu_candidate_matches_the_reference(name, cpu_target):
    check_candidate(REGISTRY.get(name), cpu_target)


def test_every_family_has_standard_shapes():
    assert {c.op for c in own_cpu_candidates()} <= set(STANDARD)


# -- a test-only conv2d candidate: registered here, tested by the machinery above, selectable --

def _naive_check(wl, target):
    if wl.epilogue or wl.attr("groups", 1) != 1 or wl.attr("data_layout", "NCHW") != "NCHW":
        return "bare NCHW convolution only"
    return None if wl.shapes[0][1] == 7 else "only 7 input channels (a test kernel)"


def _naive_build(wl, cfg, target):
    X = te.placeholder(wl.shapes[0], name="X")
    W = te.placeholder(wl.shapes[1], name="W")
    out = topi.nn.conv2d_nchw(X, W, wl.attr("strides"), wl.attr("padding"), wl.attr("dilation"))
    return finish(create_schedule([X, W, out]), "conv2d.test_naive")


@dataclasses.dataclass(frozen=True)
class _NoKnobs:
    pass


@pytest.fixture
def naive_conv():
    cand = Candidate("conv2d.test_naive", ("llvm",), PLEVEL.SPECIALIZED + 1, _naive_check, _NoKnobs,
                     space=lambda wl, t: [_NoKnobs()], default=lambda wl, t: _NoKnobs(), build=_naive_build)
    REGISTRY.register(cand)
    try:
        yield cand
    finally:
        REGISTRY.unregister(cand.name)


def test_a_test_only_conv2d_candidate_is_enumerated_tested_and_selectable(naive_conv, cpu_target):
    assert naive_conv in own_cpu_candidates()
    assert check_candidate(naive_conv, cpu_target, STANDARD["conv2d"] + [conv_wl(1, 7, 9, 11, 5, 3, epilogue=())]) >= 1
    decision = Selector(cpu_target).choose(conv_wl(1, 7, 9, 11, 5, 3, epilogue=()))
    assert decision.name == "conv2d.test_naive" and decision.source == "plevel"
    assert Selector(cpu_target).choose(conv_wl(1, 8, 9, 11, 5, 3, epilogue=())).name != "conv2d.test_naive"


def _off_by_a_little(wl, cfg, target):
    X, W = te.placeholder(wl.shapes[0], name="X"), te.placeholder(wl.shapes[1], name="W")
    conv = topi.nn.conv2d_nchw(X, W, wl.attr("strides"), wl.attr("padding"), wl.attr("dilation"))
    out = te.compute(conv.shape, lambda *i: conv(*i) + 1e-3, name="D")
    return finish(create_schedule([X, W, out]), "conv2d.test_wrong")


def test_a_wrong_test_only_candidate_fails_the_machinery(cpu_target):
    wrong = Candidate("conv2d.test_wrong", ("llvm",), PLEVEL.DIRECT, _naive_check, _NoKnobs,
                      space=lambda wl, t: [_NoKnobs()], default=lambda wl, t: _NoKnobs(), build=_off_by_a_little)
    with pytest.raises(AssertionError, match="conv2d.test_wrong"):  # 1e-3 off everywhere must not pass
        check_candidate(wrong, cpu_target, [conv_wl(1, 7, 11, 11, 5, 3, stride=2, epilogue=())])


# -- a test-only target kind: one register_target_kind call, nothing else edited --

@pytest.fixture
def testcpu():
    row = dataclasses.replace(ext.target.LLVM, name="testcpu", uses=("llvm",),
                              match=lambda t: "testcpu" in [str(k) for k in t.keys],
                              describe=lambda t: "testcpu " + ext.target.llvm_describe(t))
    ext.target.register_target_kind(row)
    try:
        yield row
    finally:
        ext.target.unregister_target_kind("testcpu")


def test_a_test_only_target_kind_builds_with_llvm_candidates(testcpu, cpu_target):
    import tvm
    from tvm import relax

    from ext.models.gemm import dense
    from ext.tuning.log import target_info

    host = {k: cpu_target.attrs[k] for k in ("mcpu", "mattr") if k in cpu_target.attrs}
    tgt = ext.target.normalize({"kind": "llvm", **host, "num-cores": 2, "keys": ["testcpu", "cpu"]})
    assert ext.target.target_kind(tgt) is testcpu and ext.target.target_kind(cpu_target).name == "llvm"
    assert target_info(tgt)["kind"] == "testcpu" and ext.target.describe(tgt).startswith("testcpu llvm")
    mod, params = dense(7, 13, 11)
    ex = ext.build(mod, tgt, cache=False, verbose=False)
    rep = ext.last_report()
    assert rep.target.startswith("testcpu") and rep.decisions[0].name.startswith("matmul.")
    x = np.random.default_rng(0).uniform(-1, 1, (7, 11)).astype("float32")
    dev = testcpu.device(0)
    y = relax.VirtualMachine(ex, dev)["main"](tvm.runtime.tensor(x, dev)).numpy()
    assert_close(y, np.maximum(x @ params["w"] + params["b"], 0), rtol=1e-5, atol=1e-5, what="testcpu dense")
