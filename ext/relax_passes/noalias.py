"""``tirx.noalias`` on the PrimFuncs that cannot alias: one buffer parameter or none.

TVM 0.27's LLVM codegen gives every kernel a separate compute function whose pointer
arguments are ``noalias`` (and aligned) -- unless *any* function in the module lacks the
``tirx.noalias`` attr; then no function of the module gets one, and kernels lose the alias
information their vectorized loops rely on. The functions that lack it are the host shape
functions ``VMShapeLower`` adds for symbolic shapes (``shape_func(H)``, one buffer): one
such function made every kernel of a symbolic-batch ResNet-50 1.6-1.9x slower than the same
kernel compiled alone (Winograd 128x28x28: 0.62 vs 0.36 ms). A function with at most one
buffer parameter has nothing to alias, so the attr is exact there; others are left alone.
"""
from __future__ import annotations

import tvm


def _buffers(func) -> int:
    return sum(1 for p in func.params if tvm.tirx.is_buffer_var(p))


def MarkNoAlias() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    def transform(mod, _ctx):
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or (func.attrs and func.attrs.get("tirx.noalias")):
                continue
            if _buffers(func) <= 1:
                updates[gv] = func.with_attr("tirx.noalias", True)
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.MarkNoAlias")
