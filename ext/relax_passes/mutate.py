"""What the Relax passes share: the ``PyExprMutator`` driver, a tensor's static shape, a call's
operator name, how often each variable is read."""
from __future__ import annotations

from collections import Counter

import tvm
from tvm import relax


def mutate_functions(mutator, mod: tvm.IRModule) -> tvm.IRModule:
    """``mutator`` (a ``PyExprMutator`` built over ``mod``) applied to every Relax function of
    ``mod``; returns the module its builder holds afterwards (with any functions it added)."""
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def static_int(d) -> int | None:
    """A shape dimension as an int, or None when it is symbolic."""
    return int(d.value) if hasattr(d, "value") else None


def static_dims(expr) -> list[int] | None:
    """The shape of a tensor expression as ints, or None (not a tensor, unknown or symbolic dims)."""
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    if any(not hasattr(d, "value") for d in ty.shape):
        return None
    return [int(d.value) for d in ty.shape]


def op_name(expr) -> str:
    """The operator a Relax call applies (``"relax.add"``), or "" (not a call of an operator)."""
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def has_op(mod: tvm.IRModule, *names: str) -> bool:
    """Whether a Relax function of ``mod`` calls one of the operators ``names``."""
    found = []
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func, lambda e: found.append(1) if op_name(e) in names else None)
    return bool(found)


def var_uses(func: relax.Function) -> Counter:
    """How many times each variable is read by the bindings of ``func`` and its result."""
    count = Counter()

    def visit(expr):
        if isinstance(expr, relax.Var):
            count[expr] += 1

    for block in func.body.blocks:
        for b in block.bindings:
            relax.analysis.post_order_visit(b.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return count
