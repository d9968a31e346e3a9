"""The driver the ``PyExprMutator`` passes share."""
from __future__ import annotations

import tvm
from tvm import relax


def mutate_functions(mutator, mod: tvm.IRModule) -> tvm.IRModule:
    """``mutator`` (a ``PyExprMutator`` built over ``mod``) applied to every Relax function of
    ``mod``; returns the module its builder holds afterwards (with any functions it added)."""
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
