"""How the CPU tiled matmuls choose their shape: register tile (rows x panel width), panel
width against L2 and N's padding, and loop order (``TileConfig.order``).

Shared by ``matmul.direct``/``packed``/``batch`` (``matmul.py``), the dynamic-shape matmuls,
Winograd's batched GEMM and the im2col/pointwise GEMM form.
"""
from __future__ import annotations

import dataclasses

from ..tir_schedules.cpu.matmul import TileConfig
from ..topi_kernels import matmul as mm


#: rows per register tile the tile spaces hold: every default ``fit_rows`` gives (up to 6, or M
#: when smaller) and 8
ROW_OPTIONS = (1, 2, 3, 4, 5, 6, 8)


def _rows_possible(N: int, K: int, nb: int, info) -> bool:
    """``order="rows"`` is worth a point: two panels or more (one panel: both orders are the same
    loop nest), and B, padded to whole ``nb`` panels, fits in half of L2 (the rest holds A's row
    tiles and the output)."""
    return mm.ceil_to(N, nb) > nb and K * mm.ceil_to(N, nb) * 4 <= info.l2_bytes // 2


def pick_order(M: int, N: int, K: int, nb: int, info) -> str:
    """``"rows"`` (row tiles outside the panels: A read once) where ``_rows_possible`` and A
    (M x K) is larger than half of L2; else ``"panels"`` (A read once per panel). On an AVX2
    Zen 4 guest (1 MB L2, interleaved, one kernel): P @ V over 1500 tokens (6 x 1500 x 1500 x
    64) 0.85x the time, 3136 x 64 x 256 0.84-0.88x, 3136 x 96 x 384 0.95x, an A of 4.8 MB with
    96 columns 0.99-1.03x; with B past L2 (784 x 192 x 768, B 590 KB) no gain."""
    return "rows" if M * K * 4 > info.l2_bytes // 2 and _rows_possible(N, K, nb, info) else "panels"


def _panel_options(info, nb_max: int = 64) -> list[int]:
    """Panel widths of up to 4 vectors, the register tile with the most accumulators first (the
    widest on ties): 4 vectors x 4 rows with 32 registers; with 16, 3 x 4 and 2 x 6 (12 each;
    4 x 2 would leave 4 idle, and 3 x 24 ran 1.4x as fast as 2 x 32 on BERT/ViT GEMMs)."""
    lanes = info.lanes_f32
    return sorted((v * lanes for v in (4, 3, 2, 1) if v * lanes <= nb_max),
                  key=lambda nb: -_accumulators(nb // lanes, info))


def _least_padded(options: list[int], N: int) -> int:
    """The first of ``options`` unless a later one pads N to at least 5% fewer columns (48 beats
    64 when N = 333: 336 vs 384 columns; 16 beats 24 when N = 64: attention's P @ V with 64-wide
    heads, 6 x 16 tiles 0.82x the time of 4 x 24 ones, which computed 72 columns)."""
    best = options[0]
    for nb in options[1:]:
        if mm.ceil_to(N, nb) < 0.95 * mm.ceil_to(N, best):
            best = nb
    return best


def pick_nb(N: int, K: int, info, nb_max: int = 64) -> int:
    """Panel width: ``_panel_options`` whose panel of B (K x nb) fits in L2 and is no wider
    than N's vectors, the least padded (``_least_padded``)."""
    lanes = info.lanes_f32
    options = _panel_options(info, nb_max)
    fits = [nb for nb in options if K * nb * 4 <= info.l2_bytes] or [lanes]
    fits = [nb for nb in fits if nb <= mm.ceil_to(N, lanes)] or [min(fits)]
    return _least_padded(fits, N)


#: time per row of a 6 x 4-vector tile against a 4 x 4-vector one with two 512-bit FMA units
#: (``scripts/bench_gemm.py`` shapes and BERT/ViT/ConvNeXt's, interleaved on an Emerald Rapids
#: VM: 0.89-0.97 from M = 49 up, e.g. 128x3072x768 0.90, 1024^3 0.89; 32x4096x4096 1.03)
SIX_ROW_TIME = 0.92


def _row_budget(vectors: int, info) -> int:
    """Rows whose ``rows * vectors`` accumulators + one B row + a broadcast of A fit the vector
    registers (32 zmm with AVX-512, 16 ymm otherwise)."""
    return (info.vector_registers - vectors - 1) // vectors


def fit_rows(vectors: int, info, M: int | None = None) -> int:
    """Rows of a register tile ``vectors`` wide: ``_row_budget``, at most 4 with 32 registers
    (6 there only by ``pick_mb``'s rule) and 6 with 16, and at most M. With AVX2 on Zen 4,
    6 x 2-vector tiles ran 0.89-0.96x the time of 4 x 2 (BERT/ViT GEMMs)."""
    cap = 4 if info.vector_registers > 16 else 6
    return max(1, min(cap, _row_budget(vectors, info), M if M is not None else cap))


def _accumulators(vectors: int, info) -> int:
    """Accumulator registers of a register tile ``vectors`` wide on a tall M."""
    return vectors * fit_rows(vectors, info)


def widest_tile(M: int, N: int, info) -> tuple[int, int]:
    """``(mb, nb)``: the register tile with the most accumulators (4 rows x 4 vectors with 32
    registers, 4 x 3 or 6 x 2 with 16, the least padded), narrowed to N's vectors and M's rows."""
    lanes = info.lanes_f32
    nb = min(_least_padded(_panel_options(info), N), mm.ceil_to(N, lanes))
    return fit_rows(nb // lanes, info, M), nb


def pick_mb(M: int, nb: int, info) -> int:
    """Rows per register tile: ``fit_rows``, or 6 rows of 4-vector panels with two 512-bit FMA
    units (24 accumulators: each loaded B vector feeds 6 FMAs instead of 4, and a panel is
    streamed from L2 for M/6 row tiles, not M/4) unless padding M to sixes costs more than the
    tile saves."""
    vectors = max(1, nb // info.lanes_f32)
    mb = fit_rows(vectors, info, M)
    if (info.two_fma512 and vectors == 4 and _row_budget(vectors, info) >= 6 and M >= 6
            and mm.ceil_to(M, 6) * SIX_ROW_TIME < mm.ceil_to(M, mb)):
        return 6
    return mb


def ordered(cfg: TileConfig, M: int, N: int, K: int, info) -> TileConfig:
    """``cfg`` with ``pick_order``'s loop order; threads split row tiles (``"tiles"``) in rows order."""
    if pick_order(M, N, K, cfg.nb, info) == "panels":
        return cfg
    return dataclasses.replace(cfg, parallel="none" if cfg.parallel == "none" else "tiles", order="rows")


def rows_order_points(mb: int, nb: int, N: int, K: int, info) -> list[TileConfig]:
    """The ``order="rows"`` points of a tile space for an ``mb x nb`` tile: none unless
    ``_rows_possible``; threads split row tiles or none do."""
    if not _rows_possible(N, K, nb, info):
        return []
    return [TileConfig(mb=mb, nb=nb, parallel=par, order="rows") for par in ("tiles", "none")]
