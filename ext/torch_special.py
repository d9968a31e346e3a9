"""Special functions TVM has no operator for, written as Relax element-wise arithmetic.

``torch.lgamma`` / ``special.gammaln``, ``torch.digamma`` / ``special.psi`` /
``polygamma(0, x)``, ``torch.erfinv``, ``special.ndtri``, ``torch.i0`` and ``special.i0e`` /
``i1`` / ``i1e`` were each an ``UnsupportedOperatorError``; models that score distributions
(Gamma, Beta, Dirichlet and negative-binomial likelihoods), Gaussian copulas and Kaiser
windows use them. Each is computed in float64 whatever the input's float type and cast to
PyTorch's result dtype: a float32 model gets the float64 value rounded (PyTorch's own float32
kernels differ from it by up to 2e-6 relative), a float64 model agrees with PyTorch within
1e-12 relative (1e-15 for erfinv and the Bessel functions; digamma near its root 2e-13). Poles, NaN and the
infinities follow PyTorch: ``lgamma`` is +inf at the non-positive integers and at both
infinities, ``digamma`` NaN at the negative integers and ``-inf`` / ``+inf`` at +0 / -0,
``erfinv`` +-inf at +-1 and NaN outside [-1, 1].

Methods: ``lgamma`` by Lanczos' approximation (g = 7, nine terms) for arguments >= 0.5 and the
reflection formula below; ``digamma`` by six steps of its recurrence, the asymptotic series at
the shifted argument (>= 6.5, seven Bernoulli terms) and reflection; ``erfinv`` and ``ndtri``
by Giles' single-precision approximation (an asymptotic guess in the far tail) refined by
three Newton steps, on ``erf`` below 3 and on ``log erfc`` (its continued fraction) beyond,
where ``1 - erf`` has lost its precision; the Bessel functions by their power series for |x| <= 30
(positive terms: no cancellation) and their asymptotic expansion beyond.
"""
from __future__ import annotations

import math

from tvm import relax

from .torch_ops import Emitting, _signbit

WORK = "float64"
LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
           -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
           1.5056327351493116e-7)
# Giles (2010), "Approximating the erfinv function": w = -log((1 - y)(1 + y)), highest power first
GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                 -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
              -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
SERIES_TERMS = 48  # the Bessel power series at |x| = 30: the last term is 1e-19 of the sum
ASYMPTOTIC_TERMS = 16  # the asymptotic expansion at |x| = 30: the last term is 1e-16


def _c(value: float):
    return relax.const(value, WORK)


def _add(*terms):
    out = terms[0]
    for t in terms[1:]:
        out = relax.op.add(out, t)
    return out


def _mul(*factors):
    out = factors[0]
    for f in factors[1:]:
        out = relax.op.multiply(out, f)
    return out


def _horner(x, coefficients):
    """The polynomial with ``coefficients`` (highest power first) at ``x``."""
    out = _c(coefficients[0])
    for a in coefficients[1:]:
        out = _add(_mul(out, x), _c(a))
    return out


def _reduced(x):
    """``x - round(x)``, in [-0.5, 0.5]: ``sin(pi x)`` and ``tan(pi x)`` from it keep their
    precision for large ``x`` and are exact zeros at the integers."""
    return relax.op.subtract(x, relax.op.round(x))


def _is_inf(x):
    return relax.op.equal(relax.op.abs(x), _c(math.inf))


def _non_positive_integer(x):
    return relax.op.logical_and(relax.op.less_equal(x, _c(0.0)), relax.op.equal(x, relax.op.floor(x)))


def lgamma(x):
    """``log |Gamma(x)|`` of a float64 expression."""
    reflect = relax.op.less(x, _c(0.5))
    z = relax.op.subtract(relax.op.where(reflect, relax.op.subtract(_c(1.0), x), x), _c(1.0))
    series = _add(_c(LANCZOS[0]), *[relax.op.divide(_c(a), _add(z, _c(float(i)))) for i, a in
                                    enumerate(LANCZOS[1:], start=1)])
    t = _add(z, _c(7.5))
    log_gamma = _add(_c(0.5 * math.log(2 * math.pi)), _mul(_add(z, _c(0.5)), relax.op.log(t)),
                     relax.op.negative(t), relax.op.log(series))
    # Gamma(x) Gamma(1 - x) = pi / sin(pi x); sin(pi x) = 0 at the poles gives +inf
    sine = relax.op.abs(relax.op.sin(_mul(_c(math.pi), _reduced(x))))
    reflected = _add(_c(math.log(math.pi)), relax.op.negative(relax.op.log(sine)), relax.op.negative(log_gamma))
    out = relax.op.where(reflect, reflected, log_gamma)
    return relax.op.where(_is_inf(x), _c(math.inf), out)


def digamma(x):
    """``d/dx log Gamma(x)`` of a float64 expression."""
    reflect = relax.op.less(x, _c(0.5))
    z = relax.op.where(reflect, relax.op.subtract(_c(1.0), x), x)
    steps = _add(*[relax.op.divide(_c(1.0), _add(z, _c(float(k)))) for k in range(6)])
    w = _add(z, _c(6.0))
    inv2 = relax.op.divide(_c(1.0), _mul(w, w))
    # sum of B_2k / (2k w^2k), k = 1..7, as a polynomial in 1 / w^2
    bernoulli = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)
    tail = _mul(inv2, _horner(inv2, [b / (2 * k) for k, b in reversed(list(enumerate(bernoulli, start=1)))]))
    shifted = _add(relax.op.log(w), relax.op.negative(relax.op.divide(_c(0.5), w)), relax.op.negative(tail))
    psi = relax.op.subtract(shifted, steps)
    # psi(1 - x) - psi(x) = pi / tan(pi x)
    reflected = relax.op.subtract(psi, relax.op.divide(_c(math.pi), relax.op.tan(_mul(_c(math.pi), _reduced(x)))))
    out = relax.op.where(reflect, reflected, psi)
    zero = relax.op.where(_signbit(x), _c(math.inf), _c(-math.inf))
    out = relax.op.where(relax.op.equal(x, _c(0.0)), zero, out)
    nan = relax.op.logical_or(relax.op.logical_and(relax.op.less(x, _c(0.0)), relax.op.equal(x, relax.op.floor(x))),
                              relax.op.equal(x, _c(-math.inf)))
    return relax.op.where(nan, _c(math.nan), out)


def _erfc_fraction(ax):
    """``f`` with ``erfc(ax) = exp(-ax^2) / (sqrt(pi) f)``: erfc's continued fraction, 40
    levels (float64 precision from ``ax = 3`` on)."""
    f = ax
    for k in range(40, 0, -1):
        f = _add(ax, relax.op.divide(_c(k / 2), f))
    return f


def _inverse_erfc(t, y):
    """``ax >= 0`` with ``erfc(ax) = t`` and ``erf(ax) = y``, given both (``t + y = 1``; each
    holds the precision where it is small). A first guess (Giles' approximation for
    ``w = -log(t (2 - t)) < 16``, the asymptotic ``sqrt(u - log(u) / 2)``, ``u = -log(t sqrt(pi))``
    beyond), then three Newton steps: on ``erf`` below 3, on ``log erfc`` (its continued
    fraction) from 3 on, where ``1 - erf`` has no precision left."""
    w = relax.op.negative(relax.op.log(_mul(t, relax.op.subtract(_c(2.0), t))))
    central = _mul(_horner(relax.op.subtract(w, _c(2.5)), GILES_CENTRAL), y)
    tail = _mul(_horner(relax.op.subtract(relax.op.sqrt(w), _c(3.0)), GILES_TAIL), y)
    u = relax.op.negative(relax.op.log(_mul(t, _c(math.sqrt(math.pi)))))
    far = relax.op.sqrt(relax.op.subtract(u, _mul(_c(0.5), relax.op.log(u))))
    ax = relax.op.where(relax.op.less(w, _c(5.0)), central, relax.op.where(relax.op.less(w, _c(16.0)), tail, far))
    for _ in range(3):
        slope = _mul(_c(2.0 / math.sqrt(math.pi)), relax.op.exp(relax.op.negative(_mul(ax, ax))))
        on_erf = relax.op.subtract(ax, relax.op.divide(relax.op.subtract(relax.op.erf(ax), y), slope))
        f = _erfc_fraction(ax)
        log_erfc = relax.op.negative(_add(_mul(ax, ax), relax.op.log(_mul(_c(math.sqrt(math.pi)), f))))
        on_log_erfc = _add(ax, relax.op.divide(relax.op.subtract(log_erfc, relax.op.log(t)), _mul(_c(2.0), f)))
        ax = relax.op.where(relax.op.less(ax, _c(3.0)), on_erf, on_log_erfc)
    return relax.op.where(relax.op.equal(t, _c(0.0)), _c(math.inf), ax)


def erfinv(y):
    """The inverse of ``erf`` at a float64 expression ``y``: NaN outside [-1, 1], -0 at -0."""
    ay = relax.op.abs(y)
    ax = _inverse_erfc(relax.op.subtract(_c(1.0), ay), ay)
    out = relax.op.where(_signbit(y), relax.op.negative(ax), ax)
    return relax.op.where(relax.op.greater(relax.op.abs(y), _c(1.0)), _c(math.nan), out)


def ndtri(p):
    """The standard normal quantile ``sqrt(2) erfinv(2p - 1)``, from ``erfc``'s side in the
    tails (``2p - 1`` rounds to -1 for p below 1e-16): NaN outside [0, 1]."""
    lower = relax.op.less(p, _c(0.5))
    t = _mul(_c(2.0), relax.op.where(lower, p, relax.op.subtract(_c(1.0), p)))
    ax = _mul(_c(math.sqrt(2.0)), _inverse_erfc(t, relax.op.abs(relax.op.subtract(_mul(_c(2.0), p), _c(1.0)))))
    out = relax.op.where(lower, relax.op.negative(ax), ax)
    outside = relax.op.logical_or(relax.op.less(p, _c(0.0)), relax.op.greater(p, _c(1.0)))
    return relax.op.where(outside, _c(math.nan), out)


def _bessel_series(y, order: int):
    """``sum_k y^k / (k! (k + order)!)`` (``y = x^2 / 4``), the power series of ``I_order``
    without its ``(x/2)^order`` factor."""
    coefficients = [1.0 / (math.factorial(k) * math.factorial(k + order)) for k in range(SERIES_TERMS)]
    return _horner(y, coefficients[::-1])


def _bessel_asymptotic(ax, order: int):
    """``sqrt(2 pi |x|) e^-|x| I_order(|x|)`` for large ``|x|``: ``sum_k c_k / |x|^k`` with
    ``c_k = prod_{j<=k} -(4 order^2 - (2j - 1)^2) / (8j)``."""
    coefficients, c = [], 1.0
    for k in range(ASYMPTOTIC_TERMS):
        coefficients.append(c)
        c *= -(4 * order * order - (2 * k + 1) ** 2) / (8 * (k + 1))
    return _horner(relax.op.divide(_c(1.0), ax), coefficients[::-1])


def bessel_i(x, order: int, scaled: bool):
    """``I_order(x)`` (order 0 or 1) of a float64 expression; ``scaled``: ``e^-|x| I_order(x)``."""
    ax = relax.op.abs(x)
    half = _mul(_c(0.5), x)
    small = _bessel_series(_mul(half, half), order)
    if order == 1:
        small = _mul(small, half)
    if scaled:
        small = _mul(small, relax.op.exp(relax.op.negative(ax)))
    large = relax.op.divide(_bessel_asymptotic(ax, order), relax.op.sqrt(_mul(_c(2 * math.pi), ax)))
    if not scaled:
        large = _mul(large, relax.op.exp(ax))
    if order == 1:
        large = relax.op.where(relax.op.less(x, _c(0.0)), relax.op.negative(large), large)
    return relax.op.where(relax.op.less_equal(ax, _c(30.0)), small, large)


class SpecialOps(Emitting):
    """Importer mixin: the special functions of the module doc."""

    def special_converters(self) -> dict:
        unary = {
            "lgamma.default": lgamma,
            "digamma.default": digamma,
            "erfinv.default": erfinv,
            "special_ndtri.default": ndtri,
            "i0.default": lambda x: bessel_i(x, 0, scaled=False),
            "special_i0e.default": lambda x: bessel_i(x, 0, scaled=True),
            "special_i1.default": lambda x: bessel_i(x, 1, scaled=False),
            "special_i1e.default": lambda x: bessel_i(x, 1, scaled=True),
        }
        table = {name: (lambda node, fn=fn: self._special(node, fn, node.args[0])) for name, fn in unary.items()}
        table["polygamma.default"] = self._polygamma
        return table

    def _special(self, node, fn, arg):
        """``fn`` at ``arg`` in float64, cast to the dtype PyTorch's result has (float32 for an
        integer input)."""
        x = self.env[arg]
        val = node.meta.get("val")
        out_dtype = str(val.dtype).replace("torch.", "") if val is not None else str(x.ty.dtype)
        if not out_dtype.startswith(("float", "bfloat")):
            out_dtype = "float32"
        return self._emit(relax.op.astype(fn(self._emit(relax.op.astype(x, WORK))), out_dtype))

    def _polygamma(self, node):
        n = node.args[0]
        if n != 0:
            from .frontend import UnsupportedOperatorError

            raise UnsupportedOperatorError("PyTorch", [f"polygamma.default (order {n}; order 0, digamma, imports)"])
        return self._special(node, digamma, node.args[1])
