"""A batched product with gathered matrices reads them in place: ``FuseExpertGather``.

transformers' mixture-of-experts layers (Mixtral, Qwen-MoE, OLMoE, DeepSeek, GPT-OSS...) export
with ``batched_mm`` (``torch_fixes.EXPORTED_EXPERTS``): every (token, chosen expert) pair ``s``
gets its expert's weight matrix by ``take(w, ids, axis=0)``, then one matrix-vector product per
pair (``bmm``). The ``take`` copies a whole matrix per pair: on a 2-layer Mixtral with 4 experts
of 1024 x 256 and 128 tokens choosing 2, 256 MB per projection, and the batched product reads
the copies back; ext ran 107 ms against PyTorch's 13 ms. Here the product becomes
``topi_kernels.expert_matmul``, which indexes the stacked weights with ``ids`` and reads them
where they lie (they stay in cache across pairs).

Matched (after ``CheckTakeIndices``, so the indices are the range-checked copy):

* ``matmul(take(w, ids, 0), v)``, ``w (E, N, K)``, ``v (S, K, 1)`` (transformers' default
  layout);
* ``matmul(u, take(w, ids, 0))``, ``u (S, 1, K)``, ``w (E, K, N)`` (``is_transposed`` layouts).

Either ``w`` is first rearranged into the kernel's column panels (a reshape and a
``permute_dims``), which constant folding or the weight-transform lifting runs once where ``w``
is a weight.

float32, ``E``, ``K`` and ``N`` static (``S`` may be symbolic); CPU only.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm_ffi import structural_equal

from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.expert_matmul import schedule_expert_matmul
from ..topi_kernels.expert_matmul import expert_matmul
from .mutate import has_op, op_name

#: accumulator registers per (column chunk, row) pair: ``cols`` is at most this many vectors
CHUNK_VECTORS = 4


def _static(d) -> int | None:
    return int(d.value) if hasattr(d, "value") else None


def _gathered(expr, binds: dict):
    """``(w, ids)`` where ``expr`` is bound to ``take(w, ids, axis=0)`` of a 3-D float32 ``w`` with
    a static shape and 1-D integer ``ids``, else None."""
    call = binds.get(expr) if isinstance(expr, relax.Var) else None
    if op_name(call) != "relax.take" or call.attrs.axis is None or int(call.attrs.axis) != 0:
        return None
    w, ids = call.args
    wt, it = w.ty, ids.ty
    if not isinstance(wt, relax.TensorType) or wt.shape is None or len(wt.shape) != 3 or str(wt.dtype) != "float32":
        return None
    if any(_static(d) is None for d in wt.shape):
        return None
    if not isinstance(it, relax.TensorType) or it.shape is None or len(it.shape) != 1 or "int" not in str(it.dtype):
        return None
    return w, ids


def _plan(mm, binds: dict):
    """``(x, ids, w, transpose_w)`` for a matmul this pass rewrites, else None: ``x`` is the
    ``(S, K, 1)`` or ``(S, 1, K)`` vector operand, ``transpose_w`` whether ``w`` is ``(E, N, K)``."""
    a, b = mm.args
    for mat, vec, transpose in ((a, b, True), (b, a, False)):
        got = _gathered(mat, binds)
        if got is None:
            continue
        w, ids = got
        vt = vec.ty
        if not isinstance(vt, relax.TensorType) or vt.shape is None or len(vt.shape) != 3 or str(vt.dtype) != "float32":
            continue
        E, R, C = (_static(d) for d in w.ty.shape)
        K = C if transpose else R
        unit, k = (vt.shape[2], vt.shape[1]) if transpose else (vt.shape[1], vt.shape[2])
        if _static(unit) != 1 or _static(k) != K:
            continue
        if not structural_equal(vt.shape[0], ids.ty.shape[0]):
            continue
        return vec, ids, w, transpose
    return None


def _cols(N: int, lanes: int) -> int:
    """Output columns per chunk: the widest of ``CHUNK_VECTORS``..1 vectors that divides ``N``,
    else the largest divisor of ``N`` within ``CHUNK_VECTORS`` vectors (odd ``N``)."""
    for v in range(CHUNK_VECTORS, 0, -1):
        if N % (v * lanes) == 0:
            return v * lanes
    return max(d for d in range(1, min(N, CHUNK_VECTORS * lanes) + 1) if N % d == 0)


def _kernel(E: int, K: int, N: int, cols: int, ids_dtype: str):
    S = tirx.Var("S", "int64")
    x = te.placeholder((S, K), "float32", name="x")
    ids = te.placeholder((S,), ids_dtype, name="ids")
    wp = te.placeholder((E, N // cols, K, cols), "float32", name="wp")
    y = expert_matmul(x, ids, wp)
    sch = create_schedule([x, ids, wp, y])
    schedule_expert_matmul(sch, cols)
    return finish(sch, "expert_matmul")


@mutator
class _Fuse(PyExprMutator):
    def __init__(self, mod, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.binds: dict = {}
        self.kernels: dict = {}

    def visit_function_(self, func):
        self.binds = relax.analysis.get_var2val(func)
        return super().visit_function_(func)

    def visit_var_binding_(self, binding):
        value = binding.value
        plan = _plan(value, self.binds) if op_name(value) == "relax.matmul" else None
        if plan is None or str(binding.var.ty.dtype) != "float32":
            return super().visit_var_binding_(binding)
        vec, ids, w, transpose = (self.visit_expr(e) if isinstance(e, relax.Expr) else e for e in plan)
        E, R, C = (_static(d) for d in w.ty.shape)
        K, N = (C, R) if transpose else (R, C)
        S = ids.ty.shape[0]
        cols = _cols(N, self.lanes)
        if transpose:  # (E, N, K) -> (E, N / cols, cols, K) -> panels
            w = self.builder_.emit(relax.op.reshape(w, [E, N // cols, cols, K]))
            wp = self.builder_.emit(relax.op.permute_dims(w, [0, 1, 3, 2]))
        else:  # (E, K, N) -> (E, K, N / cols, cols) -> panels
            w = self.builder_.emit(relax.op.reshape(w, [E, K, N // cols, cols]))
            wp = self.builder_.emit(relax.op.permute_dims(w, [0, 2, 1, 3]))
        x = self.builder_.emit(relax.op.reshape(vec, [S, K]))
        key = (E, K, N, cols, str(ids.ty.dtype))
        if key not in self.kernels:
            self.kernels[key] = self.builder_.add_func(_kernel(*key), "expert_matmul")
        y = self.builder_.emit(relax.call_tir(self.kernels[key], [x, ids, wp], out_ty=relax.TensorType([S, N], "float32")))
        out = self.builder_.emit(relax.op.reshape(y, binding.var.ty.shape))
        self.set_var_remap(binding.var, out)


def FuseExpertGather(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass (CPU): gathered-matrix products read the matrices in place (module docstring)."""
    from ..target import cpu_info

    lanes = cpu_info(target).lanes_f32

    def transform(mod, _ctx):
        if not has_op(mod, "relax.take"):
            return mod
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function) or (func.attrs and "Composite" in func.attrs):
                continue
            fuser = _Fuse(mod, lanes)
            new = fuser.visit_expr(func)
            if not fuser.kernels:
                continue
            fuser.builder_.update_func(gv, new)
            mod = relax.transform.DeadCodeElimination()(fuser.builder_.get())
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FuseExpertGather")


__all__ = ["FuseExpertGather"]
