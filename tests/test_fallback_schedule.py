"""The CPU fallback schedule: correct, parallel and vectorized where it can be, never a failed build."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir, te
from tvm.script import ir as I, relax as R

import ext
from ext.testing import assert_close, run_relax
from ext.tir_schedules.common import MAX_EXPANDED_NODES, MAX_SELECT_DEPTH, expanded_size, select_depth
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


def test_symbolic_row_stays_its_own_loop():
    """A run-time row length (a concat of two maps over a symbolic image size): the rows above it
    are the parallel loop, the row a plain loop with affine indices (no // or % by a run-time
    extent per element), and the copy is right at odd sizes."""
    from tvm import tirx

    n, w = tirx.Var("n", "int64"), tirx.Var("w", "int64")
    A = te.placeholder((n, 3, 5, w), name="A")
    B = te.placeholder((n, 2, 5, w), name="B")
    C = te.compute((n, 5, 5, w), lambda i, c, h, x: tirx.if_then_else(c < 3, A[i, c, h, x], B[i, c - 3, h, x]),
                   name="C")
    func = fallback.schedule(te.create_prim_func([A, B, C]), lanes=16)
    text = func.script()
    assert "T.parallel" in text and "// w" not in text and "% w" not in text, text
    ex = tvm.compile(func.with_attr("global_symbol", "f"), target=ext.target.cpu())
    for size in (1, 17, 40):
        a = np.random.rand(2, 3, 5, size).astype("float32")
        b = np.random.rand(2, 2, 5, size).astype("float32")
        c = tvm.runtime.empty((2, 5, 5, size), "float32")
        ex["f"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
        assert_close(c.numpy(), np.concatenate([a, b], 1), rtol=0, atol=0)


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


def _chain(step, k: int):
    """``main(x)`` on a (7, 13) float32 ``x``: ``y = step(bb, y)`` k times from ``y = x``."""
    x = relax.Var("x", relax.TensorType([7, 13], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(k):
                y = step(bb, y)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _tanh_step(bb, y):
    """gelu_new's inner shape: tanh, then y + c * y**3."""
    y = bb.emit(relax.op.tanh(y))
    return bb.emit(relax.op.add(y, relax.op.multiply(relax.const(0.044715, "float32"),
                                                     relax.op.power(y, relax.const(3.0, "float32")))))


def _tanh_chain(k: int):
    return _chain(_tanh_step, k)


def test_fused_chain_does_not_copy_expressions_per_read():
    """Nested polynomial tanh: inlining every producer copied its expression once per read
    (5x per level: 4 levels took minutes to build); the fallback keeps such producers."""
    target = ext.target.cpu()
    sizes = []
    for k in (2, 4):  # (without the fix the 4-chain prints ~600x larger; building it took minutes)
        with target:
            lowered = ext.pipeline(target)(_tanh_chain(k))
        sizes.append(sum(len(f.script()) for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)))
    assert sizes[1] < 3 * sizes[0], sizes  # linear in k, not exponential
    ex = ext.build(_tanh_chain(6), target, cache=False, verbose=False)
    xv = np.random.default_rng(0).standard_normal((7, 13)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    ref = xv.astype("float64")
    for _ in range(6):
        ref = np.tanh(ref)
        ref = ref + 0.044715 * ref ** 3
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _newton_step(bb, y):
    """A Newton step for the cube root of 2, ``y - (y^3 - 2) / (3 y^2)``: it reads ``y`` four times."""
    cube = relax.op.multiply(relax.op.multiply(y, y), y)
    slope = relax.op.multiply(relax.const(3.0, "float32"), relax.op.multiply(y, y))
    return bb.emit(relax.op.subtract(y, relax.op.divide(relax.op.subtract(cube, relax.const(2.0, "float32")), slope)))


def _newton_chain(k: int):
    return _chain(_newton_step, k)


def test_cuda_fused_chain_does_not_copy_expressions_per_read():
    """The same guard on CUDA (``GuardedElementwise`` before dlight's rules, whose Fallback
    inlines every producer): erfinv's three Newton steps, each reading the last ~50 times, took
    5 minutes to build. Code generation only (no GPU needed)."""
    target = ext.target.cuda(arch="sm_90")
    sizes = []
    for k in (2, 5):  # linear in k: 4.5x here; inlined whole, the 5-step chain printed 4^3 = 64x more
        with target:
            lowered = ext.pipeline(target)(_newton_chain(k))
        sizes.append(sum(len(f.script()) for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)))
    assert sizes[1] < 8 * sizes[0], sizes
    ext.build(_newton_chain(5), target, cache=False, verbose=False)


def test_nested_sigmoids_stay_below_the_expanded_size(cpu_target):
    """Eight nested sigmoids (ext's let-bound exp): LLVM codegen's simplifier expands every let,
    and the fused kernel took 14 s to build (three: 7 s); producers that would pass
    ``MAX_EXPANDED_NODES`` once inlined stay blocks of their own."""
    mod = _chain(lambda bb, y: bb.emit(relax.op.sigmoid(y)), 8)
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(mod)
    for _, f in lowered.functions_items():
        if isinstance(f, tvm.tirx.PrimFunc):
            sch = s_tir.Schedule(f)
            for block in sch.get_child_blocks(sch.get_sblock("root")):
                assert expanded_size(sch.get(block))[0] < MAX_EXPANDED_NODES
    ex = ext.build(mod, cpu_target, cache=False, verbose=False)
    xv = np.random.default_rng(0).standard_normal((7, 13)).astype("float32") * 4
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    ref = xv.astype("float64")
    for _ in range(8):
        ref = 1 / (1 + np.exp(-ref))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


EYE = np.eye(17, dtype="float32")


def _select_chain(op, k: int, shape=(3, 5, 17), fresh: bool = False):
    """k times ``op(y + 0.25)``; ``fresh``: y starts as a matmul's result (the chain then runs
    in place over it, UseInplaceCalls' path)."""
    x = relax.Var("x", relax.TensorType(list(shape), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(EYE))) if fresh else x
            for _ in range(k):
                y = bb.emit(op(relax.op.add(y, relax.const(0.25, "float32"))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_select_depth_counts_nesting_through_lets():
    f32 = "float32"
    x, v = tvm.tirx.Var("x", f32), tvm.tirx.Var("v", f32)
    zero = tvm.tirx.const(0.0, f32)
    inner = tvm.tirx.Select(x < zero, zero, x)
    assert select_depth(x + zero) == 0
    assert select_depth(inner) == 1
    # the let's variable carries its value's select into the body's condition
    assert select_depth(tvm.tirx.Let(v, inner, tvm.tirx.Select(v < zero, zero, v))) == 2


@pytest.mark.parametrize("name,op,k,ref,fresh", [
    ("relu", relax.op.nn.relu, 16, lambda y: np.maximum(y, 0), False),
    ("relu", relax.op.nn.relu, 12, lambda y: np.maximum(y, 0), True),
    ("sigmoid", relax.op.sigmoid, 8, lambda y: 1 / (1 + np.exp(-y)), False),
])
def test_long_select_chain_builds_quickly(name, op, k, ref, fresh):
    """Each relu / exp is a select on a let-bound value; fused and inlined, k of them nest k
    selects, and LLVM codegen (which re-simplifies every select's condition with the lets
    substituted) took 7 s for 8 relus and minutes for 10. The fallback keeps every
    MAX_SELECT_DEPTH-th producer as a block of its own, so no stored value nests more."""
    target = ext.target.cpu()
    with target:
        lowered = ext.pipeline(target)(_select_chain(op, k, fresh=fresh))
    depths = []
    for _, f in lowered.functions_items():
        if isinstance(f, tvm.tirx.PrimFunc):
            sch = s_tir.Schedule(f)
            for b in sch.get_child_blocks(sch.get_sblock("root")):
                body = sch.get(b).body
                if isinstance(body, tvm.tirx.BufferStore):
                    depths.append(select_depth(body.value))
    assert depths and max(depths) <= MAX_SELECT_DEPTH, depths
    ex = ext.build(_select_chain(op, k, fresh=fresh), target, cache=False, verbose=False)
    xv = np.random.default_rng(1).standard_normal((3, 5, 17)).astype("float32")
    xv[0, 0, :3] = [np.nan, np.inf, -np.inf]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    want = xv.astype("float64")
    if fresh:
        with np.errstate(invalid="ignore"):
            want = want @ EYE  # NaN and inf spread along their row (inf * 0), in both
    for _ in range(k):
        want = ref(want + 0.25)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[0, 0, 0])
