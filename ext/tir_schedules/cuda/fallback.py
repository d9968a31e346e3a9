"""CUDA fallback schedule for kernels no candidate covers: stock dlight rules (thread binding
is mandatory on a GPU, so every kernel needs one), then dlight's Fallback; before them,
``GuardedElementwise`` for element-wise kernels whose full inlining would copy a big expression."""
from __future__ import annotations

import tvm
from tvm import s_tir
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func

from ..common import all_blocks, bind_elementwise, inline_injective_guarded

#: threads per block of the element-wise kernels below
THREADS = 256


class GuardedElementwise(dl.ScheduleRule):
    """An element-wise kernel in which some producer, once the others are inlined, would be
    copied past the CPU fallback's limit (``common.inline_injective_guarded``): those stay
    kernels of their own (one more pass over memory), one thread per element in each. dlight's
    Fallback inlines every producer: erfinv's Newton steps, each reading the last ~50 times,
    grew to a kernel that took 5 minutes to schedule and compile."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or not all(info.is_injective() for info in infos):
            return None
        inline_injective_guarded(sch)
        blocks = all_blocks(sch)
        if len(blocks) == 1:  # all inlined: what dlight's rules do with it too
            return None
        threads = min(THREADS, int(target.max_num_threads))
        for block in blocks:
            bind_elementwise(sch, block, threads)
        return sch


def fallback_pass(target) -> tvm.transform.Pass:
    """dlight's GPU rules (the cuda row's ``fallback_schedule`` in ``ext.target``)."""
    return dl.ApplyDefaultSchedule(GuardedElementwise(), dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                   dl.gpu.GeneralReduction(), dl.gpu.Fallback())
