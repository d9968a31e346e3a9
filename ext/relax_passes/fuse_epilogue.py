"""Fuse each anchor (matmul, conv2d, ...) with its element-wise epilogue into
one composite function: ``anchor [+ bias] [-> activation] [+ residual]``.

Composite names spell the chain: ``ext.matmul``, ``ext.matmul_bias_relu``,
``ext.conv2d_bias_relu_residual``, ``ext.conv2d_bias_clip_scale``; the family and the epilogue
chain are also set on each composite as function attributes ``ext.family`` and ``ext.epilogue`` (later passes read those,
never the name, so family and activation names may contain ``_``; ``ext.epilogue`` spells an
activation's parameters, ``clip:0:6``). Chains spanning more Relax ops are tried first. A ``bias``
add takes a tensor that varies only along the anchor's channel axis (last
axis for matmul, given by the family's check); a ``residual`` add takes a
tensor of the output's exact shape; a ``scale`` multiply (families with a ``scale_axis``:
conv2d's batch axis) a tensor varying along the channel and batch axes only, the
squeeze-and-excitation gate ``(N, C, 1, 1)``.

Activations are matched in the forms importers emit: single ops (``relu``, ``gelu``,
``clip`` with constant bounds, ``leakyrelu``...), SiLU as ``y * sigmoid(y)``,
hardsigmoid as ``clip(y + 3, 0, 6) / 6`` and hardswish as ``y * clip(y + 3, 0, 6) / 6``
(``torch.export`` of ``nn.Hardsigmoid``/``nn.Hardswish`` once ``MergeClips`` made its two
clips one; ``* (1/6)`` and ``y * hardsigmoid(y)`` too), each constant checked.

A match is rejected when one of its intermediate values (the anchor's output,
the bias add, the activation) is also used outside the group: the composite
would then have to return a tuple of them, which no kernel computes (and the
families describe single results only). A residual operand that depends on the
anchor itself (``y = conv(x); y + conv2(y)`` matched as ``conv + residual``) is
rejected too, and so is a ``scale`` gate computed from the anchor (the usual SE block, whose
gate pools the conv's own output): the group would need its own output as an input, a cycle that
stock ``FuseOpsByPattern`` reports as a crash.
"""
from __future__ import annotations

import itertools

import tvm
from tvm_ffi import structural_equal
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from ..workload import TENSOR_STEPS
from .computed_dims import computed_shape
from .elemwise_math import commutative, is_constant, parametric_activation
from .families import FAMILIES

#: activations that are one Relax op with no parameter
ACTIVATION_OPS = {
    "relu": "relax.nn.relu", "gelu": "relax.nn.gelu", "gelu_tanh": "relax.nn.gelu_tanh",
    "silu": "relax.nn.silu", "sigmoid": "relax.sigmoid", "tanh": "relax.tanh",
}


def _mul(a, b):
    return commutative("relax.multiply", a, b)


def _const(ann: dict, name: str):
    c = is_const()
    ann[name] = c
    return c


def _hardsigmoid(y, ann: dict):
    """``(clip(y + 3, 0, 6), hardsigmoid(y))``: ``clip(y + 3, 0, 6) / 6`` (or ``* (1/6)``; the two clips
    of an export are one after MergeClips) or ONNX's ``clip(y * (1/6) + 1/2, 0, 1)``."""
    three = _const(ann, "hs_3")
    clip = is_op("relax.clip")(is_op("relax.add")(y, three) | is_op("relax.add")(three, y), wildcard(), wildcard())
    ann["hs_clip"] = clip
    scaled, half = _mul(y, _const(ann, "hs_alpha")), _const(ann, "hs_beta")
    onnx = is_op("relax.clip")(is_op("relax.add")(scaled, half) | is_op("relax.add")(half, scaled),
                               wildcard(), wildcard())
    ann["hs_clip01"] = onnx
    return clip, is_op("relax.divide")(clip, _const(ann, "hs_div6")) | _mul(clip, _const(ann, "hs_mul6")) | onnx


def _act_hardsigmoid(y, ann: dict):
    return _hardsigmoid(y, ann)[1]


def _act_hardswish(y, ann: dict):
    """``y * clip(y + 3, 0, 6) / 6`` as PyTorch exports ``nn.Hardswish``, or ``y * hardsigmoid(y)`` (ONNX's)."""
    clip, hsig = _hardsigmoid(y, ann)
    prod = _mul(y, clip)
    return (is_op("relax.divide")(prod, _const(ann, "hw_div6")) | _mul(prod, _const(ann, "hw_mul6"))
            | _mul(y, hsig))


def _act_silu(y, ann: dict):
    """``silu(y)`` or ``y * sigmoid(y)`` (how PyTorch exports ``nn.SiLU``)."""
    return is_op("relax.nn.silu")(y) | _mul(y, is_op("relax.sigmoid")(y))


#: name -> (pattern factory ``(y, annotations) -> pattern``, Relax ops it spans: longer chains match first)
ACTIVATION_PATTERNS = {
    **{name: ((lambda op: lambda y, ann: is_op(op)(y))(op), 1) for name, op in ACTIVATION_OPS.items()},
    "silu": (_act_silu, 2),
    "clip": (lambda y, ann: is_op("relax.clip")(y, wildcard(), wildcard()), 1),
    "leaky_relu": (lambda y, ann: is_op("relax.nn.leakyrelu")(y), 1),
    "hardsigmoid": (_act_hardsigmoid, 3),  # ONNX's form is 3 ops too
    "hardswish": (_act_hardswish, 4),
}
#: activations whose epilogue name carries parameters read from the matched call
PARAMETRIC = {"clip": "relax.clip", "leaky_relu": "relax.nn.leakyrelu"}


def _activation_ok(act: str, ann: dict) -> bool:
    """The matched activation is the one its name says: constant parameters; hardswish/hardsigmoid's
    constants are 3, 0, 6 and 6 (or 1/6), or ONNX's 1/6, 1/2, 0 and 1."""
    if act == "clip":
        return parametric_activation(ann["act"]) is not None
    if act not in ("hardsigmoid", "hardswish"):
        return True
    if "hs_clip" in ann and (parametric_activation(ann["hs_clip"]) != "clip:0:6" or not is_constant(ann["hs_3"], 3.0)):
        return False
    if "hs_clip01" in ann and parametric_activation(ann["hs_clip01"]) != "clip:0:1":
        return False
    for name, want in (("hs_div6", 6.0), ("hs_mul6", 1 / 6), ("hw_div6", 6.0), ("hw_mul6", 1 / 6),
                       ("hs_alpha", 1 / 6), ("hs_beta", 0.5)):
        if name in ann and not is_constant(ann[name], want):
            return False
    return True


def _add(lhs, name: str, ann: dict, order: str = "either"):
    """``lhs + other`` with ``other`` annotated as ``name``: ``order`` "first" / "second" puts the
    chain on that side only, "either" matches both."""
    other = wildcard()
    ann[name] = other
    first, second = is_op("relax.add")(lhs, other), is_op("relax.add")(other, lhs)
    return {"first": first, "second": second}.get(order, first | second)


def _same_shape(a, b) -> bool:
    sa, sb = a.ty.shape, b.ty.shape
    return sa is not None and sb is not None and len(sa) == len(sb) and all(
        structural_equal(x, y) for x, y in zip(sa, sb))


def _is_bias(expr, out, channel_axis, *more_axes: int) -> bool:
    """``expr`` varies only along ``channel_axis`` (an axis or a tuple of them: blocked channels)
    and ``more_axes`` of ``out`` (broadcast right-aligned)."""
    s, o = expr.ty.shape, out.ty.shape
    if s is None or o is None or len(s) > len(o) or expr.ty.dtype != out.ty.dtype:
        return False
    chan = channel_axis if isinstance(channel_axis, tuple) else (channel_axis,)
    axes = {a % len(o) for a in (*chan, *more_axes)}
    off = len(o) - len(s)
    for d in range(len(s)):
        if off + d in axes:
            if not (structural_equal(s[d], o[off + d]) or int(getattr(s[d], "value", -1)) == 1):
                return False
        elif int(getattr(s[d], "value", -1)) != 1:
            return False
    return True


def _axis(spec, anchor) -> int:
    return spec(anchor) if callable(spec) else spec


def _bound_var(ctx: PatternCheckContext, expr):
    """The variable ``expr`` is bound to in the function (``expr`` itself if it is a variable)."""
    if isinstance(expr, relax.Var):
        return expr
    return ctx.value_to_bound_var.get(expr)


def _leaks(ctx: PatternCheckContext) -> bool:
    """An intermediate value of the match is used outside it (or the match cannot be analysed)."""
    try:
        return has_leaking_intermediate_variables(ctx)
    except (KeyError, IndexError):  # the matched root is not bound to a variable: do not fuse
        return True


def _depends_on(ctx: PatternCheckContext, target, source) -> bool:
    """``target`` is computed (transitively) from ``source`` (both bound variables)."""
    seen, todo = {source}, [source]
    while todo:
        var = todo.pop()
        if var not in ctx.var_usages:
            continue
        for user in ctx.var_usages[var]:
            if user.same_as(target):
                return True
            if user not in seen:
                seen.add(user)
                todo.append(user)
    return False


def _needs_anchor(ctx: PatternCheckContext, part: str) -> bool:
    """The ``part`` operand (residual, SE gate) is computed from the anchor's result: fusing would make
    a cycle (a squeeze-and-excitation gate pooled from the conv's own output is one)."""
    ann = ctx.annotated_expr
    res, anchor = _bound_var(ctx, ann[part]), _bound_var(ctx, ann["anchor"])
    if res is None or anchor is None:
        return False
    return res.same_as(anchor) or _depends_on(ctx, res, anchor)


def _check_chain(family, variant: str, parts: tuple):
    def check(ctx) -> bool:
        ann = ctx.annotated_expr
        if _leaks(ctx):  # an inner value is used outside the group
            return False
        if any(computed_shape(e.ty) for e in (*ann.values(), *ann["anchor"].args) if isinstance(e, relax.Expr)):
            return False  # a ceil-mode pool's if_then_else extent: stock fusion would stop on it
        if not family.check(variant, ann):
            return False
        anchor = ann["anchor"]
        chan = _axis(family.channel_axis, anchor)
        if "bias" in parts and not _is_bias(ann["bias"], anchor, chan):
            return False
        if "scale" in parts and not (_is_bias(ann["scale"], anchor, chan, _axis(family.scale_axis, anchor))
                                     and not _needs_anchor(ctx, "scale")):
            return False
        if "residual" in parts and not (_same_shape(ann["residual"], anchor)
                                        and ann["residual"].ty.dtype == anchor.ty.dtype):
            return False
        if "residual" in parts and _needs_anchor(ctx, "residual"):
            return False
        act = next((p for p in parts if p not in TENSOR_STEPS), None)
        return act is None or _activation_ok(act, ann)

    return check


def _weight(chain: tuple) -> int:
    """Relax ops a chain spans (an activation may be several: hardswish is four)."""
    return sum(ACTIVATION_PATTERNS[p][1] if p in ACTIVATION_PATTERNS else 1 for p in chain)


def epilogue_chains(scale: bool = False) -> list[tuple]:
    """Every epilogue chain, the most Relax ops first (ties: fewer steps, so ``hardsigmoid`` wins
    over ``bias, clip, scale`` on the same ops). ``scale``: also chains with the channel-wise
    multiply after the activation, ``anchor [+ bias] [-> act] * gate`` (no residual after it)."""
    chains = []
    for bias, act, res in itertools.product((True, False), [*ACTIVATION_PATTERNS, None], (True, False)):
        chains.append(tuple(p for p in (("bias" if bias else None), act, ("residual" if res else None)) if p))
        if act and res:  # ResNet order: relu(conv + bias + shortcut)
            chains.append(tuple(p for p in (("bias" if bias else None), "residual", act) if p))
        if scale and not res:
            chains.append(tuple(p for p in (("bias" if bias else None), act, "scale") if p))
    return sorted(chains, key=lambda c: (_weight(c), -len(c)), reverse=True)


def _family_chains(fam) -> list[tuple]:
    return epilogue_chains(scale=fam.scale_axis is not None) if fam.chains else [()]


def _chain_pattern(factory, parts: tuple, residual: str = "either"):
    """The pattern of one anchor variant followed by ``parts``, and its annotations; ``residual``:
    the side of the residual add the chain takes (``_add``'s ``order``)."""
    pat, ann = factory()
    ann = dict(ann)
    for p in parts:
        if p == "bias" or p == "residual":
            pat = _add(pat, p, ann, residual if p == "residual" else "either")
        elif p == "scale":
            gate = wildcard()
            ann["scale"] = gate
            pat = _mul(pat, gate)
        else:
            pat = ACTIVATION_PATTERNS[p][0](pat, ann)
            ann["act"] = pat
    return pat, ann


def patterns(families=None) -> list[FusionPattern]:
    """One pattern per family, chain and anchor variant; a chain with a residual add twice, the
    chain as the add's first operand and then as its second. A matcher that takes the first
    side of ``a | b`` that fits never tries the second once the check rejects the first: in
    ``conv0 + conv1`` (MobileNetV2's first residual of a stage: ``x + project(expand(x))``)
    conv0 fits as the anchor but its output feeds the next block, and conv1 + residual would
    never be tried."""
    out = []
    for fam in (families or FAMILIES.values()):
        for parts in _family_chains(fam):
            for variant, factory in fam.anchors:  # earlier variants win ties: list the larger anchor first
                name = "_".join(("ext." + fam.name,) + parts)
                for side in (("first", "second") if "residual" in parts else ("either",)):
                    pat, ann = _chain_pattern(factory, parts, side)
                    out.append(FusionPattern(name, pat, ann, _check_chain(fam, variant, parts)))
    return out


def chain_operands(func: relax.Function, family: str, epilogue, args: list) -> list:
    """The outer arguments the tensor steps (bias, scale, residual) of a composite called with
    ``args`` read, in chain order. Found by matching the chain's pattern again (parameters seen
    as their arguments, so activation constants match), since activations hold adds and
    multiplies of their own (hardswish's ``y + 3``) that are no bias."""
    parts = tuple(str(p).split(":")[0] for p in epilogue)
    want = [p for p in parts if p in TENSOR_STEPS]
    if not want:
        return []
    var2val = dict(relax.analysis.get_var2val(func))
    var2val.update(zip(func.params, args))
    root = func.body.body if isinstance(func.body, relax.SeqExpr) else func.body
    root = var2val.get(root, root)
    for _variant, factory in FAMILIES[family].anchors:
        pat, ann = _chain_pattern(factory, parts)
        matched = pat.extract_matched_expr(root, var2val)
        if matched is not None:
            return [matched[ann[p]] for p in want]
    raise ValueError(f"composite {func.attrs.get('Composite')}: body does not match its epilogue {list(parts)}")


def _named_steps(func: relax.Function, parts: tuple) -> list[str]:
    """The chain with each parametric activation named with its parameters (``clip`` -> ``clip:0:6``),
    read from the composite's body (one activation per chain)."""
    calls = [b.value for blk in func.body.blocks for b in blk.bindings if isinstance(b.value, relax.Call)]
    steps = []
    for p in parts:
        if p in PARAMETRIC:
            call = next(c for c in calls if getattr(c.op, "name", None) == PARAMETRIC[p])
            p = parametric_activation(call)
        steps.append(p)
    return steps


def required_ops(pattern) -> frozenset:
    """Op names every match of ``pattern`` contains (an alternative requires only what both
    sides do): a module holding none of them cannot match, so the pattern is not tried."""
    from tvm.relax.dpl import pattern as dp

    memo: dict = {}

    def req(pat) -> frozenset:
        key = pat.__chandle__()
        if key not in memo:
            if isinstance(pat, dp.OrPattern):
                out = req(pat.left) & req(pat.right)
            elif isinstance(pat, dp.AndPattern):
                out = req(pat.left) | req(pat.right)
            elif isinstance(pat, dp.CallPattern):
                op = pat.op.expr if isinstance(pat.op, dp.ExprPattern) else None
                out = frozenset([op.name] if isinstance(op, tvm.ir.Op) else []).union(*[req(a) for a in pat.args])
            elif isinstance(pat, (dp.AttrPattern, dp.DataTypePattern, dp.ShapePattern, dp.TypePattern)):
                out = req(pat.pattern)
            else:
                out = frozenset()
            memo[key] = out
        return memo[key]

    return req(pattern)


def _ops_in(mod: tvm.IRModule) -> set:
    ops = set()

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            ops.add(e.op.name)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return ops


def FuseEpilogues(families=None, cpu: bool = True, target=None) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """``FuseOpsByPattern`` over every family's anchor and epilogue chains whose ops the module
    holds (``required_ops``: 226 patterns tried on a 24-layer transformer took 2.7 s), then each
    composite gets its ``ext.family`` and ``ext.epilogue`` attributes. ``cpu=False`` (a GPU or
    NPU target) leaves out the CPU-only families (``Family.cpu_only``: attention); a CPU
    ``target`` leaves out those whose ``fuses_on`` declines it."""
    def fused_here(f) -> bool:
        if not cpu:
            return not f.cpu_only
        return target is None or f.fuses_on is None or f.fuses_on(target)

    fams = [f for f in (families or FAMILIES.values()) if fused_here(f)]
    names = {"_".join(("ext." + fam.name,) + parts): (fam.name, parts)
             for fam in fams for parts in _family_chains(fam)}
    every = [(pat, required_ops(pat.pattern)) for pat in patterns(fams)]

    def fuse(mod, _ctx):
        present = _ops_in(mod)
        usable = [pat for pat, need in every if need <= present]
        if not usable:
            return mod
        return relax.transform.FuseOpsByPattern(usable, bind_constants=False, annotate_codegen=False)(mod)

    def annotate(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            comp = func.attrs.get("Composite") if isinstance(func, relax.Function) and func.attrs else None
            if comp is not None and str(comp) in names:
                family, parts = names[str(comp)]
                mod[gv] = func.with_attr("ext.family", family).with_attr("ext.epilogue", _named_steps(func, parts))
        return mod

    return tvm.transform.Sequential([tvm.transform.module_pass(fuse, opt_level=0, name="ext.FuseChains"),
                                     tvm.transform.module_pass(annotate, opt_level=0, name="ext.AnnotateComposites")],
                                    name="ext.FuseEpilogues")
