"""Rewrite fused element-wise ``call_tir`` kernels to ``call_tir_inplace`` when an
input of the output's shape and dtype dies at that call: the kernel then writes
its result over that input and the memory planner has one buffer fewer to keep.

Why not stock ``relax.transform.DataflowUseInplaceCalls``: it works on single
Relax operators before legalization (``R.add`` -> ``call_tir_inplace(add_inplace)``)
and knows a fixed list of ops (``add``/``multiply``/``relu`` yes, ``sigmoid``,
``softmax`` no). ``FuseOps`` then fuses those in-place kernels with their
neighbours into an ordinary ``call_tir`` with a fresh output (checked on
softmax -> add -> relu -> multiply: one ``fused_..._inplace`` kernel writing a
new buffer), so for fused chains, the common case, no buffer is saved. This
pass runs after ``FuseOps``/``FuseTIR`` on the fused kernels instead.

A call ``y = call_tir(f, (..., x, ...))`` is rewritten, overwriting ``x``, when

* ``x`` is a dataflow variable used exactly once in the function (here), bound
  in the same block to a ``call_tir`` that is not a reshape (a reshape is a
  view of its input at run time) or to an in-place call this pass made: so
  no other live tensor shares ``x``'s storage;
* ``x`` has ``y``'s dtype and number of elements (a reshape fused into the
  kernel is fine: both are dense row-major buffers);
* ``f`` is unscheduled and, once its injective blocks are inlined, is one
  spatial block (nesting at most ``MAX_SELECT_DEPTH`` selects) writing one element
  of ``y`` per iteration and reading ``x`` only at the same memory offset (proved on the block's read/write regions),
  so every element is read before it is overwritten, by the same iteration.

A reshape kernel over a dying fresh tensor (stock ``RewriteDataflowReshape``
leaves those that produce a function output as copies) becomes a view.

The in-place PrimFunc drops the output parameter and declares the output
buffer over ``x``'s data (rebuilt through TVMScript: TVM 0.27 has no
Python-side TIR mutator; any failure leaves the call as it was).
"""
from __future__ import annotations

import math

import tvm
from tvm import relax, s_tir, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym import Analyzer  # tvm.arith in older TVM
from ..tir_schedules.common import MAX_SELECT_DEPTH, select_depth, unscheduled
from .mutate import var_uses

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CALL_TIR_INPLACE = tvm.ir.Op.get("relax.call_tir_inplace")
_RESHAPE = tvm.ir.Op.get("relax.reshape")

#: PrimFunc attribute of a scheduled kernel: the input indices its output may overwrite. Declared
#: by row kernels (softmax) that read a whole row of the input before writing that row and no
#: other: over a dying input they run in place, one buffer fewer (and no write-allocate misses:
#: Whisper's 54 MB attention softmax 9.2 -> 6.1 ms)
ROW_INPLACE = "ext.row_inplace"


#: ``_is_reshape`` gives up on kernels of more blocks than this: inlining a chain of reshapes
#: composes their ``//`` and ``%`` indices, doubling per block (a kernel of 22 reshapes and adds:
#: 9 s here); the copies it looks for are two or three blocks
MAX_RESHAPE_BLOCKS = 6
#: ``inplace_kernel`` gives up on unscheduled kernels of more blocks than this: each
#: ``compute_inline`` rescans the whole function, so inlining n blocks costs O(n^2) (Mamba's
#: 64-step selective scan, unrolled by ``torch.export``, fuses into kernels of ~60 blocks: 41 s of
#: a 45 s build); fused element-wise kernels of the zoo's models have at most 11
MAX_INPLACE_BLOCKS = 24


def _inline_all(func, max_blocks: int | None = None) -> tuple | None:
    """(schedule, output block) with every other block inlined, or None (also for more than
    ``max_blocks`` blocks)."""
    sch = s_tir.Schedule(func)
    root = sch.get_sblock("root") if _has_root(sch) else None
    blocks = sch.get_child_blocks(root) if root is not None else []
    out_buf = func.params[-1]  # TVM 0.27: a parameter is its buffer; regions point at it as .source
    outs = [b for b in blocks if any(w.source.same_as(out_buf) for w in sch.get(b).writes)]
    if len(outs) != 1 or (max_blocks is not None and len(blocks) > max_blocks):
        return None
    for b in blocks:
        if not b.same_as(outs[0]):
            try:
                sch.compute_inline(b)
            except Exception:
                return None
    return sch, outs[0]


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False


def _point(region) -> list | None:
    """The element a region names, or None when it spans more than one element."""
    if any(int(getattr(r.extent, "value", -1)) != 1 for r in region.region):
        return None
    return [r.min for r in region.region]


def _flat(index, shape):
    """Row-major offset of ``index`` in a buffer of ``shape``."""
    off = tirx.IntImm("int64", 0)
    for i, n in zip(index, shape):
        off = off * n + i
    return off


def _same_element(a, b, analyzer) -> bool:
    """Regions ``a`` and ``b`` name the same single element in memory (equal row-major offsets:
    both buffers are dense and of equal size, so a fused reshape aliases correctly too)."""
    pa, pb = _point(a), _point(b)
    if pa is None or pb is None:
        return False
    fa, fb = _flat(pa, a.source.ty.shape), _flat(pb, b.source.ty.shape)
    diff = analyzer.simplify(fa - fb)
    return isinstance(diff, tirx.IntImm) and int(diff) == 0


def inplace_kernel(func, index: int):
    """``func`` (inputs..., output) rewritten to write its output over input ``index``, or None."""
    if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
        # a candidate's kernel: in place only where its author declared it safe (ROW_INPLACE)
        rows = func.attrs.get(ROW_INPLACE, None)
        x_buf, out_buf = func.params[index], func.params[-1]
        if rows is None or index not in [int(i) for i in rows] or not _same_buffer_type(x_buf, out_buf):
            return None
        return _alias_output(func, index)
    found = _inline_all(func, MAX_INPLACE_BLOCKS)
    if found is None:
        return None
    sch, blk = found
    block = sch.get(blk)
    out_buf, x_buf = func.params[-1], func.params[index]
    ivars = list(block.iter_vars)
    if any(int(v.iter_type) != 0 for v in ivars) or len(block.writes) != 1:
        return None
    if isinstance(block.body, tirx.BufferStore) and select_depth(block.body.value) > MAX_SELECT_DEPTH:
        return None  # one block would build for minutes: the fallback splits it (MAX_SELECT_DEPTH)
    if not _same_buffer_type(x_buf, out_buf):
        return None
    analyzer = Analyzer()
    for v in ivars:
        analyzer.bind(v.var, v.dom)
    x_reads = [r for r in block.reads if r.source.same_as(x_buf)]
    if not x_reads or not all(_same_element(r, block.writes[0], analyzer) for r in x_reads):
        return None
    return _alias_output(sch.mod["main"], index)


def _alias_output(func, index: int):
    """Drop the output parameter and declare its buffer over input ``index``'s data: a
    ``DeclBuffer`` first in the root block; None for a function without one. (Built directly:
    printing the kernel as TVMScript and parsing it back took 0.1 s per kernel, 4 s of
    Mask2Former's build.)"""
    out, x = func.params[-1], func.params[index]
    root = func.body
    if not isinstance(root, s_tir.SBlockRealize) or out.same_as(x):
        return None
    blk = root.block
    body = tirx.SeqStmt([tirx.DeclBuffer(out, data=x.data), blk.body])
    blk = s_tir.SBlock(blk.iter_vars, blk.reads, blk.writes, blk.name_hint, body, blk.init,
                       blk.alloc_buffers, blk.match_buffers, blk.annotations)
    new = tirx.PrimFunc(list(func.params)[:-1], s_tir.SBlockRealize(root.iter_values, root.predicate, blk),
                        func.ret_type, func.attrs)
    return new.without_attr("global_symbol")


def _is_reshape(func) -> bool:
    """A kernel that only copies its input into a new shape. Also after FuseOps chained
    reshapes, or a reshape -> multiply(x, 1) -> reshape that legalization left as copies (two
    or three blocks, which stock ``has_reshape_pattern`` does not see through): Whisper's
    attention scores went through two 54 MB copies per layer that way. Input and output must
    hold as many elements: a leading slice (CvT's class token, ``split`` of the first row) has
    the reshape's index pattern too, but it is no reshape."""
    buffers = [p for p in func.params if isinstance(p.ty, tirx.BufferType)]  # symbolic sizes come as scalars
    if len(buffers) != 2 or not _same_numel(*buffers):
        return False
    if relax.analysis.has_reshape_pattern(func):
        return True
    if not unscheduled(func):  # a candidate's kernel computes
        return False
    try:
        inlined = _inline_all(func, MAX_RESHAPE_BLOCKS)
    except Exception:  # noqa: BLE001 - not a plain block chain: not a reshape we can prove
        return False
    return inlined is not None and relax.analysis.has_reshape_pattern(inlined[0].mod["main"])


def _same_buffer_type(a, b) -> bool:
    return str(a.ty.dtype) == str(b.ty.dtype) and \
        math.prod(int(d) for d in a.ty.shape) == math.prod(int(d) for d in b.ty.shape)


def _same_numel(a, b) -> bool:
    """Two buffer parameters hold provably as many elements (symbolic shapes by the analyzer)."""
    return Analyzer().can_prove_equal(math.prod(a.shape), math.prod(b.shape))


def _same_shape(a, b) -> bool:
    return [int(d) for d in a.shape] == [int(d) for d in b.shape]


@mutator
class _Rewrite(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod
        self.made: dict = {}
        self.reshapes: dict = {}  # kernel GlobalVar -> _is_reshape (it may build a schedule)
        self.rewritten = 0

    def _reshape(self, gv) -> bool:
        if gv not in self.reshapes:
            self.reshapes[gv] = _is_reshape(self.mod_[gv])
        return self.reshapes[gv]

    def _fresh(self, producer) -> bool:
        if not isinstance(producer, relax.Call):
            return False
        if producer.op.same_as(_CALL_TIR_INPLACE):
            return True  # only this pass makes them here, each over a tensor that died
        if not producer.op.same_as(_CALL_TIR):
            return False
        gv = producer.args[0]
        return isinstance(self.mod_[gv], tirx.PrimFunc) and not self._reshape(gv)

    def _view_of_fresh(self, x, uses, producers) -> bool:
        """``x`` a reshape (a view at run time) of a fresh tensor used only by that reshape."""
        p = producers.get(x)
        if not isinstance(p, relax.Call):
            return False
        if p.op.same_as(_RESHAPE):
            y = p.args[0]
        elif p.op.same_as(_CALL_TIR) and len(p.args[1].fields) == 1 and self._reshape(p.args[0]):
            y = p.args[1].fields[0]
        else:
            return False
        return isinstance(y, relax.DataflowVar) and uses[y] == 1 and \
            (self._fresh(producers.get(y)) or self._view_of_fresh(y, uses, producers))

    def rewrite_block(self, block, uses, producers):
        out = []
        for b in block.bindings:
            value = b.value
            new = self._try(value, uses, producers) if isinstance(value, relax.Call) else None
            if new is None:
                out.append(b)
            elif not new.op.same_as(_CALL_TIR_INPLACE):  # a reshape view
                out.append(relax.VarBinding(b.var, new))
            elif _same_shape(new.args[1].fields[int(new.attrs.inplace_indices[0])].ty, b.var.ty):
                producers[b.var] = new
                out.append(relax.VarBinding(b.var, new))
            else:  # the kernel fused a reshape: alias x's shape, then a (free) view in y's shape
                x_ty = new.args[1].fields[int(new.attrs.inplace_indices[0])].ty
                tmp = relax.DataflowVar(str(b.var.name) + "_inplace", x_ty)
                out.append(relax.VarBinding(tmp, new))
                out.append(relax.VarBinding(b.var, relax.op.reshape(tmp, b.var.ty.shape)))
        return relax.DataflowBlock(out)

    def _try(self, call, uses, producers):
        if not call.op.same_as(_CALL_TIR) or not isinstance(call.ty, relax.TensorType):
            return None
        gv, args = call.args[0], list(call.args[1].fields)
        func = self.mod_[gv]
        if not isinstance(func, tirx.PrimFunc) or len(func.params) != len(args) + 1:
            return None
        reshape = self._reshape(gv)
        for i, x in enumerate(args):
            if not isinstance(x, relax.DataflowVar) or uses[x] != 1:
                continue
            if not (self._fresh(producers.get(x)) or self._view_of_fresh(x, uses, producers)):
                continue
            if reshape and len(args) == 1:  # a copy into a new shape of a dying tensor: a view
                self.rewritten += 1
                return relax.op.reshape(x, call.ty.shape)
            key = (gv, i)
            if key not in self.made:
                try:
                    kernel = inplace_kernel(func, i)
                except Exception:  # never fail a build over an optimization
                    kernel = None
                self.made[key] = None if kernel is None else self.builder_.add_func(kernel, gv.name_hint + "_inplace")
            if self.made[key] is None:
                continue
            self.rewritten += 1
            return relax.call_tir_inplace(self.made[key], args, [i], x.ty)
        return None

    def run(self):
        for gv, func in self.mod_.functions_items():
            if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
                continue
            uses = var_uses(func)
            blocks = []
            for block in func.body.blocks:
                if isinstance(block, relax.DataflowBlock):
                    producers = {b.var: b.value for b in block.bindings}
                    block = self.rewrite_block(block, uses, producers)
                blocks.append(block)
            body = relax.SeqExpr(blocks, func.body.body)
            self.builder_.update_func(gv, relax.Function(func.params, body, func.ret_ty, func.is_pure,
                                                         func.attrs, func.span))
        return relax.transform.DeadCodeElimination()(self.builder_.get())


def UseInplaceCalls() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: fused element-wise call_tir -> call_tir_inplace where an input dies (see module doc)."""
    return tvm.transform.module_pass(lambda mod, _ctx: _Rewrite(mod).run(), opt_level=0, name="ext.UseInplaceCalls")
