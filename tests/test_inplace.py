"""UseInplaceCalls: fused element-wise kernels write over an input that dies at the call; the memory
plan of the built module has fewer/smaller storages, results are unchanged, and aliasing is respected."""
from __future__ import annotations

import re
import sys

import numpy as np
import tvm
from tvm import relax, te

import ext
import ext.pipeline  # noqa: F401 - the module (``ext.pipeline`` the attribute is the function)
from ext.relax_passes.inplace import _is_reshape, inplace_kernel
from ext.testing import assert_close, run_relax

ext_pipeline = sys.modules["ext.pipeline"]

SHAPE = (512, 1024)  # 2 MiB per tensor


def _module(build):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    y = relax.Var("y", relax.TensorType(SHAPE, "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = build(bb, x, y)
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def chain(bb, x, y):
    """softmax (a kernel of its own), then an element-wise chain, then a row sum."""
    a = bb.emit(relax.op.nn.softmax(x))
    b = bb.emit(relax.op.nn.silu(relax.op.add(relax.op.multiply(a, relax.const(2.0)), y)))
    return bb.emit(relax.op.sum(relax.op.sigmoid(b), axis=[1]))


def aliasing(bb, x, y):
    """b overwrites a; c = softmax(y) must not be placed in a's storage while b is still live."""
    a = bb.emit(relax.op.nn.softmax(x))
    b = bb.emit(relax.op.tanh(relax.op.add(a, y)))
    c = bb.emit(relax.op.nn.softmax(y))
    return bb.emit(relax.Tuple([relax.op.add(b, c), b]))


def keeps_live_input(bb, x, y):
    """a is used after the element-wise call, by a kernel of its own: no in-place over a."""
    a = bb.emit(relax.op.nn.softmax(x))
    b = bb.emit(relax.op.exp(a))
    c = bb.emit(relax.op.nn.softmax(a))
    return bb.emit(relax.op.add(b, c))


def _lowered_main(mod, target, inplace: bool, monkeypatch) -> str:
    if not inplace:
        monkeypatch.setattr(ext_pipeline, "UseInplaceCalls", lambda: tvm.transform.Sequential([]))
    with target:
        text = ext.pipeline(target)(mod)["main"].script()
    monkeypatch.undo()
    return text


def plan(text: str) -> tuple[int, int]:
    """(number of alloc_storage calls, total planned bytes) in the lowered VM function."""
    sizes = [int(n) for n in re.findall(r"R\.vm\.alloc_storage\(R\.shape\(\[(\d+)\]\)", text)]
    return len(sizes), sum(sizes)


def _build(mod, target, inplace, monkeypatch):
    if not inplace:
        monkeypatch.setattr(ext_pipeline, "UseInplaceCalls", lambda: tvm.transform.Sequential([]))
    ex = ext.build(mod, target)
    monkeypatch.undo()
    return ex


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.normal(size=SHAPE).astype("float32") for _ in range(2)]


def test_chain_allocates_less_with_inplace(cpu_target, monkeypatch):
    mod = _module(chain)
    with_ip = _lowered_main(mod, cpu_target, True, monkeypatch)
    without = _lowered_main(mod, cpu_target, False, monkeypatch)
    assert "inplace" in with_ip and "inplace" not in without
    n_with, bytes_with = plan(with_ip)
    n_without, bytes_without = plan(without)
    nbytes = int(np.prod(SHAPE)) * 4
    assert n_with < n_without and bytes_without - bytes_with >= nbytes, (plan(with_ip), plan(without))
    xs = _inputs()
    got = run_relax(_build(mod, cpu_target, True, monkeypatch), *xs)
    want = run_relax(_build(mod, cpu_target, False, monkeypatch), *xs)
    assert_close(got, want, rtol=0, atol=0)  # same kernels, same arithmetic: bit-identical


def test_aliasing_is_respected(cpu_target, monkeypatch):
    mod = _module(aliasing)
    assert "inplace" in _lowered_main(mod, cpu_target, True, monkeypatch)
    xs = _inputs()
    got = run_relax(ext.build(mod, cpu_target), *xs)
    want = run_relax(relax.build(mod, cpu_target), *xs)  # stock, no in-place
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_live_input_is_not_overwritten(cpu_target, monkeypatch):
    mod = _module(keeps_live_input)
    text = _lowered_main(mod, cpu_target, True, monkeypatch)
    assert "ext_exp_inplace" not in text and "fused_ext_exp_inplace" not in text
    xs = _inputs()
    assert_close(run_relax(ext.build(mod, cpu_target), *xs), run_relax(relax.build(mod, cpu_target), *xs),
                 rtol=1e-5, atol=1e-6)


def test_kernel_analysis_rejects_shifted_reads():
    A = te.placeholder((8, 8), name="A")
    ok = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    shifted = te.compute((8, 8), lambda i, j: A[i, (j + 1) % 8], name="B")
    transposed = te.compute((8, 8), lambda i, j: A[j, i], name="B")
    assert inplace_kernel(te.create_prim_func([A, ok]), 0) is not None
    assert inplace_kernel(te.create_prim_func([A, shifted]), 0) is None
    assert inplace_kernel(te.create_prim_func([A, transposed]), 0) is None


def test_kernel_of_many_blocks_is_left_as_it_is():
    """Inlining n blocks costs O(n^2): Mamba's unrolled scan fused into ~60-block kernels and the
    analysis took 41 s of a 45 s build. Past MAX_INPLACE_BLOCKS the kernel keeps its own output;
    a chain of the same kind below it still runs in place."""
    from ext.relax_passes.inplace import MAX_INPLACE_BLOCKS

    def chain(n):
        A = te.placeholder((8, 8), name="A")
        def step(t, k):
            return te.compute((8, 8), lambda i, j: t[i, j] * 2.0 + 1.0, name=f"T{k}")

        t = A
        for k in range(n):
            t = step(t, k)
        return te.create_prim_func([A, t])

    assert inplace_kernel(chain(MAX_INPLACE_BLOCKS), 0) is not None
    assert inplace_kernel(chain(MAX_INPLACE_BLOCKS + 1), 0) is None


def test_inplace_over_second_input_when_both_inputs_share_a_name():
    """Found by the fuzzer: relu(x) is used twice, so add(v1, softmax(relu(v1))) writes over its
    second input; both fused inputs are named ``lv`` (printed lv, lv_1), and the kernel aliased
    the first one while the call returned the second (1.0 instead of 1.27)."""
    import numpy as np
    import tvm
    from tvm import relax

    import ext

    x = relax.Var("x0", relax.TensorType([1, 1], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v1 = bb.emit(relax.op.nn.relu(x))
            v2 = bb.emit(relax.op.nn.relu(v1))
            v3 = bb.emit(relax.op.nn.softmax(v2, axis=-1))
            out = bb.emit_output(relax.op.add(v1, v3))
        bb.emit_func_output(out)
    ex = ext.build(bb.get(), ext.target.cpu(), cache=False, verbose=False)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.array([[0.27]], "float32"))).numpy()
    np.testing.assert_allclose(got, [[1.27]], rtol=1e-6)


def scores_softmax(bb, x, y):
    """Attention-like: a fresh (8, 64, 1024) tensor seen through a reshape dies at a softmax."""
    s = bb.emit(relax.op.reshape(relax.op.multiply(relax.op.matmul(x, relax.op.permute_dims(y)),
                                                   relax.const(0.03)), (8, 64, 512)))
    p = bb.emit(relax.op.nn.softmax(s, axis=-1))
    return bb.emit(relax.op.add(p, relax.const(1.0)))


def test_row_kernel_runs_in_place_over_a_dying_view(cpu_target, monkeypatch):
    """softmax.rowwise declares its rows safe to overwrite (ROW_INPLACE); its input, a reshape
    of a fresh matmul output used nowhere else, is overwritten: one buffer fewer, same values."""
    mod = _module(scores_softmax)
    with_ip = _lowered_main(mod, cpu_target, True, monkeypatch)
    without = _lowered_main(mod, cpu_target, False, monkeypatch)
    assert re.search(r"softmax_\w*inplace", with_ip), with_ip
    assert plan(with_ip)[1] < plan(without)[1], (plan(with_ip), plan(without))
    xs = _inputs()
    s = (xs[0].astype(np.float64) @ xs[1].T.astype(np.float64) * 0.03).reshape(8, 64, 512)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    assert_close(run_relax(ext.build(mod, cpu_target), *xs), e / e.sum(axis=-1, keepdims=True) + 1.0,
                 rtol=1e-5, atol=1e-6)


def leading_row(bb, x, _y):
    """softmax, then its first row through reshape -> split -> reshape (one fused copy kernel)."""
    a = bb.emit(relax.op.nn.softmax(x))
    r = bb.emit(relax.op.reshape(a, (1, *SHAPE)))
    first = bb.emit(relax.TupleGetItem(relax.op.split(r, [1], axis=1), 0))
    return bb.emit(relax.op.nn.softmax(relax.op.reshape(first, (1, SHAPE[1]))))


def test_leading_slice_is_not_taken_for_a_reshape(cpu_target):
    """Found on CvT's class token: a kernel copying the first row has a reshape's index pattern
    (stock ``has_reshape_pattern`` says yes) but fewer elements; made a view, the build failed."""
    A = te.placeholder((4, 5), name="A")
    row = te.create_prim_func([A, te.compute((5,), lambda i: A[0, i], name="B")])
    flat = te.create_prim_func([A, te.compute((20,), lambda i: A[i // 5, i % 5], name="B")])
    assert relax.analysis.has_reshape_pattern(row)  # the stock check this pass must not trust alone
    assert not _is_reshape(row) and _is_reshape(flat)
    n = tvm.tirx.Var("n", "int64")  # symbolic sizes: the kernel also takes n, a scalar parameter
    S = te.placeholder((n, 5), name="A")
    assert _is_reshape(te.create_prim_func([S, te.compute((n * 5,), lambda i: S[i // 5, i % 5], name="B"), n]))
    assert not _is_reshape(te.create_prim_func([S, te.compute((5,), lambda i: S[0, i], name="B"), n]))
    xs = _inputs()
    e = np.exp(xs[0] - xs[0].max(axis=1, keepdims=True))
    first = (e / e.sum(axis=1, keepdims=True))[:1]
    want = np.exp(first - first.max()) / np.exp(first - first.max()).sum()
    assert_close(run_relax(ext.build(_module(leading_row), cpu_target), *xs), want, rtol=1e-5, atol=1e-7)
