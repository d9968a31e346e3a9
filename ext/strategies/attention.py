"""Candidate table for fused attention on CPU: ``attention.fused``.

Workload convention (``relax_passes.families.attention``): ``q (B, M, d)``, ``k (B, N, d)``
(``k_layout="nk"``) or ``(B, d, N)`` (``"kn"``), ``v (B, N, dv)``, optionally an additive
``mask (G, Mm, Nn)``, then optionally a ``keep (G', Mm', Nn')`` of 1.0 / 0.0 when attr ``fill``
is set (``where(keep > 0, scores, fill)`` before the mask); attrs ``scale``, ``scale_op``,
``out_shape (B, M, dv)``.

One kernel per attention (``topi_kernels/attention.py``): each task takes ``mb`` query rows,
computes their scores panel by panel into its own buffer, the softmax over it, and the
product with ``V``; the scores never reach memory. Unfused, the graph writes the ``B*M*N``
scores, a softmax reads and writes them, and the second matmul reads them again. Whisper-tiny's
encoder layer (6 heads, 1500x1500, d 64), alone on 2 threads: 9.5-10.4 ms fused against 14.3 ms for the
two ``matmul.batch`` kernels and the softmax.
"""
from __future__ import annotations

from tvm import te

from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.attention import AttentionConfig, schedule_attention
from ..topi_kernels import i64
from ..topi_kernels.attention import attention
from ..topi_kernels.matmul import ceil_to
from ..target import cpu_info
from .registry import PLEVEL, Candidate, register
from ._util import lanes as _lanes

#: vector registers (of 32) the two register tiles may take: the rest hold Q/P broadcasts and loads
TILE_REGISTERS = 24
#: the same with AVX2's 16 registers: 2 rows of a 64-wide head (16 accumulators, some spilled) ran
#: 0.72-0.87x the time of 3 rows (24) and 0.9-0.97x of 1 row on Zen 4 (ViT 197, 384 and Whisper's
#: 1500 keys)
TILE_REGISTERS_16 = 16


def _tile_registers(target) -> int:
    return TILE_REGISTERS if cpu_info(target).vector_registers >= 32 else TILE_REGISTERS_16


def _check(wl, target):
    if any(dt != "float32" for dt in wl.dtypes) or wl.out_dtype != "float32":
        return f"float32 only, got {wl.dtypes} -> {wl.out_dtype}"
    if not 3 <= len(wl.shapes) <= 4 + (wl.attr("fill") is not None) or any(len(s) != 3 for s in wl.shapes):
        return "expects q, k, v (and a mask, a keep tensor) of rank 3"
    if any(not isinstance(d, int) or d == 0 for s in wl.shapes for d in s):
        return "symbolic or zero-size dimension"
    return None


def _dims(wl):
    (B, M, d), (_, N, dv) = wl.shapes[0], wl.shapes[2]
    return B, M, N, d, dv


def _fits(wl, cfg: AttentionConfig, lanes: int, registers: int) -> bool:
    _, _, _, _, dv = _dims(wl)
    vectors = max(1, -(-dv // lanes))
    return cfg.nb % lanes == 0 and cfg.mb * max(cfg.nb // lanes, vectors) <= registers


def _space(wl, target):
    lanes, regs = _lanes(target), _tile_registers(target)
    M = wl.shapes[0][1]
    return [c for c in (AttentionConfig(mb, nb) for mb in (1, 2, 3, 4, 5, 6, 8) if mb <= max(M, 1)
                        for nb in (lanes, 2 * lanes, 3 * lanes, 4 * lanes)) if _fits(wl, c, lanes, regs)]


def _default(wl, target):
    """Six rows (both tiles fit the registers for heads up to 64 wide; fewer for wider ones),
    and the panel width of 1-4 vectors that pads the keys least (3 on a tie: 6 x 48 measured
    best on Whisper's 1500 keys, 9.5 against 10.4 ms for 6 x 64). With 16 registers, 3-vector
    panels unless they pad the keys by 10% more (2 x 24 beat 3 x 8 on ViT's 197 keys: 0.72x)."""
    lanes, regs = _lanes(target), _tile_registers(target)
    _, M, N, _, dv = _dims(wl)
    vectors = max(1, -(-dv // lanes))
    mb = max(1, min(6, M, regs // max(vectors, 3)))
    nb = min((3 * lanes, 2 * lanes, 4 * lanes, lanes), key=lambda w: ceil_to(N, w))
    if regs < TILE_REGISTERS and ceil_to(N, 3 * lanes) <= 1.1 * ceil_to(N, nb):
        nb = 3 * lanes
    return AttentionConfig(mb=mb, nb=nb)


def operand_names(wl) -> list[str]:
    """The workload's inputs in call order: ``Q K V [mask] [keep]``."""
    keep = wl.attr("fill") is not None
    return ["Q", "K", "V"] + ["mask"] * (len(wl.shapes) - 3 - keep) + ["keep"] * keep


def _build(wl, cfg: AttentionConfig, target):
    tensors = {n: te.placeholder(tuple(i64(d) for d in s), dtype=dt, name=n)
               for n, s, dt in zip(operand_names(wl), wl.shapes, wl.dtypes)}
    out = attention(tensors["Q"], tensors["K"], tensors["V"], tensors.get("mask"), tensors.get("keep"),
                    k_layout=wl.attr("k_layout"), scale=wl.attr("scale"), scale_op=wl.attr("scale_op"),
                    fill=wl.attr("fill"), mb=cfg.mb, nb=cfg.nb)
    sch = create_schedule(list(tensors.values()) + [out])
    schedule_attention(sch, cfg, _lanes(target))
    return finish(sch, "attention.fused")


register(Candidate("attention.fused", ("llvm",), PLEVEL.BLOCKED, _check, AttentionConfig, space=_space,
                   default=_default, build=_build))
