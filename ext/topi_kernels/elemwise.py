"""Vectorizable float32 math for element-wise kernels: exp, sigmoid, tanh, erf, gelu, relu,
clip (ReLU6), leaky ReLU, hardsigmoid, hardswish.

Stock TVM lowers ``exp``/``tanh``/``erf`` on LLVM CPU targets to scalar libm
calls (``expf@PLT``), one call per lane, so a "vectorized" loop over them runs
at scalar speed (~1 ms for 2^20 ``exp`` on two cores). These helpers build the
same functions from multiply-adds and bit tricks that LLVM turns
into straight-line AVX-512/AVX2 code.

``exp(x)`` (range reduction + polynomial)::

    x  = clamp(x, ln(FLT_MIN), 89)        # by selects, which keep NaN
    kf = x * log2(e) + (1.5 * 2^23 + 127) # rounds: kf = n + 127 + 1.5 * 2^23 exactly
    n  = kf - (1.5 * 2^23 + 127)          # integer, |r| <= ln(2)/2
    r  = x - n * ln2_hi - n * ln2_lo      # Cody-Waite split keeps r exact
    p  = 1 + r + r^2/2! + ... + r^7/7!    # Horner; truncation error < 6e-9
    2^n = bits(kf) << 23                  # n + 127 in the exponent field (x <= 0);
                                          # 2^(n >> 1) * 2^(n - (n >> 1)) up to n = 128
    exp(x) = p * 2^n                      # NaN in: NaN through r and p

Cost: ~14 vector operations per element and no memory beyond the operand. Measured error
against float64 is within 2 ulp on [-87, 88]; below ``ln(FLT_MIN)`` the
result is 0 (a subnormal flushed, as with FTZ; at most 1.2e-38 off).

Non-finite inputs follow NumPy/PyTorch: NaN in gives NaN out; +-inf give the
limits (``exp(-inf) = 0``, ``exp(inf) = inf``, ``sigmoid(+-inf) = 1/0``,
``tanh(+-inf) = +-1``, ``erf(+-inf) = +-1``) because the formulas below only
combine those through ``exp``; products such as ``silu(-inf) = -inf * 0`` give
NaN exactly as PyTorch does. ``relu(x) = x < 0 ? 0 : x`` keeps NaN (as
``torch.relu``); ``max(x, 0)`` would not, since TVM lowers ``max`` to
``x > 0 ? x : 0`` (one ``vmaxps`` either way, operands swapped).

``tanh(x) = sign(x) (1 - e) / (1 + e)`` with ``e = exp(-2|x|)``, odd Taylor series below |x| = 0.3
(relative error <= 4e-7), ``sigmoid(x) = 1 / (1 + e)`` (x >= 0) or ``e / (1 + e)`` with
``e = exp(-|x|)`` (an exp of a non-positive argument, cheaper, and nothing overflows), ``erf`` by a rational fit
``x P(x^2) / Q(x^2)`` (absolute error <= 5e-7, +-1 from |x| = 3.92),
``gelu(x) = x/2 * (1 + erf(x / sqrt 2))`` and ``gelu_tanh(x) = x * sigmoid(2u)`` (the same as
``x/2 * (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``). Their reciprocals
(``reciprocal``) depend on the target being built for (``Target.current()``): off the CPU,
Newton steps from a bit-trick guess (``recip_bounded``); on every CPU a divide (on AVX-512 the
Newton form was used until the stop-51 fix in ``divides_fast``: a zmm ``vdivps`` issues once per
10-16 cycles on Xeons, and the divide had made GELU cost 23% of a 128x768x3072 GEMM's time in
its epilogue, 4% with Newton, but fused chains of them built for minutes). On CPUs with 256-bit vectors a ``vdivps``
on ymm (one per ~5 cycles on Zen 4) is the faster choice: the Newton chain's 7 dependent
operations made sigmoid latency-bound (each vector's ~100-cycle chain, few in flight), and the
divide took SiLU over 1.2 M floats from 0.64 to 0.43 ms on an AVX2 Zen 4 (2 threads).

The piecewise-linear activations are selects, which keep NaN because every
compare with NaN is false: ``clip(x, lo, hi) = x < lo ? lo : (x > hi ? hi : x)``
(a ``vmaxps``/``vminps`` pair with the operand order LLVM picks for the select;
``te.max(te.min(...))`` lowers to ``x > hi ? ...`` orders that drop NaN),
``leaky_relu(x, a) = x < 0 ? a * x : x``, ``hardsigmoid(x) = clip(x/6 + 1/2, 0, 1)``
and ``hardswish(x) = x * hardsigmoid(x)`` (so ``hardswish(-inf) = -inf * 0 = NaN``,
as ``torch.nn.functional.hardswish`` gives). They are dtype-generic.

``ACTIVATIONS`` maps the activation names of ``ext.workload`` to these (``f(x, *params)``;
``activation("clip:0:6")`` binds the parameters a name spells);
``UNARY`` maps Relax op names to them (``relax_passes.elemwise_math`` lowers
those ops with these computes, so FuseOps fuses them into element-wise chains).
"""
from __future__ import annotations

import math

from tvm import te, tirx
from tvm.target import Target


LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125  # 12 significant bits: n * LN2_HI is exact for |n| < 2^12
LN2_LO = 1.428606765330187e-06
#: ln of the smallest normal float32: ``exp`` below it is flushed to 0
EXP_MIN = -87.33654475055310


def _c(v: float, dtype: str = "float32"):
    return tirx.const(v, dtype)


def _pow2(n_int):
    """``2 ** n`` for an int32 expression ``n`` in [-126, 127] (builds the exponent field)."""
    return tirx.reinterpret("float32", tirx.shift_left(n_int + tirx.const(127, "int32"), tirx.const(23, "int32")))


#: float dtype -> (same-width int dtype, |bits| above which a value is NaN, the |.| mask)
_NAN_BITS = {"float32": ("int32", 0x7F800000, 0x7FFFFFFF), "float16": ("int16", 0x7C00, 0x7FFF)}


def isnan(x):
    """``x`` is NaN, as a bit test: ``|bits(x)| > bits(inf)``. TVM 0.27's ``tirx.isnan`` stops
    its loop vectorizer (the loop stays scalar; LLVM then vectorizes it behind a run-time
    alias check that fails for an in-place kernel: GELU ran 4x slower in place), and
    ``x != x`` is folded to false by the simplifier. Integer ops vectorize on any ISA."""
    dtype = dtype_of(x)
    if dtype not in _NAN_BITS:
        return tirx.isnan(x)
    itype, inf_bits, mask = _NAN_BITS[dtype]
    bits = tirx.reinterpret(itype, x) & tirx.const(mask, itype)
    return bits > tirx.const(inf_bits, itype)


def _let(name: str, dtype: str, value, body):
    """``body(v)`` with ``v`` bound to ``value`` once (keeps the expression a DAG, not a tree)."""
    v = tirx.Var(name, dtype)
    return tirx.Let(v, value, body(v))


#: ``1.5 * 2^23 + 127``: adding it to a float32 of magnitude below 2^22 rounds that to an integer
#: ``n`` (round to nearest) and leaves ``n + 127`` in the low mantissa bits
ROUND_BIAS = 12582912.0 + 127.0
#: the bit pattern of ``ROUND_BIAS`` less its ``127``
ROUND_BITS = 0x4B400000


def exp(x, nonpositive: bool = False):
    """float32 ``exp(x)`` from multiply-adds (see module doc). ``nonpositive``: the caller
    guarantees ``x <= 0`` or NaN (softmax's ``x - max``), so no overflow clamp and one
    power-of-two scale instead of two.

    ``n`` comes from one add of ``ROUND_BIAS`` (``kf``), not ``floor`` and a float-to-int
    conversion: ``n = kf - ROUND_BIAS`` exactly, and ``kf``'s bits shifted left by 23 are
    already ``2^n`` (``n + 127`` in the exponent field) where ``n >= -126``. The clamps are
    selects that keep NaN, which then flows through the arithmetic to the result, so no NaN
    test is needed (and ``kf``'s bits are defined for NaN, where a float-to-int conversion of
    NaN is undefined in LLVM). Against the floor/convert/NaN-select form: SiLU over 1.2 M
    floats 0.64 -> 0.54 ms with Newton reciprocals (0.48 -> 0.44 with divides), AVX2 Zen 4."""

    def clamped(xn):
        low = tirx.Select(xn < _c(EXP_MIN), _c(EXP_MIN), xn)
        high = low if nonpositive else tirx.Select(low > _c(89.0), _c(89.0), low)

        def with_k(xc, kf):
            def with_n(n):
                def poly(r):
                    p = _c(1.0 / 5040)
                    for coef in (1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0):
                        p = p * r + _c(coef)
                    return p

                bits = tirx.reinterpret("int32", kf)
                if nonpositive:  # n in [-126, 0]: kf's bits are 2^n's exponent field
                    scale = (lambda p: p * tirx.reinterpret("float32", tirx.shift_left(bits, tirx.const(23, "int32"))))
                else:  # n up to 128: two halves
                    def scale(p):
                        ni = bits - tirx.const(ROUND_BITS + 127, "int32")
                        half = tirx.shift_right(ni, tirx.const(1, "int32"))
                        return p * _pow2(half) * _pow2(ni - half)
                return _let("r", "float32", xc - n * _c(LN2_HI) - n * _c(LN2_LO), lambda r: scale(poly(r)))

            return _let("n", "float32", kf - _c(ROUND_BIAS), with_n)

        # below ln(FLT_MIN) the result would be subnormal: 0 instead (flush to zero). Subnormal
        # operands cost ~100 cycles each on x86, and a masked softmax row (-3.4e38 where the
        # causal mask blocks) made exp and the row sum 4x slower
        body = _let("xc", "float32", high,
                    lambda xc: _let("kf", "float32", xc * _c(LOG2E) + _c(ROUND_BIAS), lambda kf: with_k(xc, kf)))
        return tirx.Select(xn < _c(EXP_MIN), _c(0.0), body)

    return _let("xn", "float32", x, clamped)


def relu(x):
    """``max(x, 0)`` that keeps NaN (``torch.relu(nan) = nan``)."""
    dt = dtype_of(x)
    return _let("xr", dt, x, lambda v: tirx.Select(v < tirx.const(0.0, dt), tirx.const(0.0, dt), v))


def dtype_of(x) -> str:
    """dtype string of a TIR expression or tensor element (TVM 0.27 exposes it as ``.ty``)."""
    if isinstance(x, te.tensor.TensorSlice):
        return x.tensor.dtype
    return str(x.ty)


def sigmoid(x):
    """From ``e = exp(-|x|)`` in (0, 1]: ``1 / (1 + e)`` for x >= 0, ``e / (1 + e)`` below; the
    reciprocal's operand stays in [1, 2], the exp needs no overflow clamp, and below ln(FLT_MIN)
    ``e`` is 0, so ``sigmoid(-inf) = 0`` and ``silu(-inf) = -inf * 0 = NaN`` as in PyTorch."""
    def body(v):
        return _let("se", "float32", exp(-te.abs(v), nonpositive=True),
                    lambda e: _let("sr", "float32", reciprocal(_c(1.0) + e),
                                   lambda r: tirx.Select(v < _c(0.0), e * r, r)))

    return _let("xs", "float32", x, body)


def tanh(x):
    return _let("xt", "float32", x, _tanh)


def _tanh(x):
    ax = te.abs(x)
    # near 0 the formula cancels: odd Taylor series, error < 2e-8 for |x| < 0.3
    x2 = x * x
    small = x * (_c(1.0) + x2 * (_c(-1 / 3) + x2 * (_c(2 / 15) + x2 * (_c(-17 / 315) + x2 * _c(62 / 2835)))))
    # tanh|x| = (1 - e) / (1 + e), e = exp(-2|x|) in (0, 1]: no overflow, the reciprocal's operand in [1, 2]
    return _let("t", "float32", _let("te", "float32", exp(ax * _c(-2.0), nonpositive=True),
                                     lambda e: (_c(1.0) - e) * reciprocal(_c(1.0) + e)),
                lambda t: tirx.Select(ax < _c(0.3), small, tirx.Select(x < _c(0.0), -t, t)))


#: erf(x) = x * P(x^2) / Q(x^2) on |x| < ERF_ONE: a rational least-max-error fit made for ext
#: (Lawson iterations in float64: 1.6e-8 fit error; 4.9e-7 absolute in float32 arithmetic)
_ERF_P = (1.1283790223247587, 0.19276446001055436, 0.05306054422478774, 0.0038683477312497785,
          0.00028748040703683957, 2.034739049659503e-06)
_ERF_Q = (1.0, 0.5041647209471813, 0.11508479460184796, 0.015172335640956838, 0.001188121146778292,
          3.8070736881443796e-05)
#: from here on float32's erf is +-1 (erfc(3.92) = 2.96e-8, under half an ulp of 1)
ERF_ONE = 3.92


def _horner(coefs, z):
    p = _c(coefs[-1])
    for a in reversed(coefs[:-1]):
        p = p * z + _c(a)
    return p


def divides_fast(target=None) -> bool:
    """Whether ``reciprocal`` divides on ``target`` (default ``Target.current()``): any LLVM CPU
    target; False with no target and off the CPU. Stop 51: AVX-512 too. There the Newton form
    (``recip_bounded``), read through lets by LLVM codegen's simplifier, made a fused chain of
    two sigmoids build in 2.4 s and three in more than 5 minutes; with a divide they build in
    a fraction of a second, as on AVX2."""
    target = target if target is not None else Target.current(allow_none=True)
    return target is not None and target.kind.name == "llvm"


def reciprocal(q):
    """``1 / q`` for a positive normal ``q`` (NaN gives NaN): a divide where ``divides_fast()``,
    else ``recip_bounded``."""
    return _c(1.0) / q if divides_fast() else recip_bounded(q)


def recip_bounded(q):
    """``1 / q`` for a positive normal ``q`` up to 1e37 (NaN gives NaN) without a divide: an
    exponent-flip first guess (within 5.1%) and three Newton steps (the error squares each
    time: 2.6e-3, 6.5e-6, then float32 rounding: 1.5e-7 relative, measured on 1e-30..1e37).
    A ``vdivps`` on zmm issues once per 10-16 cycles on Xeons (5 on Zen 4); these 7 ops
    pipeline with the rest of the expression."""
    def steps(qv):
        r = tirx.reinterpret("float32", tirx.const(0x7EF311C3, "int32") - tirx.reinterpret("int32", qv))
        for _ in range(3):  # no Let per step: each nested Let doubled the TIR passes' time on the kernel
            r = r * (_c(2.0) - qv * r)  # (the repeated guess is 3 nodes; CSE merges the copies)
        return r

    return _let("qr", "float32", q, steps)


def erf(x):
    return _let("xe", "float32", x, _erf)


def _erf(x):
    # a clamp by selects (NaN passes through them; TVM's max/min would map NaN to the bound)
    xc = tirx.Select(x < _c(-ERF_ONE), _c(-ERF_ONE), tirx.Select(x > _c(ERF_ONE), _c(ERF_ONE), x))

    def body(v):
        z = v * v
        y = v * _horner(_ERF_P, z) * reciprocal(_horner(_ERF_Q, z))
        return tirx.Select(x <= _c(-ERF_ONE), _c(-1.0), tirx.Select(x >= _c(ERF_ONE), _c(1.0), y))

    return _let("xc", "float32", xc, body)


def gelu(x):
    return _let("xg", "float32", x, _gelu)


def _gelu(x):
    return _c(0.5) * x * (_c(1.0) + erf(x * _c(1.0 / math.sqrt(2.0))))


def gelu_tanh(x):
    return _let("xg", "float32", x, _gelu_tanh)


def _gelu_tanh(x):
    # x/2 (1 + tanh(u)) = x sigmoid(2u): one exp and one reciprocal, and no cancellation in 1 + tanh(u)
    # for u < 0 (tanh's form cost 2.2x the erf gelu in a GEMM epilogue)
    inner = _c(2.0 * math.sqrt(2.0 / math.pi)) * (x + _c(0.044715) * x * x * x)
    return x * sigmoid(inner)


def clip(x, lo: float, hi: float):
    """``min(max(x, lo), hi)`` that keeps NaN; an infinite bound costs no compare."""
    dt = dtype_of(x)

    def body(v):
        out = v
        if hi != math.inf:
            out = tirx.Select(v > tirx.const(hi, dt), tirx.const(hi, dt), out)
        if lo != -math.inf:
            out = tirx.Select(v < tirx.const(lo, dt), tirx.const(lo, dt), out)
        return out

    return _let("xk", dt, x, body)


def leaky_relu(x, alpha: float):
    """``x < 0 ? alpha * x : x`` (NaN stays NaN)."""
    dt = dtype_of(x)
    return _let("xl", dt, x, lambda v: tirx.Select(v < tirx.const(0.0, dt), v * tirx.const(alpha, dt), v))


def hardsigmoid(x):
    """``clip(x / 6 + 1/2, 0, 1)``: PyTorch's ``relu6(x + 3) / 6`` up to rounding."""
    dt = dtype_of(x)
    return clip(x * tirx.const(1.0 / 6.0, dt) + tirx.const(0.5, dt), 0.0, 1.0)


def hardswish(x):
    """``x * hardsigmoid(x)``."""
    return _let("xh", dtype_of(x), x, lambda v: v * hardsigmoid(v))


ACTIVATIONS = {
    "relu": relu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "silu": lambda x: _let("xs", "float32", x, lambda v: v * sigmoid(v)),
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "hardswish": hardswish,
    "hardsigmoid": hardsigmoid,
    "clip": clip,
    "leaky_relu": leaky_relu,
}
#: activations built from selects and multiply-adds only: any dtype, no float32 polynomial
GENERIC = ("relu", "hardswish", "hardsigmoid", "clip", "leaky_relu")


def activation(name: str):
    """``f(x)`` for an epilogue activation name such as ``"gelu"`` or ``"clip:0:6"``."""
    from ..workload import parse_activation

    base, params = parse_activation(name)
    f = ACTIVATIONS[base]
    return (lambda x: f(x, *params)) if params else f


UNARY = {
    "relax.nn.relu": relu,
    "relax.exp": exp,
    "relax.sigmoid": sigmoid,
    "relax.tanh": tanh,
    "relax.nn.silu": ACTIVATIONS["silu"],
    "relax.nn.gelu": gelu,
    "relax.nn.gelu_tanh": gelu_tanh,
    # the NaN tests relax_passes.nan_compare and nan_order add: stock isnan keeps a loop scalar
    "relax.isnan": isnan,
}


def unary_compute(op_name: str, x: te.Tensor) -> te.Tensor:
    """Element-wise ``op_name`` over ``x`` (float32) with the vectorizable expansions above."""
    f = UNARY[op_name]
    return te.compute(x.shape, lambda *i: f(x[i]), name="T_" + op_name.rsplit(".", 1)[1])


def activation_compute(name: str, x: te.Tensor) -> te.Tensor:
    """Element-wise epilogue activation ``name`` (``"clip:0:6"``, ``"leaky_relu:0.1"``) over ``x``."""
    f = activation(name)
    return te.compute(x.shape, lambda *i: f(x[i]), name="T_" + name.split(":")[0])
