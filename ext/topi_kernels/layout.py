"""Layout transforms as one batched, blocked transpose.

Every supported transform (NCHW <-> NHWC, NCHW <-> NCHW{c}, NHWC <-> NCHW{c},
and any permutation that swaps two adjacent groups of axes) is, after
merging axes that stay together, the same operation on a 4-D view::

    X (B, R, S, E)  ->  Y (B, S, R, E)          Y[b, s, r, e] = X[b, r, s, e]

    NCHW  -> NHWC     B=N       R=C      S=H*W    E=1
    NHWC  -> NCHW     B=N       R=H*W    S=C      E=1
    NCHW  -> NCHWc    B=N*C/c   R=c      S=H*W    E=1
    NCHWc -> NCHW     B=N*C/c   R=H*W    S=c      E=1
    NHWC  -> NCHWc    B=N       R=H*W    S=C/c    E=c
    NCHWc -> NHWC     B=N       R=C/c    S=H*W    E=c

Cost: no flops; ``8 * B * R * S * E`` bytes moved (read once, written once).
With ``E >= lanes`` it is a copy of contiguous chunks; with ``E == 1`` the
schedule walks ``tile x tile`` blocks so that both the strided reads and the
contiguous writes of a block stay in L1.

``canonical_permutation(shape, perm)`` finds the 4-D view for a
``permute_dims``; ``split_axes_form`` reads a ``layout_transform`` index map made
of ``v``, ``v // k``, ``v % k`` and ``v * k + u`` terms.
"""
from __future__ import annotations

import math

from tvm import te, tirx

from . import i64 as _i64


def batched_transpose(X: te.Tensor) -> te.Tensor:
    """``Y[b, s, r, e] = X[b, r, s, e]`` for ``X`` of shape ``(B, R, S, E)``; block ``T``."""
    B, R, S, E = (int(d) for d in X.shape)
    return te.compute((_i64(B), _i64(S), _i64(R), _i64(E)), lambda b, s, r, e: X[b, r, s, e], name="T")


def canonical_permutation(shape, perm) -> tuple | None:
    """``(B, R, S, E)`` when permuting ``shape`` by ``perm`` swaps two adjacent groups of axes
    (size-1 axes ignored), else None. A pure reshape (no swap) also returns None."""
    keep = [a for a in perm if shape[a] != 1]
    # runs of input axes that stay consecutive in the output
    groups, run = [], [keep[0]] if keep else []
    for a in keep[1:]:
        if a == run[-1] + 1:
            run.append(a)
        else:
            groups.append(run)
            run = [a]
    if run:
        groups.append(run)
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # groups in input order
    pos = {g: i for i, g in enumerate(order)}
    out_order = [pos[g] for g in range(len(groups))]  # output position -> input group index
    n = len(groups)
    swaps = [i for i in range(n - 1) if out_order[i] == i + 1 and out_order[i + 1] == i]
    if len(swaps) != 1 or any(out_order[j] != j for j in range(n) if j not in (swaps[0], swaps[0] + 1)):
        return None
    k = swaps[0]
    size = lambda g: math.prod(shape[a] for a in groups[order[g]])  # noqa: E731
    B = math.prod(size(g) for g in range(k))
    R, S = size(k), size(k + 1)
    E = math.prod(size(g) for g in range(k + 2, n))
    return B, R, S, E


def split_axes_form(shape, index_map) -> tuple | None:
    """``(split_shape, perm, out_merges)`` for an index map of ``v``, ``v // k``, ``v % k`` and
    ``v * k + u`` terms, or None: the transform equals reshape(split) -> permute -> reshape(merge)."""
    ivars = list(index_map.initial_indices)
    split = {}  # input axis -> block size k
    terms = []
    for e in index_map.final_indices:
        t = _term(e, ivars)
        if t is None:
            return None
        terms.append(t)
        for kind, axis, k in t:
            if kind in ("div", "mod"):
                if split.get(axis, k) != k or shape[axis] % k:
                    return None
                split[axis] = k
    pieces, where = [], {}
    for axis, d in enumerate(shape):
        if axis in split:
            where[(axis, "div")], where[(axis, "mod")] = len(pieces), len(pieces) + 1
            pieces += [d // split[axis], split[axis]]
        else:
            where[(axis, "var")] = len(pieces)
            pieces.append(d)
    perm = []
    for t in terms:
        for kind, axis, k in t:
            if kind == "merge":  # v * k + u: u must span exactly k
                if shape[axis] != k:
                    return None
                kind = "var"
            key = (axis, kind) if (axis, kind) in where else None
            if key is None:
                return None
            perm.append(where[key])
    if sorted(perm) != list(range(len(pieces))):
        return None
    return tuple(pieces), tuple(perm)


def _term(e, ivars):
    """One output index as a list of (kind, input axis, k) pieces, or None."""
    def axis_of(v):
        for i, iv in enumerate(ivars):
            if v.same_as(iv):
                return i
        return None

    if isinstance(e, tirx.Var):
        a = axis_of(e)
        return None if a is None else [("var", a, 1)]
    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod)) and isinstance(e.a, tirx.Var) and isinstance(e.b, tirx.IntImm):
        a = axis_of(e.a)
        return None if a is None else [("div" if isinstance(e, tirx.FloorDiv) else "mod", a, int(e.b))]
    if isinstance(e, tirx.Add) and isinstance(e.a, tirx.Mul) and isinstance(e.a.a, tirx.Var) \
            and isinstance(e.a.b, tirx.IntImm) and isinstance(e.b, tirx.Var):
        hi, lo = axis_of(e.a.a), axis_of(e.b)
        return None if hi is None or lo is None else [("var", hi, 1), ("merge", lo, int(e.a.b))]
    return None
