"""A nearest resize to the size it already has is the input itself: ``DropIdentityResize``.
So is a cast to the dtype the input already has (``DropIdentityCast``: ViT's ONNX export casts
its attention probabilities float32 -> float32 twice, a copy each that also kept the attention
from fusing).

In the coordinate modes that map each output index to itself when in == out (``half_pixel``,
``pytorch_half_pixel``, ``align_corners``, ``asymmetric``), each output pixel of a nearest resize
reads exactly its own input pixel, so the op is dropped (a copy of the whole tensor saved).

A linear resize to its own size is kept: it also reads the next pixel with weight 0, and PyTorch
computes that product too, so an infinite neighbour makes the output NaN in both, where the
input itself would not (SegFormer's head resizes its first stage 64x64 -> 64x64 this way: 0.59 ms
in ``resize2d.rows`` at 256x256, left as it is to keep PyTorch's NaN pattern).
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .mutate import static_dims

#: the modes whose coordinate map is the identity when the input and output sizes are equal
IDENTITY_MODES = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}


def is_identity(call: relax.Call) -> bool:
    a = call.attrs
    x, out = static_dims(call.args[0]), static_dims(call)
    return (str(a.method) == "nearest_neighbor" and str(a.coordinate_transformation_mode) in IDENTITY_MODES
            and str(a.layout) in ("NCHW", "NHWC") and x is not None and x == out
            and (a.out_dtype is None or str(a.out_dtype) in ("", str(call.args[0].ty.dtype))))


@relax.transform.function_pass(opt_level=0, name="ext.DropIdentityResize")
class DropIdentityResize:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        resize = is_op("relax.image.resize2d")(wildcard(), wildcard())
        return rewrite_call(resize, lambda orig, m: m[resize].args[0] if is_identity(m[resize]) else orig, func)


@relax.transform.function_pass(opt_level=0, name="ext.DropIdentityCast")
class DropIdentityCast:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        cast = is_op("relax.astype")(wildcard())

        def rewrite(orig, m):
            x = m[cast].args[0]
            same = isinstance(x.ty, relax.TensorType) and str(x.ty.dtype) == str(m[cast].attrs.dtype)
            return x if same else orig

        return rewrite_call(cast, rewrite, func)


__all__ = ["DropIdentityCast", "DropIdentityResize", "is_identity"]
