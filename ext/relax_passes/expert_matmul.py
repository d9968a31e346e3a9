"""A batched product with gathered matrices reads them in place: ``FuseExpertGather``.

transformers' mixture-of-experts layers (Mixtral, Qwen-MoE, OLMoE, DeepSeek, GPT-OSS...) export
with ``batched_mm`` (``torch_fixes.EXPORTED_EXPERTS``): every (token, chosen expert) pair ``s``
gets its expert's weight matrix by ``take(w, ids, axis=0)``, then one matrix-vector product per
pair (``bmm``). The ``take`` copies a whole matrix per pair: on a 2-layer Mixtral with 4 experts
of 1024 x 256 and 128 tokens choosing 2, 256 MB per projection, and the batched product reads
the copies back; ext ran 107 ms against PyTorch's 13 ms. Here the product becomes two kernels
(``tir_schedules/cpu/expert_matmul.py``): a counting sort of the pairs by expert, then a
grouped product that reads each expert's weights where they lie, for a tile of its pairs at a
time (a GEMM micro-kernel over gathered rows).

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
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm_ffi import structural_equal

from ..tir_schedules.common import mark_scheduled
from ..tir_schedules.cpu.expert_matmul import grouped_kernel, route_kernel
from .mutate import has_op, mutate_functions, op_name, static_dims, static_int

#: vectors per row of the grouped kernel's register tile (its column panel)
PANEL_VECTORS = 2
#: rows of the register tile at most (AVX2's 16 registers: 6 rows x 2 vectors + 2 panel loads
#: + 1 broadcast; more registers allow more rows, up to this)
MAX_TILE_ROWS = 8


def _gathered(expr, binds: dict):
    """``(w, ids)`` where ``expr`` is bound to ``take(w, ids, axis=0)`` of a 3-D float32 ``w`` with
    a static shape and 1-D integer ``ids``, else None."""
    call = binds.get(expr) if isinstance(expr, relax.Var) else None
    if op_name(call) != "relax.take" or call.attrs.axis is None or int(call.attrs.axis) != 0:
        return None
    w, ids = call.args
    dims, it = static_dims(w), ids.ty
    if dims is None or len(dims) != 3 or str(w.ty.dtype) != "float32":
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
        K = static_dims(w)[2 if transpose else 1]
        unit, k = (vt.shape[2], vt.shape[1]) if transpose else (vt.shape[1], vt.shape[2])
        if static_int(unit) != 1 or static_int(k) != K:
            continue
        if not structural_equal(vt.shape[0], ids.ty.shape[0]):
            continue
        return vec, ids, w, transpose
    return None


def _cols(N: int, lanes: int) -> int:
    """Columns per panel: ``PANEL_VECTORS``..1 vectors, the widest that divides ``N``, else the
    largest divisor of ``N`` within ``PANEL_VECTORS`` vectors (odd ``N``)."""
    for v in range(PANEL_VECTORS, 0, -1):
        if N % (v * lanes) == 0:
            return v * lanes
    return max(d for d in range(1, min(N, PANEL_VECTORS * lanes) + 1) if N % d == 0)


def _tile_rows(cols: int, lanes: int, registers: int) -> int:
    """Rows of the register tile: accumulators for ``rows x cols`` plus the panel row's
    vectors and one broadcast fit in ``registers``."""
    vectors = -(-cols // lanes)
    return max(1, min(MAX_TILE_ROWS, (registers - vectors - 2) // vectors))


@mutator
class _Fuse(PyExprMutator):
    def __init__(self, mod, lanes: int, registers: int):
        super().__init__(mod)
        self.lanes, self.registers = lanes, registers
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
        E, R, C = static_dims(w)
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
        ids_dtype = str(ids.ty.dtype)
        route, grouped = ("route", E, ids_dtype), ("grouped", E, K, N, cols, _tile_rows(cols, self.lanes, self.registers))
        if route not in self.kernels:
            self.kernels[route] = self.builder_.add_func(mark_scheduled(route_kernel(E, ids_dtype), "expert_route"),
                                                         "expert_route")
        if grouped not in self.kernels:
            self.kernels[grouped] = self.builder_.add_func(mark_scheduled(grouped_kernel(*grouped[1:]), "expert_matmul"),
                                                           "expert_matmul")
        routed = self.builder_.emit(relax.call_tir(self.kernels[route], [ids], out_ty=[
            relax.TensorType([S], "int32"), relax.TensorType([E + 1], "int32")]))
        order = self.builder_.emit(relax.TupleGetItem(routed, 0))
        offsets = self.builder_.emit(relax.TupleGetItem(routed, 1))
        y = self.builder_.emit(relax.call_tir(self.kernels[grouped], [x, order, offsets, wp],
                                              out_ty=relax.TensorType([S, N], "float32")))
        out = self.builder_.emit(relax.op.reshape(y, binding.var.ty.shape))
        self.set_var_remap(binding.var, out)


def FuseExpertGather(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass (CPU): gathered-matrix products read the matrices in place (module docstring)."""
    from ..target import cpu_info

    info = cpu_info(target)
    lanes, registers = info.lanes_f32, info.vector_registers

    def transform(mod, _ctx):
        if not has_op(mod, "relax.take"):
            return mod
        fuser = _Fuse(mod, lanes, registers)
        out = mutate_functions(fuser, mod)
        return relax.transform.DeadCodeElimination()(out) if fuser.kernels else mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FuseExpertGather")


__all__ = ["FuseExpertGather"]
