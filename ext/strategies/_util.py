"""Small helpers the candidate tables share (not a table: the package skips ``_`` modules)."""
from __future__ import annotations

from ..target import cpu_info


def lanes(target) -> int:
    """float32 lanes of one vector register of an LLVM target (16 with AVX-512, 8 with AVX2)."""
    return cpu_info(target).lanes_f32
