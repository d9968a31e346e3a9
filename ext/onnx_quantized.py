"""Quantized ONNX operators in the QOperator format, rewritten as float operators between
dequantize and quantize steps (the QDQ form) before TVM's importer sees them.

onnxruntime's quantization tools write a model in one of two formats. The QDQ one (``QuantizeLinear``
/ ``DequantizeLinear`` pairs around float ops) imports as it is. The QOperator one, and the
int8 models of the ONNX model zoo, use fused integer operators the importer rejects:
``QLinearConv``, ``QLinearMatMul``, ``ConvInteger`` (from ``quantize_dynamic`` of a CNN) and
onnxruntime's own ``QGemm``, ``QLinearAdd``, ``QLinearMul``, ``QLinearGlobalAveragePool``,
``QLinearAveragePool``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearConcat``.

Each becomes: every quantized input dequantized (``(float(q) - float(zero_point)) * scale``;
a per-channel scale reshaped onto its axis), the float operator with the same attributes, and
``QuantizeLinear`` of its result (round half to even, saturating, as the integer kernels
requantize). A bias (int32, scale ``x_scale * w_scale``) is dequantized the same way.
``ConvInteger`` gives its int32 sum: the float conv of the zero-point-shifted operands, rounded.

Why float: ext's float kernels are its fast ones, and weights (initializers) are dequantized
once at import by the constant folding that follows. What it costs: float32 sums are exact
below 2**24, past which a result may differ from the integer kernels' in the last bit of the
requantized value (one quantization step); onnxruntime's own QDQ execution rounds the same way.
"""
from __future__ import annotations

#: operator -> (float operator, (position, channel axis) of each (value, scale, zero point)
#: input triple, output (scale, zero point) positions, bias position or None)
_LINEAR = {
    "QLinearConv": ("Conv", [(0, 0), (3, 0)], (6, 7), 8),  # per output channel: the weight's axis 0
    "QLinearMatMul": ("MatMul", [(0, -1), (3, -1)], (6, 7), None),  # per column of b
    "QLinearAdd": ("Add", [(0, 0), (3, 0)], (6, 7), None),
    "QLinearMul": ("Mul", [(0, 0), (3, 0)], (6, 7), None),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", [(0, 0)], (3, 4), None),
    "QLinearAveragePool": ("AveragePool", [(0, 0)], (3, 4), None),
    "QLinearSigmoid": ("Sigmoid", [(0, 0)], (3, 4), None),
    "QLinearLeakyRelu": ("LeakyRelu", [(0, 0)], (3, 4), None),
}
REWRITTEN = (*_LINEAR, "QGemm", "QLinearConcat", "ConvInteger")


class _Rewriter:
    """Emits the replacement nodes of one model; ``ranks`` gives an initializer's rank (the
    per-channel scale of a weight is reshaped to broadcast along its axis)."""

    def __init__(self, model):
        import onnx

        self.onnx = onnx
        self.nodes: list = []
        self.inits: list = []
        self.ranks = {t.name: len(t.dims) for t in model.graph.initializer}
        self.count = 0

    def _name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}__q{self.count}"

    def node(self, op: str, inputs: list, stem: str, **attrs) -> str:
        out = self._name(stem)
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def _on_axis(self, name: str, axis: int, rank: int | None, stem: str) -> str:
        """A 1-D per-channel tensor reshaped to broadcast along ``axis`` of a rank-``rank`` value
        (as it is where the axis is the last one or the rank is unknown)."""
        if rank is None or axis in (-1, rank - 1):
            return name
        import numpy as np

        shape = self._name(stem + "_shape")
        dims = [-1 if i == axis % rank else 1 for i in range(rank)]
        self.inits.append(self.onnx.numpy_helper.from_array(np.array(dims, np.int64), shape))
        return self.node("Reshape", [name, shape], stem)

    def dequantize(self, value: str, scale: str, zero: str, stem: str, axis: int = 0) -> str:
        """``(float(value) - float(zero)) * scale``; ``scale``/``zero`` may be per-channel (on ``axis``)."""
        f = self.onnx.TensorProto.FLOAT
        x = self.node("Cast", [value], stem, to=f)
        rank = self.ranks.get(value)
        if zero:
            x = self.node("Sub", [x, self._on_axis(self.node("Cast", [zero], stem, to=f), axis, rank, stem)], stem)
        return self.node("Mul", [x, self._on_axis(scale, axis, rank, stem)], stem) if scale else x

    def rewrite(self, node) -> None:
        op, ins = node.op_type, list(node.input) + [""] * 9
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        stem = node.output[0]
        if op == "ConvInteger":
            x, w = self.dequantize(ins[0], "", ins[2], stem), self.dequantize(ins[1], "", ins[3], stem)
            y = self.node("Round", [self.node("Conv", [x, w], stem, **attrs)], stem)
            self.nodes.append(self.onnx.helper.make_node("Cast", [y], [stem], to=self.onnx.TensorProto.INT32))
            return
        if op == "QLinearConcat":  # (y_scale, y_zero, (x, x_scale, x_zero)...)
            parts = [self.dequantize(*ins[i:i + 3], stem) for i in range(2, len(node.input), 3)]
            self._quantize(self.node("Concat", parts, stem, axis=attrs["axis"]), ins[0], ins[1], stem)
            return
        if op == "QGemm":  # (a, a_scale, a_zero, b, b_scale, b_zero, [c], [y_scale], [y_zero])
            a = self.dequantize(*ins[0:3], stem)
            b = self.dequantize(*ins[3:6], stem, axis=0 if attrs.get("transB", 0) else 1)
            c = [self.dequantize(ins[6], self.node("Mul", [ins[1], ins[4]], stem), "", stem, axis=-1)] if ins[6] else []
            y = self.node("Gemm", [a, b, *c], stem, **attrs)
            if ins[7]:
                self._quantize(y, ins[7], ins[8], stem)
            else:  # a float result
                self.nodes.append(self.onnx.helper.make_node("Identity", [y], [stem]))
            return
        float_op, quantized, (ys, yz), bias = _LINEAR[op]
        if op in ("QLinearGlobalAveragePool", "QLinearAveragePool") and attrs.pop("channels_last", 0):
            raise NotImplementedError(f"{op} with channels_last=1 does not import (NCHW only)")
        args = [self.dequantize(*ins[i:i + 3], stem, axis=axis) for i, axis in quantized]
        if bias is not None and ins[bias]:
            args.append(self.dequantize(ins[bias], self.node("Mul", [ins[1], ins[4]], stem), "", stem))
        self._quantize(self.node(float_op, args, stem, **attrs), ins[ys], ins[yz], stem)

    def _quantize(self, y: str, scale: str, zero: str, out: str) -> None:
        self.nodes.append(self.onnx.helper.make_node("QuantizeLinear", [y, scale, zero] if zero else [y, scale], [out]))


def qdq_form(model):
    """``model`` (in place) with the operators of ``REWRITTEN`` (default and ``com.microsoft``
    domains) replaced by their float form; a model without them is returned as it is."""
    graph = model.graph
    if not any(n.op_type in REWRITTEN and n.domain in ("", "ai.onnx", "com.microsoft") for n in graph.node):
        return model
    rw = _Rewriter(model)
    for node in graph.node:
        if node.op_type in REWRITTEN and node.domain in ("", "ai.onnx", "com.microsoft"):
            rw.rewrite(node)
        else:
            rw.nodes.append(node)
    del graph.node[:]
    graph.node.extend(rw.nodes)
    graph.initializer.extend(rw.inits)
    return model


__all__ = ["REWRITTEN", "qdq_form"]
