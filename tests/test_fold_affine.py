"""FoldAffineIntoAnchor: constant per-channel scale/shift chains folded into conv2d / matmul weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.script import ir as I, relax as R

import ext
from ext.frontend import from_torch
from ext.relax_passes import Canonicalize
from ext.relax_passes.fold_affine import FoldAffineIntoAnchor
from ext.testing import assert_close


class LayerScales(torch.nn.Module):
    """Layer scale after a conv (PoolFormer) and after a Linear (ConvNeXt, BEiT), a BatchNorm1d
    after a Linear (LeViT), a constant subtracted from the left: every step folds."""

    def __init__(self, c: int = 5, o: int = 7, n: int = 9):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, o, 3, padding=1)
        self.g = torch.nn.Parameter(torch.randn(o, 1, 1))
        self.fc = torch.nn.Linear(o, n)
        self.bn = torch.nn.BatchNorm1d(n)
        self.g2 = torch.nn.Parameter(torch.randn(n))
        self.bn.running_mean.normal_()
        self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = torch.relu(self.g * self.conv(x) + x[:, :1])  # the residual x[:, :1]: a tensor, not folded
        z = self.bn(self.fc(y.mean((2, 3)))) * self.g2
        return 0.5 - z / 3.0


def _ops(mod) -> str:
    return Canonicalize()(mod)["main"].script()


@pytest.mark.parametrize("shape", [(3, 5, 11, 13), (1, 5, 7, 2)])
def test_layer_scales_and_batch_norm_fold_and_match_pytorch(cpu_target, shape):
    torch.manual_seed(0)
    model = LayerScales().eval()
    x = torch.randn(*shape)
    x[0, 1, 2, 1] = float("nan")
    with torch.no_grad():
        want = model(x).numpy()
    mod = from_torch(model, (x,))
    script = _ops(mod)
    # one add after each anchor (the folded shift) and the residual add; nothing else element-wise
    assert "R.multiply" not in script and "R.divide" not in script and "R.subtract" not in script, script
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert (np.isnan(got) == np.isnan(want)).all() and np.isnan(want).any()
    assert_close(got, want, rtol=1e-5, atol=1e-5, what="folded layer scales")


def test_linear_weight_read_through_permute_dims():
    w = np.arange(12, dtype="float32").reshape(4, 3)  # (N, K): PyTorch's Linear weight
    g = np.array([1.0, -2.0, 0.5, 3.0], "float32")

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 4), "float32"):
            with R.dataflow():
                y = R.matmul(x, R.permute_dims(R.const(w), [1, 0]))
                z = R.multiply(R.const(g), y)
                R.output(z)
            return z

    after = FoldAffineIntoAnchor()(Before)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    ex = relax.build(relax.transform.DeadCodeElimination()(after), tvm.target.Target({"kind": "llvm"}))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert_close(got, (x @ w.T) * g, rtol=1e-6, atol=1e-5, what="matmul through permute_dims")
    script = relax.transform.DeadCodeElimination()(after)["main"].script()
    assert "R.multiply" not in script and "R.permute_dims" in script


def _chain(case: str) -> tvm.IRModule:
    """conv -> + b -> * g, or a variation of it that must stay as it is."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 3, 3), "float32"))
    s = relax.Var("s", relax.TensorType((1, 4, 1, 1), "float32"))
    wc = relax.const(np.ones((4, 2, 1, 1), "float32"))
    b = relax.const(np.arange(4, dtype="float32").reshape(1, 4, 1, 1))
    g = relax.const(np.full((1, 4, 1, 1), 2.0, "float32"))
    with bb.function("main", [x, s]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(bb.emit(relax.op.nn.conv2d(x, wc)), b))
            if case == "bias_only":
                z = y
            elif case == "divide_into":  # g / y: not affine in y
                z = bb.emit(relax.op.divide(g, y))
            else:
                z = bb.emit(relax.op.multiply(y, s if case == "scale_is_input" else g))
            if case == "second_reader":  # y read twice: folding would compute the conv twice
                z = bb.emit(relax.op.add(z, y))
            if case == "two_shifts":  # * g + b + 3: the + 3 is hardsigmoid's, left for the epilogue
                z = bb.emit(relax.op.add(bb.emit(relax.op.add(z, b)), relax.const(3.0, "float32")))
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("case", ["second_reader", "scale_is_input", "divide_into", "bias_only"])
def test_chains_without_a_constant_scale_stay(case):
    mod = _chain(case)
    after = relax.transform.DeadCodeElimination()(FoldAffineIntoAnchor()(mod))
    tvm.ir.assert_structural_equal(after, relax.transform.DeadCodeElimination()(mod))


def test_scale_chain_becomes_one_shift():
    after = relax.transform.DeadCodeElimination()(FoldAffineIntoAnchor()(_chain("fold")))
    calls = [b.value.op.name for blk in after["main"].body.blocks for b in blk.bindings if isinstance(b.value, relax.Call)]
    assert calls == ["relax.nn.conv2d", "relax.add"]
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 3)).astype("float32")
    ex = relax.build(after, tvm.target.Target({"kind": "llvm"}))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros((1, 4, 1, 1), "float32"))).numpy()
    want = (x.sum(1, keepdims=True) + np.arange(4, dtype="float32").reshape(1, 4, 1, 1)) * 2
    assert_close(got, want, rtol=1e-6, atol=1e-6, what="conv + b then * 2")


class LinearBatchNorm(torch.nn.Module):
    """LeViT's Linear + BatchNorm1d: the rows flattened for the norm and regrouped after it."""

    def __init__(self, k: int = 8, n: int = 11):
        super().__init__()
        self.fc = torch.nn.Linear(k, n, bias=False)
        self.bn = torch.nn.BatchNorm1d(n)
        self.bn.running_mean.normal_()
        self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.fc(x)
        return torch.nn.functional.hardswish(self.bn(y.flatten(0, 1)).reshape_as(y))


def test_norm_between_row_reshapes_folds_into_the_linear(cpu_target):
    torch.manual_seed(1)
    model = LinearBatchNorm().eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        want = model(x).numpy()
    mod = from_torch(model, (x,))
    script = _ops(mod)
    assert "R.subtract" not in script and "R.divide(" not in script.split("R.clip")[0], script
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert_close(got, want, rtol=1e-5, atol=1e-5, what="Linear + BatchNorm1d")


def test_one_shift_after_the_last_scale():
    after = relax.transform.DeadCodeElimination()(FoldAffineIntoAnchor()(_chain("two_shifts")))
    calls = [b.value for blk in after["main"].body.blocks for b in blk.bindings if isinstance(b.value, relax.Call)]
    assert [c.op.name for c in calls] == ["relax.nn.conv2d", "relax.add", "relax.add"]
    assert float(calls[-1].args[1].value.numpy()) == 3.0


def test_a_zero_divisor_or_an_infinite_constant_stays():
    """Folded, ``(conv + b) / 0`` would sum infinite terms (NaN where PyTorch has an infinity)."""
    for const in (np.zeros((1, 4, 1, 1), "float32"), np.full((1, 4, 1, 1), np.inf, "float32")):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 2, 3, 3), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit(relax.op.nn.conv2d(x, relax.const(np.ones((4, 2, 1, 1), "float32"))))
                op = relax.op.divide if not np.isinf(const).any() else relax.op.multiply
                out = bb.emit_output(op(y, relax.const(const)))
            bb.emit_func_output(out)
        mod = bb.get()
        tvm.ir.assert_structural_equal(relax.transform.DeadCodeElimination()(FoldAffineIntoAnchor()(mod)), mod)
