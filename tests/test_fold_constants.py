"""Compile-time constant folding: NumPy twins of weight transforms and the batched folder.

Every weight transform that names a NumPy twin must produce the same bits as its
compiled PrimFunc (the twin replaces it at compile time); the folder must
produce the same constants as stock ``FoldConstant``.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.relax_passes.fold_constants import FoldConstants
from ext.strategies._util import lanes
from ext.testing import own_candidates
from ext.topi_kernels import host
from conv2d_helpers import blocked_wl, conv_wl
from test_matmul import matmul_wl

TARGET = ext.target.cpu()
LANES = lanes(TARGET)

WORKLOADS = [
    conv_wl(1, 3, 13, 11, 7, 3, pad=1),                 # odd channels: padding in every block
    conv_wl(1, 17, 15, 15, 19, 3, pad=1),               # Winograd-eligible, prime sizes
    conv_wl(1, 8, 9, 9, 12, 1, pad=0),                  # 1x1: pointwise / weight matrix
    conv_wl(1, 12, 9, 9, 12, 3, pad=1, groups=3),       # grouped
    conv_wl(1, 5, 10, 10, 13, 5, stride=2, pad=2),      # 5x5 stride 2: im2col / direct
    blocked_wl(1, 32, 7, 9, 32, 3, groups=32, b_in=LANES, b_out=LANES, epilogue=("bias",)),  # depthwise, NCHW{lanes}c
    matmul_wl(7, 33, 19),
    matmul_wl(5, 67, 31, transpose_b=True),
    matmul_wl(1, 97, 43),
    matmul_wl(3, 11, 13, batch=(2,), transpose_b=True),
]


def _transforms():
    """(candidate, workload, config, input index, PrimFunc) for every transform with a twin."""
    out = []
    for wl in WORKLOADS:
        for cand in own_candidates(wl, TARGET):
            configs = [cand.default_config(wl, TARGET)] + list(cand.space(wl, TARGET) or [])[:3]
            for cfg in configs:
                for idx, func in cand.input_transforms(wl, cfg, TARGET).items():
                    if host.lookup(func) is not None:
                        out.append((cand.name, wl, cfg, idx, func))
    return out


CASES = _transforms()


def test_every_twin_is_exercised():
    names = {str(host.lookup(f)[0].__name__) for *_, f in CASES}
    assert {"pack_weight", "pack_weight_nchwc", "winograd_filter", "weight_matrix", "batch_operand",
            "pack_weight_depthwise"} <= names


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1].shapes[1]))}")
def test_twin_is_bit_identical_to_the_compiled_transform(case):
    _, wl, _, idx, func = case
    rng = np.random.default_rng(0)
    w = rng.standard_normal(wl.shapes[idx]).astype("float32")
    rt = tvm.compile(tvm.IRModule({"f": func.with_attr("global_symbol", "f")}), target=tvm.target.Target({"kind": "llvm"}))
    out_ty = func.params[-1]
    buf = func.buffer_map[out_ty] if hasattr(func, "buffer_map") else None
    shape = [int(d) for d in (buf.shape if buf is not None else func.ty.params[-1].shape)]
    got = tvm.runtime.empty(shape, "float32", tvm.cpu())
    rt["f"](tvm.runtime.tensor(w), got)
    twin = host.run(func, [w])
    assert twin.shape == tuple(shape) and twin.dtype == np.float32
    assert np.array_equal(twin.view(np.uint32), got.numpy().view(np.uint32)), "twin differs from the compiled transform"
    # folds hand twins views (a folded transpose is not copied): a non-contiguous input, same bits
    strided = host.run(func, [np.asfortranarray(w)] if w.ndim > 1 else [w])
    assert np.array_equal(strided.view(np.uint32), twin.view(np.uint32)), "twin depends on its input's strides"


def _bn_module():
    """conv weights scaled by folded batch-norm statistics: chains of constant arithmetic."""
    rng = np.random.default_rng(1)
    w = relax.const(rng.standard_normal((13, 7, 3, 3)).astype("float32"))
    gamma, beta, mean = (relax.const(rng.standard_normal(13).astype("float32")) for _ in range(3))
    var = relax.const(rng.uniform(0.5, 1.5, 13).astype("float32"))
    x = relax.Var("x", relax.TensorType((1, 7, 11, 11), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.divide(gamma, relax.op.sqrt(relax.op.add(var, relax.const(1e-5, "float32")))))
            ws = bb.emit(relax.op.multiply(w, relax.op.reshape(s, (13, 1, 1, 1))))
            shift = bb.emit(relax.op.subtract(beta, relax.op.multiply(mean, s)))
            wt = bb.emit(relax.op.permute_dims(ws, [1, 0, 2, 3]))
            wt = bb.emit(relax.op.permute_dims(wt, [1, 0, 2, 3]))
            y = bb.emit(relax.op.nn.conv2d(x, wt, padding=1))
            y = bb.emit(relax.op.add(y, relax.op.reshape(shift, (1, 13, 1, 1))))
            cum = bb.emit(relax.op.exp(shift))  # not a NumPy op: legalized, compiled in one batch
            out = bb.emit_output(relax.Tuple([y, cum]))
        bb.emit_func_output(out)
    return bb.get()


def _constants(mod) -> list:
    out = []

    def visit(e):
        if isinstance(e, tvm.ir.expr.Constant) and hasattr(e.value, "numpy"):
            out.append(e.value.numpy())
    relax.analysis.post_order_visit(mod["main"], visit)
    return out


def test_folder_equals_stock_fold_constant_bit_for_bit():
    mod = _bn_module()
    ours, stock = FoldConstants()(mod), relax.transform.FoldConstant()(mod)
    a, b = _constants(ours), _constants(stock)
    assert len(a) == len(b) and len(a) >= 3
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
    # nothing foldable is left for stock FoldConstant
    calls = []
    relax.analysis.post_order_visit(ours["main"], lambda e: calls.append(e) if isinstance(e, relax.Call) else None)
    assert [str(c.op) for c in calls if all(isinstance(a, tvm.ir.expr.Constant) for a in c.args
                                            if isinstance(a.ty, relax.TensorType))
            and any(isinstance(a.ty, relax.TensorType) for a in c.args)] == []


def test_index_arithmetic_folds_like_stock_bit_for_bit():
    """The integer, bool and selection twins (position grids of DETR-style embeddings): the same
    bits as stock FoldConstant's compiled evaluation, odd shapes, wrap-around included."""
    rng = np.random.default_rng(0)
    i64 = relax.const(rng.integers(-2**62, 2**62, (5, 7)).astype("int64"))
    j64 = relax.const(rng.integers(-9, 9, (5, 7)).astype("int64"))
    small = relax.const(rng.integers(0, 5, (3,)).astype("int32"))
    f = relax.const(np.where(rng.random((5, 7)) < 0.2, np.nan, rng.standard_normal((5, 7))).astype("float32"))
    x = relax.Var("x", relax.TensorType((5, 7), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(i64, i64))            # wraps
            d = bb.emit(relax.op.multiply(relax.op.subtract(j64, i64), j64))
            ge = bb.emit(relax.op.greater_equal(d, j64))
            ne = bb.emit(relax.op.not_equal(s, i64))
            both = bb.emit(relax.op.logical_or(relax.op.logical_and(ge, ne), relax.op.logical_not(ge)))
            nan = bb.emit(relax.op.isnan(f))
            pick = bb.emit(relax.op.where(relax.op.logical_or(both, nan), relax.op.astype(j64, "float32"), f))
            rows = bb.emit(relax.op.take(pick, small, axis=0))
            ints = bb.emit(relax.op.astype(relax.op.astype(s, "int32"), "float32"))
            flags = bb.emit(relax.op.astype(both, "float32"))
            out = bb.emit_output(relax.op.add(relax.op.add(x, ints), relax.op.add(flags, relax.op.sum(rows))))
        bb.emit_func_output(out)
    mod = bb.get()
    ours, stock = FoldConstants()(mod), relax.transform.FoldConstant()(mod)
    a, b = _constants(ours), _constants(stock)
    assert len(a) == len(b) and len(a) >= 2
    for p, q in zip(a, b):
        assert p.shape == q.shape and p.dtype == q.dtype and p.tobytes() == q.tobytes()


def test_shape_arithmetic_of_a_static_tensor_folds():
    """ONNX's Shape -> Gather -> negative-index fix -> Slice chain on a run-time tensor of
    static shape folds with NumPy (stock FoldConstant built one module per op of it: RWKV's
    ONNX export, 45 s); the values are the shape's."""
    x = relax.Var("x", relax.TensorType((3, 5, 7), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            dims = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(x))))
            last = bb.emit(relax.op.take(dims, relax.const(np.array([2], "int64"), "int64"), axis=0))
            neg = relax.const(np.array([-2], "int64"), "int64")
            fixed = bb.emit(relax.op.where(relax.op.less(neg, relax.const(np.array([0], "int64"), "int64")),
                                           relax.op.add(neg, last), neg))
            out = bb.emit_output(relax.op.add(x, relax.op.astype(relax.op.add(fixed, last),
                                                                  "float32")))
        bb.emit_func_output(out)
    mod = bb.get()
    ours = FoldConstants()(mod)
    text = ours.script(show_meta=False)
    assert "shape_to_tensor" not in text and "R.where" not in text
    assert [c.tolist() for c in _constants(ours)] == [[12.0]]  # (7 - 2) + 7


def test_folder_leaves_non_constant_work_alone():
    x = relax.Var("x", relax.TensorType((3, 5), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.add(relax.const(np.ones((3, 5), "float32")), relax.const(np.float32(2))))
            out = bb.emit_output(relax.op.multiply(x, c))
        bb.emit_func_output(out)
    mod = FoldConstants()(bb.get())
    ex = tvm.compile(mod, TARGET)
    xv = np.arange(15, dtype="float32").reshape(3, 5)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    np.testing.assert_array_equal(got, xv * 3)


def test_zero_dim_constants_fold_like_stock():
    """0-d constants through both paths (NumPy and a compiled batch) keep their shape ()."""
    x = relax.Var("x", relax.TensorType((), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.exp(relax.const(np.float32(0.75))))             # legalized + compiled
            b = bb.emit(relax.op.broadcast_to(relax.const(np.int64(3)), ()))     # NumPy
            c = bb.emit(relax.op.astype(b, "float32"))
            out = bb.emit_output(relax.op.add(x, relax.op.add(a, c)))
        bb.emit_func_output(out)
    mod = bb.get()
    ours = FoldConstants()(mod)  # folds further than stock FoldConstant (which leaves the int cast)
    assert [a.shape for a in _constants(ours)] == [()]
    ex = tvm.compile(ours, TARGET)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.float32(1.0))).numpy()
    np.testing.assert_allclose(got, 1.0 + np.exp(np.float32(0.75)) + 3.0, rtol=1e-6)


@pytest.mark.parametrize("axes,begin,end,strides", [
    ([0], [1], [4], [1]), ([1, 2], [-3, 0], [100, 7], [2, 3]), ([2], [6], [-9], [-2]), ([0], [5], [9], [1]),
])
def test_strided_slice_of_a_constant_folds_like_stock(axes, begin, end, strides):
    """An LSTM's gate weights are slices of one constant: folded with NumPy (stock FoldConstant
    then has nothing left and is skipped: has_constant_call)."""
    from ext.relax_passes.fold_constants import has_constant_call

    w = np.random.default_rng(0).standard_normal((5, 6, 7)).astype("float32")
    x = relax.Var("x", relax.TensorType((), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.strided_slice(relax.const(w), axes, begin, end, strides))
            out = bb.emit_output(relax.op.multiply(s, x))
        bb.emit_func_output(out)
    mod = bb.get()
    assert has_constant_call(mod)
    ours, stock = FoldConstants()(mod), relax.transform.FoldConstant()(mod)
    assert not has_constant_call(ours)
    a, b = _constants(ours), _constants(stock)
    assert len(a) == len(b) == 1 and a[0].shape == b[0].shape and a[0].tobytes() == b[0].tobytes()


def _calls(mod) -> set:
    ops = set()
    relax.analysis.post_order_visit(mod["main"], lambda e: ops.add(e.op.name) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    return ops


def test_index_grids_of_an_export_fold():
    """A bicubic resize of a weight (YOLOS interpolates its position embeddings every call) is
    decomposed by ``torch.export`` into ``arange`` grids, int64 arithmetic, ``concat`` and
    ``index_tensor``: all of it is constant, so all of it folds, and the result still matches."""
    import torch

    from ext.frontend import from_torch
    from ext.testing import run_relax

    class Interp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = torch.nn.Parameter(torch.randn(1, 8, 6, 7))

        def forward(self, x):
            return x + torch.nn.functional.interpolate(self.pos, size=(11, 13), mode="bicubic", align_corners=False)

    model, x = Interp().eval(), torch.randn(2, 8, 11, 13)
    mod = from_torch(model, (x,))
    assert {"relax.arange", "relax.index_tensor", "relax.concat"} <= _calls(mod)
    folded = FoldConstants()(mod)
    assert _calls(folded) <= {"relax.add"}, _calls(folded)
    ex = ext.build(mod, TARGET, cache=False, verbose=False)
    with torch.no_grad():
        np.testing.assert_allclose(run_relax(ex, x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_index_tensor_out_of_range_is_left_to_the_kernel():
    """NumPy would wrap a negative index where the op's kernel does not: not folded here."""
    data = relax.const(np.arange(12, dtype="float32").reshape(3, 4))
    idx = relax.const(np.array([0, -1, 2], dtype="int64"))
    x = relax.Var("x", relax.TensorType((3, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            g = bb.emit(relax.op.index_tensor(data, relax.Tuple([idx])))
            out = bb.emit_output(relax.op.add(x, g))
        bb.emit_func_output(out)
    assert "relax.index_tensor" in _calls(FoldConstants()(bb.get()))


def test_full_with_an_infinite_fill_builds():
    """``torch.full((M, N), -inf)`` (a causal mask built in forward): folded with NumPy; stock
    legalization raised TypeError on the infinite fill."""
    import torch

    from ext.frontend import from_torch
    from ext.testing import run_relax

    class Causal(torch.nn.Module):
        def forward(self, s):
            return torch.softmax(s + torch.triu(torch.full((5, 5), float("-inf")), 1), dim=-1)

    x = torch.randn(2, 5, 5)
    ex = ext.build(from_torch(Causal(), (x,)), TARGET, cache=False, verbose=False)
    np.testing.assert_allclose(run_relax(ex, x.numpy()), Causal()(x).numpy(), rtol=1e-6, atol=1e-7)


def test_operand_that_is_a_prim_value_folds_through_legalization():
    """``add(tensor, prim_value)`` (a decoder's cache position arithmetic) has one tensor operand:
    not a NumPy twin's two-array call; it folds through the compiled batch."""
    x = relax.Var("x", relax.TensorType((4,), "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            grid = bb.emit(relax.op.arange(0, 4, 1, "int64"))
            shifted = bb.emit(relax.op.add(grid, relax.prim_value(tvm.tirx.IntImm("int64", 3))))
            out = bb.emit_output(relax.op.add(x, shifted))
        bb.emit_func_output(out)
    folded = FoldConstants()(bb.get())
    adds = []
    relax.analysis.post_order_visit(folded["main"], lambda e: adds.append(e) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") == "relax.add" else None)
    assert len(adds) == 1  # x + a constant: the grid and its shift folded
    ex = tvm.compile(folded, TARGET)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.zeros(4, "int64"))).numpy()
    np.testing.assert_array_equal(got, np.arange(4) + 3)


def test_an_unrolled_rnn_transforms_each_weight_once(cpu_target):
    """The translator unrolls a GRU and transposes its weights at every step: each transpose
    folded to a copy of its own and each copy packed (129 x 4 MB for a 2-layer LSTM of width 512
    over 64 steps; 3.9 s of the build). After CSE before folding, one constant per weight."""
    import torch
    from ext.frontend import from_torch
    from ext.relax_passes import Canonicalize

    torch.manual_seed(0)
    rnn = torch.nn.GRU(16, 32, num_layers=2, batch_first=True).eval()
    x = torch.randn(1, 9, 16)
    mod = from_torch(rnn, (x,))
    seen = set()

    def visit(e):
        if isinstance(e, tvm.ir.expr.Constant) and hasattr(e.value, "numpy") and e.value.numpy().size >= 16 * 96:
            seen.add(e)

    relax.analysis.post_order_visit(Canonicalize()(mod)["main"], visit)
    assert len(seen) <= 4, f"{len(seen)} weight constants for 4 weights"  # w_ih and w_hh of 2 layers
    with torch.no_grad():
        want = rnn(x)[0].numpy()
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = got[0].numpy() if not hasattr(got, "numpy") else got.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
