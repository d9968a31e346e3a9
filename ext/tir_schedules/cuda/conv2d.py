"""CUDA schedules for conv2d (computes from ``topi_kernels.conv2d_implicit.implicit_gemm``).

Implicit GEMM: the conv is the GEMM ``C = A @ B`` whose operands are gathered from the
input and the weight on the fly (``Col[k, p] = Xpad[n, c, oh*sh + kh*dh, ow*sw + kw*dw]``):
the gathers are inlined into the shared-memory loads of the matmul schedules
(``cuda/matmul.py``: SIMT tiles for fp32, wmma tensor cores for fp16), so no im2col matrix
is ever stored. The output block ``D`` (4-D, in the data layout) is first re-indexed to the
GEMM's 2-D ``(row, col)`` (``transform_block_layout``) so the fused epilogue is written
straight from the tile. Cost: ``2 * N*OH*OW * O * C*KH*KW`` flops; the input is re-read
once per block column of output channels (``O / block_n`` times).

Direct: one thread per output element, the ``(c, kh, kw)`` reduction in a register
(``schedule_small``) -- small layers, odd shapes, any dtype.

Winograd F(m x m, 3 x 3) (``schedule_winograd``, NCHW, stride 1, TOPI's compute): every
stage its own kernel -- kernel pack, data pack, the per-position batched GEMM and the inverse
transform one thread per output element (serial reductions), the epilogue element-wise. Correct and simple, not yet fast: the GEMM
has no shared-memory tiling, so selection prefers the implicit GEMM unless a tuning log says
otherwise.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import _is_reduction, bind_elementwise, reindex_block
from . import matmul as mm_sched
from .matmul import SmallConfig, TensorCoreConfig, TiledConfig  # noqa: F401  (the knobs of these schedules)


def flatten_output(sch: s_tir.Schedule, out_map) -> None:
    """Re-index the 4-D output block ``D`` by the GEMM coordinates ``out_map(*idx) -> (row, col)``."""
    reindex_block(sch, "D", out_map, 4)


def schedule_implicit_gemm(sch: s_tir.Schedule, cfg, out_map, *, in_dtype: str = "float32",
                           trans_b: bool = False) -> None:
    flatten_output(sch, out_map)
    if isinstance(cfg, TensorCoreConfig):
        mm_sched.schedule_tensorcore(sch, cfg, in_dtype, trans_b)
    else:
        mm_sched.schedule_tiled(sch, cfg)


def schedule_direct(sch: s_tir.Schedule, cfg: SmallConfig, out_map) -> None:
    flatten_output(sch, out_map)
    mm_sched.schedule_small(sch, cfg)


@dataclasses.dataclass(frozen=True)
class WinogradConfig:
    """Threads per block of every stage (TOPI picks the F(m x m, 3 x 3) tile)."""

    threads: int = 128


def schedule_winograd(sch: s_tir.Schedule, cfg: WinogradConfig) -> None:
    """Stages of ``topi.nn.conv2d_winograd_nchw`` + epilogue, each its own kernel: element-wise
    stages (padding, tiling) are inlined into their consumers; every remaining stage (kernel
    pack, data pack, batched GEMM, inverse, epilogue) gets one thread per output element with
    its reduction serial in a register."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    for b in blocks[:-1]:
        if not _is_reduction(sch, b):
            try:
                sch.compute_inline(b)
            except Exception:  # e.g. read by several stages in ways inlining cannot express
                pass
    for b in list(sch.get_child_blocks(sch.get_sblock("root"))):
        if _is_reduction(sch, b):
            loops = sch.get_loops(b)
            nsp = sum(1 for iv in sch.get(b).iter_vars if int(iv.iter_type) == 0)
            fused = sch.fuse(*loops[:nsp])
            bx, tx = sch.split(fused, [None, cfg.threads])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        else:
            bind_elementwise(sch, b, cfg.threads)
