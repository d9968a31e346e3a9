"""CUDA schedules for reductions in the canonical ``(O, R, I) -> (O, I)`` form (blocks ``acc``
and ``out`` from ``topi_kernels.reduce.reduce_3d``).

``schedule_inner`` (``I == 1``): one thread block per row ``o``; T threads stride the row and
their partials meet in a warp-shuffle tree (plus a shared-memory stage across warps)::

    block o: acc = tree_reduce_t(reduce_{k = t, t+T, ...} X[o, k]); Y[o] = finish(acc)

``schedule_outer`` (``I > 1``): one thread per kept element ``(o, i)``, consecutive threads on
consecutive ``i`` (coalesced rows of X), a serial loop over ``k`` in registers::

    thread (o, i): acc = reduce_k X[o, k, i]; Y[o, i] = finish(acc)

Both read X once: ``4 * O * R * I`` bytes.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import bind_elementwise, schedule_rows_gpu


@dataclasses.dataclass(frozen=True)
class ThreadsConfig:
    threads: int = 256


def schedule_inner(sch: s_tir.Schedule, cfg: ThreadsConfig) -> None:
    schedule_rows_gpu(sch, cfg.threads)


def schedule_outer(sch: s_tir.Schedule, cfg: ThreadsConfig) -> None:
    out = sch.get_sblock("out")
    bind_elementwise(sch, out, cfg.threads)
    acc = sch.get_sblock("acc")
    sch.compute_at(acc, sch.get_loops(out)[-1], preserve_unit_loops=True)
    sch.set_scope(acc, 0, "local")
    sch.decompose_reduction(acc, sch.get_loops(acc)[-1])
