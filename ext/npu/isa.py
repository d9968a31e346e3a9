"""The NPU's instruction set: a small Gemmini-like ISA for a float32 systolic array.

Memories (all float32 words): DRAM holds named 2-D tensors; the scratchpad holds input and
weight tiles; the accumulator holds partial sums. On-chip operands are ``Tile`` s: a
``rows x cols`` block at word ``addr`` with row pitch ``stride``.

=============  =================================================================  ==========
instruction    effect                                                              cycles
=============  =================================================================  ==========
``MvIn``       DRAM block -> scratchpad or accumulator (``broadcast``: one DRAM     DMA: bytes
               row repeated into every row, e.g. a bias into the accumulator)       / bandwidth
``Preload``    weight-stationary: a ``k x n`` weight tile (k <= rows, n <= cols)    ``rows``
               shifts into the array, one row per cycle
``ComputeWS``  ``out (+)= a @ W``: the preloaded weights stay, the ``m`` rows of    ``m`` + fill
               ``a`` stream through
``ComputeOS``  output-stationary: ``out (+)= a @ b`` for an ``m x n`` output tile   ``k`` + fill
               (m <= rows, n <= cols) held in the PEs while ``k`` steps stream
``MvOut``      accumulator -> DRAM block, with an optional activation (``relu``)    DMA
=============  =================================================================  ==========

Fill/drain of the systolic pipeline (``rows + cols - 2`` cycles: the operand skew plus
the partial sums draining out) is paid once per stream: a ``ComputeWS`` right after its
``Preload``, a ``ComputeOS`` starting a new output tile. A ``ComputeOS`` that accumulates
into the tile the previous instruction computed continues the same stream (no refill).
This is how SCALE-Sim counts compute cycles (``ext/npu/sim.py`` has the formulas).
"""
from __future__ import annotations

import dataclasses

ACTIVATIONS = ("none", "relu")


@dataclasses.dataclass(frozen=True)
class Tile:
    """``rows x cols`` float32 words at ``addr`` of an on-chip memory, rows ``stride`` words apart."""

    addr: int
    rows: int
    cols: int
    stride: int

    def __post_init__(self):
        if min(self.rows, self.cols) <= 0 or self.addr < 0 or self.stride < self.cols:
            raise ValueError(f"bad tile {self}: needs rows, cols > 0, addr >= 0, stride >= cols")

    @property
    def end(self) -> int:
        """One past the last word the tile touches."""
        return self.addr + (self.rows - 1) * self.stride + self.cols


@dataclasses.dataclass(frozen=True)
class MvIn:
    """``mem[dst] = dram[src][row:row+rows, col:col+cols]`` (``broadcast``: row ``row`` repeated)."""

    src: str
    row: int
    col: int
    dst: Tile
    mem: str = "spad"  # "spad" | "acc"
    broadcast: bool = False


@dataclasses.dataclass(frozen=True)
class Preload:
    """Weight-stationary: load the weight tile ``w`` (scratchpad) into the array."""

    w: Tile


@dataclasses.dataclass(frozen=True)
class ComputeWS:
    """``acc[out] (+)= spad[a] @ W`` with the preloaded weights ``W`` (``a.cols == W.rows``)."""

    a: Tile
    out: Tile
    accumulate: bool = True


@dataclasses.dataclass(frozen=True)
class ComputeOS:
    """``acc[out] (+)= spad[a] @ spad[b]`` for one output tile of at most ``rows x cols``."""

    a: Tile
    b: Tile
    out: Tile
    accumulate: bool = True


@dataclasses.dataclass(frozen=True)
class MvOut:
    """``dram[dst][row:row+src.rows, col:col+src.cols] = act(acc[src])``."""

    src: Tile
    dst: str
    row: int
    col: int
    act: str = "none"

    def __post_init__(self):
        if self.act not in ACTIVATIONS:
            raise ValueError(f"MvOut activation must be one of {ACTIVATIONS}, got {self.act!r}")


Instruction = MvIn | Preload | ComputeWS | ComputeOS | MvOut
