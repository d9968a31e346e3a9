"""Execute NPU instruction streams with exact float32 numerics and count cycles and traffic.

Compute cycles follow SCALE-Sim's accounting of a ``R x C`` array (R = rows, C = cols):

* weight-stationary fold: ``R`` cycles to preload the weights, ``m`` cycles to stream the
  input rows, ``R + C - 2`` to fill and drain the skewed pipeline: ``m + 2R + C - 2``
  (SCALE-Sim: the ifmap demand matrix of one fold, ``R`` prefix + ``T`` + ``C - 1``
  suffix rows, skewed by ``R - 1``);
* output-stationary tile: ``k`` reduction steps plus ``R + C - 2`` fill/drain;
  ``k + R + C - 2`` (SCALE-Sim: ``T + C - 1`` rows skewed by ``R - 1``).

Partial folds (fewer than ``R`` or ``C`` used) cost the same as full ones, as in SCALE-Sim.
DMA (``MvIn``/``MvOut``) costs ``ceil(bytes / bandwidth)`` cycles. The scratchpad is double
buffered, so DMA overlaps compute: a program takes ``max(compute, dma)`` cycles (the extra
over compute is reported as ``stall_cycles``). Utilization is useful MACs over
``R * C * compute_cycles``.

Every access is bounds-checked: a tile past the scratchpad or accumulator, a DRAM block past
its tensor, a compute on mismatched tiles raise ``ValueError`` naming the instruction.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .isa import ComputeOS, ComputeWS, MvIn, MvOut, Preload, Tile
from .target import ArrayConfig


@dataclasses.dataclass
class Stats:
    """Counters of one or more programs (``+`` adds them)."""

    compute_cycles: int = 0
    dma_cycles: int = 0
    macs: int = 0
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    spad_reads: int = 0  # words read from the scratchpad by the array
    instructions: int = 0
    folds: int = 0  # pipeline fills (preloads in ws, output tiles started in os)
    rows: int = 0
    cols: int = 0

    @property
    def cycles(self) -> int:
        return max(self.compute_cycles, self.dma_cycles)

    @property
    def stall_cycles(self) -> int:
        return self.cycles - self.compute_cycles

    @property
    def utilization(self) -> float:
        """Useful MACs per PE per compute cycle (0..1)."""
        pes = self.rows * self.cols * self.compute_cycles
        return self.macs / pes if pes else 0.0

    def __add__(self, other: "Stats") -> "Stats":
        out = Stats(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                       for f in dataclasses.fields(self) if f.name not in ("rows", "cols")})
        out.rows, out.cols = self.rows or other.rows, self.cols or other.cols
        return out

    def to_json(self) -> dict:
        return dict(dataclasses.asdict(self), cycles=self.cycles, stall_cycles=self.stall_cycles,
                    utilization=self.utilization)


class Simulator:
    """One array and its memories; ``run(program)`` executes instructions against ``dram``.

    Parameters
    ----------
    cfg : the array.
    dram : name -> 2-D float32 array (read by ``MvIn``, written in place by ``MvOut``).
    numerics : False counts cycles and traffic only (the tiles are not computed).
    """

    def __init__(self, cfg: ArrayConfig, dram: dict | None = None, numerics: bool = True):
        self.cfg, self.dram, self.numerics = cfg, dict(dram or {}), numerics
        self.spad = np.zeros(cfg.spad_words, "float32") if numerics else None
        self.acc = np.zeros(cfg.acc_words, "float32") if numerics else None
        self.stats = Stats(rows=cfg.rows, cols=cfg.cols)
        self._weights: Tile | None = None
        self._w: np.ndarray | None = None
        self._stream = None  # what the pipeline is streaming now (a fill/drain is paid per stream)
        self._fill = cfg.rows + cfg.cols - 2

    def run(self, program) -> Stats:
        handlers = {MvIn: self._mvin, Preload: self._preload, ComputeWS: self._compute_ws,
                    ComputeOS: self._compute_os, MvOut: self._mvout}
        for ins in program:
            handler = handlers.get(type(ins))
            if handler is None:
                raise ValueError(f"not an NPU instruction: {ins!r}")
            handler(ins)
            self.stats.instructions += 1
        return self.stats

    # -- memories ---------------------------------------------------------------------------

    def _check(self, tile: Tile, mem: str, ins) -> None:
        size = self.cfg.spad_words if mem == "spad" else self.cfg.acc_words
        if tile.end > size:
            name = "scratchpad" if mem == "spad" else "accumulator"
            raise ValueError(f"{type(ins).__name__}: tile {tile} ends at word {tile.end}, past the "
                             f"{size}-word {name}")

    def _view(self, tile: Tile, mem: str) -> np.ndarray:
        buf = self.spad if mem == "spad" else self.acc
        return np.lib.stride_tricks.as_strided(buf[tile.addr:], (tile.rows, tile.cols), (tile.stride * 4, 4))

    def _tensor(self, name: str, ins) -> np.ndarray:
        if name not in self.dram:
            raise ValueError(f"{type(ins).__name__}: no DRAM tensor {name!r} (have {sorted(self.dram)})")
        return self.dram[name]

    def _dma(self, nbytes: int) -> None:
        self.stats.dma_cycles += -(-nbytes // self.cfg.bandwidth)

    def _mvin(self, ins: MvIn) -> None:
        if ins.mem not in ("spad", "acc"):
            raise ValueError(f"MvIn: memory must be 'spad' or 'acc', got {ins.mem!r}")
        self._check(ins.dst, ins.mem, ins)
        rows = 1 if ins.broadcast else ins.dst.rows
        if self.numerics or ins.src in self.dram:
            src = self._tensor(ins.src, ins)
            if ins.row < 0 or ins.col < 0 or ins.row + rows > src.shape[0] or ins.col + ins.dst.cols > src.shape[1]:
                raise ValueError(f"MvIn: block [{ins.row}:{ins.row + rows}, {ins.col}:{ins.col + ins.dst.cols}] "
                                 f"is outside DRAM tensor {ins.src!r} of shape {src.shape}")
            if self.numerics:
                self._view(ins.dst, ins.mem)[...] = src[ins.row:ins.row + rows, ins.col:ins.col + ins.dst.cols]
        if ins.mem == "acc":
            self._stream = None  # new partial sums: no stream continues into them
        nbytes = rows * ins.dst.cols * 4
        self.stats.dram_read_bytes += nbytes
        self._dma(nbytes)

    def _mvout(self, ins: MvOut) -> None:
        self._check(ins.src, "acc", ins)
        if self.numerics or ins.dst in self.dram:
            dst = self._tensor(ins.dst, ins)
            r, c = ins.src.rows, ins.src.cols
            if ins.row < 0 or ins.col < 0 or ins.row + r > dst.shape[0] or ins.col + c > dst.shape[1]:
                raise ValueError(f"MvOut: block [{ins.row}:{ins.row + r}, {ins.col}:{ins.col + c}] is outside "
                                 f"DRAM tensor {ins.dst!r} of shape {dst.shape}")
            if self.numerics:
                v = self._view(ins.src, "acc")
                dst[ins.row:ins.row + r, ins.col:ins.col + c] = np.where(v < 0, np.float32(0), v) \
                    if ins.act == "relu" else v  # relu keeps NaN, as PyTorch's does
        self._stream = None  # the results leave the array: the next compute starts a new stream
        nbytes = ins.src.rows * ins.src.cols * 4
        self.stats.dram_write_bytes += nbytes
        self._dma(nbytes)

    # -- the array --------------------------------------------------------------------------

    def _preload(self, ins: Preload) -> None:
        w = ins.w
        if w.rows > self.cfg.rows or w.cols > self.cfg.cols:
            raise ValueError(f"Preload: weight tile {w.rows}x{w.cols} exceeds the "
                             f"{self.cfg.rows}x{self.cfg.cols} array")
        self._check(w, "spad", ins)
        self._weights = w
        if self.numerics:
            self._w = self._view(w, "spad").copy()  # the array holds its own copy
        self._stream = None
        self.stats.compute_cycles += self.cfg.rows
        self.stats.spad_reads += w.rows * w.cols

    def _compute_ws(self, ins: ComputeWS) -> None:
        w = self._weights
        if w is None:
            raise ValueError("ComputeWS: no weights preloaded (a Preload must come first)")
        a, out = ins.a, ins.out
        if a.cols != w.rows or out.cols != w.cols or out.rows != a.rows:
            raise ValueError(f"ComputeWS: shapes do not chain: a {a.rows}x{a.cols} @ W {w.rows}x{w.cols} "
                             f"-> out {out.rows}x{out.cols}")
        self._check(a, "spad", ins)
        self._check(out, "acc", ins)
        if self.numerics:
            self._accumulate(out, self._view(a, "spad") @ self._w, ins.accumulate)
        stream = ("ws", id(w))
        self.stats.compute_cycles += a.rows + (0 if self._stream == stream else self._fill)
        self.stats.folds += self._stream != stream
        self._stream = stream
        self.stats.macs += a.rows * a.cols * w.cols
        self.stats.spad_reads += a.rows * a.cols

    def _compute_os(self, ins: ComputeOS) -> None:
        a, b, out = ins.a, ins.b, ins.out
        if a.cols != b.rows or out.rows != a.rows or out.cols != b.cols:
            raise ValueError(f"ComputeOS: shapes do not chain: a {a.rows}x{a.cols} @ b {b.rows}x{b.cols} "
                             f"-> out {out.rows}x{out.cols}")
        if out.rows > self.cfg.rows or out.cols > self.cfg.cols:
            raise ValueError(f"ComputeOS: output tile {out.rows}x{out.cols} exceeds the "
                             f"{self.cfg.rows}x{self.cfg.cols} array")
        self._check(a, "spad", ins)
        self._check(b, "spad", ins)
        self._check(out, "acc", ins)
        if self.numerics:
            self._accumulate(out, self._view(a, "spad") @ self._view(b, "spad"), ins.accumulate)
        stream = ("os", out)
        cont = ins.accumulate and self._stream == stream
        self.stats.compute_cycles += a.cols + (0 if cont else self._fill)
        self.stats.folds += not cont
        self._stream = stream
        self._weights = None  # the PEs now hold outputs, not weights
        self.stats.macs += a.rows * a.cols * b.cols
        self.stats.spad_reads += a.rows * a.cols + b.rows * b.cols

    def _accumulate(self, out: Tile, value: np.ndarray, accumulate: bool) -> None:
        view = self._view(out, "acc")
        if accumulate:
            view += value
        else:
            view[...] = value


def run(cfg: ArrayConfig, program, dram: dict | None = None, numerics: bool = True) -> Stats:
    """Execute ``program`` on a fresh simulator; returns its ``Stats`` (``dram`` is written in place)."""
    return Simulator(cfg, dram, numerics).run(program)
