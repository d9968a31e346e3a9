"""Layout policy for the CPU target, and cancellation of redundant layout pairs.

ext's CPU conv2d candidates read and write NCHW and do any blocking (NCHW16c,
Winograd tiles, GEMM panels) inside the kernel, with weights re-laid out
once at compile time. So the policy is simple:

1. ``LayoutPolicy(target)`` on an LLVM target converts every conv2d that is
   not NCHW/OIHW (e.g. NHWC from TensorFlow/ONNX exports) to NCHW/OIHW with
   stock ``ConvertLayout``, which propagates the layout through element-wise
   ops so consecutive convs stay in NCHW and only the graph's ends transpose;
2. ``CancelLayoutPairs`` then removes ``permute_dims(permute_dims(x))`` and
   ``layout_transform(layout_transform(x))`` pairs that compose to the
   identity (checked on the static shape and a set of probe coordinates).

Other targets are left alone (their candidates choose their own layouts).
Cost: the two transposes at the graph's ends. Between convs, ``BlockChannels``
(``block_channels.py``, next in the pipeline) then keeps the activations in the
kernels' own blocked layout where that saves their packs and unpacks.
"""
from __future__ import annotations

import itertools

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from ..target import target_kind
from ..workload import channel_block
from .mutate import static_dims
WANT = {"relax.nn.conv2d": ["NCHW", "OIHW"]}


def _perm_identity(inner, outer, x) -> bool:
    nd = len(x.ty.shape) if isinstance(x.ty, relax.TensorType) and x.ty.shape is not None else None
    if nd is None:
        return False
    p1 = [int(a) for a in inner.attrs.axes] if inner.attrs.axes is not None else list(range(nd))[::-1]
    p2 = [int(a) for a in outer.attrs.axes] if outer.attrs.axes is not None else list(range(nd))[::-1]
    return [p1[p2[i]] for i in range(nd)] == list(range(nd))


def _probe_points(shape, limit: int = 64):
    """Corners and a stride through the index space of ``shape``."""
    corners = itertools.product(*[(0, d - 1) for d in shape])
    pts = [list(c) for c in itertools.islice(corners, limit)]
    pts += [[(i * 7 + k * 3) % d for k, d in enumerate(shape)] for i in range(16)]
    return pts


def _transform_identity(inner, outer, x) -> bool:
    shape = static_dims(x)
    if shape is None or inner.attrs.pad_value is not None or outer.attrs.pad_value is not None:
        return False
    m1, m2 = inner.attrs.index_map, outer.attrs.index_map
    try:
        mid = [int(d) for d in m1.map_shape(shape)]
        back = [int(d) for d in m2.map_shape(mid)]
        if back != shape or _numel(mid) != _numel(shape):
            return False
        for pt in _probe_points(shape):
            if [int(v) for v in m2.map_indices(m1.map_indices(pt))] != pt:
                return False
    except Exception:  # noqa: BLE001 - maps we cannot evaluate are left alone
        return False
    return True


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _pair(op: str, check):
    x = wildcard()
    inner = is_op(op)(x)
    outer = is_op(op)(inner)

    def rewrite(expr, matches):
        return matches[x] if check(matches[inner], matches[outer], matches[x]) else expr

    return outer, rewrite


def CancelLayoutPairs() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Remove back-to-back permute_dims / layout_transform pairs that compose to the identity."""
    return tvm.transform.module_pass(_cancel, opt_level=0, name="ext.CancelLayoutPairs")


def _cancel(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    rules = [_pair("relax.permute_dims", _perm_identity), _pair("relax.layout_transform", _transform_identity)]
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            new = func
            for pat, rw in rules:
                new = rewrite_call(pat, rw, new)
            if not new.same_as(func):
                mod[gv] = new
    return relax.transform.DeadCodeElimination()(mod)


def _needs_conversion(mod) -> bool:

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d":
            a = e.attrs
            found.append((str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCHW", "OIHW", "NCHW"))
            blocked.append(channel_block(a.data_layout) > 0)

    found, blocked = [], []
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    # a graph with blocked (NCHW{b}c) convs chose its layouts already (stock ConvertLayout fails on them)
    return any(found) and not any(blocked)


def LayoutPolicy(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """CPU: conv2d to NCHW/OIHW (see module doc), then cancel redundant pairs. Other targets: pairs only."""
    cpu = target is not None and target_kind(target).cpu

    def transform(mod, _ctx):
        if cpu and _needs_conversion(mod):
            mod = relax.transform.ConvertLayout(WANT)(mod)
            # fold the permuted constant weights; share the input's transpose between its users
            mod = relax.transform.EliminateCommonSubexpr()(relax.transform.FoldConstant()(mod))
        return CancelLayoutPairs()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.LayoutPolicy")
