"""CPU schedule of FFT conv2d (blocks from ``topi_kernels.conv2d_fft``)::

    TRIG, TB, TF, INV                                           # twiddle tables, serial (~F^2 elements)
    parallel for (n, cb, hp): P[.., 0:kb] = pack(X)             # kb-lane vectors
    parallel for (tile, cb):                                    # one tile, kb channels, all local
      R1, R   = the row DFT's two passes                        # [.., 0:kb] vectors
      V1, V   = the column DFT's two passes -> V[0:E, tile, 0:2, cb*kb : +kb]
    parallel for bin e:  M = V (x) U                            # depthwise: one complex product
    parallel for (bin e, panel of nb output channels):         # dense: per-bin complex GEMM
      for row tile (mb tiles):
        acc[mb][2][nb] = 0                                      # 2 * mb * nb/lanes vector registers
        for c, input plane q (unrolled):
          acc[i][p] +-= V[q] * U[c, (p + q) % 2, panel]          # one FMA each: the selects fold
        MM[e, tiles, :, panel] = acc
    parallel for (tile, ob):                                    # one tile, ob output channels, local
      Z1, Z   = inverse column DFT's two passes (rows y < mh)
      Y[mh, mw][0:ob] = inverse real row DFT
    parallel for (n, o): out[n, o, :, :] = epilogue(Y ...)       # NCHW, fused bias/act/residual

Every DFT pass is register-tiled the same way (``_accumulate``): two or three of its output
indices blocked inside its reduction loop, the real/imaginary planes unrolled, channels
vectorized, so each loaded vector and broadcast twiddle feeds several independent FMAs (one
accumulator chain per output would be FMA-latency bound: 4x slower).

Knobs (``FFTConfig``): ``tile`` F (the transform size), the GEMM's ``mb`` x ``nb`` register
tile (``nb`` a multiple of the vector width; ``2 * mb * nb / lanes`` accumulators must fit).
"""
from __future__ import annotations

import dataclasses

from tvm import s_tir

from ..common import extent, pick_divisor
from .conv2d import _try, _vectorize_split, schedule_pack


@dataclasses.dataclass(frozen=True)
class FFTConfig:
    """Transform size ``tile`` (F x F); complex GEMM register tile ``mb`` tiles x ``nb`` output channels."""

    tile: int = 16
    mb: int = 4
    nb: int = 32


def _vec(sch: s_tir.Schedule, loop, block: int, lanes: int) -> None:
    """Vectorize a channel-block loop (in ``lanes`` pieces when it divides)."""
    if block % lanes == 0:
        _vectorize_split(sch, loop, lanes)
    else:
        _try(sch.vectorize, loop)


def _block(sch: s_tir.Schedule, loop, upper: int):
    """``loop`` split into (outer, inner) with the inner extent its largest divisor <= ``upper``."""
    return sch.split(loop, [None, pick_divisor(extent(sch, loop), upper)])


def _accumulate(sch: s_tir.Schedule, name: str, n_sp: int, n_red: int, blocked: dict, unrolled: tuple,
                width: int, lanes: int) -> None:
    """Register-tile one DFT pass computed under a tile loop. Its trailing loops are ``n_sp``
    spatial ones, the channel lanes, ``n_red`` reductions (the sum, then the input plane);
    ``blocked`` maps spatial positions to a register-block bound. The order is: blocked outers,
    the reductions, blocked inners, ``unrolled``, channels (vectorized): several independent
    accumulators per loaded vector, so neither FMA latency nor loads bound the pass."""
    b = sch.get_sblock(name)
    own = sch.get_loops(b)[-(n_sp + 1 + n_red):]
    sp, ci, (red, *plane) = own[:n_sp], own[n_sp], own[n_sp + 1:]
    outs, ins = [], []
    for i, lp in enumerate(sp):
        if i in blocked:
            o, inner = _block(sch, lp, blocked[i])
            outs.append(o)
            ins.append(inner)
        elif i not in unrolled:
            outs.append(lp)
    rest = [sp[i] for i in unrolled]
    sch.reorder(*outs, red, *plane, *ins, *rest, ci)
    for lp in (*plane, *ins, *rest):
        sch.unroll(lp)
    _vec(sch, ci, width, lanes)
    sch.decompose_reduction(b, red)


def _forward(sch: s_tir.Schedule, fh: int, kb: int, lanes: int, depthwise: bool) -> None:
    """``V`` parallel over (tile, channel block); ``V1``, ``R``, ``R1`` computed per tile locally;
    depthwise: the product ``M`` (a separate pass: computed at ``V``'s tile loop, TVM rejects its
    region)."""
    v = sch.get_sblock("V")
    e, *tile, q, c, m1, s3 = sch.get_loops(v)
    cb, ci = sch.split(c, [None, kb])
    u, k = sch.split(e, [None, fh])
    uo, ui = _block(sch, u, 2)
    ko, ki = _block(sch, k, 4)
    sch.reorder(*tile, cb, uo, ko, m1, s3, ui, ki, q, ci)
    outer = sch.fuse(*tile, cb)
    sch.parallel(outer)
    for lp in (s3, ui, ki, q):
        sch.unroll(lp)
    _vec(sch, ci, kb, lanes)
    sch.decompose_reduction(v, m1)
    for name in ("V1", "R", "R1"):
        sch.compute_at(sch.get_sblock(name), outer, preserve_unit_loops=True)
        sch.set_scope(sch.get_sblock(name), 0, "local")
    # V1[a, u2, k, q, ci] sum (m2, s2); R[r, k, q, ci] sum (n1, s1); R1[r, n1, k2, p, ci] sum n2
    _accumulate(sch, "V1", 4, 2, {1: 2, 2: 4}, (3,), kb, lanes)
    _accumulate(sch, "R", 3, 2, {0: 2, 1: 4}, (2,), kb, lanes)
    _accumulate(sch, "R1", 4, 1, {0: 3, 2: 4}, (3,), kb, lanes)
    if depthwise:  # one pass over the spectra: parallel over bins, channels vectorized
        m = sch.get_sblock("M")
        me, *_, mp, mc = sch.get_loops(m)
        sch.parallel(me)
        sch.unroll(mp)
        _vec(sch, mc, kb, lanes)


def _inverse(sch: s_tir.Schedule, ob: int, lanes: int) -> None:
    """``Y`` parallel over (tile, output channel block), ``Z`` and ``Z1`` computed per tile locally
    (register-blocked as in ``_forward``)."""
    y = sch.get_sblock("Y")
    *tile, yy, x, oi, k, t = sch.get_loops(y)
    xo, xi = _block(sch, x, 8)
    sch.reorder(*tile, yy, xo, k, t, xi, oi)
    outer = sch.fuse(*tile)
    sch.parallel(outer)
    sch.unroll(t)
    sch.unroll(xi)
    _vec(sch, oi, ob, lanes)
    sch.decompose_reduction(y, k)
    for name in ("Z", "Z1"):
        sch.compute_at(sch.get_sblock(name), outer, preserve_unit_loops=True)
        sch.set_scope(sch.get_sblock(name), 0, "local")
    # Z[y, k, p, oi] sum (n1, s); Z1[a, y2, k, p, oi] sum (n2, s1)
    _accumulate(sch, "Z", 3, 2, {0: 2, 1: 4}, (2,), ob, lanes)
    _accumulate(sch, "Z1", 4, 2, {1: 2, 2: 4}, (3,), ob, lanes)


def _schedule_gemm(sch: s_tir.Schedule, cfg: FFTConfig, lanes: int) -> None:
    """Blocks ``C`` (per-bin complex GEMM, local accumulators) and ``D`` (its write-back)."""
    d = sch.get_sblock("D")
    e, i, p, j = sch.get_loops(d)
    i0, i1 = sch.split(i, [None, cfg.mb])
    j0, j1 = sch.split(j, [None, cfg.nb])
    sch.reorder(e, j0, i0, i1, p, j1)
    c = sch.get_sblock("C")
    sch.compute_at(c, i0, preserve_unit_loops=True)
    sch.set_scope(c, 0, "local")
    ci, cp, cj, ck, cq = sch.get_loops(c)[-5:]
    sch.reorder(ck, cq, ci, cp, cj)
    sch.unroll(cq)
    sch.unroll(ci)
    sch.unroll(cp)
    if cfg.nb > lanes and cfg.nb % lanes == 0:
        cj0, cj1 = sch.split(cj, [None, lanes])
        sch.unroll(cj0)
        sch.vectorize(cj1)
    else:
        sch.vectorize(cj)
    _try(_vectorize_split, sch, j1, lanes)
    sch.parallel(sch.fuse(e, j0))
    sch.decompose_reduction(c, ck)


def schedule_fft(sch: s_tir.Schedule, cfg: FFTConfig, lanes: int, kb: int, ob: int, dense: bool,
                 mh: int, mw: int) -> None:
    """Schedule every block of the FFT conv kernel (see module doc); ``mh x mw`` outputs per tile."""
    schedule_pack(sch, "P", lanes, 3)
    _forward(sch, cfg.tile // 2 + 1, kb, lanes, depthwise=not dense)
    if dense:
        _schedule_gemm(sch, cfg, lanes)
    _inverse(sch, ob, lanes)
    out = sch.get_sblock("out")
    n, o, h, w = sch.get_loops(out)
    sch.split(h, [None, mh])  # h // mh, h % mh become affine in the split loops
    sch.split(w, [None, mw])
    sch.parallel(sch.fuse(n, o))


def schedule_filter(sch: s_tir.Schedule) -> None:
    """The compile-time filter transform: each stage parallel over its outer loops."""
    for name in ("W1", "W2", "U"):
        loops = sch.get_loops(sch.get_sblock(name))
        sch.parallel(sch.fuse(*loops[:2]) if extent(sch, loops[0]) < 64 else loops[0])
