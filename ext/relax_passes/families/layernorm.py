"""The layer-norm anchor: ``R.nn.layer_norm(x, gamma, beta, axes=<trailing>)``,
optionally followed by ``R.nn.dropout`` (one composite, one kernel).

The normalized trailing axes are flattened to ``n`` and the leading ones to
rows (free reshapes). The family is named ``layernorm`` (no underscore)
because composite names ``ext.<family>_<epilogue>`` split on ``_``; its
workloads are op ``layer_norm``. The pair's result is dropout's tuple
``(y, mask)`` with ``mask = ones`` (inference); when only ``[0]`` is used the
mask is removed as dead code after the pipeline canonicalizes bindings.

``R.nn.group_norm`` over ``(N, C, *spatial)`` (channel axis 1, statistics over each group's
channels and all spatial axes; PoolFormer's ``GroupNorm(1, C)``) is the same row kernel: rows
are ``N * G`` groups of ``C / G * HW`` elements, a free reshape, and the affine is per channel
(workload attrs ``channel_run = HW``, ``groups = G``; gamma/beta of ``C`` values).
"""
from __future__ import annotations

import math

from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ...workload import Workload
from ..symbolic import flatten_rows as flatten_symbolic
from . import Composite, Family, dtype, register_family, static_shape


def _plain():
    x, g, b = wildcard(), wildcard(), wildcard()
    anchor = is_op("relax.nn.layer_norm")(x, g, b)
    return anchor, {"anchor": anchor, "x": x, "gamma": g, "beta": b}


def _group():
    x, g, b = wildcard(), wildcard(), wildcard()
    anchor = is_op("relax.nn.group_norm")(x, g, b)
    return anchor, {"anchor": anchor, "x": x, "gamma": g, "beta": b}


def _dropout():
    anchor, ann = _plain()
    # the composite returns dropout's (output, mask) tuple: FuseOpsByPattern does not
    # match a TupleGetItem root
    drop = is_op("relax.nn.dropout")(anchor)
    return drop, dict(ann, dropout=drop)


def _check(variant: str, ann: dict) -> bool:
    x, anchor = ann["x"], ann["anchor"]
    if not isinstance(x.ty, relax.TensorType) or x.ty.shape is None:
        return False
    if variant == "group":
        return _group_geometry(x, anchor) is not None
    nd = len(x.ty.shape)
    axes = sorted(int(a) % nd for a in anchor.attrs.axes) if nd else []
    return nd >= 1 and axes == list(range(nd - len(axes), nd)) and len(axes) >= 1


def _group_geometry(x, gn) -> tuple | None:
    """``(N, C, HW, G)`` of a group norm the row kernel takes (static, channels on axis 1,
    statistics over all spatial axes), else None."""
    shape = static_shape(x)
    nd = len(shape)
    if nd < 3 or not all(isinstance(d, int) for d in shape) or int(gn.attrs.channel_axis) % nd != 1:
        return None
    if sorted(int(a) % nd for a in gn.attrs.axes) != list(range(2, nd)):
        return None
    N, C, G = shape[0], shape[1], int(gn.attrs.num_groups)
    return (N, C, math.prod(shape[2:]), G) if G >= 1 and C % G == 0 else None


def _extract_group(comp: Composite):
    gn = next(c for c in comp.calls if c.op.name == "relax.nn.group_norm")
    x, g, b = (comp.outer(a) for a in gn.args)
    geo = None if None in (x, g, b) else _group_geometry(x, gn)
    if geo is None or any(static_shape(t) != (geo[1],) for t in (g, b)):
        return None
    N, C, HW, G = geo
    rows, n = N * G, C // G * HW
    attrs = {"eps": float(gn.attrs.epsilon), "center": bool(gn.attrs.center), "scale": bool(gn.attrs.scale),
             "out_shape": (rows, n), "channel_run": HW, "groups": G}
    wl = Workload("layer_norm", [(rows, n), (C,), (C,)], [dtype(x), dtype(g), dtype(b)], dtype(x), attrs=attrs)
    shape = static_shape(x)
    return wl, [relax.op.reshape(x, (rows, n)), g, b], lambda y: relax.op.reshape(y, shape)


def _extract(comp: Composite):
    if any(c.op.name == "relax.nn.group_norm" for c in comp.calls):
        return _extract_group(comp)
    ln = next(c for c in comp.calls if c.op.name == "relax.nn.layer_norm")
    drop = [c for c in comp.calls if c.op.name == "relax.nn.dropout"]
    x, g, b = (comp.outer(a) for a in ln.args)
    if None in (x, g, b):
        return None
    shape = static_shape(x)
    nax = len(ln.attrs.axes)
    if all(isinstance(d, int) for d in shape):
        rows, n = math.prod(shape[:-nax]), math.prod(shape[-nax:])
        args = [x if (len(shape) == 2 and nax == 1) else relax.op.reshape(x, (rows, n))]
    else:  # symbolic leading axes: rows named by their product; the normalized axes must be static
        flat = flatten_symbolic(x, nax)
        if not isinstance(flat[2], int) or not all(isinstance(d, int) for t in (g, b) for d in static_shape(t)):
            return None
        args, rows, n = [flat[0]], flat[1], flat[2]
        shape = x.ty.shape
    for t in (g, b):
        args.append(t if len(static_shape(t)) == 1 else relax.op.reshape(t, (n,)))
    attrs = {"eps": float(ln.attrs.epsilon), "center": bool(ln.attrs.center), "scale": bool(ln.attrs.scale),
             "out_shape": (rows, n)}
    if drop:
        attrs["dropout"] = float(drop[0].attrs.rate)
    wl = Workload("layer_norm", [(rows, n), (n,), (n,)], [dtype(x), dtype(g), dtype(b)], dtype(x), attrs=attrs)
    flat = len(shape) == 2 and nax == 1
    unflat = (lambda y: y) if flat else (lambda y: relax.op.reshape(y, shape))
    if drop:  # (output, mask): inference dropout keeps everything; an unused mask is dead code
        return wl, args, lambda y: relax.Tuple([unflat(y), relax.op.ones_like(unflat(y))])
    return wl, args, None if flat else unflat


register_family(Family("layer_norm", [("dropout", _dropout), ("plain", _plain), ("group", _group)], _check, _extract,
                       chains=False, covers="normalization over the trailing axes; group norm"))
