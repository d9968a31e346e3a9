"""ext's TIR lowering for CPU kernels: the stock ``s_tir`` pipeline, with kernel buffers on the stack.

TVM's ``LowerTVMBuiltin`` turns every allocation of a host kernel into a call pair
``TVMBackendAllocWorkspace`` / ``TVMBackendFreeWorkspace`` (the pooled heap), small or not, and
the allocations of a parallel task sit inside the task: a ``conv2d.conv1x1`` task allocates its
3 x 112 accumulator tile, LLVM zero-fills that heap memory with a ``memset`` call, and frees it,
for each of its 3584 tiles. In MobileNetV2 (``perf record`` of the built library, 2 threads),
``memset`` took 4.6% of the samples and the workspace pool 3.7%.

:func:`stack_buffers` marks each allocation of constant size up to ``limit`` bytes (and the
function's allocations up to ``budget`` bytes together) with TVM's own
``disable_lower_builtin`` annotation: the LLVM backend then places it in the function's entry
frame (an ``alloca`` hoisted out of every loop), where LLVM keeps accumulator tiles in
registers and the zero-fill becomes register moves. The limit is small on purpose: TVM gives a
stack buffer 16-byte alignment only (the pool's are 64), so an array that stays in memory and
is read with 64-byte vectors splits cache lines: the attention kernel's 36 KB score rows on the
stack made it 1.35x slower at 1500 keys (three runs). Register tiles take at most 32 vectors
(2 KB). Larger or symbolic-size buffers stay on the workspace pool.

``TIR_PIPELINE`` (``"ext_cpu"``, registered on import) is the stock ``s_tir`` pipeline with
:func:`stack_buffers` run just before ``LowerTVMBuiltin``; the ``llvm`` row of the target-kind
table names it, and ``ext.build`` and the tuner's measurements compile with it.
"""
from __future__ import annotations

import tvm
from tvm.tirx import stmt as S

TIR_PIPELINE = "ext_cpu"
#: TVM's annotation (``kDisableLowerTVMBuiltin``): ``LowerTVMBuiltin`` leaves the allocation to the backend
KEEP = "disable_lower_builtin"
#: one buffer at most this large goes on the stack: register tiles and short rows (module doc).
#: MobileNetV2, same process, 9 interleaved rounds against the stock lowering: 0.862x at 2 KB,
#: 0.865x at 4 KB, 0.828x at 16 KB; ResNet-18 0.98-1.0x, DeiT-S 0.95-0.97x
LIMIT = 4096
#: a function's stack buffers together at most this large (a task's frame, far below a thread's stack)
BUDGET = 64 * 1024


def _nbytes(buf) -> int | None:
    n = 1
    for d in buf.shape:
        if not isinstance(d, tvm.tirx.IntImm):
            return None
        n *= int(d)
    dt = tvm.runtime.DataType(buf.dtype)
    return n * dt.bits * dt.lanes // 8


class _Marker:
    def __init__(self, limit: int, budget: int):
        self.limit, self.left = limit, budget

    def alloc(self, st):
        size = _nbytes(st.buffer)
        # a zero-size buffer (an empty slice) stays with TVM: its backend refuses a zero-size alloca
        if not size or size > min(self.limit, self.left) or KEEP in st.annotations:
            return st
        self.left -= size
        return S.AllocBuffer(st.buffer, {**st.annotations, KEEP: tvm.tirx.IntImm("bool", 1)}, st.span)

    def visit(self, st):
        """``st`` with its allocations marked; the node itself when nothing under it changed.
        Statements without nested statements (stores, calls, binds) come back as they are."""
        if isinstance(st, S.AllocBuffer):
            return self.alloc(st)
        if isinstance(st, S.SeqStmt):
            seq = [self.visit(s) for s in st.seq]
            return st if all(a.same_as(b) for a, b in zip(seq, st.seq)) else S.SeqStmt(seq, st.span)
        if isinstance(st, S.For):
            body = self.visit(st.body)
            return st if body.same_as(st.body) else S.For(st.loop_var, st.min, st.extent, st.kind, body,
                                                           st.thread_binding, st.annotations, st.step, st.span)
        if isinstance(st, S.AttrStmt):
            body = self.visit(st.body)
            return st if body.same_as(st.body) else S.AttrStmt(st.node, st.attr_key, st.value, body, st.span)
        if isinstance(st, S.While):
            body = self.visit(st.body)
            return st if body.same_as(st.body) else S.While(st.condition, body, st.span)
        if isinstance(st, S.IfThenElse):
            then = self.visit(st.then_case)
            other = None if st.else_case is None else self.visit(st.else_case)
            if then.same_as(st.then_case) and (other is None or other.same_as(st.else_case)):
                return st
            return S.IfThenElse(st.condition, then, other, st.span)
        return st


def stack_buffers(limit: int | None = None, budget: int | None = None):
    """The pass that puts small constant-size buffers of host (LLVM) functions on the stack
    (module doc); ``limit`` and ``budget`` default to ``LIMIT`` and ``BUDGET``."""
    limit = LIMIT if limit is None else limit
    budget = BUDGET if budget is None else budget

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="ext.StackBuffers")
    def _pass(func, _mod, _ctx):
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is None or target.kind.name != "llvm":
            return func
        return func.with_body(_Marker(limit, budget).visit(func.body))

    return _pass


def _pipeline_factory():
    from tvm.s_tir import pipeline as stock

    main, host, device = stock.default_s_tir_pipeline()

    def host_passes():
        return tvm.ir.transform.Sequential([stack_buffers(), host()])

    return main, host_passes, device


tvm.tirx.compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _pipeline_factory)
