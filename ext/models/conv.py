"""Built-in conv layer: ``relu(conv2d(x, W) + b)`` (NCHW / OIHW) with constant weights."""
from __future__ import annotations

import numpy as np
from tvm import relax


def conv_bias_relu(x_shape, w: np.ndarray, b: np.ndarray, stride=1, padding=0, groups=1):
    """A Relax module ``main(x: x_shape) -> relu(conv2d(x, w, stride, padding, groups) + b)``;
    ``b`` holds one value per output channel."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(tuple(x_shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), strides=stride, padding=padding,
                                                groups=groups))
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(b.reshape(1, -1, 1, 1)))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()
