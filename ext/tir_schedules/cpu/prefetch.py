"""Software prefetch of the next weight panel in the tiled matmul (``matmul.packed``).

A transformer's weights (BERT-base: 340 MB) do not fit the last-level cache, so each GEMM in
the model reads its packed weight from DRAM. The tiled kernel reads panel ``p`` (``K x nb``
floats, 192 KB at K = 768) through the first row tile of the panel at the pace of the FMAs,
about 100 GB/s on one core, far above what one core draws from DRAM; the row tile stalls, and
the other row tiles of the panel, which find it in L2, do not. The hardware prefetchers do not
run ahead across the panel's pages.

:func:`prefetch_next_panel` spreads the next panel's cache lines over the current panel's
``(row tile, k)`` steps, one ``prefetcht1`` (into L2) every ``s`` reduction steps, so panel
``p + 1`` is in L2 when its first row tile starts; the last panel prefetches itself (a few
hits). It works on the scheduled PrimFunc: the prefetch is the first statement of the
reduction loop's body, outside the register tile's unrolled and vectorized loops.
"""
from __future__ import annotations

import tvm
from tvm.sym import Analyzer
from tvm import s_tir
from tvm.tirx import stmt as S

#: bytes per cache line
LINE = 64
#: the next panel is prefetched within this fraction of the current one (leaves time to land)
import os
AHEAD = float(os.environ.get("PF_AHEAD", "0.5"))


def _find(stmt, name: str, loops: tuple):
    """``(realize, enclosing For loops)`` of the block called ``name`` under ``stmt``, or None."""
    if isinstance(stmt, S.For):
        return _find(stmt.body, name, (*loops, stmt))
    if isinstance(stmt, S.SeqStmt):
        for s in stmt.seq:
            hit = _find(s, name, loops)
            if hit:
                return hit
        return None
    if isinstance(stmt, s_tir.stmt.SBlockRealize):
        if stmt.block.name_hint == name:
            return stmt, loops
        return _find(stmt.block.body, name, loops)
    if isinstance(stmt, (S.AllocBuffer, S.DeclBuffer, S.AttrStmt)) and hasattr(stmt, "body"):
        return _find(stmt.body, name, loops)
    return None


def _prepend(stmt, loop_var, first):
    """``stmt`` with ``first`` placed at the start of the body of the loop over ``loop_var``."""
    if isinstance(stmt, S.For):
        body = S.SeqStmt([first, stmt.body]) if stmt.loop_var.same_as(loop_var) else _prepend(stmt.body, loop_var, first)
        return S.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                     stmt.annotations, stmt.step, stmt.span)
    if isinstance(stmt, S.SeqStmt):
        return S.SeqStmt([_prepend(s, loop_var, first) for s in stmt.seq], stmt.span)
    if isinstance(stmt, s_tir.stmt.SBlockRealize) and not stmt.block.iter_vars:  # the root block
        b = stmt.block
        block = s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, _prepend(b.body, loop_var, first),
                                  b.init, b.alloc_buffers, b.match_buffers, b.annotations, b.span)
        return s_tir.stmt.SBlockRealize(stmt.iter_values, stmt.predicate, block, stmt.span)
    return stmt


def prefetch_next_panel(func: tvm.tirx.PrimFunc, *, rows: int, tiles: int, block: str = "C_update",
                        weight: int = 1) -> tvm.tirx.PrimFunc:
    """``func`` (a scheduled tiled matmul, packed weight ``Bp[P, K, nb]`` its parameter
    ``weight``) with the next panel prefetched from the reduction loop of ``block`` (module
    doc); ``rows`` is the register tile's row count, ``tiles`` the row tiles per panel.
    ``func`` comes back unchanged when its loops are not the expected ones."""
    Bp = func.params[weight]
    found = _find(func.body, block, ())
    if found is None or not isinstance(Bp, tvm.tirx.Buffer) or len(Bp.shape) != 3:
        return func
    realize, loops = found
    iters = realize.block.iter_vars
    reduce = [v for iv, v in zip(iters, realize.iter_values) if iv.iter_type == tvm.tirx.IterVar.CommReduce]
    if len(reduce) != 1 or not isinstance(reduce[0], tvm.tirx.Var):
        return func
    k = reduce[0]
    depth = next((n for n, lp in enumerate(loops) if lp.loop_var.same_as(k)), None)
    if depth is None:
        return func
    ana = Analyzer()
    for lp in loops[depth:]:  # the register tile's loops: their first point is the tile's origin
        ana.bind(lp.loop_var, tvm.tirx.const(0, str(lp.loop_var.ty.dtype)))
    spatial = [ana.simplify(v) for iv, v in zip(iters, realize.iter_values) if iv.iter_type == tvm.tirx.IterVar.DataPar]
    vi, vj = spatial[-2:]
    P, K, nb = (int(d) for d in Bp.shape)
    dt = str(k.ty.dtype)
    c = lambda v: tvm.tirx.const(v, dt)  # noqa: E731
    per_line = LINE * 8 // tvm.runtime.DataType(Bp.dtype).bits
    lines = K * nb // per_line
    step = max(1, int(tiles * K * AHEAD) // max(1, lines))  # reduction steps per prefetched line
    panel = tvm.tirx.min(tvm.tirx.floordiv(vj, c(nb)) + c(1), c(P - 1))
    at = tvm.tirx.floordiv(vi, c(rows)) * c(K) + k
    off = tvm.tirx.min(tvm.tirx.floordiv(at, c(step)) * c(per_line), c(K * nb - per_line))
    index = [panel, tvm.tirx.floordiv(off, c(nb)), tvm.tirx.floormod(off, c(nb))]
    addr = tvm.tirx.address_of(tvm.tirx.BufferLoad(Bp, [ana.simplify(i) for i in index]))
    pf = S.Evaluate(tvm.tirx.call_intrin("void", "tirx.prefetch", addr, 0, 2, 1))
    return func.with_body(_prepend(func.body, k, pf))
