"""Blocked activations between convolutions (CPU): ``BlockChannels``.

ext's blocked conv kernels compute in NCHW{b}c (``b`` = the vector width in
floats: 16 on AVX-512) and, with NCHW on both sides, pack their input and unpack
their output inside the kernel. The unpack is a transpose LLVM turns into scatters
or scalar moves: 1x1 64->384 at 14x14 ran 60.5 us against 36.4 with the output left
blocked. This pass keeps the activations between convs blocked instead, as
onnxruntime does, so that no conv unpacks what the next one packs again.

Regions: values are joined into regions through the ops that compute the same in
either layout, per element: the activations and other one-tensor element-wise ops,
binary element-wise ops whose other operand is a scalar, a per-channel tensor
(bias, the squeeze-and-excitation gate ``(N, C, 1, 1)``) or another value of the
region, ``mean`` over the spatial axes with ``keepdims``, depthwise convs (the
blocked depthwise kernel, ``conv2d.depthwise_nchwc``, reads and writes NCHW{b}c), concats
along the channels of whole ``b``-blocks (the concat of the blocks) and max / average
pools (``pool2d.nchwc``).
A region's edges are dense convs the Selector would give to ``conv2d.direct_nchwc`` or
``conv2d.winograd`` (both take either layout on either side), and every other use. A region is
converted when what it saves beats what it costs: one in-kernel unpack per conv
writing into it and one in-kernel pack per conv reading from it, against one
``layout_transform`` per value used outside it (the graph's output, a reshape) and per
full-size value packed into it, each weighed by the elements it moves (a pass over memory
either way): the 1x1 conv before a head's spatial mean saves a 1280x7x7 unpack for a
1280-element one after the mean, and a squeeze-and-excitation branch's pooled vector costs
next to nothing to leave the region, where counting transforms made them even.

A ``conv2d.conv1x1`` pick (NCHW as it lies) joins as a blocked conv when the blocked
kernel's estimate with both sides blocked is lower; if the plan then leaves one of its
sides NCHW, the function is planned again with that conv left to its pick. Grouped convs
join on a side whose groups are whole ``b``-blocks (RegNet-X's 16-channel groups: its
7x7 stage packed and unpacked around every grouped conv, 1.03-1.14x onnxruntime, 0.89x
blocked). Convs with channels not in whole ``b``-blocks, other grouped convs and symbolic
shapes stay NCHW, outside any region.

Per-channel constants are re-laid out here (``(1, C/b, 1, 1, b)``), other per-channel
operands by a ``layout_transform``; conv weights stay OIHW (the kernels
pack them at compile time). ``FuseEpilogues`` then fuses bias, activation, residual
and gate into the blocked convs as before.
"""
from __future__ import annotations

import functools
import os
from collections import Counter

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..strategies import REGISTRY
from ..strategies.conv2d import blockable, lanes
from ..strategies.conv2d import geom as cv_geom
from ..target import target_kind
from ..workload import Workload
from .mutate import mutate_functions, op_name, static_dims

UNARY = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh",
         "relax.tanh", "relax.nn.leakyrelu", "relax.exp", "relax.negative", "relax.abs", "relax.sqrt",
         "relax.rsqrt", "relax.erf", "relax.square"}
#: the NCHW picks of a dense conv that take NCHW{b}c on either side, and what a blocked side saves:
#: the kernel's in-kernel pack or unpack (1; Winograd's input pack and output scatter alike)
DIRECT = {"conv2d.direct_nchwc": 1, "conv2d.winograd": 1}
#: NCHW picks that read and write NCHW as it lies: a region may take such a conv to the blocked
#: kernel when its estimate with both sides blocked (no pack, no unpack) is below the pick's. Traded
#: unconditionally, EfficientNet-B0 ran 12% slower (16->96 at 112x112 and the like stay conv1x1);
#: by estimate, MobileViTV2's 64->128 at 128x128 goes blocked (conv1x1 1.46 ms alone, 0.70 blocked
#: at 64x64 for twice the channels)
TRADED = {"conv2d.conv1x1"}
#: NCHW picks for convs over few input channels (an image's stem) whose output the blocked kernel
#: writes blocked faster than they write NCHW (3->32 3x3/2 at 224: 120 us blocked, 116-140 NCHW by
#: ``conv2d.rows``, 176-188 NCHW by the blocked kernel): a region takes them as ``conv2d.direct_nchwc``
ROWS = {"conv2d.rows"}
POOL = {"relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}


_CONST = tvm.ir.expr.Constant


def _elements(v) -> int:
    """What a layout change of ``v`` costs, in pack/unpack and ``layout_transform`` alike: one
    pass over its elements (region values have static shapes)."""
    return int(np.prod(static_dims(v) or [1]))


def _tensor_args(call) -> list:
    return [a for a in call.args if isinstance(a.ty, relax.TensorType)]


class _Plan:
    """The regions of one function and which of them to convert (see module doc)."""

    def __init__(self, func: relax.Function, b: int, choose, blocked_faster, untraded=frozenset()):
        self.b, self.choose, self.blocked_faster, self.untraded = b, choose, blocked_faster, untraded
        self.traded: dict = {}  # conv var -> its input, for convs taken from a TRADED pick
        self.parent: dict = {}
        self.produced: set = set()  # region values computed by a region op (the rest are packed)
        self.conv: dict = {}  # var -> "dw" | (in_ok, out_ok) for convs that may take part
        self.gain: Counter = Counter()
        self.users: dict = {}  # region value -> number of uses outside region ops
        self.readers: list = []  # (x, conv var): direct convs that may read x blocked
        for block in func.body.blocks:
            for binding in block.bindings:
                aware = self._visit(binding) if isinstance(block, relax.DataflowBlock) else set()
                self._uses(binding.value, aware)
        self._uses(func.body.body, set())
        for x, _, gain in self.readers:
            if x in self.parent:
                self.gain[self._root(x)] += gain * _elements(x)
        cost = Counter()
        for v in self.parent:  # a produced value used outside: one unpack; one from outside: one pack
            cost[self._root(v)] += ((v in self.users) if v in self.produced else 1) * _elements(v)
        self.converted = {v for v in self.parent if self.gain[self._root(v)] > cost[self._root(v)]}
        self.rewrite = self.converted & self.produced

    def half_traded(self) -> set:
        """Traded convs left with one side NCHW: the estimate that traded them assumed both blocked
        (1x1 32->16 at 112x112: conv1x1 0.046 ms, blocked in and NCHW out 0.073, both blocked 0.038)."""
        return {v for v, x in self.traded.items() if not (v in self.converted and x in self.converted)}

    # -- union-find over region values
    def _root(self, v):
        while self.parent[v] is not v:
            v = self.parent[v]
        return v

    def _join(self, *vs) -> None:
        for v in vs:
            self.parent.setdefault(v, v)
        roots = {self._root(v) for v in vs}
        first = roots.pop()
        for r in roots:
            self.parent[r] = first
            self.gain[first] += self.gain.pop(r, 0)

    def _uses(self, expr, aware: set) -> None:
        def visit(e):
            if isinstance(e, relax.Var) and e in self.produced and not any(e.same_as(a) for a in aware):
                self.users[e] = self.users.get(e, 0) + 1

        relax.analysis.post_order_visit(expr, visit)

    # -- one binding: returns the argument vars it reads in blocked form when converted
    def _visit(self, binding) -> set:
        v, call = binding.var, binding.value
        op = op_name(call)
        if op == "relax.nn.conv2d":
            return self._conv(v, call)
        if op == "relax.concat":
            return self._concat(v, call)
        if op in POOL:
            return self._pool(v, call)
        args = _tensor_args(call) if op else []
        if not args or not all(isinstance(a, (relax.Var, _CONST)) for a in args):
            return set()
        out = static_dims(v)
        if op in UNARY and len(args) == 1 and args[0] in self.parent:
            self._join(v, args[0])
            self.produced.add(v)
            return {args[0]}
        if op in BINARY and len(args) == 2 and out is not None and len(out) == 4 and out[1] % self.b == 0:
            inside = [a for a in args if a in self.parent and static_dims(a) == out]
            kinds = [self.operand_kind(a, out) for a in args]
            if inside and all(k is not None for k in kinds):
                full = [a for a, k in zip(args, kinds) if k == "full" and isinstance(a, relax.Var)]
                if len(full) == sum(k == "full" for k in kinds):
                    self._join(v, *full)
                    self.produced.add(v)
                    return set(full)
        if op == "relax.mean" and len(args) == 1 and args[0] in self.parent and call.attrs.keepdims:
            axes = sorted(int(a) % 4 for a in call.attrs.axis) if call.attrs.axis is not None else []
            if axes == [2, 3]:
                self._join(v, args[0])
                self.produced.add(v)
                return {args[0]}
        return set()

    def _concat(self, v, call) -> set:
        """A concat along the channels of whole ``b``-blocks is the concat of the blocks (axis 1)."""
        fields, out = call.args[0], static_dims(v)
        if not isinstance(fields, relax.Tuple) or out is None or len(out) != 4 or int(call.attrs.axis) % 4 != 1:
            return set()
        shapes = [static_dims(f) if isinstance(f, relax.Var) else None for f in fields.fields]
        if not all(s is not None and len(s) == 4 and s[1] % self.b == 0 for s in shapes):
            return set()
        self._join(v, *fields.fields)
        self.produced.add(v)
        return set(fields.fields)

    def _pool(self, v, call) -> set:
        """Max / average pooling in NCHW{b}c (``pool2d.nchwc``): the window runs per channel."""
        x, a, out = call.args[0], call.attrs, static_dims(v)
        if (not isinstance(x, relax.Var) or out is None or len(out) != 4 or out[1] % self.b
                or (str(a.layout), str(a.out_layout)) != ("NCHW", "NCHW") or str(v.ty.dtype) != "float32"
                or (op_name(call) == "relax.nn.avg_pool2d" and a.ceil_mode)):  # pool2d.nchwc declines it
            return set()
        self._join(v, x)
        self.produced.add(v)
        return {x}

    def _conv(self, v, call) -> set:
        x, w = call.args
        a = call.attrs
        xs, ws, out = static_dims(x), static_dims(w), static_dims(v)
        if (xs is None or ws is None or out is None or len(xs) != 4 or len(ws) != 4
                or (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCHW", "OIHW", "NCHW")
                or not (str(x.ty.dtype) == str(w.ty.dtype) == str(v.ty.dtype) == "float32")):
            return set()
        C, O, groups = xs[1], ws[0], int(a.groups)
        attrs = {"strides": tuple(int(s) for s in a.strides), "padding": tuple(int(p) for p in a.padding),
                 "dilation": tuple(int(d) for d in a.dilation), "groups": groups, "data_layout": "NCHW",
                 "kernel_layout": "OIHW", "out_shape": tuple(out), "w_const": isinstance(w, _CONST)}
        wl = Workload("conv2d", [tuple(xs), tuple(ws)], ["float32"] * 2, "float32", attrs=attrs)
        pick = self.choose(wl)
        if pick in ROWS:  # its NCHW output is the blocked kernel's in a region (no unpack there)
            pick = "conv2d.direct_nchwc"
        if pick == "conv2d.depthwise" and groups == C == O and C % self.b == 0 and isinstance(x, relax.Var):
            self.conv[v] = "dw"
            self._join(v, x)
            self.produced.add(v)
            return {x}
        g = cv_geom(wl)
        in_ok, out_ok = blockable(g, self.b, out_block=False), blockable(g, self.b, in_block=False)
        if (pick in TRADED and groups == 1 and in_ok and out_ok and v not in self.untraded
                and isinstance(x, relax.Var) and self.blocked_faster(wl, pick)):
            pick = "conv2d.direct_nchwc"
            self.traded[v] = x
        if pick not in DIRECT or (groups != 1 and not (in_ok or out_ok)):
            return set()
        self.conv[v] = (in_ok, out_ok)
        if out_ok:
            self._join(v)
            self.produced.add(v)
            self.gain[self._root(v)] += DIRECT[pick] * _elements(v)
        if in_ok and isinstance(x, relax.Var):
            self.readers.append((x, v, DIRECT[pick]))
            return {x}
        return set()

    def operand_kind(self, a, out) -> str | None:
        """How an operand of a binary op enters a region: ``"full"`` (a value of the output's
        shape: blocked itself), ``"scalar"`` (broadcasts as it is), ``"channel"`` (varies along
        the channels, and the batch: re-laid out) or None (it cannot)."""
        s = static_dims(a)
        if s is None:
            return None
        if s == out:
            return "full"
        if len(s) <= 4 and all(d == 1 for d in s):
            return "scalar"
        s4 = [1] * (4 - len(s)) + s if len(s) <= 4 else None
        if s4 is not None and s4[1] == out[1] and s4[0] in (1, out[0]) and s4[2:] == [1, 1]:
            return "channel"
        return None


def _pack(b: int):
    return lambda n, c, h, w: (n, c // b, h, w, c % b)


def _unpack(b: int):
    return lambda n, q, h, w, r: (n, q * b + r, h, w)


@mutator
class _Rewrite(PyExprMutator):
    def __init__(self, mod, plans: dict, b: int):
        super().__init__(mod)
        self.plans, self.b = plans, b
        self.plan: _Plan | None = None
        self.blocked: dict = {}

    def visit_function_(self, func):
        outer = self.plan, self.blocked  # a nested function has its own plan (or none)
        self.plan, self.blocked = self.plans.get(func), {}
        try:
            return super().visit_function_(func)
        finally:
            self.plan, self.blocked = outer

    def _blocked(self, a):
        """The NCHW{b}c form of a region value (packed here when it was computed outside the region)."""
        if a not in self.blocked:
            self.blocked[a] = self.builder_.emit(relax.op.layout_transform(self.visit_expr(a), _pack(self.b)))
        return self.blocked[a]

    def _operand(self, a, out):
        kind = self.plan.operand_kind(a, out)
        if kind == "full":
            return self._blocked(a)
        if kind == "scalar":
            return self.visit_expr(a)
        s = static_dims(a)
        s4 = [1] * (4 - len(s)) + s
        if isinstance(a, _CONST):  # per-channel constants re-laid out now
            arr = a.value.numpy().reshape(s4)
            n, c = arr.shape[:2]
            return relax.const(np.ascontiguousarray(arr.reshape(n, c // self.b, self.b, 1, 1).transpose(0, 1, 3, 4, 2)))
        x = self.visit_expr(a)
        if len(s) != 4:
            x = self.builder_.emit(relax.op.reshape(x, s4))
        return self.builder_.emit(relax.op.layout_transform(x, _pack(self.b)))

    def _conv(self, call, x, data: str, out: str):
        a = call.attrs
        return relax.op.nn.conv2d(x, self.visit_expr(call.args[1]), a.strides, a.padding, a.dilation, a.groups,
                                  data, "OIHW", out, a.out_dtype)

    def visit_var_binding_(self, binding):
        plan, v, call = self.plan, binding.var, binding.value
        if plan is None or (v not in plan.rewrite and v not in plan.conv):
            return super().visit_var_binding_(binding)
        blk = f"NCHW{self.b}c"
        op = op_name(call)
        if op == "relax.nn.conv2d":
            x = call.args[0]
            x_in = x in plan.converted and (plan.conv[v] == "dw" or plan.conv[v][0])
            if v not in plan.rewrite and not x_in:
                return super().visit_var_binding_(binding)
            new = self._conv(call, self._blocked(x) if x_in else self.visit_expr(x), blk if x_in else "NCHW",
                             blk if v in plan.rewrite else "NCHW")
            if v not in plan.rewrite:  # reads the region, writes NCHW (its kernel's own unpack)
                return self.set_var_remap(v, self._emit_like(v, new))
        elif op in BINARY:
            out = static_dims(v)
            new = relax.Call(call.op, [self._operand(a, out) for a in call.args], call.attrs)
        elif op == "relax.mean":
            new = relax.op.mean(self._blocked(call.args[0]), axis=[2, 3], keepdims=True)
        elif op == "relax.concat":
            new = relax.op.concat([self._blocked(f) for f in call.args[0].fields], axis=1)
        elif op in POOL:
            a = call.attrs
            pool = relax.op.nn.max_pool2d if op == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
            extra = {} if op == "relax.nn.max_pool2d" else {"count_include_pad": bool(a.count_include_pad)}
            new = pool(self._blocked(call.args[0]), a.pool_size, a.strides, a.padding, a.dilation, bool(a.ceil_mode),
                       layout=blk, out_layout=blk, **extra)
        else:  # UNARY: the one tensor argument blocked, the rest as they are
            args = [self._blocked(a) if isinstance(a.ty, relax.TensorType) else self.visit_expr(a)
                    for a in call.args]
            new = relax.Call(call.op, args, call.attrs)
        self.blocked[v] = self.builder_.emit(new)
        # the NCHW value for uses outside the region (dead code, removed, when there are none)
        self.set_var_remap(v, self._emit_like(v, relax.op.layout_transform(self.blocked[v], _unpack(self.b))))

    def _emit_like(self, v, value):
        return self.builder_.emit(value) if isinstance(v, relax.DataflowVar) else self.builder_.emit_output(value)


def _blocked_wl(wl: Workload, b: int) -> Workload:
    """A plain NCHW conv2d workload with NCHW{b}c activations on both sides."""
    (n, c, h, w), wt = wl.shapes
    n_, o, oh, ow = wl.attr("out_shape")
    attrs = {**dict(wl.attrs), "data_layout": f"NCHW{b}c", "out_shape": (n_, o // b, oh, ow, b)}
    return wl.with_(shapes=((n, c // b, h, w, b), wt), attrs=attrs)


def block_channels() -> bool:
    """Whether builds run ``BlockChannels``: on unless ``EXT_BLOCK_CHANNELS=0`` (for A/B timing)."""
    return os.environ.get("EXT_BLOCK_CHANNELS", "1") != "0"


def BlockChannels(target, selector) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """CPU: keep the activations between convs in NCHW{lanes}c (see module doc); other targets
    unchanged. ``selector`` (``strategies.Selector``) says which kernel each conv would get; its
    cost model is left out (``Selector.without_model``): the plan is what the tuner measured."""
    cpu = target is not None and target_kind(target).cpu
    selector = selector.without_model()

    def transform(mod, _ctx):
        if not cpu:
            return mod
        b = lanes(target)

        @functools.cache  # a plan made again asks again
        def choose(wl):
            return selector.choose(wl).name

        @functools.cache
        def blocked_faster(wl, pick):
            """The blocked kernel with both sides NCHW{b}c estimated faster than ``pick`` on ``wl``."""
            blocked = REGISTRY.get("conv2d.direct_nchwc")
            est = REGISTRY.get(pick).estimated(wl, target)
            return est is not None and blocked.estimated(_blocked_wl(wl, b), target) < est

        plans = {}
        for _, func in mod.functions_items():
            if isinstance(func, relax.Function):
                plan = _Plan(func, b, choose, blocked_faster)
                while half := plan.half_traded():  # plan again with those convs left to their pick
                    plan = _Plan(func, b, choose, blocked_faster, plan.untraded | half)
                if plan.converted:
                    plans[func] = plan
        if not plans:
            return mod
        mod = mutate_functions(_Rewrite(mod, plans, b), mod)
        return relax.transform.DeadCodeElimination()(mod)

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.BlockChannels")
