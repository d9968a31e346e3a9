"""Fuse each anchor (matmul, conv2d, ...) with its element-wise epilogue into
one composite function: ``anchor [+ bias] [-> activation] [+ residual]``.

Composite names spell the chain: ``ext.matmul``, ``ext.matmul_bias_relu``,
``ext.conv2d_bias_relu_residual``. Longer chains are tried first. A ``bias``
add takes a tensor that varies only along the anchor's channel axis (last
axis for matmul, given by the family's check); a ``residual`` add takes a
tensor of the output's exact shape.
"""
from __future__ import annotations

import itertools

import tvm
from tvm_ffi import structural_equal
from tvm import relax
from tvm.relax.dpl import is_op, wildcard
from tvm.relax.transform import FusionPattern

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


def _check_chain(family, variant: str, parts: tuple):
    def check(ctx) -> bool:
        ann = ctx.annotated_expr
        if not family.check(variant, ann):
            return False
        anchor = ann["anchor"]
        chan = family.channel_axis
        if "bias" in parts and not _is_bias(ann["bias"], anchor, chan(anchor) if callable(chan) else chan):
            return False
        if "residual" in parts and not (_same_shape(ann["residual"], anchor)
                                        and ann["residual"].ty.dtype == anchor.ty.dtype):
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
    """``FuseOpsByPattern`` over every family's anchor and epilogue chains."""
    return relax.transform.FuseOpsByPattern(patterns(families), bind_constants=False, annotate_codegen=False)
