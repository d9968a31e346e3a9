"""CUDA schedule for layer normalization over rows (blocks ``s1``, ``s2``, ``mean``, ``rstd``,
``out`` from ``topi_kernels.norm.layer_norm_rows``)::

    block r (blockIdx.x), T threads (threadIdx.x):
      s1 = sum (x - x0), s2 = sum (x - x0)^2: strided partials per thread, then warp-shuffle
           trees (a shared-memory stage across warps when T > 32); results in shared memory
      y[k] = ((x[k] - x0) - s1/n) * rsqrt(max(s2/n - (s1/n)^2, 0) + eps) * gamma[k] + beta[k]

Two reads of the row and one write: ``12 * rows * n + 8 * n`` bytes.
"""
from __future__ import annotations

from tvm import s_tir

from ..common import schedule_rows_gpu
from .softmax import RowConfig  # noqa: F401  (same knob: threads per row)


def schedule_layer_norm(sch: s_tir.Schedule, cfg: RowConfig) -> None:
    schedule_rows_gpu(sch, cfg.threads)
