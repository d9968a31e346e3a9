"""Replace each ``ext.*`` composite call by a ``call_tir`` to the kernel the
selector chose for its workload.

For every composite: the family extracts a ``Workload``; the ``Selector``
returns a ``Decision``; the candidate builds one PrimFunc per distinct
(candidate, config, workload) and, when it wants an input in another layout
(packed weights), a transform kernel applied to that input first. Transforms
of constants are folded at compile time by the ``FoldConstant`` that follows.
A workload whose only symbolic extent is a batch (a conv net imported with a
symbolic batch) takes the kernel chosen for one image, looped over the images
(``per_image``). Composites the selector leaves to the fallback are inlined back, so stock
lowering sees the original ops. Every decision goes to the ``SelectionReport``.
An operand computed from weight parameters alone (a function with attr
``num_input``, see ``lift_params``) counts as a constant for the workload
(``b_const`` / ``w_const``): its transforms are lifted into
``main_transform_params`` and run once per weight set, so the kernels chosen
equal those of the build with the weights bound.
A vendor-library candidate builds a ``PackedCall`` instead: ``call_dps_packed``
to its packed function, then the epilogue as a ``call_tir`` to a small
element-wise kernel.

No single composite may crash the build: an exception while extracting,
choosing or emitting one composite is reported as a ``failed`` row (error
type and message) and that composite goes to stock lowering like a declined
one. After lowering, every op still left to stock lowering (outside any kernel,
or inside a declined composite) is reported as a ``stock`` row saying why no
ext kernel took it.
"""
from __future__ import annotations

import dataclasses

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..strategies.registry import PackedCall, config_to_dict
from ..strategies.report import SelectionReport
from ..strategies.select import Decision, Selector
from ..tir_schedules.common import param_dtype, param_shape
from ..workload import Workload
from .families import FAMILIES, Composite, composite_of
from .lift_params import weight_derived
from .per_image import batch_free_workload, per_image
from .stock_ops import report_stock_ops
from .symbolic import out_shape, relax_shape


#: workload attr saying "this operand is known before the first call", and the operand's index
_CONST_ATTRS = {"matmul": ("b_const", 1), "conv2d": ("w_const", 1)}


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
        self.reasons: dict = {}  # declined composite -> why (for the stock rows of its ops)
        self.weights: set = set()  # variables of the function being lowered computed from weights alone

    def _composite(self, call) -> Composite | None:
        if not isinstance(call.op, relax.GlobalVar):
            return None
        func = self.mod_[call.op]
        name = func.attrs.get("Composite") if isinstance(func, relax.Function) and func.attrs else None
        if not name or not str(name).startswith("ext."):
            return None
        binds = _bindings(func)
        calls = [v for v in binds.values() if isinstance(v, relax.Call)]
        return composite_of(func, call.args, calls, binds)  # None: not made by FuseEpilogues

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
        try:
            return self._lower(call, comp)
        except Exception as err:  # last line of defence: this composite goes to stock lowering
            first = (str(err).strip().splitlines() or [""])[-1][:200]
            reason = f"{type(err).__name__}: {first}"
            self.report.add(Decision(_failed_workload(comp), None, None, "failed", [],
                                     f"ext failed on {comp.name} ({reason}): stock lowering + ext fallback schedule"))
            self._decline(call, f"{comp.name} failed in ext ({reason})")
            return call

    def _decline(self, call, why: str) -> None:
        self.declined.add(call.op)
        self.reasons[call.op] = why

    def _lower(self, call, comp: Composite):
        family = FAMILIES[comp.family]
        extracted = family.extract(comp)
        if extracted is None:
            self._decline(call, f"the {family.name} family cannot describe this {comp.name}")
            return call
        wl, args, post = extracted
        wl = mark_weight_operand(wl, args, self.weights)
        decision, built, kernel_wl = self._decide_per_image(wl)
        if decision is None:
            decision, built = self._decide(wl)
            kernel_wl = wl
        if decision.candidate is None:
            self.report.add(decision)
            self._decline(call, f"{comp.name} declined: {decision.reason}")
            return call
        cand, config = decision.candidate, decision.config
        main, transforms = built
        args = [self.builder_.normalize(a) for a in args]
        for idx, tfunc in transforms.items():
            gv = self._kernel(cand, kernel_wl, config, f"in{idx}", lambda f=tfunc: f)
            out_ty = relax.TensorType(param_shape(tfunc, -1), param_dtype(tfunc, -1))
            args[idx] = self.builder_.emit(relax.call_tir(gv, [args[idx]], out_ty=out_ty))
        out_ty = relax.TensorType(relax_shape(out_shape(wl), args), wl.out_dtype)  # symbolic dims: args' vars
        if isinstance(main, PackedCall):  # a packed function (vendor library, NPU), then our epilogue kernel
            result = self._library_call(cand, wl, config, main, args, out_ty)
        else:
            gv = self._kernel(cand, wl, config, "", lambda: main)
            result = relax.call_tir(gv, args, out_ty=out_ty)
        result = post(self.builder_.emit(result)) if post else result
        self.report.add(decision)  # only once the kernel call exists: a failure above reports "failed"
        return result

    def _decide_per_image(self, wl):
        """A workload whose only symbolic extent is a batch: the kernel chosen for one image,
        looped (``per_image``); ``(None, None, None)`` when that does not apply. The decision
        reports the one-image workload (tuning records of batch 1 apply to it)."""
        found = batch_free_workload(wl)
        if found is None:
            return None, None, None
        one, batched, sym = found
        decision, built = self._decide(one)
        if decision.candidate is None or isinstance(built[0], PackedCall) or set(built[1]) & set(batched):
            return None, None, None  # nothing static, a library call, or a transform of the images
        main = per_image(built[0], batched)
        decision = dataclasses.replace(decision, reason=f"per image over the symbolic batch {sym}: {decision.reason}")
        return decision, (main, built[1]), one

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
                    self.built[key] = cand.build_all(wl, config, target)
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
                self.weights = weight_derived(func)
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def uncomposite(self, mod):
        """Declined composites become plain private functions (inlined by the caller)."""
        alive = {gv.name_hint for gv in mod.get_global_vars()}
        for gv in self.declined:
            if gv.name_hint in alive:
                mod[gv] = mod[gv].without_attr("Composite").without_attr("Primitive")
        return mod


def mark_weight_operand(wl: Workload, args: list, weights: set) -> Workload:
    """``wl`` with ``b_const``/``w_const`` set when that operand is one of ``weights`` (variables
    computed from weight parameters alone, ``lift_params.weight_derived``): its transforms run
    once per weight set, as for a constant. Task extraction should apply it the same way."""
    attr, idx = _CONST_ATTRS.get(wl.op, (None, 0))
    if attr is None or wl.attr(attr) or idx >= len(args) or not weights:
        return wl
    if not (isinstance(args[idx], relax.Var) and args[idx] in weights):
        return wl
    return wl.with_(attrs=dict(wl.attrs, **{attr: True}))


def _failed_workload(comp: Composite) -> Workload:
    """A workload naming a composite ext failed on, from its outer tensor arguments alone."""
    tensors = [a for a in comp.args if isinstance(getattr(a, "ty", None), relax.TensorType) and a.ty.shape is not None]
    shapes = [tuple(int(d) if hasattr(d, "value") else str(d) for d in a.ty.shape) for a in tensors]
    out = comp.func.ret_ty if hasattr(comp.func, "ret_ty") else None
    out_dtype = str(out.dtype) if isinstance(out, relax.TensorType) else "unknown"
    return Workload(comp.family, shapes, [str(a.ty.dtype) for a in tensors],
                    out_dtype, attrs={"composite": comp.name, "failed": True})


def LowerToCandidates(selector: Selector, report: SelectionReport) -> tvm.transform.Pass:  # noqa: N802
    """Module pass: composites -> chosen kernels (see module doc)."""

    def transform(mod, _ctx):
        lower = _Lower(mod, selector, report)
        lowered = relax.transform.DeadCodeElimination()(lower.run())
        report_stock_ops(mod, report, lower.reasons)  # the input: without the reshapes ext added
        return relax.transform.InlinePrivateFunctions()(lower.uncomposite(lowered))

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.LowerToCandidates")
