"""PyTorch and ONNX import of the built-in models (small variants), checked against PyTorch."""
from __future__ import annotations

import copy
import io

import numpy as np
import tvm
import pytest

import ext
from ext.testing import assert_close, run_relax

import torch
import onnx

from ext.frontend import UnsupportedOperatorError, from_onnx, from_torch  # noqa: E402
from ext.models import torch_model  # noqa: E402

# float32 end to end: ext's kernels sum in a different order than PyTorch's (oneDNN), and the
# errors of ~20 layers add up; outputs are O(1), so 1e-4 absolute is ~100 ulps of the largest value
TOL = dict(rtol=1e-4, atol=1e-4)


def onnx_of(model, inputs):
    buf = io.BytesIO()
    torch.onnx.export(model, inputs, buf, opset_version=17, input_names=["x"], dynamo=False)
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("name", ["resnet18", "encoder", "mlp"])
@pytest.mark.parametrize("frontend", ["torch", "onnx"])
def test_builtin_model_matches_pytorch(cpu_target, name, frontend):
    model, inputs = torch_model(name, small=True)
    with torch.no_grad():
        expect = model(*inputs).numpy()
    if frontend == "torch":
        mod = from_torch(model, inputs)
    else:
        mod = from_onnx(onnx_of(model, inputs), shape_dict={"x": list(inputs[0].shape)})
    got = run_relax(ext.build(mod, cpu_target), *[t.numpy() for t in inputs])
    assert_close(got, expect, **TOL, what=f"{name} via {frontend}")
    report = ext.last_report()
    assert len(report) >= 1 and all(d.alternatives is not None for d in report)


def test_resnet50_structure_imports():
    model, inputs = torch_model("resnet50", small=True)
    mod = from_torch(model, inputs)
    assert "conv2d" in mod.script()


def test_unsupported_torch_operator_is_named():
    class Weird(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x)

    with pytest.raises(UnsupportedOperatorError, match="bessel_j0"):
        from_torch(Weird(), (torch.randn(3),))


def test_unsupported_onnx_operator_is_named():
    from onnx import TensorProto, helper

    node = helper.make_node("NoSuchOperator", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOperatorError, match="NoSuchOperator"):
        from_onnx(model)


def test_unknown_builtin_model_is_named():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        torch_model("vgg")


@pytest.mark.parametrize("wrap", [list, tuple])
def test_inputs_as_list_or_tuple_are_the_model_inputs(cpu_target, wrap):
    """A list of example tensors is the model's inputs (as a tuple), not one list argument."""
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x @ y)

    x, y = torch.randn(3, 5), torch.randn(5, 7)
    mod = from_torch(Two(), wrap([x, y]))
    got = run_relax(ext.build(mod, cpu_target), x.numpy(), y.numpy())
    assert_close(got, torch.relu(x @ y).numpy(), rtol=1e-5, atol=1e-6)


def test_half_precision_model_builds_and_keeps_its_dtypes(cpu_target):
    """TVM's importer fails on a float16 conv + bias (it types the conv's result float32);
    from_torch then imports the float32 copy and casts at main's boundary."""
    class Half(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 5)

        def forward(self, x, scale):
            y = torch.relu(self.bn(self.conv(x))).mean((2, 3))
            return self.fc(y) * scale, y

    torch.manual_seed(0)
    model = Half().eval().half()
    x, scale = torch.randn(2, 3, 9, 11).half(), torch.tensor(2.0)
    mod = from_torch(model, [x, scale])
    main = mod["main"]
    assert [str(p.ty.dtype) for p in main.params] == ["float16", "float32"]
    vm = tvm.relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(scale.numpy()))
    with torch.no_grad():
        want = model.float()(x.float(), scale)
    for g, w in zip(got, want):
        assert g.numpy().dtype == np.float16
        assert_close(g.numpy().astype("float32"), w.numpy(), rtol=2e-3, atol=2e-3, what="float16 model")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_as_parameters(cpu_target, dtype):
    """A half-precision model with its weights as parameters: they stay in the checkpoint's
    dtype (so a half checkpoint loads), their casts to float32 run once, in the weight
    transform; torch tensors go in directly (bfloat16 has no NumPy dtype)."""
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 7 * 5, 5)).eval().to(getattr(torch, dtype))
    x = torch.randn(2, 3, 7, 5).to(net[0].weight.dtype)
    mod, weights = from_torch(net, (x,), keep_params_as_input=True)
    main = mod["main"]
    assert int(main.attrs["num_input"]) == 1 and len(weights) == 8  # conv w/b, bn w/b/mean/var, fc w/b: 8
    assert {str(p.ty.dtype) for p in main.params} == {dtype}
    model = ext.Model(ext.build(mod, cpu_target))
    model.set_params(weights)
    got = torch.from_dlpack(model(x)).float().numpy()
    with torch.no_grad():
        want = net.float()(x.float()).numpy()
    assert model.transform_runs == 1
    tol = 2e-3 if dtype == "float16" else 2e-2
    assert_close(got, want, rtol=tol, atol=tol, what=f"{dtype} model with weights as parameters")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_decoder(cpu_target, dtype):
    """A half-precision Llama with a symbolic length (TVM's importer typed its float16 queries
    float32, and the function failed to rebuild at the rotary multiply): computed in float32 inside, so it
    matches the float32 model on the same half weights within one rounding of the output."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(2)
    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=48, vocab_size=50)
    net = transformers.LlamaModel(config).eval().to(getattr(torch, dtype))

    class Hidden(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, ids):
            return self.net(ids, use_cache=False).last_hidden_state

    length = torch.export.Dim("length", min=2, max=32)  # symbolic: the float32 body's sizes read on
    mod = from_torch(Hidden(net), (torch.randint(0, 50, (2, 7)),), dynamic_shapes={"ids": {1: length}})
    model = ext.Model(ext.build(mod, cpu_target))
    wide = Hidden(copy.deepcopy(net).float())
    for n in (7, 12):
        ids = torch.randint(0, 50, (2, n))
        got = torch.from_dlpack(model(ids))
        assert got.dtype == getattr(torch, dtype) and got.shape == (2, n, 32)
        with torch.no_grad():
            want = wide(ids).numpy()
        ulp = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7  # relative spacing of the half type
        assert_close(got.float().numpy(), want, rtol=ulp, atol=1e-3, what=f"{dtype} Llama, {n} tokens")


def test_float64_model_computes_in_float64(cpu_target):
    """The stock importer typed every conv and matmul result float32 (a float64 conv + bias
    failed to import) and TOPI's layer/group/instance norms refuse float64: here all of it runs
    in float64, to float64's precision."""
    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
            self.gn, self.inorm = torch.nn.GroupNorm(4, 8), torch.nn.InstanceNorm2d(8, affine=True)
            self.fc, self.ln = torch.nn.Linear(8 * 5 * 7, 11), torch.nn.LayerNorm(11)

        def forward(self, x):
            y = self.inorm(self.gn(torch.relu(self.bn(self.conv(x)))))
            return torch.softmax(self.ln(self.fc(y.flatten(1))) @ torch.ones(11, 3, dtype=x.dtype), -1)

    torch.manual_seed(3)
    net = Wide().eval().double()
    x = torch.randn(2, 3, 5, 7, dtype=torch.float64)
    got = ext.Model(ext.build(from_torch(net, (x,)), cpu_target, verbose=False))(x).numpy()
    with torch.no_grad():
        want = net(x).numpy()
    assert got.dtype == np.float64
    assert_close(got, want, rtol=1e-12, atol=1e-12, what="float64 model")


def test_integer_matmul_stays_integer(cpu_target):
    """``a @ b`` of int64 tensors is int64 in PyTorch; the stock importer asked for a float32
    result, which rounds products past 2**24."""
    class IntMatmul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b + 1

    a = torch.tensor([[2**30 + 1, 3], [-7, 2**20]])
    b = torch.tensor([[5, -1], [2**10 + 1, 9]])
    got = ext.Model(ext.build(from_torch(IntMatmul(), (a, b)), cpu_target, verbose=False))(a, b).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, (a @ b + 1).numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_keyword_inputs(cpu_target, dtype):
    """``from_torch(model, {"attention_mask": m, "input_ids": i})``: the inputs as keyword
    arguments (``model(**inputs)``), taken by ``main`` in the dict's order, which need not be the
    signature's; a symbolic length by argument name."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48,
                                     vocab_size=50)
    net = transformers.BertModel(config).eval().to(getattr(torch, dtype))
    ids, mask = torch.randint(0, 50, (2, 9)), torch.ones(2, 9, dtype=torch.int64)
    mask[1, 5:] = 0
    length = torch.export.Dim("length", min=2, max=32)
    mod = from_torch(net, {"attention_mask": mask, "input_ids": ids},
                     dynamic_shapes={"attention_mask": {1: length}, "input_ids": {1: length}})
    assert [p.name for p in mod["main"].params] == ["attention_mask", "input_ids"]
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    ids, mask = ids[:, :7], mask[:, :7]
    got = torch.from_dlpack(model(mask, ids)[0]).float().numpy()
    with torch.no_grad():
        want = net.float()(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    tol = 1e-4 if dtype == "float32" else 2e-3
    assert_close(got, want, rtol=tol, atol=tol, what=f"keyword inputs, {dtype}")


def test_half_model_keeps_a_float32_output():
    """A half model that upcasts one output (logits.float()) returns it in float32, the other
    in half: the output dtypes are the original's, not all narrowed."""
    class Upcast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 4)

        def forward(self, x):
            y = self.fc(x)
            return y.float().softmax(-1), y

    net = Upcast().eval().half()
    x = torch.randn(3, 6).half()
    main = from_torch(net, (x,))["main"]
    assert [str(f.dtype) for f in main.ret_ty.fields] == ["float32", "float16"]


def test_decoder_with_its_default_cache(cpu_target):
    """A causal LM called as transformers builds it (``use_cache=True``) returns a
    ``DynamicCache``: registered as a pytree, it comes out as the key and value tensors after
    the logits (the export had failed on it)."""
    transformers = pytest.importorskip("transformers")
    from torch.utils._pytree import tree_flatten

    torch.manual_seed(5)
    net = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=60)).eval()
    ids = torch.randint(0, 60, (2, 7))
    outs = ext.Model(ext.build(from_torch(net, {"input_ids": ids}), cpu_target, verbose=False))(ids)
    with torch.no_grad():
        want = [t.numpy() for t in tree_flatten(net(input_ids=ids))[0] if isinstance(t, torch.Tensor)]
    assert len(outs) == len(want) == 1 + 2 * 2  # logits, then (key, value) per layer
    for got, ref in zip(outs, want):
        assert_close(got.numpy(), ref, rtol=1e-4, atol=1e-4, what="GPT-2 logits and cache")


def test_half_import_leaves_the_module_as_it_was():
    """Finding a half model's output dtypes runs its forward on fake tensors; what that forward
    stores on the module (a table cached on first use) is put back, so the module still runs."""
    class Caching(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.table = torch.nn.Linear(4, 4), None

        def forward(self, x):
            if self.table is None:
                self.table = torch.arange(x.shape[0], dtype=x.dtype)[:, None]
            return self.fc(x) + self.table

    net = Caching().eval().half()
    x = torch.randn(3, 4).half()
    from_torch(net, (x,))
    assert net.table is None
    assert net(x).dtype == torch.float16
