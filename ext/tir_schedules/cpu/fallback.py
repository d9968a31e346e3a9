"""CPU fallback schedule for kernels no candidate covers (stock-legalized ops).

Stock TVM leaves CPU loops serial and scalar. For each block (after inlining
injective producers into their consumers):

* spatial-only blocks: when the innermost axis holds at least a vector,
  split it into vectors and parallelize the other loops fused with the vector
  loop; a ragged axis (56, 28) runs its tail as a narrower vector loop of its
  own (a predicated tail is scalarized by TVM) when enough rows lie outside
  it; otherwise fuse the nest and vectorize ``lanes`` elements of it when the
  innermost axis divides evenly; parallelize only when there is enough work;
* reductions (``S..S R..R``): parallelize the fused spatial loops; when the
  innermost reduction is over a contiguous axis, leave it serial (LLVM
  vectorizes simple sums poorly without rfactor: the norm/reduce candidates
  handle those).

Any step that TVM rejects is skipped; the result is never less correct than
the input, only sometimes not faster.
"""
from __future__ import annotations

import tvm
from tvm import s_tir
from tvm.s_tir.dlight.analysis import normalize_prim_func

from ..common import inline_injective_guarded
from ..common import try_step as _try
from ..common import unscheduled

#: fewer elements than this run on one thread (thread launch costs a few microseconds)
MIN_PARALLEL_WORK = 16384


#: a ragged innermost axis gets a vector tail loop when the loops outside it hold this many rows
#: (they alone are then parallel); fewer rows keep the predicated tail in the parallel loop
RAGGED_MIN_ROWS = 64

def _spatial(sch, loops, doms, lanes) -> None:
    work = 1
    for d in doms:
        work = work * d if isinstance(d, int) else work * 1024
    inner_dom = doms[-1]
    if isinstance(inner_dom, int) and inner_dom >= lanes:
        # vectorize the innermost axis itself: its indices stay affine in the lane, where a
        # vector over the fused nest would need a // and % per lane
        outer_work = work // inner_dom
        if inner_dom % lanes and outer_work >= RAGGED_MIN_ROWS:
            # a ragged row (56, 28...) as whole vectors plus a narrower vector: a predicated
            # tail made TVM scalarize the whole loop (DenseNet's BN + ReLU at 56x56: 4x slower)
            whole, tail = sch.loop_partition(loops[-1], [inner_dom // lanes * lanes, None])
            _, vec = sch.split(whole, [None, lanes])
            sch.vectorize(vec)
            sch.vectorize(tail)
            if work >= MIN_PARALLEL_WORK:
                sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
            return
        io, vec = sch.split(loops[-1], [None, lanes])
        sch.vectorize(vec)
        if work >= MIN_PARALLEL_WORK:
            sch.parallel(sch.fuse(*loops[:-1], io) if len(loops) > 1 else io)
        return
    if not isinstance(inner_dom, int) and len(loops) > 1:
        # a run-time row length (an image width): the row stays its own loop, its indices affine
        # (LLVM vectorizes it with a run-time tail), the rows above it the parallel loop. Fused
        # whole, every element paid a // and % by run-time extents: a ShuffleNet/SqueezeNet-style
        # channel concat on a symbolic image size ran 3.2 ms where the static copy takes 0.1
        if work >= MIN_PARALLEL_WORK:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if isinstance(inner_dom, int) and isinstance(work, int) and work >= lanes and (
            inner_dom % lanes == 0 or len(loops) == 1):
        outer, vec = sch.split(fused, [None, lanes])  # 1-D: predicated tail
        sch.vectorize(vec)
        fused = outer
    if work >= MIN_PARALLEL_WORK:
        sch.parallel(fused)


def schedule(func, lanes: int):
    """The fallback-scheduled ``func`` (or ``func`` unchanged if it cannot be analysed)."""
    try:
        sch = s_tir.Schedule(func)
        inline_injective_guarded(sch)
        infos = normalize_prim_func(sch)
        if infos is None:
            return func
        for info in infos:
            kinds = info.dom_kind()
            loops, doms = info.get_loops(), info.dom()
            if not loops:
                continue
            if set(kinds) == {"S"}:
                _try(_spatial, sch, loops, doms, lanes)
            elif kinds.lstrip("S").strip("R") == "" and kinds.startswith("S"):
                n_s = len(kinds) - len(kinds.lstrip("S"))
                work = 1
                for d in doms:
                    work = work * d if isinstance(d, int) else work * 1024
                if work >= MIN_PARALLEL_WORK:
                    sp = loops[:n_s]
                    _try(lambda: sch.parallel(sch.fuse(*sp) if len(sp) > 1 else sp[0]))
        return sch.mod["main"].with_attr("tirx.is_scheduled", True)
    except Exception:
        return func


def fallback_pass(target) -> tvm.transform.Pass:
    """The module pass giving every unscheduled PrimFunc this schedule (the llvm row's
    ``fallback_schedule`` in ``ext.target``)."""
    from ...target import cpu_info

    lanes = cpu_info(target).lanes_f32

    def transform(mod, _ctx):
        updates = {gv: schedule(f, lanes) for gv, f in mod.functions_items() if unscheduled(f)}
        for gv, f in updates.items():
            mod[gv] = f
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FallbackSchedule")
