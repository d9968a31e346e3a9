"""Weights as run-time parameters (issue 14): weight transforms lifted out of ``main`` and run
once per weight set (``ext.Model``), the frontends' ``keep_params_as_input``, and
``matmul.stream`` (a weight that arrives with every call, read in place)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.models.transformer import encoder_layer
from ext.runner import CompiledCandidate, random_inputs
from ext.strategies import REGISTRY
from ext.testing import assert_close
from ext.workload import Workload


class SmallConvNet(torch.nn.Module):
    """conv + BN + relu, a 3x3 stack with a residual, a 1x1 stride-2 conv, a linear head:
    packing, filter transforms and BN folding all act on the weights."""

    def __init__(self, c: int = 16, classes: int = 11):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(c)
        self.down = torch.nn.Conv2d(c, 2 * c, 1, stride=2)
        self.fc = torch.nn.Linear(2 * c * 7 * 7, classes)

    def forward(self, x):
        y = torch.relu(self.bn1(self.stem(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(torch.relu(self.down(y)).flatten(1))


def conv_net(seed: int):
    torch.manual_seed(seed)
    net = SmallConvNet().eval()
    with torch.no_grad():  # statistics away from (0, 1): BN folding changes the weights
        for bn in (net.bn1, net.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return net, (torch.randn(1, 3, 13, 13),)


def mlp(seed: int):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(37, 61), torch.nn.ReLU(), torch.nn.Linear(61, 29)).eval()
    return net, (torch.randn(3, 37),)


def encoder(seed: int):
    return encoder_layer(hidden=64, heads=4, ffn=96, seed=seed), (torch.randn(1, 17, 64),)


class _Hidden(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, ids):
        return self.decoder(input_ids=ids).last_hidden_state


def moe(seed: int):
    """A Mixtral layer: the experts' stacked weights go through FuseExpertGather's panel
    transform, which must move to ``main_transform_params`` with the others."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = transformers.MixtralConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=40, vocab_size=97, num_local_experts=3, num_experts_per_tok=2,
                                     use_cache=False)
    return _Hidden(transformers.MixtralModel(cfg).eval()).eval(), (torch.randint(0, 97, (1, 13)),)


MODELS = {"conv_net": conv_net, "mlp": mlp, "encoder": encoder, "moe": moe}


def _torch_out(net, inputs) -> np.ndarray:
    with torch.no_grad():
        return net(*inputs).numpy()


def _lifted(name: str, seed: int = 0):
    net, inputs = MODELS[name](seed)
    mod, weights = ext.frontend.from_torch(net, inputs, keep_params_as_input=True)
    return net, inputs, mod, weights


def _tol(ref: np.ndarray) -> dict:
    return dict(rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def _function_text(ex, name: str) -> str:
    """One function's VM instructions from ``ex.as_text()``."""
    text = ex.as_text()
    found = re.search(rf"^@{name}:\n(.*?)(?=^@|\Z)", text, re.S | re.M)
    assert found, f"no function {name} in the executable"
    return found.group(1)


def _kernels_called(ex, name: str) -> set:
    return {c for c in re.findall(r"call\s+(\S+)", _function_text(ex, name)) if not c.startswith("vm.builtin")}


# -- lifted builds equal bound builds -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_lifted_build_equals_bound_build(cpu_target, name):
    net, inputs, mod, weights = _lifted(name)
    bound = ext.frontend.from_torch(net, inputs)
    ex_bound = ext.build(bound, cpu_target, verbose=False)
    picks_bound = [(d.name, str(d.config)) for d in ext.last_report().decisions]
    ex = ext.build(mod, cpu_target, verbose=False)
    picks = [(d.name, str(d.config)) for d in ext.last_report().decisions]
    assert picks == picks_bound, "weights as parameters must select the bound build's kernels"

    model = ext.Model(ex)
    model.set_params(weights)
    got = model(*[x.numpy() for x in inputs]).numpy()
    vm = relax.VirtualMachine(ex_bound, tvm.cpu())
    want = vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs]).numpy()
    assert_close(got, want, **_tol(want), what=f"{name}: lifted vs bound")
    ref = _torch_out(net, inputs)
    assert_close(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())), what=f"{name} vs PyTorch")


def test_weight_transforms_leave_main_and_run_once(cpu_target):
    net, inputs, mod, weights = _lifted("conv_net")
    ex = ext.build(mod, cpu_target, verbose=False)
    lifted = _kernels_called(ex, "main_transform_params")
    in_main = _kernels_called(ex, "main")
    transforms = {k for k in lifted if re.search(r"_in\d+$", k)}  # packing / filter transforms
    assert transforms, f"no weight transform was lifted: {sorted(lifted)}"
    assert not {k for k in in_main if re.search(r"_in\d+$", k)}, f"main still transforms weights: {sorted(in_main)}"

    model = ext.Model(ex)
    calls = []
    inner = model._transform
    model._transform = lambda ws: calls.append(1) or inner(ws)
    model.set_params(weights)
    x = inputs[0].numpy()
    first = model(x).numpy()
    for _ in range(3):
        assert_close(model(x).numpy(), first, what="repeated call")
    assert len(calls) == 1 and model.transform_runs == 1


def test_set_params_twice_switches_weights(cpu_target):
    net, inputs, mod, weights = _lifted("conv_net", seed=0)
    other, _, _, other_weights = _lifted("conv_net", seed=1)
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    x = inputs[0].numpy()
    for n, w in ((net, weights), (other, other_weights), (net, weights)):
        model.set_params(w)
        ref = _torch_out(n, inputs)
        assert_close(model(x).numpy(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert model.transform_runs == 3


@pytest.mark.parametrize("name", ["conv_net", "encoder"])
def test_weights_are_never_written(cpu_target, name):
    """The caller's tensors (passed as tvm tensors: no copy) survive set_params and calls: no
    kernel writes in place over a weight."""
    _, inputs, mod, weights = _lifted(name)
    tensors = [tvm.runtime.tensor(w) for w in weights]
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    model.set_params(tensors)
    for _ in range(2):
        model(inputs[0].numpy())
    for t, w in zip(tensors, weights):
        np.testing.assert_array_equal(t.numpy(), w)


class ScaledLinear(torch.nn.Module):
    """A 0-d parameter (CLIP's ``logit_scale``) and a 0-d input beside a matrix."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(7, 5)
        self.scale = torch.nn.Parameter(torch.tensor(2.5))

    def forward(self, x, shift):
        return self.fc(x) * self.scale.exp() + shift


def test_zero_dim_weight_and_input(cpu_target):
    """A 0-d weight and a 0-d input keep their shape () on the way into the VM (NumPy's
    ``ascontiguousarray`` would make them (1,), which the signature check refuses)."""
    torch.manual_seed(0)
    net, inputs = ScaledLinear().eval(), (torch.randn(3, 7), torch.tensor(-0.75))
    mod, weights = ext.frontend.from_torch(net, inputs, keep_params_as_input=True)
    assert any(w.ndim == 0 for w in weights)
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    model.set_params(weights)
    ref = _torch_out(net, inputs)
    assert_close(model(*(x.numpy() for x in inputs)).numpy(), ref, rtol=1e-5, atol=1e-5)


class BufferedNet(torch.nn.Module):
    """A persistent buffer (a checkpoint's, like batch-norm statistics) and a non-persistent one
    (derived, like a rotary table: not in ``state_dict``)."""

    def __init__(self, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.fc = torch.nn.Linear(6, 6)
        self.register_buffer("shift", torch.randn(6, generator=gen))
        self.register_buffer("table", torch.arange(6.0), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.table + self.shift


def test_non_persistent_buffer_stays_a_constant(cpu_target):
    """The weights are the checkpoint's floating-point entries; a non-persistent buffer is bound
    (as a parameter ``torch.export`` refused the model: "not in the state dict")."""
    nets = [BufferedNet(seed).eval() for seed in (0, 1)]
    x = torch.randn(3, 6)
    lifted = [ext.frontend.from_torch(net, (x,), keep_params_as_input=True) for net in nets]
    assert len(lifted[0][1]) == len(nets[0].state_dict()) == 3
    model = ext.Model(ext.build(lifted[0][0], cpu_target, verbose=False))
    for net, (_, weights) in zip(nets, lifted):
        model.set_params(weights)
        assert_close(model(x.numpy()).numpy(), _torch_out(net, (x,)), rtol=1e-5, atol=1e-5)


def test_weights_by_name(cpu_target):
    net, inputs, mod, weights = _lifted("mlp")
    ex = ext.build(mod, cpu_target, verbose=False)
    names = [n for n, _, _ in ex.ext_params["main"].weights]
    model = ext.Model(ex)
    model.set_params(dict(zip(names, weights)))
    ref = _torch_out(net, inputs)
    assert_close(model(inputs[0]).numpy(), ref, **_tol(ref))


# -- bad input: clear errors ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp_model():
    net, inputs, mod, weights = _lifted("mlp")
    return ext.Model(ext.build(mod, ext.target.cpu(), verbose=False)), weights, inputs[0].numpy()


def test_missing_weight_is_a_clear_error(mlp_model):
    model, weights, _ = mlp_model
    with pytest.raises(ValueError, match=r"expected 4 weights \(.*\), got 3"):
        model.set_params(weights[:3])


def test_wrong_shaped_weight_names_it(mlp_model):
    model, weights, _ = mlp_model
    bad = list(weights)
    bad[2] = np.zeros((29, 60), "float32")
    want = r"weight 2 \('p_2_weight'\): expected shape \(29, 61\) float32, got \(29, 60\)"
    with pytest.raises(ValueError, match=want):
        model.set_params(bad)
    bad[2] = weights[2].astype("float64")
    with pytest.raises(ValueError, match="float32, got .* float64"):
        model.set_params(bad)


def test_weights_by_name_missing_and_unknown(mlp_model):
    model, weights, _ = mlp_model
    names = [n for n, _, _ in model.spec.weights]
    by_name = dict(zip(names, weights))
    by_name.pop(names[1])
    by_name["p_9_weight"] = weights[1]
    with pytest.raises(ValueError, match=rf"missing \['{names[1]}'\], unknown \['p_9_weight'\]"):
        model.set_params(by_name)


def test_call_before_set_params_and_wrong_input(cpu_target):
    _, inputs, mod, weights = _lifted("mlp")
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    with pytest.raises(RuntimeError, match="set_params"):
        model(inputs[0].numpy())
    model.set_params(weights)
    with pytest.raises(ValueError, match=r"input 0 \('input'\): expected shape \(3, 37\) float32, got \(3, 36\)"):
        model(np.zeros((3, 36), "float32"))
    with pytest.raises(ValueError, match=r"expected 1 inputs \(input\), got 2"):
        model(inputs[0].numpy(), inputs[0].numpy())


def test_bound_module_needs_no_params(cpu_target):
    net, inputs = mlp(0)
    model = ext.Model(ext.build(ext.frontend.from_torch(net, inputs), cpu_target, verbose=False))
    ref = _torch_out(net, inputs)
    assert_close(model(inputs[0]).numpy(), ref, **_tol(ref))


# -- ONNX ------------------------------------------------------------------------------------------

def test_onnx_keep_params_as_input(cpu_target, tmp_path):
    import onnx  # noqa: F401
    net, inputs = conv_net(3)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, inputs, str(path), input_names=["x"], dynamo=False)
    mod, weights = ext.frontend.from_onnx(str(path), keep_params_as_input=True)
    assert int(mod["main"].attrs["num_input"]) == 1 and "params" not in mod["main"].attrs
    assert len(weights) == len(mod["main"].params) - 1
    model = ext.Model(ext.build(mod, cpu_target, verbose=False))
    model.set_params(weights)
    ref = _torch_out(net, inputs)
    assert_close(model(inputs[0].numpy()).numpy(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_onnx_integer_initializers_stay_constants(cpu_target):
    """PyTorch's dynamo exporter writes a reshape's target shape as an initializer; as a parameter
    the reshape had no static shape and the import failed. Only the float initializers (the
    weights) become parameters."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 6)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, -1, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([2, -1, 3], "int64"), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, weights = ext.frontend.from_onnx(model, keep_params_as_input=True)
    assert len(weights) == 1 and weights[0].shape == (5, 6)
    assert [t.name for t in model.graph.initializer] == ["w", "shape"]  # the caller's model is untouched
    compiled = ext.Model(ext.build(mod, cpu_target, verbose=False))
    compiled.set_params(weights)
    x = rng.standard_normal((3, 5)).astype("float32")
    assert_close(compiled(x).numpy(), (x @ w).reshape(2, -1, 3), rtol=1e-5, atol=1e-5)


# -- run-time weights: matmul.stream ----------------------------------------------------------------

def _runtime_weight_module(M: int, N: int, K: int, nk: bool):
    """``main(x, w, b) = x @ w + b`` (``w`` ``(K, N)``) or ``x @ w.T + b`` (``w`` ``(N, K)``): every
    tensor an input of every call (no ``num_input``)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((M, K), "float32"))
    w = relax.Var("w", relax.TensorType((N, K) if nk else (K, N), "float32"))
    b = relax.Var("b", relax.TensorType((N,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            rhs = bb.emit(relax.op.permute_dims(w, [1, 0])) if nk else w
            y = bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, rhs)), b))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("M", [1, 3, 17])
@pytest.mark.parametrize("N,K,nk", [(257, 131, False), (131, 257, True), (1031, 1031, False), (1021, 1031, True)])
def test_runtime_weight_matmul_reads_weight_in_place(cpu_target, M, N, K, nk):
    """A weight passed with every call is never packed: matmul.stream reads it in place (the
    direct kernel on problems under 2.1 MFLOP, which reads it in place as well)."""
    rng = np.random.default_rng(M * 1000 + N)
    x = rng.uniform(-1, 1, (M, K)).astype("float32")
    w = rng.uniform(-1, 1, (N, K) if nk else (K, N)).astype("float32")
    b = rng.uniform(-1, 1, N).astype("float32")
    ex = ext.build(_runtime_weight_module(M, N, K, nk), cpu_target, verbose=False)
    (d,) = ext.last_report().decisions
    small = 2 * M * N * K <= 2 ** 21
    assert d.name == ("matmul.direct" if small else "matmul.stream"), (d.name, d.reason)
    assert not d.workload.attr("b_const")
    assert not {k for k in _kernels_called(ex, "main") if re.search(r"_in\d+$", k)}, "no per-call packing"
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a) for a in (x, w, b)]).numpy()
    ref = x.astype("float64") @ (w.T if nk else w).astype("float64") + b
    assert_close(got, ref, rtol=1e-5, atol=4e-6 * K, what=f"{M}x{N}x{K} {'nk' if nk else 'kn'}")


@pytest.mark.parametrize("M,N,K,nk", [(1, 257, 131, False), (3, 131, 257, True), (17, 29, 1009, True),
                                      (17, 1031, 67, False), (1, 13, 7, False), (3, 5, 7, True)])
def test_stream_kernel_matches_numpy(cpu_target, M, N, K, nk):
    """matmul.stream itself on odd shapes, also where selection prefers the direct kernel: an
    overlapping last vector (kn, N % 16), a scalar K tail (nk), axes shorter than a vector."""
    cand = REGISTRY.get("matmul.stream")
    wl = Workload("matmul", [(M, K), (N, K) if nk else (K, N), (N,)], ["float32"] * 3, "float32",
                  attrs={"transpose_b": nk, "b_const": False, "out_shape": (M, N)}, epilogue=("bias", "relu"))
    assert cand.applies(wl, cpu_target)
    xs = random_inputs(wl, seed=M + N)
    a, bw, bias = (v.astype("float64") for v in xs)
    ref = np.maximum(a @ (bw.T if nk else bw) + bias, 0)
    out = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run(xs)
    assert_close(out, ref, rtol=1e-5, atol=4e-6 * max(K, 16), what=f"{M}x{N}x{K}")


def test_runtime_weight_at_large_m_is_still_packed(cpu_target):
    ext.build(_runtime_weight_module(96, 211, 97, True), cpu_target, verbose=False)
    (d,) = ext.last_report().decisions
    assert d.name == "matmul.packed"
    stream = next(a for a in d.alternatives if a.candidate == "matmul.stream")
    assert "M=96" in stream.reason


def test_weight_parameter_is_packed_once_not_streamed(cpu_target):
    """A weight parameter (attr num_input) is known before the first call: packed once in
    main_transform_params, like a constant; matmul.stream only takes weights of every call."""
    mod = _runtime_weight_module(1, 257, 131, True)
    mod["main"] = mod["main"].with_attr("num_input", 1)
    ex = ext.build(mod, cpu_target, verbose=False)
    (d,) = ext.last_report().decisions
    assert d.name == "matmul.gemv" and d.workload.attr("b_const")
    assert any(re.search(r"_in\d+$", k) for k in _kernels_called(ex, "main_transform_params"))
    rng = np.random.default_rng(5)
    x, w, b = (rng.uniform(-1, 1, s).astype("float32") for s in [(1, 131), (257, 131), (257,)])
    model = ext.Model(ex)
    model.set_params([w, b])
    assert_close(model(x).numpy(), x.astype("float64") @ w.T.astype("float64") + b, rtol=1e-5, atol=4e-6 * 131)


@pytest.mark.parametrize("nk", [False, True])
def test_stream_space_points_are_correct(cpu_target, nk):
    """Tuning may pick any point of matmul.stream's space: a few of each, on an odd shape."""
    cand = REGISTRY.get("matmul.stream")
    M, N, K = 5, 53, 41
    shapes = [(M, K), (N, K) if nk else (K, N), (N,), (M, N)]
    wl = Workload("matmul", shapes, ["float32"] * 4, "float32",
                  attrs={"transpose_b": nk, "b_const": False, "out_shape": (M, N)},
                  epilogue=("bias", "relu", "residual"))
    xs = random_inputs(wl, seed=7)
    a, bw, bias, res = (v.astype("float64") for v in xs)
    ref = np.maximum(a @ (bw.T if nk else bw) + bias, 0) + res
    space = cand.space(wl, cpu_target)
    assert len(space) >= 8
    for cfg in space[:: max(1, len(space) // 8)]:
        out = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(out, ref, rtol=1e-5, atol=4e-6 * K, what=f"{cfg}")


def test_bad_num_input_is_a_clear_error(cpu_target):
    mod = _runtime_weight_module(1, 17, 13, False)
    mod["main"] = mod["main"].with_attr("num_input", 4)
    with pytest.raises(ValueError, match="num_input=4 but the function has 3 parameters"):
        ext.build(mod, cpu_target, verbose=False)
