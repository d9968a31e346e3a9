"""Report every Relax op that ext leaves to stock lowering, and why.

The selection report lists ext's decisions per composite; without this, an op
no family matched (an element-wise chain, ``max`` over split axes, ``sort``)
would compile silently through stock legalization and the fallback schedule,
and a slow model would give no hint where its time goes. Runs inside
``LowerToCandidates`` over the module it received, once it knows which
composites it declined (their ops carry the decline reason).
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..strategies.report import SelectionReport
from ..strategies.select import Decision
from ..workload import Workload
from .families import FAMILIES

#: VM plumbing and calls into kernels: nothing for stock legalization to compute
_PLUMBING_PREFIXES = ("relax.call_", "relax.memory.", "relax.vm.", "relax.builtin.")
_PLUMBING = {"relax.null_value", "relax.shape_of", "relax.print", "relax.assert_op", "relax.invoke_closure",
             "relax.invoke_pure_closure", "relax.make_closure", "relax.hint_on_device", "relax.to_vdevice",
             "relax.tensor_to_shape", "relax.shape_to_tensor"}
#: ops the backend's library-dispatch passes turn into TVM's own sort/scan/sampling kernels
LIBRARY_DISPATCH = {"relax.sort": "DispatchSortScan", "relax.argsort": "DispatchSortScan",
                    "relax.topk": "DispatchSortScan", "relax.cumsum": "DispatchSortScan",
                    "relax.cumprod": "DispatchSortScan", "relax.multinomial_from_uniform": "DispatchSampling"}
#: ops that only reinterpret contiguous data
VIEWS = {"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten"}


def _is_plumbing(name: str) -> bool:
    return name in _PLUMBING or name.startswith(_PLUMBING_PREFIXES)


def _tensors(call: relax.Call) -> list:
    return [a for a in call.args if isinstance(getattr(a, "ty", None), relax.TensorType) and a.ty.shape is not None]


def _shape(expr) -> tuple:
    return tuple(int(d) if hasattr(d, "value") else str(d) for d in expr.ty.shape)


def _axes(call: relax.Call) -> tuple | None:
    """The ``axis``/``axes`` attribute of a call as a tuple (None when it has none or it is unset)."""
    attrs = call.attrs
    if attrs is None:
        return None
    for field in ("axis", "axes"):
        try:
            value = getattr(attrs, field)
        except AttributeError:
            continue
        if value is None:
            return None
        if hasattr(value, "__len__"):
            return tuple(int(a) for a in value)
        return (int(value),)
    return None


def _detail(call: relax.Call) -> str:
    axes = _axes(call)
    if axes is None:
        return ""
    return f" over axis {axes[0]}" if len(axes) == 1 else f" over axes {axes}"


def anchor_patterns() -> list:
    """``[(family name, anchor pattern)]`` of every registered family."""
    return [(fam.name, factory()[0]) for fam in FAMILIES.values() for _variant, factory in fam.anchors]


def _family_of(call: relax.Call, anchors: list) -> str | None:
    """The ext family whose anchor pattern matches ``call`` (it then rejected the instance)."""
    return next((name for name, pattern in anchors if pattern.match(call)), None)


def why_stock(call: relax.Call, anchors: list | None = None) -> str:
    """Why no ext kernel computes ``call``, and what lowers it instead (``anchors``: see
    :func:`anchor_patterns`, built once per module)."""
    name = call.op.name
    what = f"{name}{_detail(call)}"
    tensors = _tensors(call)
    if tensors and all(isinstance(a, tvm.ir.expr.Constant) for a in tensors):
        return f"{what}: constant operands, folded at compile time"
    if name in LIBRARY_DISPATCH:
        return f"no ext family for {what}: TVM library dispatch ({LIBRARY_DISPATCH[name]})"
    family = _family_of(call, anchor_patterns() if anchors is None else anchors)
    if family is not None:
        covers = FAMILIES[family].covers
        scope = f"covers only {covers}" if covers else "declined this instance"
        return f"no ext family for {what}: the {family} family {scope}; stock legalize + ext fallback schedule"
    if name in VIEWS:
        return f"no ext family for {what}: stock lowering (a view, no copy unless fused into a neighbour)"
    return f"no ext family for {what}: stock legalize + fuse + ext fallback schedule"


def stock_row(call: relax.Call, reason: str) -> Decision:
    """A ``stock`` report row for one op instance."""
    tensors = _tensors(call)
    out = call.ty if isinstance(getattr(call, "ty", None), relax.TensorType) else None
    attrs = {} if _axes(call) is None else {"axes": _axes(call)}
    wl = Workload(call.op.name, [_shape(a) for a in tensors], [str(a.ty.dtype) for a in tensors],
                  str(out.dtype) if out is not None else "tuple", attrs=attrs)
    return Decision(wl, None, None, "stock", [], reason)


def _calls(func: relax.Function) -> list:
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call):
            calls.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return calls


def _op_calls(func: relax.Function) -> list:
    return [c for c in _calls(func) if isinstance(c.op, tvm.ir.Op) and not _is_plumbing(c.op.name)]


def report_stock_ops(mod, report: SelectionReport, declined: dict) -> None:
    """Add a ``stock`` row to ``report`` for every op of ``mod`` outside ext's composites.

    ``mod`` is the module as ``LowerToCandidates`` received it (so the reshapes ext
    adds around its own kernels are not reported); ``declined`` maps the global var
    of each composite ext declined or failed on to the reason, given to its ops.
    """
    why_declined = {gv.name_hint: reason for gv, reason in declined.items()}
    anchors = anchor_patterns()
    callers = [(gv, f) for gv, f in mod.functions_items()
               if isinstance(f, relax.Function) and not (f.attrs is not None and "Composite" in f.attrs)]
    calls_of: dict = {}  # declined composite -> how many calls the model makes to it
    for _gv, func in callers:
        for call in _calls(func):
            name = getattr(call.op, "name_hint", None)
            if name in why_declined:
                calls_of[name] = calls_of.get(name, 0) + 1
        for call in _op_calls(func):
            report.add_stock(stock_row(call, why_stock(call, anchors)))
    for gv, func in mod.functions_items():
        if gv.name_hint not in calls_of or not isinstance(func, relax.Function):
            continue
        for _ in range(calls_of[gv.name_hint]):
            for call in _op_calls(func):
                report.add_stock(stock_row(call, f"{call.op.name}{_detail(call)} in {why_declined[gv.name_hint]}"))
