"""Anchor op families: the Relax pattern of each anchor and how a matched
composite becomes a ``Workload`` plus the arguments of its kernel.

A family module calls :func:`register_family` once. ``fuse_epilogue`` builds
its patterns from every family; ``lower_to_candidates`` asks the family named
by a composite to extract the workload.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from tvm import relax



@dataclasses.dataclass(frozen=True)
class Family:
    """How one anchor op is matched and described.

    anchors : ``[(variant, pattern_factory)]``; each factory returns
        ``(pattern, annotations)`` with annotations ``"anchor"`` and the anchor's inputs.
    check : ``(variant, annotated exprs) -> bool``, rejects matches the family can't describe.
    extract : ``(Composite) -> (Workload, [relax args], post) | None``; ``post`` maps the
        kernel's output expression back to the original result (e.g. a reshape), or is None.
    """

    name: str
    anchors: list
    check: Callable
    extract: Callable
    #: match epilogue chains after the anchor (False: the bare anchor only, e.g. softmax)
    chains: bool = True
    #: axis of the anchor's output that a bias varies along (int, or a callable of the anchor expr)
    channel_axis: object = -1
    #: the second axis a ``scale`` (channel-wise multiply) may vary along besides ``channel_axis``
    #: (conv2d: the batch axis, for the SE gate ``(N, C, 1, 1)``); None: no ``scale`` chains
    scale_axis: object = None
    #: what instances the family covers, for the report row of one it declined (e.g. split axes)
    covers: str = ""
    #: only CPU targets have its kernels: elsewhere its ops are left to the other families
    cpu_only: bool = False
    #: ``(target) -> bool``: whether the family is fused for this CPU target (None: always)
    fuses_on: Callable | None = None


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"op family {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


@dataclasses.dataclass
class Composite:
    """A matched composite call: its function, the outer arguments and the body's op chain."""

    name: str  # "ext.matmul_bias_relu"
    family: str  # "matmul" (the ``ext.family`` attribute set at fusion)
    epilogue: tuple  # ("bias", "relu") (the ``ext.epilogue`` attribute)
    func: relax.Function
    args: list  # outer relax expressions, positionally matching func.params
    calls: list  # the body's relax.Call values in order
    bindings: dict = dataclasses.field(default_factory=dict)  # body var -> bound value

    def value(self, expr):
        """The value bound to a body variable (the expression itself if unbound)."""
        for var, val in self.bindings.items():
            if expr.same_as(var):
                return val
        return expr

    def outer(self, expr):
        """The outer argument bound to a parameter of the composite (or None)."""
        for p, a in zip(self.func.params, self.args):
            if expr.same_as(p):
                return a
        return None

    def extras(self) -> list:
        """The outer arguments of the epilogue's tensor steps (bias, scale, residual), in chain order."""
        from ..fuse_epilogue import chain_operands

        return chain_operands(self.func, self.family, self.epilogue, self.args)



def composite_of(func, args: list, calls: list, bindings: dict | None = None) -> Composite | None:
    """The ``Composite`` of a fused function, from the ``ext.family`` / ``ext.epilogue``
    attributes ``FuseEpilogues`` set; None for a function without them."""
    attrs = func.attrs if isinstance(func, relax.Function) and func.attrs else {}
    family = attrs.get("ext.family") if attrs else None
    if family is None:
        return None
    epilogue = tuple(str(p) for p in attrs.get("ext.epilogue", []))
    return Composite(str(attrs["Composite"]), str(family), epilogue, func, list(args), list(calls), bindings or {})


def single_op_anchor(op: str):
    """Pattern factory for a bare one-input anchor ``op(x)`` (annotations ``anchor`` and ``x``)."""
    from tvm.relax.dpl import is_op, wildcard

    def factory():
        x = wildcard()
        anchor = is_op(op)(x)
        return anchor, {"anchor": anchor, "x": x}

    return factory


def static_shape(expr) -> tuple:
    """Shape of a tensor expression: ints where static, strings where symbolic."""
    return tuple(int(d) if hasattr(d, "value") else str(d) for d in expr.ty.shape)


def dtype(expr) -> str:
    return str(expr.ty.dtype)


def _load_all() -> None:
    import importlib
    import pkgutil

    for m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if not m.startswith("_"):
            importlib.import_module(f"{__name__}.{m}")


_load_all()
