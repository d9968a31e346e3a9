"""Reductions ``sum``, ``mean``, ``max``, ``min`` over any set of axes, in a canonical 3-D form.

The Relax family drops size-1 axes and merges neighbouring axes of the same
kind, so that a reduction over any axis set whose reduced axes are contiguous
(after dropping size-1 axes) becomes ``X (O, R, I) -> Y (O, I)``::

    for o in [0, O), i in [0, I):
        acc = identity                          # 0 for sum/mean, -inf for max, +inf for min
        for k in [0, R): acc = acc (+|max|min) X[o, k, i]
        Y[o, i] = acc * (1/R if mean else 1)

Cost: ``O * R * I`` combines, ``4 * O * R * I`` bytes read (each element once).

Two computes give the schedules room:

* ``reduce_3d(X, kind, pad_to)`` is the loop above (blocks ``acc``, ``out``);
  with ``pad_to > 1`` and ``I == 1`` the k loop runs to a multiple of
  ``pad_to`` reading the identity past ``R``, so the schedule can split it
  into whole vectors (an rfactor over a ragged split miscompiles in TVM 0.27).
* ``reduce_split(X, kind, chunks, lanes)`` (``I == 1``, one long reduction):
  ``P[o, t, l]`` reduces chunk ``t`` of the row lane-wise (``chunks`` chunks
  of whole ``lanes``-vectors, padded with the identity), then ``Y[o]``
  combines the ``chunks * lanes`` partials: the rfactor form that lets every
  thread work on one row.

NaN and +-inf follow NumPy: ``sum``/``mean`` propagate them by IEEE arithmetic;
``max``/``min`` use their own reducers (``nan_max``/``nan_min``)::

    max'(acc, x) = isnan(acc) ? acc + x : max(acc, x)     # identity -inf
    min'(acc, x) = isnan(acc) ? acc + x : min(acc, x)     # identity +inf

TVM's ``max(acc, x)`` lowers to ``acc > x ? acc : x``: a NaN ``x`` gets in, but the
next element replaces a NaN accumulator; and ``te.max`` starts from the largest
finite float, so a row of ``-inf`` came out as ``-3.4e38``. The NaN select keeps
a NaN accumulator (``acc + x`` is NaN), so any NaN in the row gives NaN, as
``np.max``/``torch.amax``. Per vector of elements this adds one unordered compare
and one masked add to the ``vmaxps`` (AVX-512: ``vcmpunordps`` + ``vaddps {k}``).
(The form ``(isnan(acc) or acc > x) ? acc : x`` is as cheap on paper, but LLVM
turns a store of ``select(c, acc, x)`` into a masked store and keeps the
accumulators in memory.) Both reducers are registered with the schedule's
reducer registry at import so that ``rfactor`` (lane-wise vector partials)
recognizes them.
"""
from __future__ import annotations

import ctypes
import math

import tvm
import tvm_ffi
from tvm import te, tirx

from . import elemwise as ew
from . import i64 as _i64

KINDS = ("sum", "mean", "max", "min")


def identity(kind: str, dtype: str):
    if kind in ("sum", "mean"):
        return tirx.const(0, dtype)
    if str(dtype).startswith(("float", "bfloat")):  # -inf/+inf, so a row of -inf/+inf reduces to itself
        return tirx.const(-math.inf if kind == "max" else math.inf, dtype)
    return tirx.min_value(dtype) if kind == "max" else tirx.max_value(dtype)


def _nan_combiner(kind: str):
    """``isnan(acc) ? acc + x : (max|min)(acc, x)`` (see module doc)."""
    pick = tirx.Max if kind == "max" else tirx.Min
    return lambda acc, x: tirx.Select(ew.isnan(acc), acc + x, pick(acc, x))


def _identity_of(kind: str):
    return lambda dtype: identity(kind, str(dtype))


nan_max = te.comm_reducer(_nan_combiner("max"), _identity_of("max"), name="nan_max")
nan_min = te.comm_reducer(_nan_combiner("min"), _identity_of("min"), name="nan_min")


def _immortal(fn):
    """``fn`` as a TVM function that is never freed.

    The reducer registry is a C++ static destroyed after the interpreter has
    finalized; freeing a Python callback then aborts the process ("double free").
    One reference that is never released keeps the registry's copy from being the
    last one (two small closures, alive for the whole process anyway).
    """
    f = tvm_ffi.convert(fn)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(f))
    return f


def _is_float(e) -> bool:
    return str(e.ty).startswith(("float", "bfloat"))


def _register_with_schedules() -> None:
    """Let ``s_tir`` rfactor match blocks reduced by ``nan_max``/``nan_min`` (once per process:
    this module is imported once).

    The registry offers every reduction that no built-in reducer matched to these getters,
    whatever its dtype; for non-float dtypes they return a reducer that matches nothing (an
    identity that is a fresh variable) instead of raising on, say, ``bool``.
    """
    register = tvm.get_global_func("s_tir.schedule.RegisterReducer")

    def identity_getter(kind):
        def get(values):
            v = values[0]
            return [identity(kind, str(v.ty)) if _is_float(v) else tirx.Var("no_match", v.ty)]

        return get

    for kind in ("max", "min"):
        combine = _nan_combiner(kind)
        register(1, _immortal(lambda xs, ys, c=combine: [c(xs[0], ys[0]) if _is_float(xs[0]) else xs[0]]),
                 _immortal(identity_getter(kind)))


_register_with_schedules()


def _combine(kind: str, value, axis):
    if kind in ("sum", "mean"):
        return te.sum(value, axis=axis)
    return (nan_max if kind == "max" else nan_min)(value, axis=axis)


def _finish(kind: str, R: int, acc, out_dtype: str, shape, name="out"):
    def body(*idx):
        v = acc[idx]
        if kind == "mean":  # a symbolic R (``dynamic.reduce_cols``) divides by its run-time value
            v = v * tirx.const(1.0 / R, acc.dtype) if isinstance(R, int) else v / R.astype(acc.dtype)
        return v if out_dtype == acc.dtype else v.astype(out_dtype)

    return te.compute(shape, body, name=name)


def _padded(X, kind: str, R: int, Rp: int, read):
    """``read(k)`` or the identity past ``R`` (``k`` clamped so the load stays in bounds)."""
    if Rp == R:
        return read
    ident = identity(kind, X.dtype)
    return lambda k: tirx.if_then_else(k < _i64(R), read(te.min(k, _i64(R - 1))), ident)


def reduce_3d(X: te.Tensor, kind: str, *, pad_to: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """``Y[o, i] = reduce_k X[o, k, i]`` for ``X`` of shape ``(O, R, I)``; blocks ``acc`` and ``out``."""
    if kind not in KINDS:
        raise ValueError(f"unknown reduction {kind!r} (known: {KINDS})")
    O, R, I = (int(d) for d in X.shape)
    Rp = -(-R // pad_to) * pad_to if I == 1 else R
    k = te.reduce_axis((_i64(0), _i64(Rp)), name="k")

    def body(o, i):
        return _combine(kind, _padded(X, kind, R, Rp, lambda kk: X[o, kk, i])(k), k)

    acc = te.compute((_i64(O), _i64(I)), body, name="acc")
    return _finish(kind, R, acc, out_dtype or X.dtype, (_i64(O), _i64(I)))


def reduce_split(X: te.Tensor, kind: str, *, chunks: int, lanes: int, out_dtype: str | None = None) -> te.Tensor:
    """Split reduction of ``X (O, R, 1)``: lane-wise chunk partials ``P`` then ``acc``, ``out``."""
    if kind not in KINDS:
        raise ValueError(f"unknown reduction {kind!r} (known: {KINDS})")
    O, R, I = (int(d) for d in X.shape)
    if I != 1:
        raise ValueError(f"reduce_split needs I == 1, got X of shape {(O, R, I)}")
    C = -(-R // (chunks * lanes))  # vectors per chunk
    Rp = C * chunks * lanes
    c = te.reduce_axis((_i64(0), _i64(C)), name="c")

    def part(o, t, l):
        k = (t * _i64(C) + c) * _i64(lanes) + l
        load = _padded(X, kind, R, Rp, lambda kk: X[o, kk, _i64(0)])
        return _combine(kind, load(k), c)

    P = te.compute((_i64(O), _i64(chunks), _i64(lanes)), part, name="part")
    t2 = te.reduce_axis((_i64(0), _i64(chunks)), name="t2")
    l2 = te.reduce_axis((_i64(0), _i64(lanes)), name="l2")
    acc = te.compute((_i64(O), _i64(1)), lambda o, i: _combine(kind, P[o, t2, l2], [t2, l2]), name="acc")
    return _finish(kind, R, acc, out_dtype or X.dtype, (_i64(O), _i64(1)))


def arg_extreme(X: te.Tensor, axis: int | None, keepdims: bool, largest: bool) -> te.Tensor:
    """``argmax`` (``largest``) / ``argmin`` of ``X`` over ``axis`` (all axes when None) as
    PyTorch and NumPy count: a NaN is the extreme either way (the first NaN wins), ties go to the
    first index, a row of -inf (+inf) gives 0. TVM's own reducer compares with ``>``, which a NaN
    never passes: ``argmax([1, nan, 3])`` was 2. The comparisons are written so that none is
    negated (the simplifier rewrites ``!(a < b)`` into ``b <= a``, which is false at NaN).
    Returns int64 indices."""
    shape = [int(d) for d in X.shape]
    axes = list(range(len(shape))) if axis is None else [axis % len(shape)]
    red = [te.reduce_axis((_i64(0), _i64(shape[a])), name=f"r{a}") for a in axes]

    def combine(lhs, rhs):  # (index, value) pairs; rhs replaces lhs when it is the better one
        li, lv = lhs
        ri, rv = rhs
        l_nan, r_nan = ew.isnan(lv), ew.isnan(rv)
        beats = (rv > lv) if largest else (rv < lv)
        tie = tirx.Or(rv == lv, tirx.And(l_nan, r_nan))
        take = tirx.Or(tirx.Or(tirx.And(r_nan, tirx.Not(l_nan)), tirx.And(tirx.Not(l_nan), beats)),
                       tirx.And(tie, ri < li))
        return tirx.Select(take, ri, li), tirx.Select(take, rv, lv)

    def ident(idx_t, val_t):
        return tirx.max_value(str(idx_t)), identity("max" if largest else "min", val_t)

    reducer = te.comm_reducer(combine, ident, name="nan_argmax" if largest else "nan_argmin")

    def body(*out):
        full, it, rit = [], iter(out), iter(red)
        for a in range(len(shape)):
            if a in axes:
                full.append(next(rit))
                if keepdims:
                    next(it)
            else:
                full.append(next(it))
        flat = _i64(0)
        for a, r in zip(axes, red):
            flat = flat * _i64(shape[a]) + r
        return reducer((flat, X[tuple(full)]), axis=red)

    out_shape = [(1 if a in axes else d) for a, d in enumerate(shape)] if keepdims else \
        [d for a, d in enumerate(shape) if a not in axes]
    idx, _ = te.compute([_i64(d) for d in out_shape], body, name="arg")
    return idx
