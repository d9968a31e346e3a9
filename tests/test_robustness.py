"""No model the frontend imports may crash ``ext.build``.

Covers the graphs that used to crash fusion or lowering (an intermediate used
outside its group, a residual that depends on the anchor, GPT-2's gelu_new),
the library-dispatched ops (sort, topk, cumsum), the last line of defence in
``LowerToCandidates`` (an exception in one composite becomes a ``failed`` row
and stock lowering) and the ``stock`` report rows for ops no ext kernel took.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.relax_passes import FuseEpilogues
from ext.relax_passes import fuse_epilogue
from ext.relax_passes.families import FAMILIES
from ext.testing import assert_close, run_relax

import torch

from ext.frontend import from_torch  # noqa: E402

# float32 kernels sum in another order than PyTorch: 1e-4 of the largest output magnitude
REL = 1e-4


def assert_matches(got, ref, what: str):
    scale = max(float(np.abs(ref).max()), 1e-30)
    assert_close(got, ref, rtol=REL, atol=REL * scale, what=what)


def check_torch(model: torch.nn.Module, x: torch.Tensor, what: str):
    model.eval()
    with torch.no_grad():
        ref = model(x).numpy()
    got = run_relax(ext.build(from_torch(model, (x,)), ext.target.cpu()), x.numpy())
    assert_matches(got, ref, what)
    return ext.last_report()


class Residual(torch.nn.Module):
    """``y = conv_a(x); y + conv_b(y)``: the residual operand depends on conv_a itself."""

    def __init__(self, bias: bool):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 3, 3, padding=1, bias=bias)
        self.b = torch.nn.Conv2d(3, 3, 3, padding=1, bias=bias)

    def forward(self, x):
        y = self.a(x)
        return y + self.b(y)


class GeluNew(torch.nn.Module):
    """GPT-2's gelu_new core: the linear's output is used by the pow and by the add."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(13, 13)

    def forward(self, x):
        y = self.fc(x)
        return y + 0.044715 * torch.pow(y, 3)


def test_conv_silu_as_x_times_sigmoid():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.SiLU())
    rep = check_torch(model, torch.randn(1, 3, 7, 5), "conv2d + silu")
    (conv,) = rep.find("conv2d")
    assert conv.workload.activation == "silu"  # y * sigmoid(y) is matched whole, the multiply included


@pytest.mark.parametrize("bias", [True, False])
def test_residual_that_depends_on_the_anchor(bias):
    torch.manual_seed(1)
    rep = check_torch(Residual(bias), torch.randn(1, 3, 7, 5), f"residual conv, bias={bias}")
    # conv_a cannot take the add (its residual would be its own result); conv_b takes it, y its residual
    epilogues = sorted(d.workload.epilogue for d in rep.find("conv2d"))
    assert epilogues == ([("bias",), ("bias", "residual")] if bias else [(), ("residual",)])


def test_gelu_new_linear():
    torch.manual_seed(2)
    check_torch(GeluNew(), torch.randn(5, 13), "linear + gelu_new core")


def test_residual_dependency_is_rejected_without_the_leak_check(monkeypatch):
    """The dependency check on its own keeps FuseOpsByPattern from a cyclic group."""
    torch.manual_seed(3)
    mod = from_torch(Residual(bias=False).eval(), (torch.randn(1, 3, 7, 5),))
    monkeypatch.setattr(fuse_epilogue, "_leaks", lambda ctx: False)
    after = FuseEpilogues()(mod)
    names = {str(f.attrs["Composite"]) for _, f in after.functions_items() if f.attrs and "Composite" in f.attrs}
    # conv_a bare, conv_b with the add and y as its residual: no group holds its own output
    assert names == {"ext.conv2d", "ext.conv2d_residual"}
    assert "R.add" not in after["main"].script()


# -- library dispatch: sort, topk, cumsum ---------------------------------------------------

def one_op_module(fn, shape=(5, 7), dtype="float32") -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(fn(x))
        bb.emit_func_output(y)
    return bb.get()


DISPATCHED = {
    "sort": lambda x: relax.op.sort(x, axis=0, descending=True),
    "topk": lambda x: relax.op.topk(x, 3, axis=-1),
    "cumsum": lambda x: relax.op.cumsum(x, axis=1),
}


@pytest.mark.parametrize("name", sorted(DISPATCHED))
def test_library_dispatched_op_matches_stock(name):
    mod = one_op_module(DISPATCHED[name])
    x = np.random.default_rng(4).standard_normal((5, 7)).astype("float32")
    got = run_relax(ext.build(mod, ext.target.cpu()), x)
    want = run_relax(tvm.compile(mod, tvm.target.Target({"kind": "llvm"})), x)
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        assert_matches(g, w, name)
    # a float sort reaches the library as an argsort on a NaN-last key (ext/relax_passes/nan_order.py)
    dispatched = "argsort" if name == "sort" else name
    (row,) = ext.last_report().find_stock(f"relax.{dispatched}")
    assert "library dispatch" in row.reason


def test_library_dispatched_op_builds_for_cuda_without_gpu():
    ext.build(one_op_module(DISPATCHED["topk"]), ext.target.cuda("sm_90"))


# -- last line of defence ------------------------------------------------------------------

def dense_bias_relu() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((5, 7), "float32"))
    w = relax.Var("w", relax.TensorType((7, 11), "float32"))
    b = relax.Var("b", relax.TensorType((11,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w), b)))
        bb.emit_func_output(y)
    return bb.get()


def test_exception_in_one_composite_goes_to_stock_lowering(monkeypatch, tmp_path):
    def boom(comp):
        raise RuntimeError("injected failure in extract")

    monkeypatch.setitem(FAMILIES, "matmul", dataclasses.replace(FAMILIES["matmul"], extract=boom))
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(5, 7), (7, 11), (11,)])
    got = run_relax(ext.build(dense_bias_relu(), ext.target.cpu(), report=tmp_path / "r.json"), x, w, b)
    assert_matches(got, np.maximum(x @ w + b, 0), "matmul after an injected failure")
    rep = ext.last_report()
    (failed,) = [d for d in rep.decisions if d.source == "failed"]
    assert failed.candidate is None and "RuntimeError" in failed.reason and "injected failure" in failed.reason
    assert "ext.matmul_bias_relu" in failed.reason
    assert all("failed" in r.reason for r in rep.find_stock("relax.matmul"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert [d["source"] for d in data["decisions"]] == ["failed"]
    assert "failed" in rep.table()


def test_exception_after_the_kernel_is_emitted(monkeypatch):
    """A failure after the kernel call was emitted leaves no half-lowered composite behind."""
    fam = FAMILIES["reduce"]

    def extract(comp):
        wl, args, _post = fam.extract(comp)

        def post(y):
            raise ValueError("injected failure in post")

        return wl, args, post

    monkeypatch.setitem(FAMILIES, "reduce", dataclasses.replace(fam, extract=extract))
    mod = one_op_module(lambda x: relax.op.sum(x, axis=[1]), shape=(3, 5, 7))
    x = np.random.default_rng(6).standard_normal((3, 5, 7)).astype("float32")
    assert_matches(run_relax(ext.build(mod, ext.target.cpu()), x), x.sum(axis=1), "sum after a failed post")
    rep = ext.last_report()
    assert [d.source for d in rep.decisions] == ["failed"] and "ValueError" in rep.decisions[0].reason


# -- stock rows in the report --------------------------------------------------------------

def test_stock_lowered_ops_are_reported(tmp_path):
    def graph(x):
        return relax.op.multiply(relax.op.max(relax.op.add(x, x), axis=[0, 2]), relax.const(3.0, "float32"))

    mod = one_op_module(graph, shape=(3, 5, 7))
    x = np.random.default_rng(7).standard_normal((3, 5, 7)).astype("float32")
    ex = ext.build(mod, ext.target.cpu(), report=tmp_path / "r.json")
    assert_matches(run_relax(ex, x), (x + x).max(axis=(0, 2)) * 3.0, "max over split axes")
    rep = ext.last_report()
    assert rep.decisions == []  # nothing for ext's selector
    (mx,) = rep.find_stock("relax.max")
    assert mx.source == "stock" and "over axes (0, 2)" in mx.reason and "reduce family" in mx.reason
    assert mx.workload.shapes == ((3, 5, 7),)
    assert {"relax.add", "relax.multiply"} <= {d.workload.op for d in rep.stock}
    assert all(d.reason.startswith("no ext family for") for d in rep.stock)
    text = rep.table()
    assert "relax.max" in text and "over axes (0, 2)" in text
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["decisions"] == [] and {d["op"] for d in data["stock"]} == {"relax.add", "relax.max", "relax.multiply"}
    assert all(d["candidate"] == "stock" and d["source"] == "stock" and d["uses"] == 1 for d in data["stock"])


def test_ops_of_a_declined_composite_carry_the_decline_reason():
    mod = one_op_module(lambda x: relax.op.nn.relu(relax.op.matmul(x, relax.const(np.ones((7, 3), "int32")))),
                        dtype="int32")
    x = np.random.default_rng(8).integers(-9, 9, (5, 7)).astype("int32")
    np.testing.assert_array_equal(run_relax(ext.build(mod, ext.target.cpu()), x),
                                  np.maximum(x @ np.ones((7, 3), "int32"), 0))  # integers: exact
    rep = ext.last_report()
    assert [d.source for d in rep.decisions] == ["fallback"]
    rows = {d.workload.op: d.reason for d in rep.stock}
    assert set(rows) == {"relax.matmul", "relax.nn.relu"}
    assert all("ext.matmul_relu declined" in r for r in rows.values())


@pytest.mark.parametrize("bad", [1000, -1, 2**31 - 1])
def test_embedding_id_out_of_range_is_an_index_error(bad):
    """A token id outside the table is an ``IndexError`` naming the range (PyTorch raises one
    too); ``take(mode="fast")`` read outside the table: a segfault, or garbage for -1. In-range
    ids still give PyTorch's result."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(37, 8), torch.nn.Linear(8, 4)).eval()
    ids = torch.tensor([[1, 36, 0, 5]])
    ex = ext.build(ext.frontend.from_torch(net, (ids,)), ext.target.cpu(), cache=False, verbose=False)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    with torch.no_grad():
        want = net(ids).numpy()
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(ids.numpy())).numpy(), want, rtol=1e-5, atol=1e-6)
    bad_ids = ids.clone()
    bad_ids[0, 2] = bad
    with pytest.raises(IndexError, match=r"out of range.*\[0, 37\)"):
        vm["main"](tvm.runtime.tensor(bad_ids.numpy()))


def test_onnx_gather_index_out_of_range_is_an_index_error():
    """ONNX ``Gather`` with runtime indices: negative ones count from the end (ONNX), one past
    either end is an ``IndexError``."""
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    table = np.arange(30, dtype="float32").reshape(10, 3)
    graph = helper.make_graph([helper.make_node("Gather", ["table", "i"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              initializer=[onnx.numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ex = ext.build(ext.frontend.from_onnx(model), ext.target.cpu(), cache=False, verbose=False)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    good = np.array([0, 9, -1, -10], dtype="int64")
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(good)).numpy(), table[good])
    for bad in (10, -11):
        with pytest.raises(IndexError, match="out of range"):
            vm["main"](tvm.runtime.tensor(np.array([0, bad, 1, 2], dtype="int64")))


@pytest.mark.parametrize("shape", [(1, 16), (2, 32)])
def test_index_check_of_many_ids_builds(shape):
    """The check kernel stays its own (opaque) kernel: fused with the ids' cast and reshape,
    the fallback schedule vectorized its assert into a vector branch that LLVM rejected
    (Funnel Transformer, 16 token ids)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(50, 16)).eval()
    ids = torch.randint(0, 50, shape)
    ex = ext.build(ext.frontend.from_torch(net, (ids,)), ext.target.cpu(), cache=False, verbose=False)
    with torch.no_grad():
        want = net(ids).numpy()
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(ids.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def _reshape_chain(n: int, with_adds: bool) -> tvm.IRModule:
    """``n`` reshapes of a (4, 6) tensor through other 2-D shapes, each followed by ``+ 1`` when
    ``with_adds``: one fused kernel whose reshape indices compose."""
    shapes = [(3, 8), (8, 3), (2, 12), (12, 2), (6, 4), (4, 6)]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i in range(n):
                y = bb.emit(relax.op.reshape(y, shapes[i % len(shapes)]))
                if with_adds:
                    y = bb.emit(relax.op.add(y, relax.const(1.0, "float32")))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("n,with_adds", [(40, False), (30, True)])
def test_long_reshape_chains_build_and_match(cpu_target, n, with_adds):
    """Guards a build time exponential in the chain: 20 reshapes took 79 s and 1.6 GB (40 ran out
    of memory), 20 reshapes with adds between 23 s, each reshape doubling the composed indices.
    Now consecutive reshapes merge (``RemoveRedundantReshape`` in Canonicalize), the fallback
    schedule leaves a producer whose expression is already long as a block of its own, and the
    reshape check of ``UseInplaceCalls`` gives up on kernels of many blocks."""
    mod = _reshape_chain(n, with_adds)
    x = np.arange(24, dtype="float32").reshape(4, 6)
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = (x.reshape(-1) + (n if with_adds else 0)).reshape(mod["main"].ret_ty.shape[0].value, -1)
    assert_close(got, want, rtol=0, atol=1e-4, what=f"{n} reshapes")
