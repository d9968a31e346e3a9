"""CUDA schedule for softmax over rows (blocks ``max``, ``exp``, ``sum``, ``out`` [``cast``]
from ``topi_kernels.softmax.softmax_rows``)::

    block r (blockIdx.x), T threads (threadIdx.x):
      m = max over the row: each thread a strided partial, then a warp-shuffle tree
          (and a shared-memory stage across warps when T > 32); m in shared memory
      s = sum exp(x - m): the same tree
      y[k] = exp(x[k] - m) / s for the thread's strided k

Three reads of the row (max, sum, out) and one write: ``12 * rows * n`` bytes.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import schedule_rows_gpu


@dataclasses.dataclass(frozen=True)
class RowConfig:
    """``threads`` per row (32: one warp, shuffles only)."""

    threads: int = 256


def schedule_rowwise(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    schedule_rows_gpu(sch, cfg.threads)
