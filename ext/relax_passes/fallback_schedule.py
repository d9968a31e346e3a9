"""Schedule every PrimFunc that no candidate scheduled.

CPU: ext's fallback (``tir_schedules/cpu/fallback.py``: parallel outer loops,
vectorized inner loop). CUDA: stock dlight rules (thread binding is mandatory
there), then dlight's Fallback.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..target import cpu_info
from ..tir_schedules.cpu import fallback as cpu_fallback


def _unscheduled(func) -> bool:
    return isinstance(func, tirx.PrimFunc) and not (func.attrs and func.attrs.get("tirx.is_scheduled", False))


def FallbackSchedule(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    if target.kind.name == "cuda":
        from tvm.s_tir import dlight as dl

        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                       dl.gpu.GeneralReduction(), dl.gpu.Fallback())
    lanes = cpu_info(target).lanes_f32

    def transform(mod, _ctx):
        updates = {gv: cpu_fallback.schedule(f, lanes) for gv, f in mod.functions_items() if _unscheduled(f)}
        for gv, f in updates.items():
            mod[gv] = f
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FallbackSchedule")
