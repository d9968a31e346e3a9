"""Schedule every PrimFunc that no candidate scheduled.

The schedule is the target kind's (``ext.target`` table, ``fallback_schedule``): on CPU
ext's parallel + vectorized loops (``tir_schedules/cpu/fallback.py``), on CUDA stock dlight
rules. This graph-pass package names no schedule itself.
"""
from __future__ import annotations

import tvm

from ..target import target_kind


def FallbackSchedule(target) -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    return target_kind(target).fallback_pass(target)
