"""CPU schedule of Winograd conv2d (blocks from ``topi_kernels.winograd``)::

    parallel for (n, hp, cb): P[.., 0:kb] = pack(X)                 # kb-lane vectors
    parallel for (t, cb):                                            # one tile, kb channels
      T1[0:alpha^2][0:kb] = row pass (unrolled, vectorized)          # local
      V[0:alpha^2, t, cb*kb : +kb] = column pass (unrolled, vectorized)
    parallel for thread's block of tiles: for e, panel:              # matmul.packed tiles -> MM
      mb x nb register tile, whole K
    parallel for (t, ob):                                            # one tile, 16 output channels
      Z1 = row pass of A^T MM (local); Y[0:m^2, t, ob*16 : +16] = column pass
    parallel for (n, tile row): out[n, :, rows, :] = epilogue(Y ...)  # NCHW, fused bias/act/residual

With ``parallel="tiles"`` every stage splits its work by image rows / tiles
in the same order, so each thread reads back mostly what it wrote itself; it
pays for that by every thread streaming all of U, so it is the default only
when U is smaller than the transformed data (``wino_parallel``). Measured on
the 56x56x64 layer: 0.46-0.48 ms against 0.50-0.51 ms, and in this VM's slow
state (README) 1.5x instead of 2.0x its normal time. ``parallel="stages"`` is
the stage-wise split (GEMM over transformed positions and U's panels, output
over channels), the default for weight-heavy layers.

Knobs (``WinogradConfig``): ``tile`` m (2 or 4), the GEMM's ``mb`` x ``nb``
register tile (``nb`` a multiple of the vector width), ``parallel``.
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from .conv2d import _try, _vectorize_split, schedule_pack
from .matmul import TileConfig, schedule_tiled


@dataclasses.dataclass(frozen=True)
class WinogradConfig:
    """Output tile ``tile`` x ``tile`` (F(tile, 3)); GEMM register tile ``mb`` rows x ``nb`` columns."""

    tile: int = 4
    mb: int = 4
    nb: int = 64
    parallel: str = "stages"  # the split before this knob existed: old tuning records keep their meaning


def _two_pass(sch: s_tir.Schedule, first: str, second: str, block: int, lanes: int) -> None:
    """``second[e, *tile, c]`` parallel over (tile, c-block) with ``first`` computed per tile in registers."""
    b = sch.get_sblock(second)
    e, *tile, c = sch.get_loops(b)
    cb, ci = sch.split(c, [None, block])
    sch.reorder(*tile, cb, e, ci)
    outer = sch.fuse(*tile, cb)
    sch.parallel(outer)
    sch.unroll(e)
    _vectorize_split(sch, ci, lanes) if block % lanes == 0 else sch.vectorize(ci)
    f = sch.get_sblock(first)
    sch.compute_at(f, outer)
    sch.set_scope(f, 0, "local")
    fl = sch.get_loops(f)
    e1, ci1 = fl[1], fl[-1]  # fl[0] is the shared outer loop; unit tile loops are dropped
    sch.unroll(e1)
    _vectorize_split(sch, ci1, lanes) if block % lanes == 0 else sch.vectorize(ci1)


def schedule_winograd(sch: s_tir.Schedule, cfg: WinogradConfig, lanes: int, kb: int, ob: int,
                      threads: int) -> None:
    """Schedule every block of the Winograd kernel (see module doc)."""
    local = cfg.parallel == "tiles"
    schedule_pack(sch, "P", lanes, 3, by_rows=local)
    _two_pass(sch, "T1", "V", kb, lanes)
    schedule_tiled(sch, TileConfig(mb=cfg.mb, nb=cfg.nb, parallel="rows" if local else "panels"), lanes,
                   nbatch=1, threads=threads)
    _two_pass(sch, "Z1", "Y", ob, lanes)
    out = sch.get_sblock("out")
    n, o, h, w, *r = sch.get_loops(out)  # r: the channel lanes of an NCHWc output
    th, i = sch.split(h, [None, cfg.tile])  # h % m, h // m become affine in (th, i)
    tw, j = sch.split(w, [None, cfg.tile])
    if local:
        sch.reorder(n, th, o, i, tw, j, *r)
        sch.parallel(sch.fuse(n, th))
    else:
        sch.reorder(n, o, th, i, tw, j, *r)
        sch.parallel(sch.fuse(n, o))
    sch.unroll(j)
    if r:
        _vectorize_split(sch, r[0], lanes)
