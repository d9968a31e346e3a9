"""FuseEpilogues: before/after modules compared structurally."""
from __future__ import annotations

import pytest
import tvm
from tvm.script import ir as I, relax as R

from ext.relax_passes import FuseEpilogues
from ext.relax_passes.fuse_epilogue import ACTIVATION_PATTERNS, epilogue_chains


def test_matmul_transposed_bias_gelu_residual_becomes_one_composite():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((32, 16), "float32"),
                 b: R.Tensor((32,), "float32"), r: R.Tensor((8, 32), "float32")) -> R.Tensor((8, 32), "float32"):
            with R.dataflow():
                wt = R.permute_dims(w, [1, 0])
                y = R.matmul(x, wt)
                y2 = R.add(y, b)
                y3 = R.nn.gelu(y2)
                y4 = R.add(y3, r)
                R.output(y4)
            return y4

    @I.ir_module
    class Expected:
        @R.function(private=True)
        def fused(w: R.Tensor((32, 16), "float32"), x: R.Tensor((8, 16), "float32"), b: R.Tensor((32,), "float32"),
                  r: R.Tensor((8, 32), "float32")) -> R.Tensor((8, 32), "float32"):
            R.func_attr({"Composite": "ext.matmul_bias_gelu_residual", "Primitive": True, "ext.family": "matmul",
                         "ext.epilogue": ["bias", "gelu", "residual"]})
            with R.dataflow():
                wt = R.permute_dims(w, axes=[1, 0])
                y = R.matmul(x, wt, out_dtype=None)
                y2 = R.add(y, b)
                y3 = R.nn.gelu(y2)
                gv = R.add(y3, r)
                R.output(gv)
            return gv

        @R.function
        def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((32, 16), "float32"),
                 b: R.Tensor((32,), "float32"), r: R.Tensor((8, 32), "float32")) -> R.Tensor((8, 32), "float32"):
            cls = Expected
            with R.dataflow():
                gv = cls.fused(w, x, b, r)
                R.output(gv)
            return gv

    after = FuseEpilogues()(Before)
    # private function names are generated; compare modulo the global var names
    got = {gv.name_hint: f for gv, f in after.functions_items()}
    assert set(got) == {"main", "fused_relax_permute_dims_relax_matmul_relax_add_relax_nn_gelu_relax_add"}
    tvm.ir.assert_structural_equal(
        got["fused_relax_permute_dims_relax_matmul_relax_add_relax_nn_gelu_relax_add"], Expected["fused"])
    assert "fused_relax_permute_dims" in after["main"].script() and "R.add" not in after["main"].script()


def test_row_broadcast_add_is_not_a_bias():
    """An add of an (M, 1) tensor varies along rows, not channels: only the matmul is fused."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32"),
                 c: R.Tensor((8, 1), "float32")) -> R.Tensor((8, 32), "float32"):
            with R.dataflow():
                y = R.matmul(x, w)
                y2 = R.nn.relu(R.add(y, c))
                R.output(y2)
            return y2

    after = FuseEpilogues()(Before)
    names = [f.attrs["Composite"] for _, f in after.functions_items() if f.attrs and "Composite" in f.attrs]
    assert names == ["ext.matmul"]
    assert "R.add" in after["main"].script() and "R.nn.relu" in after["main"].script()


def test_residual_without_bias_and_bias_first_operand():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32"), b: R.Tensor((1, 8), "float32"),
                 r: R.Tensor((4, 8), "float32")) -> R.Tensor((4, 8), "float32"):
            with R.dataflow():
                y = R.add(b, R.matmul(x, w))  # bias on the left
                z = R.add(R.sigmoid(y), r)
                R.output(z)
            return z

    after = FuseEpilogues()(Before)
    names = [str(f.attrs["Composite"]) for _, f in after.functions_items() if f.attrs and "Composite" in f.attrs]
    assert names == ["ext.matmul_bias_sigmoid_residual"]


def test_chains_are_ordered_longest_first():
    chains = epilogue_chains()
    # the most Relax ops first: hardswish spans four (y * clip(y + 3, 0, 6) / 6)
    assert chains[0] == ("bias", "hardswish", "residual") and chains[-1] == ()
    assert chains.index(("bias", "relu", "residual")) < chains.index(("bias", "relu"))
    # bias? x (activations + none) x residual?, plus the ResNet order bias? + residual + activation
    n = len(ACTIVATION_PATTERNS)
    assert len(chains) == len(set(chains)) == 2 * (n + 1) * 2 + 2 * n
    assert ("bias", "residual", "relu") in chains


def composites(mod) -> dict:
    return {gv.name_hint: f for gv, f in mod.functions_items() if f.attrs and "Composite" in f.attrs}


def test_intermediate_used_outside_the_group_is_not_fused():
    """``y * tanh(y)`` (no known activation): fusing the tanh would make the composite return (y, tanh(y)).
    (SiLU's ``y * sigmoid(y)`` is matched whole: tests/test_epilogues.py.)"""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((5, 7), "float32"), w: R.Tensor((7, 11), "float32"),
                 b: R.Tensor((11,), "float32")) -> R.Tensor((5, 11), "float32"):
            with R.dataflow():
                y = R.add(R.matmul(x, w), b)
                z = R.multiply(y, R.tanh(y))
                R.output(z)
            return z

    after = FuseEpilogues()(Before)
    funcs = composites(after)
    assert [str(f.attrs["Composite"]) for f in funcs.values()] == ["ext.matmul_bias"]
    assert all(isinstance(f.ret_ty, tvm.relax.TensorType) for f in funcs.values())  # no tuple outputs
    assert "R.tanh" in after["main"].script() and "R.multiply" in after["main"].script()


def test_residual_computed_from_the_anchor_is_not_fused():
    """``y = x @ w; y + y @ w2``: the first matmul's residual needs the matmul itself, so the add
    goes to the second matmul, with ``y`` as its residual."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((5, 7), "float32"), w: R.Tensor((7, 7), "float32"),
                 w2: R.Tensor((7, 7), "float32")) -> R.Tensor((5, 7), "float32"):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.add(y, R.matmul(y, w2))
                R.output(z)
            return z

    after = FuseEpilogues()(Before)
    funcs = composites(after)
    assert sorted(str(f.attrs["Composite"]) for f in funcs.values()) == ["ext.matmul", "ext.matmul_residual"]
    assert "R.add" not in after["main"].script()


@pytest.mark.parametrize("swap", [False, True])
def test_residual_add_of_two_anchor_chains_goes_to_the_one_that_can_take_it(swap):
    """MobileNetV2's first residual of a stage, ``x + project(expand(x))`` with ``x`` a conv + bias
    itself: ``x``'s chain fits the add's pattern first but its output feeds the expand conv; the
    project conv takes the add, whichever side of it ``x`` is on."""
    conv = dict(strides=(1, 1), padding=(0, 0, 0, 0))

    @I.ir_module
    class Before:
        @R.function
        def main(i: R.Tensor((1, 8, 5, 5), "float32"), w0: R.Tensor((8, 8, 1, 1), "float32"),
                 w1: R.Tensor((16, 8, 1, 1), "float32"), w2: R.Tensor((8, 16, 1, 1), "float32"),
                 b0: R.Tensor((1, 8, 1, 1), "float32"), b2: R.Tensor((1, 8, 1, 1), "float32")
                 ) -> R.Tensor((1, 8, 5, 5), "float32"):
            with R.dataflow():
                x = R.add(R.nn.conv2d(i, w0, **conv), b0)
                e = R.nn.relu(R.nn.conv2d(x, w1, **conv))
                p = R.add(R.nn.conv2d(e, w2, **conv), b2)
                z = R.add(p, x) if swap else R.add(x, p)
                R.output(z)
            return z

    after = FuseEpilogues()(Before)
    names = sorted(str(f.attrs["Composite"]) for f in composites(after).values())
    assert names == ["ext.conv2d_bias", "ext.conv2d_bias_residual", "ext.conv2d_relu"]
    assert "R.add" not in after["main"].script()


def test_gelu_written_out_becomes_the_gelu_tanh_epilogue():
    """GPT-2's ``gelu_new`` (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), imported op by op,
    is recognized as one ``gelu_tanh`` and fused into the matmul; pow(x, 2) becomes x * x."""
    import numpy as np
    import torch
    from transformers.activations import NewGELUActivation

    import ext
    from ext.frontend import from_torch
    from ext.relax_passes.gelu_tanh import RecognizeGeluTanh

    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40)

    class Net(torch.nn.Module):
        def forward(self, x):
            return NewGELUActivation()(lin(x)) + torch.pow(x, 2).sum(-1, keepdim=True)

    x = torch.randn(3, 24)
    x[0, 0] = float("nan")
    mod = from_torch(Net().eval(), (x,))
    text = RecognizeGeluTanh()(mod)["main"].script()
    assert "gelu_tanh" in text and "R.power" not in text and "R.tanh" not in text, text
    ex = ext.build(mod, ext.target.cpu(), cache=False, verbose=False)
    assert any("gelu_tanh" in d.workload.epilogue for d in ext.last_report().find("matmul"))
    got = tvm.relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    with torch.no_grad():
        ref = Net()(x).numpy()
    assert np.isnan(got[0]).all() and np.isnan(ref[0]).all()
    np.testing.assert_allclose(got[1:], ref[1:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["onnx_export", "half_first", "times_inverse_root"])
def test_gelu_erf_written_out_becomes_the_gelu_epilogue(form):
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` in the orders exporters and models write it (the
    ONNX file of ``nn.GELU()`` holds ``((x * (erf(x / 1.4142135) + 1)) * 0.5``) is one ``gelu``,
    fused into the matmul; NaN stays NaN."""
    import math

    import numpy as np
    import torch

    import ext
    from ext.frontend import from_torch

    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40)

    class Net(torch.nn.Module):
        def forward(self, x):
            y = lin(x)
            if form == "onnx_export":
                return (y * (torch.erf(y / 1.4142135381698608) + 1.0)) * 0.5
            if form == "half_first":
                return y * 0.5 * (1.0 + torch.erf(y / math.sqrt(2.0)))
            return (y * 0.5) * (torch.erf(y * (1.0 / math.sqrt(2.0))) + 1.0)

    x = torch.randn(3, 24)
    x[0, 0] = float("nan")
    mod = from_torch(Net().eval(), (x,))
    ex = ext.build(mod, ext.target.cpu(), cache=False, verbose=False)
    report = ext.last_report()
    assert any("gelu" in d.workload.epilogue for d in report.find("matmul")), report
    assert not report.find_stock("relax.erf"), report
    got = tvm.relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    with torch.no_grad():
        ref = Net()(x).numpy()
    assert np.isnan(got[0]).all() and np.isnan(ref[0]).all()
    np.testing.assert_allclose(got[1:], ref[1:], rtol=1e-5, atol=1e-5)


def test_required_ops_of_a_pattern():
    from tvm.relax.dpl import is_op, wildcard

    from ext.relax_passes.fuse_epilogue import patterns, required_ops

    y = wildcard()
    silu = is_op("relax.nn.silu")(y) | is_op("relax.multiply")(y, is_op("relax.sigmoid")(y))
    assert required_ops(silu) == frozenset()  # either form: neither op is required
    assert required_ops(is_op("relax.add")(is_op("relax.matmul")(y, y), y)) == {"relax.add", "relax.matmul"}
    by_name = {p.name: required_ops(p.pattern) for p in patterns()}
    assert {"relax.matmul", "relax.add", "relax.nn.gelu"} <= by_name["ext.matmul_bias_gelu"]
    assert "relax.nn.conv2d" in by_name["ext.conv2d_bias_relu"]
