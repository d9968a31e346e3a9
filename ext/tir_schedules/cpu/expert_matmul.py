"""CPU schedule of ``topi_kernels.expert_matmul``: the output columns in chunks of ``cols``
(a few vector registers of accumulators), the chunks parallel (the rows' count may be
symbolic, which a fused chunk-row loop cannot divide affinely); per (chunk, row), the K loop broadcasts ``x[s, k]`` and multiplies it into the contiguous ``cols`` slice of
the selected matrix's row ``k``. Consecutive rows of one chunk read the same column slice of
every expert, so it stays in L2 while a thread walks the rows."""
from __future__ import annotations

from tvm import s_tir


def schedule_expert_matmul(sch: s_tir.Schedule, cols: int) -> None:
    """``cols`` divides N; at 1 (a prime N) the chunks are single columns, nothing vectorized."""
    y = sch.get_sblock("y")
    acc = sch.cache_write(y, 0, "local")
    s, n, k = sch.get_loops(y)
    no, ni = sch.split(n, [None, cols])
    sch.reorder(no, s, k, ni)
    if cols > 1:
        sch.vectorize(ni)  # before decompose_reduction: the update alone is no reduction block
    sch.reverse_compute_at(acc, s)
    sch.parallel(no)
    init = sch.decompose_reduction(y, k)
    if cols > 1:
        sch.vectorize(sch.get_loops(acc)[-1])
        sch.vectorize(sch.get_loops(init)[-1])
