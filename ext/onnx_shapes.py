"""ONNX converters that keep symbolic extents known: shapes stay ``ShapeExpr`` through the
size arithmetic exporters emit (``Shape`` -> ``Gather`` -> ``Concat`` -> ``Cast`` -> ``Resize``),
and a ``Concat`` of maps whose extents cannot be proved equal checks them at run time.

With a dynamic image height and width the stock converters turned such sizes into run-time
tensors or float arithmetic, every shape after them became unknown, and the import failed a few
nodes later (ShuffleNet's channel split, YOLO's and UNet's feature pyramids, DeepLabV3's
resize to the input's size). ``onnx_importer`` installs these in its converter table.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock


class Gather(stock.Gather):
    """``Gather`` from a ``Shape`` by a constant 1-D index (``x.chunk(2, 1)`` exports
    ``Gather(Shape(x), [1])``) stays a shape: the numbers, or a ``ShapeExpr`` of the symbolic
    extents. The stock converter made it a run-time tensor, and every shape after it unknown: a
    ShuffleNet exported with a dynamic height and width lost its shapes at the first channel split
    and stopped at a reshape. A ``Shape`` known only at run time (a ``shape_of`` call), which
    the stock converter took for a tensor, is read as an int64 tensor."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        data, index = inputs[0], stock.get_constant(inputs[1], params)
        if isinstance(data, relax.ShapeExpr) and isinstance(index, tvm.ir.GenericConst) and index.value.numpy().ndim == 1:
            values = [data.values[int(i)] for i in index.value.numpy()]  # ONNX counts negative indices from the end
            if all(isinstance(v, tvm.tirx.IntImm) for v in values):
                return relax.const(np.array([int(v) for v in values], "int64"), "int64")
            return relax.ShapeExpr(values)
        if isinstance(data.ty, relax.ShapeType) and not isinstance(data, relax.ShapeExpr):
            inputs = [bb.normalize(relax.op.shape_to_tensor(data)), *inputs[1:]]
        return super()._impl_v13(bb, inputs, attr, params)


class Concat(stock.Concat):
    """Tensors whose other extents are symbolic and not provably equal (an upsampled map
    ``2 * ((h - 1) // 32 + 1)`` beside a lateral ``(h - 1) // 16 + 1``: equal for the sizes the
    model takes, a multiple of 32) are matched to the first one's extents with a run-time check
    (``match_cast``): the concat keeps a shape, and a size where they differ stops with the VM's
    shape error, as PyTorch stops. The stock converter left the result's shape unknown and the
    next ``Resize`` or ``Conv`` failed to import (YOLO with a dynamic height and width)."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        tensors = [bb.normalize(x) if isinstance(x, relax.Expr) else x for x in inputs]
        shapes = [getattr(getattr(x, "ty", None), "shape", None) for x in tensors]
        if len(tensors) < 2 or not all(isinstance(x.ty, relax.TensorType) and isinstance(s, relax.ShapeExpr)
                                       for x, s in zip(tensors, shapes)):
            return super()._impl_v13(bb, inputs, attr, params)
        rank = len(shapes[0].values)
        if any(len(s.values) != rank for s in shapes):
            return super()._impl_v13(bb, inputs, attr, params)
        axis = attr.get("axis", 0) % rank
        analyzer = tvm.sym.Analyzer()
        first = shapes[0].values
        matched = [tensors[0]]
        for x, s in zip(tensors[1:], shapes[1:]):
            want = [s.values[i] if i == axis else first[i] for i in range(rank)]
            if all(analyzer.can_prove_equal(a, b) for a, b in zip(want, s.values)):
                matched.append(x)
            else:
                matched.append(bb.match_cast(x, relax.TensorType(want, x.ty.dtype)))
        return relax.op.concat(matched, axis=axis)


class Cast(stock.Cast):
    """A shape cast to int64 (its own type: sizes read for a ``Resize`` to another map's size)
    stays a shape; the stock converter made a symbolic one a run-time tensor, which the
    ``Concat`` of the output size then refused beside a shape (DeepLabV3's pooling branch
    with a dynamic image size)."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        if isinstance(inputs[0], relax.ShapeExpr) and stock.get_type(attr["to"]) == "int64":
            return inputs[0]
        return super()._impl_v13(bb, inputs, attr, params)


def integral_scales(inputs: list, params) -> list:
    """``Resize`` inputs with whole-number ``scales`` on a symbolic image as int64: the stock
    converter then sizes the output ``2 * h``, not ``int64(2.0 * float32(h))``, which no later
    shape check can compare (YOLO's concat of an upsampled map with a lateral one lost every
    shape)."""
    x = inputs[0]
    shape = x.ty.shape if isinstance(getattr(x, "ty", None), relax.TensorType) else None
    scales = stock.get_constant(inputs[2], params) if len(inputs) > 2 and inputs[2] is not None else None
    if shape is None or not isinstance(scales, tvm.ir.GenericConst) or all(
            isinstance(d, tvm.tirx.IntImm) for d in shape):
        return inputs
    values = scales.value.numpy()
    if values.size != len(shape) or not np.all((values == np.round(values)) & (values >= 1)):
        return inputs
    return inputs[:2] + [relax.const(values.astype("int64"))] + inputs[3:]


def resize_to_symbolic_size(convert, bb, inputs, attr, params, sizes: relax.ShapeExpr):
    """A ``Resize`` whose ``sizes`` come from another tensor's symbolic shape (a resize to the
    input's size): ``convert`` (the stock converter, which reads each size as a number) maps
    the attributes with placeholder sizes, then the call takes the symbolic ones."""
    rank = len(sizes.values)
    placeholder = relax.const(np.ones(rank, "int64"))
    out = convert(bb, inputs[:3] + [placeholder] + inputs[4:], attr, params)
    if not (isinstance(out, relax.Call) and out.op.name in ("relax.image.resize2d", "relax.image.resize3d")):
        raise NotImplementedError(f"Resize to a symbolic size {list(sizes.values)} on a {rank}-D input with "
                                  "these attributes (a run-time ROI or a 1-D resize)")
    return relax.Call(out.op, [out.args[0], relax.ShapeExpr(list(sizes.values)[2:])], out.attrs)


CONVERTERS = {"Gather": Gather, "Concat": Concat, "Cast": Cast}


# -- ONNX auto_pad SAME_* widths (the Conv converter of onnx_importer) --------------------------------

def same_widths(n, k: int, s: int, d: int, mode: str) -> tuple:
    """``(begin, end)`` padding of one axis for ONNX ``auto_pad`` ``SAME_UPPER``/``SAME_LOWER``:
    output ``ceil(n / s)``, the odd cell at the end (UPPER) or the beginning (LOWER); ints for a
    static size, PrimExprs for a symbolic one."""
    if isinstance(n, int):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
    else:
        total = tvm.tirx.max((tvm.tirx.floordiv(n + s - 1, s) - 1) * s + (k - 1) * d + 1 - n, 0)
    small = total // 2
    begin = small if mode == "SAME_UPPER" else total - small
    return begin, total - begin


def same_pads(x, kernel, strides, dilations, mode: str) -> list | None:
    """The ``pads`` (begins, then ends) of ``same_widths``, known when every spatial extent is
    static or its stride is 1 (the total ``dilation * (k - 1)`` at any size); None otherwise."""
    pairs = []
    for size, k, s, d in zip(list(x.ty.shape.values)[2:], kernel, strides, dilations):
        if isinstance(size, tvm.tirx.IntImm):
            pairs.append(same_widths(int(size), k, s, d, mode))
        elif s == 1:  # the total, dilation * (k - 1), is the same at every size (any size stands in)
            pairs.append(same_widths(1, k, 1, d, mode))
        else:
            return None
    return [p[0] for p in pairs] + [p[1] for p in pairs]


def same_padded(bb, x, kernel, strides, dilations, mode: str):
    """``x`` zero-padded as ``auto_pad`` SAME_* asks, the widths symbolic (a strided conv on a
    run-time size: an odd and an even height pad differently): zeros concatenated on each side
    (``relax.nn.pad`` takes numbers only; the stock converter's TOPI pad stopped on the
    symbolic widths)."""
    for axis, (k, s, d) in enumerate(zip(kernel, strides, dilations), start=2):
        shape = list(x.ty.shape.values)
        widths = same_widths(shape[axis], k, s, d, mode)
        zeros = [relax.op.zeros(relax.ShapeExpr(shape[:axis] + [e] + shape[axis + 1:]), x.ty.dtype) for e in widths]
        x = bb.normalize(relax.op.concat([zeros[0], x, zeros[1]], axis=axis))
    return x
