"""``log(sigmoid(x))`` computed without underflow: ``StableLogSigmoid``.

ONNX files hold PyTorch's ``F.logsigmoid`` as ``Log(Sigmoid(x))`` (the TorchScript exporter has
no LogSigmoid), and models write it out themselves. Below x = -87 the sigmoid is a float32
denormal; ext's kernels flush denormals to zero, so the log gave -inf where PyTorch and
onnxruntime give about ``x`` (-90.0 for x = -90). Rewritten as
``min(x, 0) - log(1 + exp(-|x|))``: the same value for every x (``exp(-|x|) <= 1``, no
overflow), -inf at -inf, 0 at +inf, NaN at NaN.
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard


def _stable(orig, m, x):
    v = m[x]
    if not isinstance(v.ty, relax.TensorType) or not str(v.ty.dtype).startswith(("float", "bfloat")):
        return orig
    dt = str(v.ty.dtype)
    tail = relax.op.log(relax.op.add(relax.const(1.0, dt), relax.op.exp(relax.op.negative(relax.op.abs(v)))))
    return relax.op.subtract(relax.op.minimum(v, relax.const(0.0, dt)), tail)


@relax.transform.function_pass(opt_level=0, name="ext.StableLogSigmoid")
class StableLogSigmoid:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        x = wildcard()
        return rewrite_call(is_op("relax.log")(is_op("relax.sigmoid")(x)), lambda o, m: _stable(o, m, x), func)


__all__ = ["StableLogSigmoid"]
