"""CPU schedule for layer norm (blocks ``s1``, ``s2``, ``mean``, ``rstd``, ``out``
of ``topi_kernels.norm``)::

    parallel for r0 in rows / rows_per_task:
      for r1 in rows_per_task:
        acc1[lanes] = acc2[lanes] = 0
        for k0: d = X[r, k0*lanes : +lanes] - X[r, 0]; acc1 += d     # rfactor, vectorized
        for k0: d = ...;                               acc2 += d * d
        mean, rstd = per-row scalars from hsum(acc1), hsum(acc2)
        for k (vectorized): Y[r, k] = (X[r, k] - mean) * rstd * gamma[k] + beta[k]

The row (3 KiB at n = 768) stays in L1 across the three sweeps. The compute
pads the sums of ragged rows to whole vectors; the output keeps a predicated
vector tail.
"""
from __future__ import annotations

from tvm import s_tir

from .softmax import RowConfig, rfactor_lanes, row_length, row_loops, vectorize_inner, vectorize_rf

__all__ = ["RowConfig", "schedule_layer_norm"]


def schedule_layer_norm(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    n = row_length(sch)
    rfs = [rfactor_lanes(sch, sch.get_sblock(name), cfg.lanes) for name in ("s1", "s2")]
    row_loops(sch, cfg, blocks=("rstd", "mean", "s2", "s1"))
    for rf in rfs:
        if rf is not None:
            vectorize_rf(sch, rf, n)
    vectorize_inner(sch, sch.get_sblock("out"), cfg.lanes)
