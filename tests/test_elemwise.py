"""Element-wise chains: the vectorizable float32 math (exp, sigmoid, tanh, silu, gelu, gelu_tanh)
against float64 NumPy, fused chains built by ext (vectorized, parallel, no libm calls)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.testing import assert_close, run_relax

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - scipy ships with the test env, but keep a fallback
    _erf = np.vectorize(math.erf)

REF = {
    "exp": np.exp,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
}
OPS = {"exp": relax.op.exp, "sigmoid": relax.op.sigmoid, "tanh": relax.op.tanh, "silu": relax.op.nn.silu,
       "gelu": relax.op.nn.gelu, "gelu_tanh": relax.op.nn.gelu_tanh}
# exp: <= 2 ulp relative (7.5e-8 measured); erf (rational fit in float32): 4.9e-7 absolute, so gelu
# (x/2 * (1 + erf), cancelling for x < 0) is within 0.5 * 3.92 * sqrt(2) * 4.9e-7 = 1.4e-6 absolute
TOL = {"exp": dict(rtol=3e-7, atol=0), "sigmoid": dict(rtol=1e-6, atol=1e-7), "tanh": dict(rtol=1e-6, atol=1e-7),
       "silu": dict(rtol=1e-6, atol=1e-6), "gelu": dict(rtol=1e-6, atol=1.5e-6), "gelu_tanh": dict(rtol=1e-6, atol=1e-6)}


def _unary_module(op, shape):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(OPS[op](x)))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape", [(1,), (7, 13), (3, 1, 257)])
def test_unary_matches_numpy(cpu_target, op, shape):
    x = np.random.default_rng(len(shape)).uniform(-12, 12, shape).astype("float32")
    x.flat[0] = 0.0
    got = run_relax(ext.build(_unary_module(op, shape), cpu_target), x)
    assert_close(got, REF[op](x.astype("float64")), **TOL[op], what=op)


def test_exp_range_edges(cpu_target):
    x = np.array([-200, -104, -87.5, -20, -1e-8, 0, 1e-8, 1, 50, 88.5, 88.8, 100, 1e4], dtype="float32")
    got = run_relax(ext.build(_unary_module("exp", x.shape), cpu_target), x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype("float64")).astype("float32")  # inf beyond float32's range
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want) & (want > 1.2e-38)  # below: denormals, flushed or not
    assert_close(got[fin], want[fin].astype("float64"), rtol=3e-7, atol=0)
    assert (got[x < -104] == 0).all()


def _chain_module(shape):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    b = relax.Var("b", relax.TensorType(shape[-1:], "float32"))
    with bb.function("main", [x, b]):
        with bb.dataflow():
            y = relax.op.nn.gelu(relax.op.add(relax.op.multiply(x, relax.const(0.5)), b))
            y = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.subtract(y, relax.const(0.1)))))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("shape", [(128, 3072), (5, 33)])
def test_fused_chain_is_one_vectorized_parallel_kernel(cpu_target, shape):
    mod = _chain_module(shape)
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(mod)
    kernels = {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert len(kernels) == 1, list(kernels)  # multiply, add, gelu, subtract, relu fused
    text = next(iter(kernels.values())).script()
    assert "T.vectorized" in text
    if shape[0] * shape[1] >= 16384:
        assert "T.parallel" in text
    ex = ext.build(mod, cpu_target)
    rng = np.random.default_rng(1)
    x, b = rng.normal(size=shape).astype("float32"), rng.normal(size=shape[-1:]).astype("float32")
    want = np.maximum(REF["gelu"](x.astype("float64") * 0.5 + b) - 0.1, 0)
    assert_close(run_relax(ex, x, b), want, rtol=1e-6, atol=1e-6)
    asm = ex.mod.imports[0].inspect_source("asm") if ex.mod.imports else ex.mod.inspect_source("asm")
    assert "erff" not in asm and "expf" not in asm  # no scalar libm calls left


@pytest.mark.parametrize("divide", [True, False], ids=["divide", "newton"])
@pytest.mark.parametrize("op", ["sigmoid", "tanh", "silu", "gelu", "gelu_tanh"])
def test_either_reciprocal_matches_numpy_and_keeps_specials(cpu_target, monkeypatch, op, divide):
    """The reciprocal is a divide on 256-bit CPUs and Newton steps on AVX-512 (``elemwise.reciprocal``):
    both forms meet the same tolerance, NaN stays NaN and +-inf give PyTorch's limits."""
    from ext.topi_kernels import elemwise

    monkeypatch.setattr(elemwise, "divides_fast", lambda target=None: divide)
    x = np.random.default_rng(3).uniform(-12, 12, (5, 41)).astype("float32")
    x.flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -90.0, 90.0]
    got = run_relax(ext.build(_unary_module(op, x.shape), cpu_target), x)
    with np.errstate(all="ignore"):
        want = REF[op](x.astype("float64"))
    assert np.array_equal(np.isnan(got), np.isnan(want)), (x.flat[:6], got.flat[:6])
    fin = ~np.isnan(want)
    assert_close(got[fin], want[fin], **TOL[op], what=f"{op} ({'divide' if divide else 'newton'})")


def test_reciprocal_form_follows_the_target():
    from ext.topi_kernels.elemwise import divides_fast

    assert divides_fast(ext.target.cpu("haswell"))
    assert divides_fast(ext.target.cpu("skylake-avx512"))  # since stop 51 (fused chains built for minutes)
    assert not divides_fast(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    assert not divides_fast(None)  # no target being built for: the Newton form
