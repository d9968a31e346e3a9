"""Recognize GELU written out op by op (its tanh approximation and its erf form), and small
integer powers.

GPT-2, GPT-Neo, CodeGen and others define ``gelu_new`` in Python,
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))``, so the importer emits
eight element-wise ops where ``relax.nn.gelu_tanh`` is one. As one op it is a matmul
epilogue step (``gelu_tanh``, fused by ``FuseEpilogues``) and ext's vectorized
``elemwise.gelu_tanh``; written out, ``pow`` lowers to a scalar libm call per element
(48 ms of GPT-2's 180 ms prefill). Matched up to the operand order of each commutative op,
with the constants within 1e-6 relative of their exact values.

The erf form, ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (or ``* (1 / sqrt(2))``, the half applied
first or last), is what ONNX files hold for PyTorch's ``nn.GELU()`` (``torch.onnx.export``
below opset 20 has no Gelu op): five element-wise ops after each FFN matmul of an imported BERT,
where ``relax.nn.gelu`` is one fused epilogue step.

``pow(x, 2)`` and ``pow(x, 3)`` that are not part of it become products (``x * x``), which
vectorize (RMS / T5 layer norms square their input with ``pow``); same value, NaN and inf
included.
"""
from __future__ import annotations

import math

from tvm import relax
from tvm_ffi import structural_equal
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .elemwise_math import commutative, constant_scalar, is_constant

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _pattern():
    x = wildcard()
    c_half, c_cube, c_scale, c_one, c_exp = (is_const() for _ in range(5))
    cube = is_op("relax.power")(x, c_exp)
    inner = commutative("relax.add", x, commutative("relax.multiply", cube, c_cube))
    t = is_op("relax.tanh")(commutative("relax.multiply", inner, c_scale))
    one_plus = commutative("relax.add", t, c_one)
    out = commutative("relax.multiply", commutative("relax.multiply", x, c_half), one_plus)
    return out, x, {"half": c_half, "cube": c_cube, "scale": c_scale, "one": c_one, "exp": c_exp}


def _gelu(orig, m, x, consts):
    want = {"half": 0.5, "cube": 0.044715, "scale": _SQRT_2_OVER_PI, "one": 1.0, "exp": 3.0}
    if any(not is_constant(m[c], want[k]) for k, c in consts.items()):
        return orig
    ty = m[x].ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != orig.ty.dtype:
        return orig
    return relax.op.nn.gelu_tanh(m[x])


def _erf_patterns():
    """(pattern, x, {name: constant pattern}) for each way of writing the erf GELU."""
    out = []
    for scale_op in ("relax.divide", "relax.multiply"):
        for half_first in (True, False):
            x, c_scale, c_one, c_half = wildcard(), is_const(), is_const(), is_const()
            scaled = is_op("relax.divide")(x, c_scale) if scale_op == "relax.divide" else \
                commutative("relax.multiply", x, c_scale)
            one_plus = commutative("relax.add", is_op("relax.erf")(scaled), c_one)
            if half_first:
                gelu = commutative("relax.multiply", commutative("relax.multiply", x, c_half), one_plus)
            else:
                gelu = commutative("relax.multiply", commutative("relax.multiply", x, one_plus), c_half)
            root = math.sqrt(2.0) if scale_op == "relax.divide" else 1.0 / math.sqrt(2.0)
            out.append((gelu, x, {c_scale: root, c_one: 1.0, c_half: 0.5}))
    return out


def _gelu_erf(orig, m, x, consts):
    if any(not is_constant(m[c], want) for c, want in consts.items()):
        return orig
    ty = m[x].ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != orig.ty.dtype or ty.shape is None or \
            orig.ty.shape is None or not structural_equal(ty.shape, orig.ty.shape):
        return orig
    return relax.op.nn.gelu(m[x])


def _power(orig, m, x, exponent):
    value = constant_scalar(m[exponent])
    if value not in (2.0, 3.0) or not isinstance(m[x].ty, relax.TensorType) or m[x].ty.dtype != orig.ty.dtype:
        return orig
    sq = relax.op.multiply(m[x], m[x])
    return sq if value == 2.0 else relax.op.multiply(sq, m[x])


@relax.transform.function_pass(opt_level=0, name="ext.RecognizeGeluTanh")
class RecognizeGeluTanh:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function):
            return func
        pattern, x, consts = _pattern()
        func = rewrite_call(pattern, lambda o, m: _gelu(o, m, x, consts), func)
        for erf_pattern, ex, erf_consts in _erf_patterns():
            func = rewrite_call(erf_pattern, lambda o, m, ex=ex, c=erf_consts: _gelu_erf(o, m, ex, c), func)
        base, exponent = wildcard(), is_const()
        return rewrite_call(is_op("relax.power")(base, exponent), lambda o, m: _power(o, m, base, exponent), func)


__all__ = ["RecognizeGeluTanh"]
