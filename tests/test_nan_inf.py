"""NaN and +-inf go through ext's kernels as through NumPy (float64) and PyTorch.

ext's float32 exp/sigmoid/tanh/silu/gelu/gelu_tanh are polynomial forms whose clamps used to turn
NaN into numbers, ``max``-based relu and reductions dropped NaN (and a ``max``/``min`` clip, the
ReLU6 inside hardswish and hardsigmoid, would too), and layer_norm's variance clamp
turned ``inf - inf`` into 0. Every activation is checked standalone, in a fused element-wise chain
and as a matmul and conv2d epilogue (every CPU candidate that applies); every softmax, layer_norm
and reduction candidate on rows holding NaN, +inf, -inf and all-inf. The checks are exact on the
non-finite positions (NaN where NumPy has NaN, inf of the same sign) and use explicit tolerances
on the finite values.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conv2d_helpers import conv_ref_nchw, conv_wl
from test_candidates import _pool
from test_elemwise import REF
from tvm import relax

import ext
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import own_candidates, run_relax
from ext.strategies._util import lanes
from ext.tuning.references import activation as np_activation
from ext.tuning.references import block as block_nchw
from ext.tuning.references import pool2d as pool2d_ref
from ext.workload import ACTIVATIONS, Workload

NAN, INF = np.nan, np.inf

# the piecewise-linear activations, by their epilogue names (parameters spelled in the name)
PIECEWISE = ["clip:0:6", "clip:-1.5:2", "leaky_relu:0.1", "hardswish", "hardsigmoid"]
# float64 NumPy formulas: their limits at +-inf are PyTorch's too (silu(-inf) = gelu(-inf) = NaN,
# hardswish(-inf) = -inf * 0 = NaN), except gelu(+inf), where torch's erf form gives NaN and NumPy
# (and torch's tanh form) inf
ACT = {"relu": lambda x: np.maximum(x, 0), **REF, **{name: np_activation(name) for name in PIECEWISE}}


def _relu6_as_exported(x):
    """``torch.export``'s ReLU6 inside hardswish/hardsigmoid: two clips (MergeClips makes them one)."""
    return relax.op.clip(relax.op.clip(relax.op.add(x, relax.const(3.0)), 0, math.inf), -math.inf, 6)


RELAX = {"relu": relax.op.nn.relu, "exp": relax.op.exp, "sigmoid": relax.op.sigmoid, "tanh": relax.op.tanh,
         "silu": relax.op.nn.silu, "gelu": relax.op.nn.gelu, "gelu_tanh": relax.op.nn.gelu_tanh,
         "clip:0:6": lambda x: relax.op.clip(x, 0.0, 6.0), "clip:-1.5:2": lambda x: relax.op.clip(x, -1.5, 2.0),
         "leaky_relu:0.1": lambda x: relax.op.nn.leakyrelu(x, 0.1),
         "hardswish": lambda x: relax.op.divide(relax.op.multiply(x, _relu6_as_exported(x)), relax.const(6.0)),
         "hardsigmoid": lambda x: relax.op.divide(_relu6_as_exported(x), relax.const(6.0))}
EPILOGUE_ACTS = ["relu", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh", *PIECEWISE]


def test_every_activation_is_covered():
    assert sorted({a.split(":")[0] for a in EPILOGUE_ACTS}) == sorted(ACTIVATIONS)

# special inputs plus finite values around the polynomial's clamps and the tanh/erf branch points
# (erf is +-1 from 3.92, gelu's from 3.92 * sqrt(2) = 5.54; tanh's argument is capped at 10; sigmoid is 0
# below -80; the Newton reciprocal's operand lies within its range on each side of these)
SPECIAL = np.array([NAN, INF, -INF, 0.0, -0.0, 1e30, -1e30, 100.0, -100.0, 0.2, -0.2, 3.0, -3.0,
                    3.9, -3.9, 5.5, -5.6, 9.9, -10.1, 79.5, -79.5, -80.5, -88.0], "float32")


def ref(fn, x) -> np.ndarray:
    """``fn`` in float64, rounded to float32 (so float32 overflow becomes inf as in the kernel)."""
    with np.errstate(all="ignore"):
        return fn(np.asarray(x, "float64")).astype("float32")


def assert_matches(got, want, *, rtol: float, atol: float, what: str = "") -> None:
    """Same NaN and +-inf positions as ``want`` exactly, finite values within rtol/atol."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    for name, pred in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        bad = np.argwhere(pred(got) != pred(want))
        assert bad.size == 0, (f"{what}: {name} positions differ at {bad[:5].tolist()}: "
                               f"got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def with_specials(shape, seed: int) -> np.ndarray:
    """Random normal values with SPECIAL spread over the array (vector bodies and tails alike)."""
    x = np.random.default_rng(seed).normal(0, 2, shape).astype("float32")
    flat = x.reshape(-1)
    step = max(1, flat.size // (2 * len(SPECIAL)))
    for i, v in enumerate(np.tile(SPECIAL, 2)):
        flat[(i * step + i // len(SPECIAL)) % flat.size] = v
    return x


# -- activations ---------------------------------------------------------------------------------

# the polynomial forms: exp <= 2 ulp, erf 4.9e-7 absolute (see test_elemwise.py)
ACT_TOL = dict(rtol=2e-6, atol=1e-6)


def _module(shape, body, extra=()):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    params = [x] + [relax.Var(n, relax.TensorType(s, "float32")) for n, s in extra]
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(body(*params)))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("op", list(ACT))
def test_activation_standalone(cpu_target, op):
    shape = (3, 37)  # 111 elements: whole vectors and a tail
    x = with_specials(shape, seed=1)
    got = run_relax(ext.build(_module(shape, RELAX[op]), cpu_target), x)
    assert_matches(got, ref(ACT[op], x), **ACT_TOL, what=op)


@pytest.mark.parametrize("op", list(ACT))
def test_activation_in_fused_chain(cpu_target, op):
    shape = (5, 41)
    x = with_specials(shape, seed=2)
    b = np.random.default_rng(3).normal(0, 1, shape[-1:]).astype("float32")
    mod = _module(shape, lambda x_, b_: relax.op.multiply(RELAX[op](relax.op.add(x_, b_)), relax.const(2.0)),
                  extra=[("b", shape[-1:])])
    got = run_relax(ext.build(mod, cpu_target), x, b)
    want = ref(lambda v: 2 * ACT[op](v + b.astype("float64")), x)
    assert_matches(got, want, rtol=2e-6, atol=2e-6, what=op)


def test_relu_keeps_nan_and_signs(cpu_target):
    x = np.array([NAN, -NAN, INF, -INF, -0.0, 0.0, -1.0, 1.0, 7.0], "float32")
    got = run_relax(ext.build(_module(x.shape, relax.op.nn.relu), cpu_target), x)
    assert np.isnan(got[:2]).all() and got[2] == INF and (got[3:7] == 0).all() and list(got[7:]) == [1.0, 7.0]


def _matmul_wl(batch, M, N, K, act):
    return Workload("matmul", [(*batch, M, K), (*batch, K, N), (N,)], ["float32"] * 3, "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (*batch, M, N)},
                    epilogue=("bias", act))


def _matmul_inputs(batch, M, N, K, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (*batch, M, K)).astype("float32")
    b = rng.uniform(-1, 1, (*batch, K, N)).astype("float32")
    bias = rng.uniform(-1, 1, (N,)).astype("float32")
    bias[:len(SPECIAL)] = SPECIAL[:N]  # every column kind: NaN, +-inf, huge, tanh's branch points
    if M > 2:
        a[..., M // 2, K // 2] = NAN  # a NaN in A: its whole output row is NaN
    return a, b, bias


# (batch, M): GEMV (matmul.gemv), small/packed GEMM, batched (matmul.batch)
@pytest.mark.parametrize("act", EPILOGUE_ACTS)
@pytest.mark.parametrize("batch,M", [((), 1), ((), 7), ((3,), 5)], ids=["gemv", "gemm", "batch"])
def test_matmul_epilogue(cpu_target, act, batch, M):
    N, K = 37, 13
    wl = _matmul_wl(batch, M, N, K, act)
    cands = own_candidates(wl, cpu_target)
    assert cands, "no matmul candidate applies"
    a, b, bias = _matmul_inputs(batch, M, N, K, seed=M)
    want = ref(lambda _: ACT[act](a.astype("float64") @ b.astype("float64") + bias), a)
    for cand in cands:
        got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([a, b, bias])
        assert_matches(got, want, rtol=1e-5, atol=4e-6 * 16, what=f"{cand.name} {act} {batch} M={M}")


# (N, C, H, W, O, K, groups, layout): 3x3 (winograd, direct, im2col), 1x1 (pointwise), depthwise, NHWC
CONVS = [(1, 3, 9, 11, 13, 3, 1, "NCHW"), (1, 8, 7, 5, 13, 1, 1, "NCHW"), (1, 13, 9, 7, 13, 3, 13, "NCHW"),
         (1, 5, 7, 9, 13, 3, 1, "NHWC")]


@pytest.mark.parametrize("geom", CONVS, ids=["3x3", "1x1", "depthwise", "nhwc"])
@pytest.mark.parametrize("act", EPILOGUE_ACTS)
def test_conv2d_epilogue(cpu_target, geom, act):
    N, C, H, W, O, K, g, layout = geom
    wl = conv_wl(N, C, H, W, O, K, pad=K // 2, groups=g, epilogue=("bias", act), layout=layout)
    cands = own_candidates(wl, cpu_target)
    assert cands, "no conv2d candidate applies"
    rng = np.random.default_rng(O * K + g)
    x = rng.uniform(-1, 1, wl.shapes[0]).astype("float32")
    w = rng.uniform(-1, 1, wl.shapes[1]).astype("float32")
    bias = rng.uniform(-1, 1, wl.shapes[2]).astype("float32")
    bias.reshape(-1)[:len(SPECIAL)] = SPECIAL[:O]  # one output channel per special value
    args = wl.attr("strides"), wl.attr("padding"), wl.attr("dilation"), g
    if layout == "NHWC":
        conv = conv_ref_nchw(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), *args).transpose(0, 2, 3, 1)
    else:
        conv = conv_ref_nchw(x, w, *args)
    want = ref(lambda c: ACT[act](c + bias.astype("float64")), conv)
    for cand in cands:
        got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x, w, bias])
        assert_matches(got, want, rtol=1e-5, atol=4e-6 * max(C // g * K * K, 16), what=f"{cand.name} {act}")


#: candidates that transform whole input tiles (Winograd, FFT): a NaN or infinite input pixel
#: reaches every output of the tiles it lies in (``0 * nan``), not only its receptive field
TILE_TRANSFORMS = ("winograd", "fft")


@pytest.mark.parametrize("geom", CONVS[:3], ids=["3x3", "1x1", "depthwise"])
def test_conv2d_nan_input_pixel(cpu_target, geom):
    """A NaN and an infinite input pixel: every output PyTorch computes from them is NaN (or the
    infinity) in every candidate, never a number. Direct, im2col and pointwise candidates give
    exactly the reference's NaN/inf positions; tile transforms may turn more outputs of the same
    tile NaN (README, "NaN and Inf"), and their other outputs match."""
    N, C, H, W, O, K, g, layout = geom
    wl = conv_wl(N, C, H, W, O, K, pad=K // 2, groups=g, epilogue=("bias",), layout=layout)
    rng = np.random.default_rng(C * H + K)
    x = rng.uniform(-1, 1, wl.shapes[0]).astype("float32")
    w = rng.uniform(-1, 1, wl.shapes[1]).astype("float32")
    bias = rng.uniform(-1, 1, wl.shapes[2]).astype("float32")
    x[0, 0, 2, 3], x[0, C - 1, H - 2, W - 1] = np.nan, np.inf
    conv = conv_ref_nchw(x, w, wl.attr("strides"), wl.attr("padding"), wl.attr("dilation"), g)
    want = ref(lambda c: c + bias.astype("float64"), conv)
    tol = dict(rtol=1e-5, atol=4e-6 * max(C // g * K * K, 16))
    for cand in own_candidates(wl, cpu_target):
        got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x, w, bias])
        if not any(t in cand.name for t in TILE_TRANSFORMS):
            assert_matches(got, want, what=cand.name, **tol)
            continue
        special = ~np.isfinite(want)
        assert np.isnan(got[np.isnan(want)]).all(), f"{cand.name}: a NaN output became a number"
        assert (~np.isfinite(got[special])).all(), f"{cand.name}: an infinite output became a number"
        fine = np.isfinite(got)
        np.testing.assert_allclose(got[fine], want[fine], err_msg=cand.name, **tol)


@pytest.mark.parametrize("block", [0, 16], ids=["nchw", "nchw16c"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_nan_and_inf(cpu_target, kind, block):
    """A NaN in a window gives NaN; a max window of ``-inf`` (also one reaching into the padding)
    gives ``-inf``, +inf gives +inf. TVM's own max dropped NaN, and the padding was the largest
    finite negative float."""
    if block and lanes(cpu_target) != block:
        pytest.skip(f"NCHW{block}c needs {block}-float vectors")
    wl = _pool(kind, 32, 9, 11, 3, 2, 1, block=block)
    cands = own_candidates(wl, cpu_target)
    assert cands, "no pool2d candidate applies"
    x = np.random.default_rng(5).normal(0, 1, (1, 32, 9, 11)).astype("float32")
    x[0, 3, 4, 5] = NAN
    x[0, 20, :3, :3] = -INF
    x[0, 21, 6, 6] = INF
    xs = [block_nchw(x, block) if block else x]
    want = pool2d_ref(wl, xs)
    for cand in cands:
        got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
        assert_matches(got, want, rtol=1e-6, atol=1e-6, what=f"{cand.name} {kind}")


# -- softmax, layer_norm, reductions -------------------------------------------------------------

def special_rows(rows: int, n: int, seed: int) -> np.ndarray:
    """Rows: finite; one NaN; one +inf; one -inf; all -inf; all +inf; +inf and -inf; two +inf and a
    NaN at the end (the tail past whole vectors); finite again."""
    x = np.random.default_rng(seed).normal(0, 2, (rows, n)).astype("float32")
    assert rows >= 9
    x[1, n // 2] = NAN
    x[2, n // 3] = INF
    x[3, 0] = -INF
    x[4] = -INF
    x[5] = INF
    x[6, 1], x[6, n - 2] = INF, -INF
    x[7, 0], x[7, n // 2], x[7, n - 1] = INF, INF, NAN
    return x


#: shorter than a vector, one AVX2 vector + a tail, a ragged tail (padded reductions), whole vectors
ROW_LENGTHS = [7, 12, 37, 64]


def _row_candidates(op, wl, target):
    cands = [c for c in REGISTRY.for_op(op, "llvm") if not c.library]
    assert cands, f"no {op} candidates"
    return [c for c in cands if c.applies(wl, target)]


def softmax_ref(x):
    x = x.astype("float64")
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_softmax_candidates(cpu_target, n):
    rows = 9
    wl = Workload("softmax", [(rows, n)], ["float32"], "float32", attrs={"out_shape": (rows, n)})
    x = special_rows(rows, n, seed=n)
    want = softmax_ref(x)
    assert np.isnan(want[[1, 2, 4, 5, 6, 7]]).all() and np.isfinite(want[[0, 3, 8]]).all() and want[3, 0] == 0
    for cand in _row_candidates("softmax", wl, cpu_target):
        for cfg in {cand.default_config(wl, cpu_target), *cand.space(wl, cpu_target)[::4]}:
            got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
            assert_matches(got, want, rtol=1e-5, atol=1e-6, what=f"{cand.name} {cfg} n={n}")


def layer_norm_ref(x, g, b, eps):
    x = x.astype("float64")
    with np.errstate(all="ignore"):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("dropout", [None, 0.1])
def test_layer_norm_candidates(cpu_target, n, dropout):
    rows, eps = 9, 1e-5
    attrs = {"eps": eps, "center": True, "scale": True, "out_shape": (rows, n)}
    if dropout is not None:
        attrs["dropout"] = dropout
    wl = Workload("layer_norm", [(rows, n), (n,), (n,)], ["float32"] * 3, "float32", attrs=attrs)
    x = special_rows(rows, n, seed=n + 1)
    rng = np.random.default_rng(n)
    g, b = rng.uniform(0.5, 1.5, n).astype("float32"), rng.uniform(-1, 1, n).astype("float32")
    want = layer_norm_ref(x, g, b, eps)
    assert np.isnan(want[1:8]).all() and np.isfinite(want[[0, 8]]).all()
    cands = _row_candidates("layer_norm", wl, cpu_target)
    # .fused or .dropout, by the pair (the symbolic-rows kernel takes static rows too)
    assert len([c for c in cands if not c.dynamic]) == 1, [c.name for c in cands]
    for cand in cands:
        for cfg in {cand.default_config(wl, cpu_target), *cand.space(wl, cpu_target)[::2]}:
            got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x, g, b])
            assert_matches(got, want, rtol=1e-5, atol=1e-5, what=f"{cand.name} {cfg} n={n}")


NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
# (O, R, I): reduce.inner on short/ragged/whole-vector rows, reduce.split on long rows, reduce.outer
# (R = 26: its space ends with a split of the reduced axis across threads, chunks = 2)
REDUCE_SHAPES = [(9, 7, 1), (9, 37, 1), (9, 64, 1), (9, 997, 1), (9, 13, 5), (9, 37, 19), (9, 26, 7)]


def reduce_input(O, R, I, seed) -> np.ndarray:
    """``special_rows`` along the reduced axis for every kept inner element (shifted per column)."""
    x = np.empty((O, R, I), "float32")
    for i in range(I):
        x[:, :, i] = np.roll(special_rows(O, R, seed + i), i, axis=1)
    return x


@pytest.mark.parametrize("dims", REDUCE_SHAPES, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("kind", list(NP_REDUCE))
def test_reduce_candidates(cpu_target, dims, kind):
    wl = Workload("reduce", [dims], ["float32"], "float32", attrs={"kind": kind, "out_shape": (dims[0], dims[2])})
    x = reduce_input(*dims, seed=sum(dims))
    with np.errstate(all="ignore"):
        want = NP_REDUCE[kind](x.astype("float64"), axis=1).astype("float32")
    assert np.isnan(want[[1, 6, 7]]).all() or kind in ("max", "min")
    cands = _row_candidates("reduce", wl, cpu_target)
    assert cands
    for cand in cands:
        space = cand.space(wl, cpu_target)
        for cfg in {cand.default_config(wl, cpu_target), *space[:1], *space[-1:]}:
            got = CompiledCandidate(cand, wl, cfg, cpu_target).run([x])
            assert_matches(got, want, rtol=1e-5, atol=4e-6 * math.sqrt(dims[1]) * 4,
                           what=f"{cand.name} {kind} {cfg}")


@pytest.mark.parametrize("kind", ["max", "min"])
def test_reduce_max_min_follow_numpy(cpu_target, kind):
    """NaN anywhere -> NaN (np.max/np.min, torch.amax/amin); a row of -inf (max) or +inf (min)
    reduces to itself, not to the largest finite float."""
    wl = Workload("reduce", [(4, 37, 1)], ["float32"], "float32", attrs={"kind": kind, "out_shape": (4, 1)})
    x = np.random.default_rng(5).uniform(-1, 1, (4, 37, 1)).astype("float32")
    x[0, 0], x[1, 36], x[2] = NAN, NAN, -INF if kind == "max" else INF
    x[3, 5] = INF if kind == "max" else -INF
    cand = REGISTRY.get("reduce.inner")
    got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x])[:, 0]
    assert np.isnan(got[:2]).all()
    assert got[2] == (-INF if kind == "max" else INF) and got[3] == (INF if kind == "max" else -INF)


def test_relax_reductions_and_softmax_on_specials(cpu_target):
    """The Relax ops through ext.build (families, candidate selection) on the same rows."""
    x = special_rows(9, 37, seed=11)
    for name, body, want in [
        ("max", lambda v: relax.op.max(v, axis=[1]), ref(lambda v: v.max(1), x)),
        ("min", lambda v: relax.op.min(v, axis=[1]), ref(lambda v: v.min(1), x)),
        ("sum", lambda v: relax.op.sum(v, axis=[1]), ref(lambda v: v.sum(1), x)),
        ("softmax", lambda v: relax.op.nn.softmax(v, axis=-1), softmax_ref(x).astype("float32")),
    ]:
        got = run_relax(ext.build(_module(x.shape, body), cpu_target), x)
        assert_matches(got, want, rtol=1e-5, atol=2e-5, what=name)


def test_exact_specials_build_keeps_pytorchs_nan_positions(cpu_target):
    """``ext.build(..., exact_specials=True)``: no tile transform is picked (the report says
    why), and a NaN input pixel gives NaN exactly at PyTorch's outputs; the default build picks
    Winograd for this layer, which NaNs whole 4x4 output tiles."""
    torch = pytest.importorskip("torch")
    from ext.frontend import from_torch

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1).eval()
    x = torch.randn(1, 16, 32, 24)
    x[0, 1, 5, 7] = float("nan")
    with torch.no_grad():
        want = conv(x).numpy()
    mod = from_torch(conv, (x,))
    default = run_relax(ext.build(mod, cpu_target, cache=False, verbose=False), x.numpy())
    picked = [d.candidate.name for d in ext.last_report().decisions if d.candidate]
    exact = run_relax(ext.build(mod, cpu_target, cache=False, verbose=False, exact_specials=True), x.numpy())
    decisions = ext.last_report().decisions
    assert "conv2d.winograd" in picked and np.isnan(default).sum() > np.isnan(want).sum()
    assert not {"conv2d.winograd", "conv2d.fft"} & {d.candidate.name for d in decisions if d.candidate}
    assert any("exact_specials" in alt.reason for d in decisions for alt in d.alternatives)
    assert_matches(exact, want, rtol=1e-5, atol=1e-4, what="exact_specials build")
