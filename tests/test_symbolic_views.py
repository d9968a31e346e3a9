"""Reshapes (squeeze, expand_dims, flatten) of run-time-sized tensors run as views
(``ext.relax_passes.symbolic_views``): no copy kernel, the same numbers as NumPy at
several sizes, and memory planning keeps a view's storage alive while it is used."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import ext
from ext.pipeline import pipeline
from ext.testing import assert_close

F32 = "float32"


def _views_net():
    """``x: (n, 6, h)``: every view op on symbolic shapes, a view that outlives its input's
    last use (``z`` beside a later kernel, the storage planner must not hand ``y``'s buffer
    on), and a view of a parameter as a function output."""
    n, h = tirx.Var("n", "int64"), tirx.Var("h", "int64")
    x = relax.Var("x", relax.TensorType([n, 6, h], F32))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            z = bb.emit(relax.op.reshape(y, [n, 2, 3, h]))             # view of y, used below
            e = bb.emit(relax.op.exp(relax.op.reshape(x, [n, 2, 3, h])))
            s = bb.emit(relax.op.add(z, e))
            t = bb.emit(relax.op.expand_dims(relax.op.flatten(s), 0))  # (1, n*6*h)
            q = bb.emit(relax.op.squeeze(relax.op.reshape(x, [n, 1, 6, h]), [1]))
            out = bb.emit_output(relax.Tuple([t, q, relax.op.reshape(x, [n * 6, h])]))
        bb.emit_func_output(out)
    return bb.get()


def _reference(x: np.ndarray):
    n, _, h = x.shape
    s = np.maximum(x, 0).reshape(n, 2, 3, h) + np.exp(x.astype("float64")).reshape(n, 2, 3, h)
    return [s.reshape(1, -1), x, x.reshape(n * 6, h)]


def test_symbolic_view_ops_build_without_copy_kernels(cpu_target):
    with cpu_target:
        lowered = pipeline(cpu_target)(_views_net())
    kernels = [gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)]
    copies = [k for k in kernels if any(op in k for op in ("reshape", "squeeze", "expand_dims", "flatten"))]
    assert not copies, kernels
    assert "vm.builtin.reshape" in lowered["main"].script()


@pytest.mark.parametrize("n,h", [(1, 1), (2, 7), (3, 13)])
def test_symbolic_views_match_numpy(cpu_target, n, h):
    vm = relax.VirtualMachine(ext.build(_views_net(), cpu_target, cache=False, verbose=False), tvm.cpu())
    x = np.random.default_rng(h).standard_normal((n, 6, h)).astype(F32)
    got = vm["main"](tvm.runtime.tensor(x))
    for i, want in enumerate(_reference(x)):
        assert_close(got[i].numpy(), want, rtol=1e-5, atol=1e-6, what=f"output {i} at n={n} h={h}")


def test_static_reshapes_still_fuse(cpu_target):
    """A static reshape between two element-wise ops stays inside one fused kernel."""
    x = relax.Var("x", relax.TensorType([4, 6], F32))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.exp(relax.op.reshape(relax.op.nn.relu(x), [2, 12])))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    with cpu_target:
        lowered = pipeline(cpu_target)(bb.get())
    assert "vm.builtin.reshape" not in lowered["main"].script()
    kernels = [gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)]
    assert len(kernels) == 1, kernels
