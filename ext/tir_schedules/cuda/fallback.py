"""CUDA fallback schedule for kernels no candidate covers: stock dlight rules (thread binding
is mandatory on a GPU, so every kernel needs one), then dlight's Fallback."""
from __future__ import annotations

import tvm


def fallback_pass(target) -> tvm.transform.Pass:
    """dlight's GPU rules (the cuda row's ``fallback_schedule`` in ``ext.target``)."""
    from tvm.s_tir import dlight as dl

    return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                   dl.gpu.GeneralReduction(), dl.gpu.Fallback())
