"""CPU schedule of the fused attention kernel (blocks of ``topi_kernels.attention``)::

    parallel for b, p: Kp[b, p] = key panel p (nb keys, contiguous)      # once per call
    parallel for (b, i0) in B x M / mb:                                  # mb query rows a task
      for j0 in Np / nb:                                                 # scores, panel by panel
        acc[mb][nb] = 0; for k: for i1 (unrolled): acc[i1] += Q[i, k] * Kp[b, j0, k]
        S[i1, j0*nb : +nb] = acc * scale + mask                          # S: mb x Np floats, L1/L2
      max, exp, sum over each row of S (vectorized, lane partials)
      acc2[mb][dv] = 0; for j < N: for i1 (unrolled): acc2[i1] += exp[i1, j] * V[b, j]
      out[i, :] = acc2[i1] / sum[i1]

Both products keep their accumulators in registers (``mb x nb`` and ``mb x dv`` floats, at
most 24 of the 32 zmm registers by the config's defaults); the per-task buffers ``S`` and
``exp`` (``mb x N`` floats each) are the task's own stack arrays.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent
from .matmul import accumulate_tile
from .softmax import rfactor_lanes, vectorize_inner


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """``mb`` query rows per task (and register-tile rows of both products), ``nb`` keys per
    score panel (a multiple of the vector width)."""

    mb: int = 6
    nb: int = 48


def _vector_tile(sch, loop, lanes: int) -> None:
    """Vectorize a panel loop of ``nb`` keys (a multiple of ``lanes``) as unrolled vectors."""
    outer, inner = sch.split(loop, [None, lanes])
    sch.unroll(outer)
    sch.vectorize(inner)


def _vectorize_rows_rf(sch, rf, lanes: int, valid: int) -> None:
    """A row reduction's lane partials (``rfactor_lanes``) for the task's rows: the lane loop
    innermost and vectorized under the reduction loop; the last vectors, the only ones that
    read padded keys, get their own loop."""
    loops = sch.get_loops(rf)[1:]  # under the task loop: the lane, batch and row loops, then k0
    k0 = loops[-1]
    lane = next(lp for lp in reversed(loops[:-1]) if extent(sch, lp) == lanes)
    sch.reorder(*[lp for lp in loops[:-1] if not lp.same_as(lane)], k0, lane)
    sch.vectorize(lane)
    sch.decompose_reduction(rf, k0)
    if valid % lanes and valid > lanes:
        sch.loop_partition(sch.get_loops(rf)[-2], [valid // lanes, None])


def schedule_attention(sch: s_tir.Schedule, cfg: AttentionConfig, lanes: int) -> None:
    n_keys = extent(sch, sch.get_loops(sch.get_sblock("exp"))[-1])
    out = sch.get_sblock("out")
    b, i, c = sch.get_loops(out)
    i0, i1 = sch.split(i, [None, cfg.mb])
    task = sch.fuse(b, i0)
    sch.parallel(task)
    rfs = [rfactor_lanes(sch, sch.get_sblock(name), lanes) for name in ("max", "sum")]
    sch.decompose_reduction(*accumulate_tile(sch, task, cfg, lanes, "pv"))  # mb x dv, over the keys
    for name in ("sum", "exp", "max", "S"):
        sch.compute_at(sch.get_sblock(name), task, preserve_unit_loops=True)
        if name in ("sum", "max"):
            rf = rfs[0 if name == "max" else 1]
            if rf is not None:
                sch.compute_at(rf, task, preserve_unit_loops=True)
    for name in ("exp", "S"):
        sch.set_scope(sch.get_sblock(name), 0, "local")
    # the scores: panel by panel, an mb x nb register tile accumulated over the head dimension
    s = sch.get_sblock("S")
    si, sj = sch.get_loops(s)[-2:]
    j0, j1 = sch.split(sj, [None, cfg.nb])
    sch.reorder(j0, si, j1)
    _vector_tile(sch, j1, lanes)
    sch.decompose_reduction(*accumulate_tile(sch, j0, cfg, lanes, "C"))  # mb x nb, over the head dim
    # key panels once per call, before the tasks
    kp = sch.get_sblock("Kp")
    kb, kpp, _kk, kl = sch.get_loops(kp)
    sch.parallel(sch.fuse(kb, kpp))
    _vector_tile(sch, kl, lanes)
    # loop partitions last: their blocks would break compute_at above (not a stage pipeline)
    for rf in rfs:
        if rf is not None:
            _vectorize_rows_rf(sch, rf, lanes, n_keys)
    vectorize_inner(sch, sch.get_sblock("exp"), lanes)
    vectorize_inner(sch, out, lanes)
