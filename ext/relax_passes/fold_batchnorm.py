"""Fold inference batch norm into the preceding conv2d.

Rewrite (any data layout; the BN axis must be the conv output's channel axis)::

    batch_norm(conv2d(x, w) [+ b], gamma, beta, mean, var, eps)[0]
      -> conv2d(x, w * s[o]) + shift            s = gamma / sqrt(var + eps)
                                                shift = beta + (b - mean) * s   (b = 0 without a bias)

``w * s`` and ``shift`` are emitted as Relax arithmetic on the weights, so
the ``FoldConstant`` that follows turns them into new constants when the
weights are bound; otherwise they cost one small element-wise pass per call.
Batch norm is always treated as inference (moving statistics). The result is
the ``conv + bias`` form the conv2d epilogue fusion expects. Cost: none at
run time for constant weights (one fewer pass over the activation).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple_get_item, rewrite_call, wildcard


def _pattern(with_bias: bool):
    x, w, b = wildcard(), wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(x, w)
    pre = is_op("relax.add")(conv, b) if with_bias else conv
    stats = [wildcard() for _ in range(4)]
    bn = is_op("relax.nn.batch_norm")(pre, *stats)
    return is_tuple_get_item(bn, 0), conv, bn, (b if with_bias else None)


def conv_channel_axis(conv) -> int:
    """The conv2d output's channel axis in a 4-D layout, -1 in any other."""
    layout = str(conv.attrs.out_layout or conv.attrs.data_layout)
    return layout.index("C") if len(layout) == 4 and "C" in layout else -1


def _is_channel_vector(b, axis: int, channels: int) -> bool:
    """``b`` (right-aligned against the 4-D output) is 1 everywhere but ``channels`` at ``axis``."""
    shape = b.ty.shape
    if shape is None or len(shape) > 4 or any(not hasattr(d, "value") for d in shape):
        return False
    dims = [1] * (4 - len(shape)) + [int(d) for d in shape]
    return all(d == (channels if i == axis else 1) for i, d in enumerate(dims))


def _rewriter(conv_pat, bn_pat, bias_pat):
    def rewrite(expr, matches):
        conv, bn = matches[conv_pat], matches[bn_pat]
        axis = conv_channel_axis(conv)
        out_shape = conv.ty.shape
        kernel_layout = str(conv.attrs.kernel_layout)
        if axis < 0 or int(bn.attrs.axis) % 4 != axis or "O" not in kernel_layout or out_shape is None:
            return expr
        channels = int(out_shape[axis])
        gamma, beta, mean, var = bn.args[1:]
        eps = relax.const(float(bn.attrs.epsilon), str(conv.ty.dtype))
        scale = relax.op.divide(gamma, relax.op.sqrt(relax.op.add(var, eps)))
        if not bn.attrs.scale:
            scale = relax.op.divide(relax.op.ones_like(var), relax.op.sqrt(relax.op.add(var, eps)))
        w_shape = [1] * 4
        w_shape[kernel_layout.index("O")] = channels
        x, w = conv.args
        new_w = relax.op.multiply(w, relax.op.reshape(scale, w_shape))
        new_conv = relax.Call(conv.op, [x, new_w], conv.attrs)
        centered = relax.op.negative(mean)
        if bias_pat is not None:
            b = matches[bias_pat]
            if not _is_channel_vector(b, axis, channels):
                return expr
            centered = relax.op.subtract(relax.op.reshape(b, [channels]), mean)
        shift = relax.op.multiply(centered, scale)
        if bn.attrs.center:
            shift = relax.op.add(shift, beta)
        b_shape = [1] * 4
        b_shape[axis] = channels
        return relax.op.add(new_conv, relax.op.reshape(shift, b_shape))

    return rewrite


def FoldBatchNorm() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: every ``batch_norm(conv2d(..) [+ bias])[0]`` becomes ``conv2d(.., w*s) + shift``."""
    return tvm.transform.module_pass(_fold, opt_level=0, name="ext.FoldBatchNorm")


def _fold(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        new = func
        for with_bias in (True, False):
            pat, conv, bn, bias = _pattern(with_bias)
            new = rewrite_call(pat, _rewriter(conv, bn, bias), new)
        if not new.same_as(func):
            updates[gv] = new
    for gv, func in updates.items():
        mod[gv] = func
    return mod
