"""Weights as run-time parameters: lift weight-only work out of ``main``.

A function with the attribute ``num_input`` (what ``ext.frontend`` sets with
``keep_params_as_input=True``, and ``relax.frontend.detach_params`` keeps)
takes its first ``num_input`` parameters as run-time inputs and the rest as
weights. Everything ext emits on a weight alone -- packing into panels,
Winograd filter transforms, batch norm folded into conv weights, re-layouts --
would otherwise run on every call (ResNet-18: 3.1x slower than with weights
bound as constants). ``LiftWeightTransforms`` hands such functions to TVM's
``relax.transform.LiftTransformParams``: the weight-only bindings move into
``<name>_transform_params(weights: tuple) -> tuple``, and ``<name>`` takes the
inputs followed by that tuple's elements. ``ext.Model`` runs the transform once
per ``set_params`` and the function on every call.

It runs after ``LowerToCandidates`` (so the kernels' own transforms are there
to lift) and after constant folding (so nothing constant-only is lifted that
could have been folded at compile time).

``weight_derived(func)`` is the set of variables computed from weights and
constants only: ``LowerToCandidates`` treats a kernel operand in it like a
constant (its transforms run once), so a model built with weights as
parameters selects the same kernels as the bound build.
"""
from __future__ import annotations

import dataclasses

import tvm
from tvm import relax


def num_inputs(func) -> int | None:
    """The ``num_input`` attribute of a Relax function (None when absent)."""
    if not isinstance(func, relax.Function) or not func.attrs or "num_input" not in func.attrs:
        return None
    return int(func.attrs["num_input"])


def weight_params(func) -> list:
    """The weight parameters of ``func``: those after the first ``num_input`` (none without it)."""
    n = num_inputs(func)
    return [] if n is None else list(func.params)[n:]


def _free_vars(expr) -> list:
    return list(relax.analysis.free_vars(expr))


def weight_derived(func) -> set:
    """Variables of ``func`` bound to values that depend on weight parameters and constants only
    (the weight parameters themselves included); empty when ``func`` has no weights."""
    weights = weight_params(func)
    if not weights:
        return set()
    known = set(weights)
    body = func.body
    for block in getattr(body, "blocks", []):
        for b in block.bindings:
            if not isinstance(b, relax.VarBinding):
                continue
            deps = _free_vars(b.value)
            if all(v in known for v in deps) and _pure(b.value):
                known.add(b.var)
    return known


#: calls that may have effects or run outside TVM (a library through Python): never "a weight"
_OPAQUE = ("relax.call_dps_packed", "relax.call_pure_packed", "relax.print", "relax.call_builtin_with_ctx")


def _pure(value) -> bool:
    if not isinstance(value, relax.Call):
        return True
    if isinstance(value.op, tvm.ir.Op):
        return value.op.name not in _OPAQUE
    return isinstance(value.op, relax.GlobalVar)


def has_weights(mod: tvm.IRModule) -> bool:
    return any(weight_params(f) for _, f in mod.functions_items())


def LiftWeightTransforms() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: ``relax.transform.LiftTransformParams`` when some function has weight
    parameters; the module unchanged otherwise (see module doc)."""

    def transform(mod, _ctx):
        if not has_weights(mod):
            return mod
        return relax.transform.LiftTransformParams()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.LiftWeightTransforms")


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """The run-time inputs and the weights of one function, as ``(name, shape, dtype)`` triples
    (symbolic dims as strings); ``ext.Model`` checks what it is given against them."""

    inputs: tuple
    weights: tuple
    #: ``{symbol: (lowest, highest)}`` a symbolic dim may take (the export's ``Dim(min, max)``,
    #: attrs ``tir_var_lower_bound`` / ``tir_var_upper_bound``): beyond them a kernel may read
    #: past a table (a position embedding), so a call outside is refused
    bounds: tuple = ()

    def check(self, what: str, arrays: list) -> None:
        """Raise ``ValueError`` naming the first of ``arrays`` that does not match ``what``
        (``"inputs"`` or ``"weights"``): wrong count, shape or dtype, a symbol that two arrays
        give different values, or a symbolic dim outside its declared bounds."""
        want = getattr(self, what)
        if len(arrays) != len(want):
            names = ", ".join(n for n, _, _ in want)
            raise ValueError(f"expected {len(want)} {what} ({names}), got {len(arrays)}")
        bounds, seen = dict(self.bounds), {}  # symbol -> (value, the input that set it)
        for i, ((name, shape, dtype), arr) in enumerate(zip(want, arrays)):
            if shape is None:
                continue
            got_shape, got_dtype = tuple(int(d) for d in arr.shape), str(arr.dtype)
            fits = len(got_shape) == len(shape) and all(not isinstance(w, int) or w == g
                                                        for w, g in zip(shape, got_shape))
            if not fits or got_dtype != dtype:
                raise ValueError(f"{what[:-1]} {i} ({name!r}): expected shape {_fmt_shape(shape)} {dtype}, "
                                 f"got {_fmt_shape(got_shape)} {got_dtype}")
            for w, g in zip(shape, got_shape):
                if isinstance(w, int):
                    continue
                where = f"{what[:-1]} {i} ({name!r})"
                if seen.setdefault(w, (g, where))[0] != g:
                    raise ValueError(f"{where}: {w}={g}, but {seen[w][1]} has {w}={seen[w][0]}")
                lo, hi = bounds.get(w, (None, None))
                if (lo is not None and g < lo) or (hi is not None and g > hi):
                    raise ValueError(f"{where}: {w}={g} is outside the range the model was built for "
                                     f"({lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'})")


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _triple(var) -> tuple:
    """``(name, shape, dtype)`` of a tensor parameter; ``(name, None, None)`` for anything else
    (a shape, a tuple, a tensor of unknown rank), which the VM checks alone."""
    ty = var.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return var.name, None, None
    shape = tuple(int(d) if hasattr(d, "value") else str(d) for d in ty.shape)
    return var.name, shape, str(ty.dtype)


def _bounds(func) -> tuple:
    """``((symbol, (lo, hi)), ...)`` from the function's bound attrs (either may be None)."""
    attrs = func.attrs or {}
    lo = {str(k): int(v) for k, v in (attrs["tir_var_lower_bound"].items() if "tir_var_lower_bound" in attrs else [])}
    hi = {str(k): int(v) for k, v in (attrs["tir_var_upper_bound"].items() if "tir_var_upper_bound" in attrs else [])}
    return tuple((s, (lo.get(s), hi.get(s))) for s in sorted(set(lo) | set(hi)))


def param_specs(mod: tvm.IRModule) -> dict:
    """``{function name: ParamSpec}`` for every Relax function with weight parameters."""
    out = {}
    for gv, func in mod.functions_items():
        n = num_inputs(func)
        if n is None:
            continue
        params = list(func.params)
        if not 0 <= n <= len(params):
            raise ValueError(f"{gv.name_hint}: attr num_input={n} but the function has {len(params)} parameters")
        if n == len(params):
            continue
        out[gv.name_hint] = ParamSpec(tuple(_triple(p) for p in params[:n]),
                                      tuple(_triple(p) for p in params[n:]), _bounds(func))
    return out
