"""GEMM and conv2d lowered to NPU instruction streams, with dataflow and tile sizes as knobs.

``C[M, N] = act(A[M, K] @ B[K, N] + bias)``, tiled as::

    for n0 in 0..N step tile_n:            # output columns held in the accumulator
      for m0 in 0..M step tile_m:          # output rows held in the accumulator
        bias -> accumulator (broadcast MvIn), or the first compute overwrites
        for k0 in 0..K step tile_k:        # reduction chunk, double-buffered in the scratchpad
          MvIn A[m0:, k0:] and B[k0:, n0:]
          ws: for each rows x cols block of B: Preload it, ComputeWS streaming tile_m rows of A
          os: for each rows x cols output tile: ComputeOS streaming the tile_k chunk
        MvOut accumulator -> C[m0:, n0:] (relu on the way out when asked)

Capacities bound the tiles: ``tile_m * tile_n`` words of accumulator, ``tile_m * tile_k +
tile_k * tile_n`` words in one half of the scratchpad. Weight-stationary pays one preload
and one pipeline fill per ``rows x cols`` weight block per ``tile_m`` chunk, so it wants
``tile_m`` large; output-stationary pays one fill per output tile per ``tile_k`` chunk, so
it wants ``tile_k`` large; small ``tile_n`` re-reads A from DRAM. ``estimate`` counts the
same cycles and bytes as running the program (tested equal) without generating it, and
``best_tiling`` picks the fewest simulated cycles (ties: less DRAM traffic).

conv2d is im2col + GEMM: the host lays the (padded, strided, dilated) input windows out as
the ``[N*OH*OW, C*KH*KW]`` matrix the DMA reads (DRAM traffic counts that matrix, as
SCALE-Sim's operand matrices do) and the weight as ``[C*KH*KW, O]``.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from . import sim
from .isa import ComputeOS, ComputeWS, MvIn, MvOut, Preload, Tile
from .target import DATAFLOWS, ArrayConfig


@dataclasses.dataclass(frozen=True)
class Tiling:
    dataflow: str
    tile_m: int
    tile_n: int
    tile_k: int


@dataclasses.dataclass(frozen=True)
class Estimate:
    compute_cycles: int
    dma_cycles: int
    macs: int
    dram_bytes: int
    rows: int
    cols: int

    @property
    def cycles(self) -> int:
        return max(self.compute_cycles, self.dma_cycles)

    @property
    def utilization(self) -> float:
        return self.macs / (self.rows * self.cols * self.compute_cycles) if self.compute_cycles else 0.0


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tiling_problem(M: int, N: int, K: int, cfg: ArrayConfig, t: Tiling) -> str | None:
    """Why ``t`` cannot run a ``M x N x K`` GEMM on ``cfg`` (None when it can)."""
    if t.dataflow not in DATAFLOWS:
        return f"dataflow must be one of {DATAFLOWS}, got {t.dataflow!r}"
    if min(t.tile_m, t.tile_n, t.tile_k) <= 0:
        return f"tile sizes must be positive, got {t}"
    tm, tn, tk = min(t.tile_m, M), min(t.tile_n, N), min(t.tile_k, K)
    if tm * tn > cfg.acc_words:
        return f"accumulator tile {tm}x{tn} needs {tm * tn} words, the accumulator has {cfg.acc_words}"
    if tm * tk + tk * tn > cfg.spad_words // 2:
        return (f"scratchpad chunks {tm}x{tk} + {tk}x{tn} need {tm * tk + tk * tn} words, half the "
                f"scratchpad (double buffering) has {cfg.spad_words // 2}")
    return None


def _chunks(total: int, step: int) -> list[tuple[int, int]]:
    """(size, count) of the chunks ``range(0, total, step)`` cuts."""
    full, rest = divmod(total, step)
    return [(s, c) for s, c in ((step, full), (rest, 1)) if c and s]


def estimate(M: int, N: int, K: int, cfg: ArrayConfig, t: Tiling, bias: bool = False) -> Estimate:
    """Cycles and traffic of ``gemm_program`` without generating it (the same counts)."""
    R, C, bw, fill = cfg.rows, cfg.cols, cfg.bandwidth, cfg.rows + cfg.cols - 2
    tm, tn, tk = min(t.tile_m, M), min(t.tile_n, N), min(t.tile_k, K)
    compute = dma = nbytes = 0
    for (nn, cn), (mm, cm) in itertools.product(_chunks(N, tn), _chunks(M, tm)):
        per = 0  # cycles and bytes of one (n, m) chunk
        if bias:
            dma += cn * cm * _ceil(nn * 4, bw)
            nbytes += cn * cm * nn * 4
        for kk, ck in _chunks(K, tk):
            dma += cn * cm * ck * (_ceil(mm * kk * 4, bw) + _ceil(kk * nn * 4, bw))
            nbytes += cn * cm * ck * (mm * kk + kk * nn) * 4
            if t.dataflow == "ws":
                per += ck * _ceil(kk, R) * _ceil(nn, C) * (R + mm + fill)
        if t.dataflow == "os":  # one output tile per chunk: its stream continues across k chunks
            tiles = _ceil(mm, R) * _ceil(nn, C)
            per = tiles * K + fill * (1 if tiles == 1 else tiles * _ceil(K, tk))
        compute += cn * cm * per
        dma += cn * cm * _ceil(mm * nn * 4, bw)
        nbytes += cn * cm * mm * nn * 4
    return Estimate(compute, dma, M * N * K, nbytes, R, C)


def gemm_program(M: int, N: int, K: int, cfg: ArrayConfig, t: Tiling, a: str = "A", b: str = "B",
                 c: str = "C", bias: str | None = None, act: str = "none"):
    """The instruction stream (a generator) of ``c = act(a @ b + bias)``; ``bias`` names a ``1 x N`` tensor."""
    problem = tiling_problem(M, N, K, cfg, t)
    if problem:
        raise ValueError(f"tiling {t} for GEMM {M}x{N}x{K} on {cfg}: {problem}")
    tm, tn, tk = min(t.tile_m, M), min(t.tile_n, N), min(t.tile_k, K)
    half, chunk = cfg.spad_words // 2, 0
    for n0 in range(0, N, tn):
        nn = min(tn, N - n0)
        for m0 in range(0, M, tm):
            mm = min(tm, M - m0)
            if bias is not None:
                yield MvIn(bias, 0, n0, Tile(0, mm, nn, nn), "acc", broadcast=True)
            for k0 in range(0, K, tk):
                kk = min(tk, K - k0)
                base, chunk = half * (chunk % 2), chunk + 1  # alternate halves: double buffering
                yield MvIn(a, m0, k0, Tile(base, mm, kk, kk))
                yield MvIn(b, k0, n0, Tile(base + mm * kk, kk, nn, nn))
                first = k0 == 0 and bias is None
                yield from (_ws if t.dataflow == "ws" else _os)(cfg, base, mm, nn, kk, first)
            yield MvOut(Tile(0, mm, nn, nn), c, m0, n0, act)


def _ws(cfg: ArrayConfig, base: int, mm: int, nn: int, kk: int, first: bool):
    R, C = cfg.rows, cfg.cols
    for kb in range(0, kk, R):
        kr = min(R, kk - kb)
        for nb in range(0, nn, C):
            nc = min(C, nn - nb)
            yield Preload(Tile(base + mm * kk + kb * nn + nb, kr, nc, nn))
            yield ComputeWS(Tile(base + kb, mm, kr, kk), Tile(nb, mm, nc, nn), accumulate=not (first and kb == 0))


def _os(cfg: ArrayConfig, base: int, mm: int, nn: int, kk: int, first: bool):
    R, C = cfg.rows, cfg.cols
    for mb in range(0, mm, R):
        mr = min(R, mm - mb)
        for nb in range(0, nn, C):
            nc = min(C, nn - nb)
            yield ComputeOS(Tile(base + mb * kk, mr, kk, kk), Tile(base + mm * kk + nb, kk, nc, nn),
                            Tile(mb * nn + nb, mr, nc, nn), accumulate=not first)


# -- choosing tiles ------------------------------------------------------------------------------

def _sizes(total: int, unit: int) -> list[int]:
    """Candidate tile sizes along an axis: unit * 2^i below ``total``, and ``total`` itself."""
    out, v = set(), unit
    while v < total:
        out.add(v)
        v *= 2
    out.add(total)
    return sorted(out)


def tilings(M: int, N: int, K: int, cfg: ArrayConfig, dataflows=None) -> list[Tiling]:
    """Every feasible tiling of the knob grid (dataflows of ``cfg`` unless given)."""
    out = []
    for df in dataflows or cfg.dataflows:
        for tm, tn, tk in itertools.product(_sizes(M, cfg.rows), _sizes(N, cfg.cols), _sizes(K, cfg.rows)):
            t = Tiling(df, tm, tn, tk)
            if tiling_problem(M, N, K, cfg, t) is None:
                out.append(t)
    return out


def ranked(M: int, N: int, K: int, cfg: ArrayConfig, bias: bool = False,
           dataflows=None) -> list[tuple[Tiling, Estimate]]:
    """Feasible tilings, fewest simulated cycles first (ties: less DRAM traffic, then ws first)."""
    pts = [(t, estimate(M, N, K, cfg, t, bias)) for t in tilings(M, N, K, cfg, dataflows)]
    if not pts:
        raise ValueError(f"no tiling of GEMM {M}x{N}x{K} fits {cfg}")
    return sorted(pts, key=lambda p: (p[1].cycles, p[1].dram_bytes, p[0].dataflow != "ws"))


def best_tiling(M: int, N: int, K: int, cfg: ArrayConfig, bias: bool = False,
                dataflows=None) -> tuple[Tiling, Estimate]:
    return ranked(M, N, K, cfg, bias, dataflows)[0]


# -- running kernels on NumPy data ---------------------------------------------------------------

def gemm(a: np.ndarray, b: np.ndarray, cfg: ArrayConfig, tiling: Tiling | None = None,
         bias: np.ndarray | None = None, act: str = "none") -> tuple[np.ndarray, sim.Stats]:
    """``act(a @ b + bias)`` on the simulated array (float32); returns (result, stats)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"npu gemm needs [M, K] @ [K, N], got {a.shape} @ {b.shape}")
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError(f"npu gemm takes float32 operands, got {a.dtype} and {b.dtype}")
    (M, K), N = a.shape, b.shape[1]
    if min(M, N, K) == 0:
        raise ValueError(f"npu gemm got a zero-size dimension: {a.shape} @ {b.shape}")
    tiling = tiling or best_tiling(M, N, K, cfg, bias is not None)[0]
    out = np.empty((M, N), "float32")
    dram = {"A": np.ascontiguousarray(a), "B": np.ascontiguousarray(b), "C": out}
    if bias is not None:
        dram["bias"] = np.ascontiguousarray(np.asarray(bias, "float32").reshape(1, N))
    stats = sim.run(cfg, gemm_program(M, N, K, cfg, tiling, bias="bias" if bias is not None else None, act=act),
                    dram)
    return out, stats


def conv_geometry(x_shape, w_shape, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> dict:
    """Sizes of an NCHW/OIHW convolution and of its im2col GEMM (ValueError for a bad one)."""
    (n, c, h, w), (o, i, kh, kw) = x_shape, w_shape
    if c != i:
        raise ValueError(f"npu conv2d: input has {c} channels, weight expects {i} (groups are not supported)")
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pl + pr - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"npu conv2d: empty output ({oh}x{ow}) for input {x_shape} and weight {w_shape}")
    return {"N": n, "C": c, "H": h, "W": w, "O": o, "KH": kh, "KW": kw, "OH": oh, "OW": ow,
            "M": n * oh * ow, "K": c * kh * kw}


def im2col(x: np.ndarray, kh: int, kw: int, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """``[N*OH*OW, C*KH*KW]`` windows of NCHW ``x`` (columns ordered c, kh, kw like OIHW weights)."""
    n, c, h, w = x.shape
    pt, pl, pb, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    g = conv_geometry(x.shape, (1, c, kh, kw), strides, padding, dilation)
    oh, ow = g["OH"], g["OW"]
    cols = np.empty((n, oh, ow, c, kh, kw), x.dtype)
    for i, j in itertools.product(range(kh), range(kw)):
        r0, c0 = i * dilation[0], j * dilation[1]
        patch = xp[:, :, r0:r0 + strides[0] * (oh - 1) + 1:strides[0], c0:c0 + strides[1] * (ow - 1) + 1:strides[1]]
        cols[:, :, :, :, i, j] = patch.transpose(0, 2, 3, 1)
    return cols.reshape(n * oh * ow, c * kh * kw)


def conv2d(x: np.ndarray, w: np.ndarray, cfg: ArrayConfig, strides=(1, 1), padding=(0, 0, 0, 0),
           dilation=(1, 1), tiling: Tiling | None = None, bias: np.ndarray | None = None,
           act: str = "none") -> tuple[np.ndarray, sim.Stats]:
    """NCHW x OIHW convolution on the array (im2col + GEMM); returns (NCHW result, stats)."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"npu conv2d needs 4-D NCHW data and OIHW weight, got {x.shape} and {w.shape}")
    g = conv_geometry(x.shape, w.shape, strides, padding, dilation)
    a = im2col(x, g["KH"], g["KW"], strides, padding, dilation)
    b = np.ascontiguousarray(w.reshape(g["O"], g["K"]).T)
    out, stats = gemm(a, b, cfg, tiling, bias, act)
    return out.reshape(g["N"], g["OH"], g["OW"], g["O"]).transpose(0, 3, 1, 2), stats
