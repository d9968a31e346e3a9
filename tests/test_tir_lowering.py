"""``ext.tir_lowering``: kernel buffers on the stack instead of the workspace pool, within a
size limit and a per-function budget, hoisted out of loops, results unchanged."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

import ext
from ext import tir_lowering
from ext.target import compile_tir


def _row_sums(rows: int, cols: int):
    """``out[i] = 2 * sum_k A[i, k]`` with the row sums in a task-local buffer of ``rows / 4`` floats."""
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((rows,), lambda i: B[i] * 2.0, name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, C]))
    (i,) = sch.get_loops(sch.get_sblock("C"))
    io, _ = sch.split(i, [4, None])
    sch.parallel(io)
    sch.compute_at(sch.get_sblock("B"), io)
    sch.set_scope(sch.get_sblock("B"), 0, "local")
    return sch.mod["main"]


def _llvm_ir(lib) -> str:
    return lib.mod.inspect_source("ll")


def _run(lib, rows, cols):
    a = np.random.default_rng(0).standard_normal((rows, cols)).astype("float32")
    out = tvm.runtime.tensor(np.zeros(rows, "float32"))
    lib["main"](tvm.runtime.tensor(a), out)
    np.testing.assert_allclose(out.numpy(), 2 * a.sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [64, 4 * 997])  # a 64 B and a 3988 B task buffer (prime row count)
def test_task_buffers_leave_the_workspace_pool(rows):
    tgt = ext.target.cpu()
    stock = tvm.compile(_row_sums(rows, 37), target=tgt)
    ours = compile_tir(_row_sums(rows, 37), tgt)
    assert "TVMBackendAllocWorkspace" in _llvm_ir(stock), "the stock lowering pools even small task buffers"
    assert "TVMBackendAllocWorkspace" not in _llvm_ir(ours)
    _run(stock, rows, 37)
    _run(ours, rows, 37)


@pytest.mark.parametrize("setting", ["LIMIT", "BUDGET"])
def test_limit_and_budget(monkeypatch, setting):
    tgt = ext.target.cpu()
    func = _row_sums(4 * 1000, 8)  # a 4000-byte buffer per task
    monkeypatch.setattr(tir_lowering, setting, 4000)
    assert "TVMBackendAllocWorkspace" not in _llvm_ir(compile_tir(func, tgt))
    monkeypatch.setattr(tir_lowering, setting, 3999)  # above the limit, or past the function's budget
    lib = compile_tir(func, tgt)
    assert "TVMBackendAllocWorkspace" in _llvm_ir(lib)
    _run(lib, 4000, 8)


def test_a_buffer_inside_a_long_loop_is_allocated_once():
    """4 KB inside a 3000-iteration serial loop: an alloca per iteration would need 12 MB of
    stack (8 MB is the limit) and crash; the backend hoists it into the entry frame (run in a
    child process)."""
    code = textwrap.dedent("""
        import numpy as np, tvm
        from tvm import s_tir, te
        import ext
        from ext.target import compile_tir
        n, w = 3000, 1000
        A = te.placeholder((w,), name="A")
        B = te.compute((n, w), lambda i, j: A[j] + 1.0, name="B")
        C = te.compute((n,), lambda i: B[i, 0] + B[i, w - 1], name="C")
        sch = s_tir.Schedule(te.create_prim_func([A, C]))
        (i,) = sch.get_loops(sch.get_sblock("C"))
        sch.compute_at(sch.get_sblock("B"), i)
        sch.set_scope(sch.get_sblock("B"), 0, "local")
        lib = compile_tir(sch.mod["main"], ext.target.cpu())
        assert "TVMBackendAllocWorkspace" not in lib.mod.inspect_source("ll")
        a = np.ones(w, "float32")
        out = tvm.runtime.tensor(np.zeros(n, "float32"))
        lib["main"](tvm.runtime.tensor(a), out)
        assert (out.numpy() == 4.0).all()
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


def test_ext_build_lowers_with_it():
    """``ext.build`` compiles with the llvm row's pipeline: a 1x1 conv's accumulator tiles leave the pool."""
    torch = pytest.importorskip("torch")
    from tvm import relax

    from ext.frontend import from_torch
    from ext.pipeline import pipeline

    model = torch.nn.Sequential(torch.nn.Conv2d(16, 96, 1), torch.nn.ReLU6()).eval()
    x = torch.randn(1, 16, 28, 28)
    mod = from_torch(model, (x,))
    tgt = ext.target.cpu()
    ex = ext.build(mod, tgt, cache=False, verbose=False)
    stock = relax.build(mod, tgt, relax_pipeline=pipeline(tgt), tir_pipeline="default")

    def pooled(executable):
        return any("TVMBackendAllocWorkspace" in m.inspect_source("ll") for m in executable.mod.imports)

    assert pooled(stock) and not pooled(ex)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_zero_size_buffer_is_left_to_tvm():
    """An empty intermediate (Phi-3 slices a zero-width tensor and concatenates it) builds: TVM's
    backend rejects a zero-size stack allocation, so such a buffer is not marked."""
    X = te.placeholder((4, 3), name="X")
    E = te.placeholder((4, 0), name="E")
    B = te.compute((4, 0), lambda i, j: E[i, j] + 1.0, name="B")
    C = te.compute((4, 3), lambda i, j: tvm.tirx.if_then_else(j < 3, X[i, j], B[i, j - 3]), name="C")
    lib = compile_tir(te.create_prim_func([X, E, C]), ext.target.cpu())
    x = np.arange(12, dtype="float32").reshape(4, 3)
    out = tvm.runtime.tensor(np.zeros((4, 3), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros((4, 0), "float32")), out)
    np.testing.assert_array_equal(out.numpy(), x)
