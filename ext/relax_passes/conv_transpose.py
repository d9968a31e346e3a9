"""``relax.nn.conv2d_transpose`` as a conv2d, so ext's conv2d candidates run it:
``ConvTransposeToConv2d``.

No candidate implements a transposed convolution: it ran the stock lowering (a zero-dilated,
padded input and a direct sum with a bounds test per tap, unscheduled). Depth Anything's DPT
head upsamples two feature maps with ``ConvTranspose2d(k=4, s=4)`` and ``(k=2, s=2)``: 113 and
28 ms of the model's 207, onnxruntime's two ConvTranspose nodes 0.45 ms (2.7x its time end to end).

Kernel equal to the stride, no padding (DPT, U-Net's up-convolutions, SAM's upscaling): every
input pixel fills its own ``s x s`` output block, ``y[n, o, i*s + a, j*s + b] = sum_c x[n, c, i, j]
* w[c, o, a, b]``. That is a 1x1 conv to ``O*s*s`` channels (the weight ``(C, O, s, s)`` read as
``(O*s*s, C, 1, 1)``) followed by a depth-to-space reshape and transpose: the same products, the
same sums.

Any other stride, kernel, padding or output padding: the textbook equivalence, a stride-1
conv2d of the input dilated by the stride (``s - 1`` zeros between pixels, made by a reshape of
the input padded with a zero axis) with the flipped kernel, its in/out axes swapped per group,
padded by ``k - 1 - p`` (plus the output padding at the bottom and right): the stock lowering's
own formulation, run by ext's conv2d kernels. A dilated kernel is a dilated conv2d, padded by
``d * (k - 1) - p`` (the stock lowering wrote the dilation's zeros into the kernel, where they
met a NaN of the input: NaN at outputs PyTorch computes from numbers). The dilation's zeros cost ``s*s`` times the
products a scatter would do, far less time than the stock lowering all the same. Like the stock
lowering (and any conv with zero padding), the zeros meet the weights: an infinite weight gives
NaN (``0 * inf``) where PyTorch's scatter gives an infinity; a NaN in the input stays exactly
where PyTorch has it. A symbolic batch is fine; a non-NCHW layout, other symbolic sizes and a padding
above ``d * (k - 1)`` keep the stock op.
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .mutate import static_dims


def _blocks(x, w, dims, out_dtype):
    """Kernel == stride, no padding: a 1x1 conv to ``O*s*s`` channels, then depth to space."""
    N, C, H, W = dims["x"]
    _, O, kh, kw = dims["w"]
    w1 = relax.op.reshape(relax.op.permute_dims(w, [1, 2, 3, 0]), [O * kh * kw, C, 1, 1])
    y = relax.op.nn.conv2d(x, w1, out_dtype=out_dtype)
    y = relax.op.permute_dims(relax.op.reshape(y, [N, O, kh, kw, H, W]), [0, 1, 4, 2, 5, 3])
    return relax.op.reshape(y, [N, O, H * kh, W * kw])


def _dilated(x, w, dims, attrs, out_dtype):
    """The general case: the input dilated by the stride, a stride-1 conv with the flipped kernel."""
    N, C, H, W = dims["x"]
    _, Og, kh, kw = dims["w"]
    sh, sw = (int(s) for s in attrs.strides)
    dh, dw = (int(d) for d in attrs.dilation)
    pt, pl, pb, pr = (int(p) for p in attrs.padding)
    oph, opw = (int(p) for p in attrs.output_padding)
    g = int(attrs.groups)
    eh, ew = dh * (kh - 1), dw * (kw - 1)  # the dilated kernel's reach
    pad = (eh - pt, ew - pl, eh - pb + oph, ew - pr + opw)
    if min(pad) < 0:
        return None
    if (sh, sw) != (1, 1):  # s - 1 zeros after each pixel, the last pixel's dropped
        x = relax.op.nn.pad(relax.op.reshape(x, [N, C, H, 1, W, 1]),
                            [0, 0, 0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1])
        x = relax.op.reshape(x, [N, C, H * sh, W * sw])
        x = relax.op.strided_slice(x, [2, 3], [0, 0], [(H - 1) * sh + 1, (W - 1) * sw + 1])
    wt = relax.op.reshape(w, [g, C // g, Og, kh, kw])
    wt = relax.op.reshape(relax.op.permute_dims(wt, [0, 2, 1, 3, 4]), [g * Og, C // g, kh, kw])
    wt = relax.op.flip(relax.op.flip(wt, 2), 3)
    return relax.op.nn.conv2d(x, wt, padding=pad, dilation=(dh, dw), groups=g, out_dtype=out_dtype)


def _input_dims(x):
    """``[N, C, H, W]`` with ``C, H, W`` ints and ``N`` an int or a symbolic size, or None."""
    ty = getattr(x, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or len(ty.shape) != 4:
        return None
    n, *rest = ty.shape
    if not all(hasattr(d, "value") for d in rest):
        return None
    return [int(n.value) if hasattr(n, "value") else n, *(int(d.value) for d in rest)]


def as_conv2d(call: relax.Call):
    """The conv2d form of a ``conv2d_transpose`` call (module doc), or None when it keeps the stock op.
    The batch may be symbolic; channels, sizes and the weight's shape must be known."""
    a = call.attrs
    x, w = call.args
    dims = {"x": _input_dims(x), "w": static_dims(w)}
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
    if None in dims.values() or layouts != ("NCHW", "IOHW", "NCHW"):
        return None
    out_dtype = str(call.ty.dtype)
    _, _, kh, kw = dims["w"]
    if ((kh, kw) == tuple(int(s) for s in a.strides) and all(int(d) == 1 for d in a.dilation)
            and not any(int(p) for p in a.padding)
            and not any(int(p) for p in a.output_padding) and int(a.groups) == 1):
        new = _blocks(x, w, dims, out_dtype)
    else:
        new = _dilated(x, w, dims, a, out_dtype)
    return new


@relax.transform.function_pass(opt_level=0, name="ext.ConvTransposeToConv2d")
class ConvTransposeToConv2d:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        pat = is_op("relax.nn.conv2d_transpose")(wildcard(), wildcard())

        def rewrite(orig, m):
            new = as_conv2d(m[pat])
            return orig if new is None else new

        return rewrite_call(pat, rewrite, func)


__all__ = ["ConvTransposeToConv2d", "as_conv2d"]
