"""Task extraction: the distinct workloads of a Relax module, with use counts.

Runs the front half of ext's pipeline (``Canonicalize``, ``FuseEpilogues``)
under the target, then walks every call to an ``ext.*`` composite and asks
its family to ``extract`` the ``Workload`` (the same code ``LowerToCandidates``
uses, so the tuned keys are exactly the keys the build looks up).

A task's ``weight`` is ``uses x estimated seconds``; the estimate is the
best measured time when known, else ``flops / 100 GFLOPS``.

Example
-------
>>> tasks = extract_tasks(ext.models.gemm.mlp(), ext.target.cpu())  # doctest: +SKIP
>>> [(t.workload.key, t.uses) for t in tasks]                        # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprVisitor, visitor

from ..workload import Workload

#: throughput assumed for a workload nobody has measured (only orders tasks)
NOMINAL_FLOPS_PER_S = 100e9


@dataclasses.dataclass
class Task:
    """One workload to tune and how often the model runs it."""

    workload: Workload
    uses: int = 1

    def estimated_seconds(self, measured: float | None = None) -> float:
        if measured:
            return measured
        flops = self.workload.flops
        return flops / NOMINAL_FLOPS_PER_S if flops == flops else 1e-3  # NaN: symbolic

    def weight(self, measured: float | None = None) -> float:
        return self.uses * self.estimated_seconds(measured)


@visitor
class _CompositeCalls(PyExprVisitor):
    def __init__(self, mod):
        super().__init__()
        self.mod_, self.found = mod, []

    def visit_call_(self, call):
        super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar):
            func = self.mod_[call.op]
            name = func.attrs.get("Composite") if isinstance(func, relax.Function) and func.attrs else None
            if name and str(name).startswith("ext."):
                self.found.append((str(name), func, list(call.args)))


def _body_calls(func: relax.Function) -> list:
    out = []
    body = func.body
    for block in getattr(body, "blocks", []):
        for b in block.bindings:
            if isinstance(b.value, relax.Call):
                out.append(b.value)
    return out


def extract_tasks(mod: tvm.IRModule, target) -> list[Task]:
    """Distinct ``Workload`` s of ``mod`` with use counts, in first-use order.

    Parameters
    ----------
    mod : a Relax IRModule (as given to ``ext.build``).
    target : the target it will be compiled for.

    Returns
    -------
    ``[Task]``; composites a family declines to describe (symbolic shapes...) are left out,
    as they go to stock lowering.
    """
    from .. import relax_passes as rp
    from ..relax_passes.families import FAMILIES, composite_of
    from ..target import normalize

    if not isinstance(mod, tvm.IRModule):
        raise ValueError(f"extract_tasks needs a Relax IRModule, got {type(mod).__name__}")
    tgt = normalize(target)
    with tgt:
        fused = tvm.transform.Sequential([rp.Canonicalize(), rp.FuseEpilogues()])(mod)
    tasks: dict[str, Task] = {}
    for _gv, func in fused.functions_items():
        if not isinstance(func, relax.Function) or (func.attrs and "Composite" in func.attrs):
            continue
        walker = _CompositeCalls(fused)
        walker.visit_expr(func)
        for name, cfunc, args in walker.found:
            comp = composite_of(cfunc, args, _body_calls(cfunc))
            family = FAMILIES.get(comp.family) if comp is not None else None
            if family is None:
                continue
            extracted = family.extract(comp)
            if extracted is None or not extracted[0].is_static:
                continue
            wl = extracted[0]
            if wl.key in tasks:
                tasks[wl.key].uses += 1
            else:
                tasks[wl.key] = Task(wl)
    return list(tasks.values())
