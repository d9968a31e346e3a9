"""NumPy twins of the weight transforms, for constants at compile time.

A candidate's weight transform (packing, Winograd filter transform) is a TE
compute whose PrimFunc runs once per constant weight, at compile time. Compiling
each of them with LLVM cost ~0.3-1 s per distinct layer shape (a Winograd
filter transform's 36-way select dominates); a NumPy twin computes the same
array in milliseconds. Each twin is bit-identical to its TE compute (pure data
movement, or the same float32 operations in the same order;
``tests/test_fold_constants.py`` checks every twin against the compiled
PrimFunc on odd shapes).

A transform PrimFunc names its twin with :func:`attach` (attribute
``ext.host``: the twin's name and its integer/string parameters);
``relax_passes.fold_constants`` calls :func:`run` for constant inputs and
falls back to compiling the PrimFunc when no twin is attached.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

HOST_TWINS: dict[str, Callable] = {}


def twin(name: str):
    def register(fn):
        HOST_TWINS[name] = fn
        return fn
    return register


def attach(func, name: str, **params):
    """``func`` marked with the NumPy twin ``name`` and its parameters."""
    if name not in HOST_TWINS:
        raise KeyError(f"no NumPy twin named {name!r}")
    return func.with_attr("ext.host", {"name": name, **params})


def lookup(func) -> tuple[Callable, dict] | None:
    """``(twin, params)`` attached to a PrimFunc, or None."""
    spec = func.attrs.get("ext.host") if func.attrs is not None else None
    if spec is None:
        return None
    params = {str(k): (v if isinstance(v, (int, str)) else int(v) if hasattr(v, "value") else str(v))
              for k, v in spec.items()}
    fn = HOST_TWINS.get(str(params.pop("name")))
    return (fn, params) if fn is not None else None


def run(func, inputs: list) -> np.ndarray | None:
    found = lookup(func)
    if found is None or len(inputs) != 1:
        return None
    fn, params = found
    return fn(inputs[0], **params)


def _pad_to(x: np.ndarray, shape) -> np.ndarray:
    """``x`` in the corner of a zero array of ``shape`` (+0.0 padding, as the computes write);
    ``x`` itself when it has that shape (the callers' layout change copies it anyway)."""
    if tuple(x.shape) == tuple(shape):
        return x
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(0, d) for d in x.shape)] = x
    return out


@twin("matmul.pack")
def pack_weight(B: np.ndarray, *, N: int, nb: int, layout: str) -> np.ndarray:
    """``Bp[p, k, l] = B(k, p*nb + l)``, zero past ``N`` (``topi_kernels.matmul.pack_weight``)."""
    kn = B if layout == "kn" else B.T  # a view: B may itself be a view (a folded transpose)
    K, full, P = kn.shape[0], N // nb, -(-N // nb)
    out = np.empty((P, K, nb), B.dtype)  # one copy, panel by panel, whatever B's strides
    out[:full] = kn[:, :full * nb].reshape(K, full, nb).transpose(1, 0, 2)
    if P > full:
        out[full] = 0
        out[full, :, :N - full * nb] = kn[:, full * nb:N]
    return out


@twin("matmul.batch_operand")
def batch_operand(B: np.ndarray, *, transpose: bool, cols: int) -> np.ndarray:
    """``topi_kernels.matmul.batch_operand``: ``(..., K, cols)``, zero past ``N``."""
    kn = np.swapaxes(B, -1, -2) if transpose else B
    return np.ascontiguousarray(_pad_to(kn, kn.shape[:-1] + (cols,)))


@twin("conv2d.pack_nchwc")
def pack_weight_nchwc(W: np.ndarray, *, OB: int, RC: int, icb: int, ocb: int) -> np.ndarray:
    """``Wp[ob, rc, kh, kw, ri, oi] = W[ob*ocb + oi, rc*icb + ri, kh, kw]``, zero past O and C/g."""
    O, Cg, KH, KW = W.shape
    W = _pad_to(W[: OB * ocb, : RC * icb], (OB * ocb, RC * icb, KH, KW))
    return np.ascontiguousarray(W.reshape(OB, ocb, RC, icb, KH, KW).transpose(0, 2, 4, 5, 3, 1))


@twin("conv2d.pack_depthwise")
def pack_weight_depthwise(W: np.ndarray, *, block: int) -> np.ndarray:
    """``Wb[q, kh, kw, r] = W[q*block + r, 0, kh, kw]``."""
    O, _, KH, KW = W.shape
    return np.ascontiguousarray(W[:, 0].reshape(O // block, block, KH, KW).transpose(0, 2, 3, 1))


@twin("conv2d.weight_matrix")
def weight_matrix(W: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(W.reshape(W.shape[0], -1))


@twin("conv2d.winograd_filter")
def winograd_filter(W: np.ndarray, *, m: int, nb: int, kb: int) -> np.ndarray:
    """``U[e, jb, k, jl] = (G W[o, k] G^T)[e]`` with the float32 operations of
    ``topi_kernels.winograd.filter_transform``: the non-zero terms in (a, b) order, a unit
    coefficient as a (negated) copy, others as one float32 product, summed left to right."""
    from .winograd import matrices

    _, _, G = matrices(m)
    alpha, (O, C) = m + 2, W.shape[:2]
    dt = W.dtype
    P, Cp = -(-O // nb), -(-C // kb) * kb
    out = np.zeros((alpha * alpha, P * nb, Cp), dt)  # [e, o, k], +0.0 past O and C
    for e in range(alpha * alpha):
        acc = None
        for a in range(3):
            for b in range(3):
                coef = G[e // alpha, a] * G[e % alpha, b]
                if coef == 0:
                    continue
                v = W[:, :, a, b]
                v = v if coef == 1 else (-v if coef == -1 else v * dt.type(float(coef)))
                acc = v if acc is None else acc + v
        if acc is not None:
            out[e, :O, :C] = acc
    return np.ascontiguousarray(out.reshape(alpha * alpha, P, nb, Cp).transpose(0, 1, 3, 2))
