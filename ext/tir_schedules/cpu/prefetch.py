"""Software prefetch of the next block of a weight, spread over the loop steps before it is used.

In a model every weight is cold when its kernel starts: a kernel that walks a weight block by
block (the packed panels of ``matmul.packed``) reads each block from L3 or DRAM the first
time, and the hardware prefetchers stop at 4 KB page boundaries, so the first tile of every
block waits on its misses. :func:`prefetch_lines` adds ``llvm.prefetch`` calls (into L2) at the
top of a loop body of a scheduled kernel: while block ``b`` is computed, lines of block
``b + 1`` are requested a few per step.

Tried and not kept: the same for the output-channel blocks of ``conv2d.direct_nchwc``
(a 1x1 1024 -> 256 layer at 14x14 took 0.89x the time alone, but ResNet-50 and MobileNetV2
were unchanged, 0.99-1.02x, in the model).
"""
from __future__ import annotations

from tvm import s_tir, tirx

#: floats per 64-byte cache line
LINE_FLOATS = 16


def i64(v: int):
    return tirx.const(v, "int64")


def prefetch_lines(func, loop_var, buffer_index: int, start, lines: list, guard=None):
    """``func`` with, at the top of the body of the loop over ``loop_var``, a prefetch into L2 of
    each line ``l`` of ``lines`` (expressions): the 64 bytes at flat element
    ``start + l * LINE_FLOATS`` of parameter ``buffer_index`` (row-major over its shape),
    all under ``guard`` when given."""
    buf = func.params[buffer_index]
    shape = [int(d) for d in buf.shape]
    calls = []
    for line in lines:
        flat = start + line * i64(LINE_FLOATS)
        idx, stride = [], 1
        for d in reversed(shape):
            idx.append(flat // i64(stride) % i64(d) if stride > 1 else flat % i64(d))
            stride *= d
        idx[-1] = flat // i64(stride // shape[0])  # the outermost axis needs no modulo
        addr = tirx.address_of(tirx.BufferLoad(buf, list(reversed(idx))))
        # llvm.prefetch(address, write=0, locality=2: L2, data cache=1)
        calls.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", addr, 0, 2, 1)))
    stmt = tirx.SeqStmt(calls) if len(calls) > 1 else calls[0]
    if guard is not None:
        stmt = tirx.IfThenElse(guard, stmt, None)
    return tirx.PrimFunc(func.params, _prepend_in_loop(func.body, loop_var, stmt), func.ret_type, func.attrs)


def _prepend_in_loop(stmt, loop_var, first):
    """``stmt`` with ``first`` at the top of the body of the loop over ``loop_var`` (rebuilding
    only the loops, sequences and blocks on the way to it)."""
    if isinstance(stmt, tirx.For):
        body = (tirx.SeqStmt([first, stmt.body]) if stmt.loop_var.same_as(loop_var)
                else _prepend_in_loop(stmt.body, loop_var, first))
        return stmt if body.same_as(stmt.body) else tirx.For(
            stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, tirx.SeqStmt):
        parts = [_prepend_in_loop(s, loop_var, first) for s in stmt]
        return stmt if all(a.same_as(b) for a, b in zip(parts, stmt)) else tirx.SeqStmt(parts)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = _prepend_in_loop(stmt.block, loop_var, first)
        return stmt if block.same_as(stmt.block) else s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, block)
    if isinstance(stmt, s_tir.SBlock):
        body = _prepend_in_loop(stmt.body, loop_var, first)
        return stmt if body.same_as(stmt.body) else s_tir.SBlock(
            stmt.iter_vars, stmt.reads, stmt.writes, stmt.name_hint, body, stmt.init, stmt.alloc_buffers,
            stmt.match_buffers, stmt.annotations)
    return stmt
