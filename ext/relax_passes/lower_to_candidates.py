"""Replace each ``ext.*`` composite call by a ``call_tir`` to the kernel the
selector chose for its workload.

For every composite: the family extracts a ``Workload``; the ``Selector``
returns a ``Decision``; the candidate builds one PrimFunc per distinct
(candidate, config, workload) and, when it wants an input in another layout
(packed weights), a transform kernel applied to that input first. Transforms
of constants are folded at compile time by the ``FoldConstant`` that follows.
Composites the selector leaves to the fallback are inlined back, so stock
lowering sees the original ops. Every decision goes to the ``SelectionReport``.
A vendor-library candidate builds a ``PackedCall`` instead: ``call_dps_packed``
to its packed function, then the epilogue as a ``call_tir`` to a small
element-wise kernel.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..strategies.registry import config_to_dict
from ..strategies.report import SelectionReport
from ..strategies.select import Selector
from ..tir_schedules.common import param_dtype, param_shape
from .families import FAMILIES, Composite


def _bindings(func: relax.Function) -> dict:
    return {b.var: b.value for block in func.body.blocks for b in block.bindings}


@mutator
class _Lower(PyExprMutator):
    def __init__(self, mod, selector: Selector, report: SelectionReport):
        super().__init__(mod)
        self.mod_, self.selector, self.report = mod, selector, report
        self.kernels: dict = {}
        self.built: dict = {}
        self.declined: set = set()

    def _composite(self, call) -> Composite | None:
        if not isinstance(call.op, relax.GlobalVar):
            return None
        func = self.mod_[call.op]
        name = func.attrs.get("Composite") if isinstance(func, relax.Function) and func.attrs else None
        if not name or not str(name).startswith("ext."):
            return None
        binds = _bindings(func)
        calls = [v for v in binds.values() if isinstance(v, relax.Call)]
        return Composite(str(name), func, list(call.args), calls, binds)

    def _kernel(self, cand, wl, config, key_extra, build):
        key = (cand.name, wl.key, repr(config_to_dict(config)), key_extra)
        if key not in self.kernels:
            func = build()
            hint = cand.name.replace(".", "_") + ("_" + key_extra if key_extra else "")
            self.kernels[key] = self.builder_.add_func(func, hint)
        return self.kernels[key]

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        comp = self._composite(call)
        if comp is None:
            return call
        family = FAMILIES[comp.name.split(".", 1)[1].split("_", 1)[0]]
        extracted = family.extract(comp)
        if extracted is None:
            self.declined.add(call.op)
            return call
        wl, args, post = extracted
        decision, built = self._decide(wl)
        self.report.add(decision)
        if decision.candidate is None:
            self.declined.add(call.op)
            return call
        cand, config = decision.candidate, decision.config
        main, transforms = built
        args = [self.builder_.normalize(a) for a in args]
        for idx, tfunc in transforms.items():
            gv = self._kernel(cand, wl, config, f"in{idx}", lambda f=tfunc: f)
            out_ty = relax.TensorType(param_shape(tfunc, -1), param_dtype(tfunc, -1))
            args[idx] = self.builder_.emit(relax.call_tir(gv, [args[idx]], out_ty=out_ty))
        out_ty = relax.TensorType([int(d) for d in wl.attr("out_shape")], wl.out_dtype)
        if cand.library is not None:  # vendor library: a packed call, then our epilogue kernel
            result = self._library_call(cand, wl, config, main, args, out_ty)
        else:
            gv = self._kernel(cand, wl, config, "", lambda: main)
            result = relax.call_tir(gv, args, out_ty=out_ty)
        return post(self.builder_.emit(result)) if post else result

    def _decide(self, wl):
        """Choose and build; a candidate whose build raises is reported ``failed`` and the
        selector chooses again without it (never a crash, at worst the stock fallback)."""
        failed: dict = {}
        while True:
            decision = self.selector.choose(wl, failed)
            if decision.candidate is None:
                return decision, None
            cand, config, target = decision.candidate, decision.config, self.selector.target
            key = (cand.name, wl.key, repr(config_to_dict(config)))
            try:
                if key not in self.built:  # repeated layers share one build
                    self.built[key] = (cand.build(wl, config, target), cand.input_transforms(wl, config, target))
                return decision, self.built[key]
            except Exception as err:  # a schedule that TVM rejects for this shape
                first = (str(err).strip().splitlines() or [""])[-1][:160]
                failed[cand.name] = f"failed to build: {type(err).__name__}: {first}"

    def _library_call(self, cand, wl, config, call, args, out_ty):
        """``call_dps_packed`` to the library's function, then its ``PackedCall.epilogue`` kernel."""
        statics = [tvm.ir.StringImm(v) if isinstance(v, str) else relax.expr.prim_value(v)
                   for v in call.static_args]
        anchor_ty = relax.TensorType([int(d) for d in call.out_shape], call.out_dtype)
        anchor = relax.call_dps_packed(call.func_name, args[: call.num_inputs] + statics, anchor_ty)
        if call.epilogue is None:
            return anchor
        gv = self._kernel(cand, wl, config, "epilogue", lambda: call.epilogue)
        return relax.call_tir(gv, [self.builder_.emit(anchor)] + args[call.num_inputs:], out_ty=out_ty)

    def run(self):
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function) and not (func.attrs and "Composite" in func.attrs):
                self.builder_.update_func(gv, self.visit_expr(func))
        mod = self.builder_.get()
        for gv in self.declined:  # back to plain private functions, inlined below
            func = mod[gv]
            mod[gv] = func.without_attr("Composite").without_attr("Primitive")
        return mod


def LowerToCandidates(selector: Selector, report: SelectionReport) -> tvm.transform.Pass:  # noqa: N802
    """Module pass: composites -> chosen kernels (see module doc)."""

    def transform(mod, _ctx):
        mod = _Lower(mod, selector, report).run()
        mod = relax.transform.DeadCodeElimination()(mod)
        return relax.transform.InlinePrivateFunctions()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.LowerToCandidates")
