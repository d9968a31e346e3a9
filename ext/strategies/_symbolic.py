"""Roles of a workload's symbolic dimensions, for ``Candidate.dynamic``.

A symbolic dimension (a string in ``Workload.shapes``, e.g. ``"n"`` or
``"b * s"``) is named by the role it plays in its op family, so a candidate
declares what it can leave open at compile time in the family's words
(``("rows",)`` for a GEMM tiled over a run-time M) rather than by input index
and axis. A kernel that loops over a symbolic extent stays correct for every
value; one whose tiling or vector width depends on an extent (the reduction
of a row, the channels of a conv) must see it static, and a candidate that
does not name a role declines workloads where that role is symbolic.

Roles per family (an unknown family, or a symbol that only an epilogue tensor
carries, gives ``"other"``, which no candidate should declare):

* ``matmul``: ``rows`` (M; every leading axis of an N-D ``a`` against a 2-D
  ``b``), ``cols`` (N), ``reduction`` (K), ``batch`` (batch axes of a batched pair)
* ``softmax`` / ``layer_norm``: ``rows``, ``cols``
* ``reduce``: ``outer``, ``reduced``, ``inner`` of the canonical ``(O, R, I)``
* ``conv2d``: ``batch``, ``channels``, ``spatial``, ``kernel`` (an epilogue tensor's axes
  as the output's: a residual's computed height is ``spatial``)
* ``pool2d``: ``batch``, ``channels``, ``spatial`` (by the ``layout`` attr's letters)
"""
from __future__ import annotations

from ..workload import Workload

ROLES = ("rows", "cols", "reduction", "batch", "outer", "reduced", "inner", "channels", "spatial", "kernel",
         "other")


def _matmul(wl: Workload) -> list[tuple[object, str]]:
    a, b = wl.shapes[0], wl.shapes[1]
    tb = bool(wl.attr("transpose_b"))
    k_b, n_b = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    out = [(n_b, "cols"), (a[-1], "reduction"), (k_b, "reduction")]
    if len(b) == 2:
        return out + [(d, "rows") for d in a[:-1]]
    return out + [(a[-2], "rows")] + [(d, "batch") for d in list(a[:-2]) + list(b[:-2])]


def _rows(wl: Workload) -> list[tuple[object, str]]:
    rows, n = wl.shapes[0]
    return [(rows, "rows"), (n, "cols")] + [(d, "cols") for s in wl.shapes[1:] for d in s]


def _reduce(wl: Workload) -> list[tuple[object, str]]:
    return list(zip(wl.shapes[0], ("outer", "reduced", "inner")))


def _conv2d(wl: Workload) -> list[tuple[object, str]]:
    from ..workload import conv_dims

    role = {"N": "batch", "C": "channels", "O": "channels", "I": "channels", "H": "spatial", "W": "spatial",
            "KH": "kernel", "KW": "kernel"}
    pairs = [(d, role[k]) for k, d in conv_dims(wl).items()]
    # bias, residual, SE scale broadcast against the output (in the data's layout): their axes
    # play its roles
    layout = str(wl.attr("data_layout", "NCHW"))
    if sorted(layout) == sorted("NCHW"):
        pairs += [(d, role[ax]) for s in wl.shapes[2:] if len(s) == 4 for ax, d in zip(layout, s)]
    return pairs


def _pool2d(wl: Workload) -> list[tuple[object, str]]:
    layout = str(wl.attr("layout") or "NCHW")
    shape = wl.shapes[0]
    role = {"N": "batch", "C": "channels", "H": "spatial", "W": "spatial"}
    letters = [ch for ch in layout if ch.isalpha()]  # NCHW16c: N, C, H, W, c
    return [(d, role.get(ax, "channels")) for ax, d in zip(letters, shape)]


_FAMILIES = {"matmul": _matmul, "softmax": _rows, "layer_norm": _rows, "reduce": _reduce, "conv2d": _conv2d,
             "pool2d": _pool2d}


def symbolic_roles(wl: Workload) -> dict[str, set[str]]:
    """``{symbol: {roles}}`` for every symbolic dimension of ``wl`` (empty when static)."""
    symbols = {d for s in wl.shapes for d in s if not isinstance(d, int)}
    if not symbols:
        return {}
    try:
        pairs = _FAMILIES[wl.op](wl) if wl.op in _FAMILIES else []
    except (IndexError, ValueError, TypeError):  # a malformed workload: the candidate's check names it
        pairs = []
    roles: dict[str, set[str]] = {}
    for d, role in pairs:
        if not isinstance(d, int):
            roles.setdefault(d, set()).add(role)
    for s in symbols - set(roles):
        roles[s] = {"other"}
    return roles


def undeclared(wl: Workload, dynamic: tuple) -> str | None:
    """Why a candidate declaring symbolic ``dynamic`` roles cannot take ``wl``; None when it can."""
    roles = symbolic_roles(wl)
    bad = {s: sorted(r - set(dynamic)) for s, r in roles.items() if r - set(dynamic)}
    if not bad:
        return None
    found = "; ".join(f"{s}: {'/'.join(r)}" for s, r in sorted(bad.items()))
    takes = f"takes symbolic {'/'.join(dynamic)} only" if dynamic else "takes static shapes only"
    return f"symbolic shape ({found}): {takes}"
