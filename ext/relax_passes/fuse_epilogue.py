"""Fuse each anchor (matmul, conv2d, ...) with its element-wise epilogue into
one composite function: ``anchor [+ bias] [-> activation] [+ residual]``.

Composite names spell the chain: ``ext.matmul``, ``ext.matmul_bias_relu``,
``ext.conv2d_bias_relu_residual``; the family and the epilogue chain are also set on each
composite as function attributes ``ext.family`` and ``ext.epilogue`` (later passes read those,
never the name, so family and activation names may contain ``_``). Longer chains are tried first. A ``bias``
add takes a tensor that varies only along the anchor's channel axis (last
axis for matmul, given by the family's check); a ``residual`` add takes a
tensor of the output's exact shape.

A match is rejected when one of its intermediate values (the anchor's output,
the bias add, the activation) is also used outside the group: the composite
would then have to return a tuple of them, which no kernel computes (and the
families describe single results only). A residual operand that depends on the
anchor itself (``y = conv(x); y + conv2(y)`` matched as ``conv + residual``) is
rejected too: the group would need its own output as an input, a cycle that
stock ``FuseOpsByPattern`` reports as a crash.
"""
from __future__ import annotations

import itertools

import tvm
from tvm_ffi import structural_equal
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from .families import FAMILIES

ACTIVATION_OPS = {
    "relu": "relax.nn.relu", "gelu": "relax.nn.gelu", "gelu_tanh": "relax.nn.gelu_tanh",
    "silu": "relax.nn.silu", "sigmoid": "relax.sigmoid", "tanh": "relax.tanh",
}


def _add(lhs, name: str, ann: dict):
    other = wildcard()
    ann[name] = other
    return is_op("relax.add")(lhs, other) | is_op("relax.add")(other, lhs)


def _same_shape(a, b) -> bool:
    sa, sb = a.ty.shape, b.ty.shape
    return sa is not None and sb is not None and len(sa) == len(sb) and all(
        structural_equal(x, y) for x, y in zip(sa, sb))


def _is_bias(expr, out, channel_axis: int) -> bool:
    """``expr`` varies only along ``channel_axis`` of ``out`` (broadcast right-aligned)."""
    s, o = expr.ty.shape, out.ty.shape
    if s is None or o is None or len(s) > len(o) or expr.ty.dtype != out.ty.dtype:
        return False
    ax = channel_axis % len(o)
    off = len(o) - len(s)
    for d in range(len(s)):
        if off + d == ax:
            if not (structural_equal(s[d], o[ax]) or int(getattr(s[d], "value", -1)) == 1):
                return False
        elif int(getattr(s[d], "value", -1)) != 1:
            return False
    return True


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


def _residual_needs_anchor(ctx: PatternCheckContext) -> bool:
    """The residual operand is computed from the anchor's result: fusing would make a cycle."""
    ann = ctx.annotated_expr
    res, anchor = _bound_var(ctx, ann["residual"]), _bound_var(ctx, ann["anchor"])
    if res is None or anchor is None:
        return False
    return res.same_as(anchor) or _depends_on(ctx, res, anchor)


def _check_chain(family, variant: str, parts: tuple):
    def check(ctx) -> bool:
        ann = ctx.annotated_expr
        if _leaks(ctx):  # an inner value is used outside the group
            return False
        if not family.check(variant, ann):
            return False
        anchor = ann["anchor"]
        chan = family.channel_axis
        if "bias" in parts and not _is_bias(ann["bias"], anchor, chan(anchor) if callable(chan) else chan):
            return False
        if "residual" in parts and not (_same_shape(ann["residual"], anchor)
                                        and ann["residual"].ty.dtype == anchor.ty.dtype):
            return False
        if "residual" in parts and _residual_needs_anchor(ctx):
            return False
        return True

    return check


def epilogue_chains() -> list[tuple]:
    """Every epilogue chain, longest first."""
    chains = []
    for bias, act, res in itertools.product((True, False), [*ACTIVATION_OPS, None], (True, False)):
        chains.append(tuple(p for p in (("bias" if bias else None), act, ("residual" if res else None)) if p))
        if act and res:  # ResNet order: relu(conv + bias + shortcut)
            chains.append(tuple(p for p in (("bias" if bias else None), "residual", act) if p))
    return sorted(chains, key=len, reverse=True)


def patterns(families=None) -> list[FusionPattern]:
    out = []
    for fam in (families or FAMILIES.values()):
        for parts in (epilogue_chains() if fam.chains else [()]):
            for variant, factory in fam.anchors:  # earlier variants win ties: list the larger anchor first
                pat, ann = factory()
                ann = dict(ann)
                for p in parts:
                    if p == "bias" or p == "residual":
                        pat = _add(pat, p, ann)
                    else:
                        pat = is_op(ACTIVATION_OPS[p])(pat)
                name = "_".join(("ext." + fam.name,) + parts)
                out.append(FusionPattern(name, pat, ann, _check_chain(fam, variant, parts)))
    return out


def FuseEpilogues(families=None) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """``FuseOpsByPattern`` over every family's anchor and epilogue chains, then each composite
    gets its ``ext.family`` and ``ext.epilogue`` attributes."""
    fams = list(families or FAMILIES.values())
    names = {"_".join(("ext." + fam.name,) + parts): (fam.name, parts)
             for fam in fams for parts in (epilogue_chains() if fam.chains else [()])}
    fuse = relax.transform.FuseOpsByPattern(patterns(fams), bind_constants=False, annotate_codegen=False)

    def annotate(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            comp = func.attrs.get("Composite") if isinstance(func, relax.Function) and func.attrs else None
            if comp is not None and str(comp) in names:
                family, parts = names[str(comp)]
                mod[gv] = func.with_attr("ext.family", family).with_attr("ext.epilogue", list(parts))
        return mod

    return tvm.transform.Sequential([fuse, tvm.transform.module_pass(annotate, opt_level=0, name="ext.AnnotateComposites")],
                                    name="ext.FuseEpilogues")
