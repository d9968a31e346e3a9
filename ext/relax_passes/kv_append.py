"""Fuse a decode step's cache append with the attention product that reads the new cache.

A decode step writes ``present = concat(past, new, axis=2)`` (returned to the caller) and
multiplies the query by it (``q @ present^T``: the scores) or the attention weights by it
(``p @ present``: the output). Apart, the cache moves through memory three times (read
past, write present, read present again for the product); ``topi_kernels.kv_append`` does
both in one kernel per product, one read and one write per row. The matmul family never
sees these products (a reading order, not a tiling).

Matched on the imported forms (after ``UnflattenLinear`` dropped the no-op broadcasts):
``matmul(q, permute_dims(reshape(concat((past, new), 2), (B*H, S, D)), [0, 2, 1]))`` and
``matmul(p, reshape(concat(...), (B*H, S, D)))``, with ``past``'s sequence symbolic (a
decode step; a static prefill keeps the tiled batch kernels), a static head dim, one query
row (``MAX_ROWS``), and no other use of the concat before the product. CPU only.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import kv_append as sched
from ..topi_kernels import kv_append as kv
from .mutate import static_int

#: query rows per head (a decode step: one token; the scores schedule covers one row)
MAX_ROWS = 1


def _op(value, name: str) -> bool:
    return isinstance(value, relax.Call) and getattr(value.op, "name", None) == name


def _plan(mm, binds: dict, lanes: int):
    """``(kind, left, concat var, past, new)`` for a matmul this pass fuses, else None."""
    left, right = mm.args[0], mm.args[1]
    kind = "mix"
    if isinstance(right, relax.Var) and _op(binds.get(right), "relax.permute_dims"):
        perm = binds[right]
        axes = [int(a) for a in perm.attrs.axes] if perm.attrs.axes is not None else None
        if axes != [0, 2, 1]:
            return None
        right, kind = perm.args[0], "scores"
    flat = binds.get(right) if isinstance(right, relax.Var) else None
    if not _op(flat, "relax.reshape") or not isinstance(flat.args[0], relax.Var):
        return None
    c = flat.args[0]
    cat = binds.get(c)
    if not _op(cat, "relax.concat") or int(cat.attrs.axis) not in (2, -2):
        return None
    parts = cat.args[0].fields if isinstance(cat.args[0], relax.Tuple) else None
    if parts is None or len(parts) != 2:
        return None
    past, new = parts
    ps, ns, ls = (getattr(x.ty, "shape", None) for x in (past, new, left))
    if ps is None or ns is None or ls is None or len(ps) != 4 or len(ns) != 4 or len(ls) != 3:
        return None
    if any(str(x.ty.dtype) != "float32" for x in (past, new, left)):
        return None
    B, H, D, T, M = static_int(ps[0]), static_int(ps[1]), static_int(ps[3]), static_int(ns[2]), static_int(ls[1])
    if None in (B, H, D, T, M) or static_int(ps[2]) is not None or M > MAX_ROWS:
        return None
    if static_int(ls[0]) != B * H or [static_int(x) for x in (ns[0], ns[1], ns[3])] != [B, H, D]:
        return None
    if kind == "scores" and (D % lanes or static_int(ls[2]) != D):
        return None
    return kind, left, c, past, new


def _kernel(kind: str, past_ty, new_ty, left_shape, lanes: int):
    P = tirx.Var("past", "int64")
    B, H, _, D = (static_int(d) for d in past_ty.shape)
    T, M = static_int(new_ty.shape[2]), left_shape[1]
    past = te.placeholder((B, H, P, D), name="past")
    new = te.placeholder((B, H, T, D), name="new")
    if kind == "scores":
        left = te.placeholder((B, H, M, D), name="q")
        present, out = kv.append_scores(left, past, new, lanes)
        sch = create_schedule([left, past, new, present, out])
        sched.schedule_append_scores(sch)
    else:
        left = te.placeholder((B, H, M, P + T), name="p")
        present, out = kv.append_mix(left, past, new)
        sch = create_schedule([left, past, new, present, out])
        sched.schedule_append_mix(sch)
    return finish(sch, f"kv_append.{kind}")


@mutator
class _Fuse(PyExprMutator):
    def __init__(self, mod, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.plans: dict = {}
        self.kernels: dict = {}

    def scan(self, func) -> None:
        binds, order = {}, []
        for block in func.body.blocks:
            for b in block.bindings:
                binds[b.var] = b.value
                order.append(b)
        for pos, b in enumerate(order):
            if not _op(b.value, "relax.matmul"):
                continue
            plan = _plan(b.value, binds, self.lanes)
            if plan is None:
                continue
            c = plan[2]
            chain = {v for v, val in binds.items() if _op(val, "relax.reshape") and val.args[0].same_as(c)}
            chain |= {v for v, val in binds.items() if _op(val, "relax.permute_dims") and val.args[0] in chain}
            early = [o.var for o in order[:pos] if o.var not in chain and c in relax.analysis.free_vars(o.value)]
            if not early:
                self.plans[b.var] = plan

    def visit_var_binding_(self, binding):
        plan = self.plans.get(binding.var)
        if plan is None:
            return super().visit_var_binding_(binding)
        kind, left, c, past, new = plan
        left, past, new = (self.visit_expr(x) for x in (left, past, new))
        B, H = (static_int(d) for d in list(past.ty.shape)[:2])
        ls = list(left.ty.shape)
        M = static_int(ls[1])
        key = (kind, tuple(str(d) for d in list(past.ty.shape)[1:]), str(new.ty.shape[2]), M)
        if key not in self.kernels:
            func = _kernel(kind, past.ty, new.ty, [B * H, M], self.lanes)
            self.kernels[key] = self.builder_.add_func(func, f"kv_append_{kind}")
        left4 = self.builder_.emit(relax.op.reshape(left, [B, H, M, ls[2]]))
        out_last = c.ty.shape[2] if kind == "scores" else past.ty.shape[3]
        tys = [relax.TensorType(c.ty.shape, "float32"), relax.TensorType([B, H, M, out_last], "float32")]
        pair = self.builder_.emit(relax.call_tir(self.kernels[key], [left4, past, new], out_ty=tys))
        present = self.builder_.emit(relax.TupleGetItem(pair, 0))
        out = self.builder_.emit(relax.op.reshape(self.builder_.emit(relax.TupleGetItem(pair, 1)),
                                                  binding.var.ty.shape))
        self.set_var_remap(binding.var, out)
        self.set_var_remap(c, present)


def FuseCacheAppend(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    from ..target import cpu_info

    lanes = cpu_info(target).lanes_f32

    def transform(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function) or (func.attrs and "Composite" in func.attrs):
                continue
            fuser = _Fuse(mod, lanes)
            fuser.scan(func)
            if not fuser.plans:
                continue
            fuser.builder_.update_func(gv, fuser.visit_expr(func))
            mod = relax.transform.DeadCodeElimination()(fuser.builder_.get())
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FuseCacheAppend")
