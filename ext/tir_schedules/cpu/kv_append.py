"""CPU schedules of ``topi_kernels.kv_append``: threads over (batch, head); per slice, the
``present`` rows are written (vectorized), then the product reads them back from L2."""
from __future__ import annotations

from tvm import s_tir

from .dynamic import lane_partials_at


def _present_root(sch: s_tir.Schedule):
    """``present``'s (batch, head) loops fused and parallel, its rows vectorized; returns the
    fused loop, under which the product goes."""
    present = sch.get_sblock("present")
    b, h, j, d = sch.get_loops(present)
    sch.vectorize(d)
    return sch.fuse(b, h)


def schedule_append_scores(sch: s_tir.Schedule) -> None:
    bh = _present_root(sch)
    sch.reverse_compute_at(sch.get_sblock("part"), bh)
    s = sch.get_sblock("S")
    sch.reverse_compute_at(s, bh)
    j = sch.get_loops(s)[-2]
    part, pk = lane_partials_at(sch, "part", j)
    sch.parallel(bh)
    sch.decompose_reduction(part, pk)


def schedule_append_mix(sch: s_tir.Schedule) -> None:
    o = sch.get_sblock("O")
    wb = sch.cache_write(o, 0, "local")
    bh = _present_root(sch)
    sch.reverse_compute_at(o, bh)
    i, d, j = sch.get_loops(o)[-3:]
    sch.reorder(j, d)
    sch.vectorize(d)
    sch.reverse_compute_at(wb, i)
    sch.vectorize(sch.get_loops(wb)[-1])
    sch.parallel(bh)
    sch.decompose_reduction(o, j)
