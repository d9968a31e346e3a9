"""Quantized ONNX models (onnxruntime's quantization tools) against onnxruntime on the same file:
the QOperator format (``QLinearConv``, ``QGemm``, ``QLinearAdd``, ...) and dynamic quantization
(``ConvInteger``, ``MatMulInteger``) through ``ext/onnx_quantized.py``; the QDQ format as it is."""
from __future__ import annotations

import numpy as np
import pytest

import ext

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

#: 7-bit weights. Without VNNI, onnxruntime's uint8 x int8 kernels add pairs of products in
#: saturating int16 (vpmaddubsw): on an AVX2 host its outputs were 3 steps (static) and 5% (dynamic)
#: off the exact sums ext computes; its documentation gives reduce_range for such CPUs
REDUCE_RANGE = True


class Mixed(torch.nn.Module):
    """Every operator the QOperator format fuses: convs (odd channel counts, a strided one), a
    residual add, leaky ReLU, sigmoid times a tensor, a concat, an average pool, a mean, a
    linear layer and a matmul with a constant."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 7, 3, padding=1)
        self.c2 = torch.nn.Conv2d(7, 7, 3, padding=1)
        self.c3 = torch.nn.Conv2d(14, 5, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(5, 3)
        self.w = torch.nn.Parameter(torch.randn(5, 4))

    def forward(self, x):
        a = torch.relu(self.c1(x))
        b = torch.nn.functional.leaky_relu(self.c2(a), 0.1) + a
        c = torch.cat([b, torch.sigmoid(a) * b], 1)
        d = torch.nn.functional.avg_pool2d(self.c3(c), 2).mean((2, 3))
        return self.fc(d), d @ self.w


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, shape):
        rng = np.random.default_rng(1)
        self.batches = iter([{"x": rng.standard_normal(shape).astype("float32")} for _ in range(6)])

    def get_next(self):
        return next(self.batches, None)


def _float_model(tmp_path, shape):
    torch.manual_seed(0)
    path = str(tmp_path / "float.onnx")
    torch.onnx.export(Mixed().eval(), (torch.randn(*shape),), path, opset_version=13, input_names=["x"], dynamo=False)
    return path


def _output_steps(path) -> list[float]:
    """The quantization step of each graph output (the scale of the DequantizeLinear producing it)."""
    model = onnx.load(path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    made = {n.output[0]: n for n in model.graph.node}
    steps = []
    for out in model.graph.output:
        node = made[out.name]
        steps.append(float(inits[node.input[1]]) if node.op_type == "DequantizeLinear" else 0.0)
    return steps


def _check_against_onnxruntime(path, shape, cpu_target):
    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ext.Model(ext.build(ext.frontend.from_onnx(path), cpu_target, verbose=False))(x)
    got = [got] if hasattr(got, "numpy") else list(got)
    for g, w, step in zip(got, want, _output_steps(path)):
        # integer kernels and float sums may round a value at a tie apart: one step at most
        np.testing.assert_allclose(g.numpy(), w, rtol=0, atol=step + 1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_qoperator_format_matches_onnxruntime(tmp_path, cpu_target, per_channel, activations):
    shape = (1, 3, 13, 11)
    path = str(tmp_path / "q.onnx")
    quantization.quantize_static(_float_model(tmp_path, shape), path, _Calibration(shape),
                                 quant_format=quantization.QuantFormat.QOperator, per_channel=per_channel,
                                 activation_type=getattr(quantization.QuantType, activations),
                                 weight_type=quantization.QuantType.QInt8, reduce_range=REDUCE_RANGE)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"QLinearConv", "QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
            "QLinearLeakyRelu", "QLinearAveragePool", "QLinearMatMul"} <= ops
    _check_against_onnxruntime(path, shape, cpu_target)


def test_dynamic_quantization_of_convs(tmp_path, cpu_target):
    """``quantize_dynamic`` of a CNN: ``ConvInteger`` (the int32 sums) and ``MatMulInteger``."""
    shape = (2, 3, 9, 7)
    path = str(tmp_path / "dynamic.onnx")
    quantization.quantize_dynamic(_float_model(tmp_path, shape), path, reduce_range=REDUCE_RANGE)
    assert "ConvInteger" in {n.op_type for n in onnx.load(path).graph.node}
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ext.Model(ext.build(ext.frontend.from_onnx(path), cpu_target, verbose=False))(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


def test_qdq_format_imports_as_it_is(tmp_path, cpu_target):
    shape = (1, 3, 13, 11)
    path = str(tmp_path / "qdq.onnx")
    quantization.quantize_static(_float_model(tmp_path, shape), path, _Calibration(shape),
                                 quant_format=quantization.QuantFormat.QDQ, reduce_range=REDUCE_RANGE)
    _check_against_onnxruntime(path, shape, cpu_target)


def _graph_case(name):
    """A one-node ONNX model of ``name`` with edge-case operands, and its feed."""
    from onnx import TensorProto as T, helper, numpy_helper as nh

    rng = np.random.default_rng(4)

    def scalar(value, dtype, key):
        return nh.from_array(np.array(value, dtype), key)

    if name == "QLinearConv":  # uint8 weights with a zero point, no bias, stride 2, uneven pads
        x = rng.integers(0, 256, (1, 5, 9, 7), dtype=np.uint8)
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                strides=[2, 2], pads=[1, 0, 1, 2])
        inits = [scalar(0.02, np.float32, "xs"), scalar(128, np.uint8, "xz"),
                 nh.from_array(rng.integers(0, 256, (6, 5, 3, 3), dtype=np.uint8), "w"),
                 scalar(0.01, np.float32, "ws"), scalar(120, np.uint8, "wz"), scalar(0.5, np.float32, "ys"),
                 scalar(10, np.uint8, "yz")]
        types = (T.UINT8, T.UINT8)
    elif name == "ConvInteger":  # no zero points
        x = rng.integers(-20, 20, (2, 3, 8, 8), dtype=np.int8)
        node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        inits = [nh.from_array(rng.integers(-20, 20, (4, 3, 3, 3), dtype=np.int8), "w")]
        types = (T.INT8, T.INT32)
    else:  # QLinearMatMul with a batched int8 left operand
        x = rng.integers(-128, 128, (2, 5, 16), dtype=np.int8)
        node = helper.make_node("QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
        inits = [scalar(0.05, np.float32, "as"), scalar(3, np.int8, "az"),
                 nh.from_array(rng.integers(-128, 128, (16, 7), dtype=np.int8), "b"), scalar(0.02, np.float32, "bs"),
                 scalar(0, np.int8, "bz"), scalar(0.9, np.float32, "ys"), scalar(-5, np.int8, "yz")]
        types = (T.INT8, T.INT8)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", types[0], x.shape)],
                              [helper.make_tensor_value_info("y", types[1], None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, x


@pytest.mark.parametrize("name", ["QLinearConv", "ConvInteger", "QLinearMatMul"])
def test_integer_operators_match_onnxruntime_exactly(cpu_target, name):
    model, x = _graph_case(name)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ext.Model(ext.build(ext.frontend.from_onnx(model), cpu_target, verbose=False))(x).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
