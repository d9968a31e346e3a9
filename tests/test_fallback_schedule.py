"""The CPU fallback schedule: correct, parallel and vectorized where it can be, never a failed build."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te
from tvm.script import ir as I, relax as R

import ext
from ext.testing import assert_close, run_relax
from ext.tir_schedules.cpu import fallback


def test_elementwise_kernel_becomes_parallel_and_vectorized():
    A = te.placeholder((64, 512), name="A")
    B = te.compute((64, 512), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    func = fallback.schedule(te.create_prim_func([A, B]), lanes=16)
    text = func.script()
    assert "T.parallel" in text and "T.vectorized" in text
    assert func.attrs["tirx.is_scheduled"]


def test_small_or_odd_kernels_stay_correct():
    A = te.placeholder((3, 7), name="A")
    B = te.compute((3, 7), lambda i, j: A[i, j] + 1.0, name="B")
    func = fallback.schedule(te.create_prim_func([A, B]), lanes=16)
    ex = tvm.compile(func.with_attr("global_symbol", "f"), target=ext.target.cpu())
    a = np.random.rand(3, 7).astype("float32")
    b = tvm.runtime.empty((3, 7), "float32")
    ex["f"](tvm.runtime.tensor(a), b)
    assert_close(b.numpy(), a + 1, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(1, 1), (5, 33), (64, 1000)])
def test_model_without_candidates_matches_stock(cpu_target, shape):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(shape, "float32")):
            with R.dataflow():
                y = R.nn.softmax(R.multiply(R.add(x, R.const(1.0)), R.const(0.5)), axis=-1)
                z = R.sum(R.tanh(y), axis=0)
                R.output(z)
            return z

    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    got = run_relax(ext.build(Mod, cpu_target), x)
    ref = run_relax(relax.build(Mod, cpu_target), x)
    assert_close(got, ref, rtol=1e-5, atol=1e-6)
