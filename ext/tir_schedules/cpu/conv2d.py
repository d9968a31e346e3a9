"""CPU schedules for the conv2d family (blocks from ``topi_kernels.conv2d``).

Blocked direct (blocks ``P``, ``C``, ``D``)::

    parallel for (n, cb, hp): P[..., 0:icb] = pack(X)               # vectorized over icb lanes
    parallel for (n, ob, oh):                                        # one output row of one channel block
      for owo in OWp / reg_n:
        acc[reg_n][ocb] = 0                                          # reg_n * ocb/lanes zmm registers
        for rc, kh, kw, ri:                                          # reduction, P broadcast, Wp streamed
          for owi in reg_n (unrolled): for oi in ocb (vectors unrolled, lanes vectorized):
            acc[owi][oi] += P[..] * Wp[..]
        C[n, ob, oh, owo*reg_n : +reg_n, :] = acc
      D[n, ob*ocb : +ocb, oh, :] = epilogue(C[...])                  # unpack to NCHW while the row is hot
                                                                     # (NCHWc activations: vector copies)

Knobs (``DirectConfig``): ``icb`` (input-channel block), ``ocb`` (output
channels per tile, a multiple of the vector width), ``reg_n`` (output columns
per tile), ``order``: ``"channels"`` runs every row of one channel block before
the next (its weights stay in L2; for large weights), ``"rows"`` runs every
channel block of one row before the next, and packs by rows too, so each
thread reads the pixels it packed itself (stride-2 56x56 layer: 0.57-0.59 ms
against 0.57-0.60 with channels first; less exposed to this VM's slow state,
see README). ``reg_n * ocb / lanes`` accumulators must fit in the 32 zmm
registers with room for the broadcast and weight vectors: <= 28.

Depthwise (``P``, ``C``, ``D``): parallel over (n, o) planes, each padded
by its own thread (stride-s columns split into s phases, so taps read
contiguous vectors), ``rows`` x ``reg_n`` register tiles, taps unrolled. NHWC direct: parallel over
(n, oh), output channels vectorized innermost, ``reg_n`` columns unrolled.
"""
from __future__ import annotations

import dataclasses
import math

from tvm import s_tir, tirx

from ..common import extent, has_block
from ..common import try_step


@dataclasses.dataclass(frozen=True)
class DirectConfig:
    """Register tile ``reg_n`` output columns x ``ocb`` output channels; input channel block ``icb``."""

    icb: int = 16
    ocb: int = 32
    reg_n: int = 7
    order: str = "channels"  # the order before this knob existed: old tuning records keep their meaning


@dataclasses.dataclass(frozen=True)
class RowConfig:
    """Row-tiled kernels (depthwise, NHWC): ``reg_n`` output columns per tile; NHWC also
    ``ocb`` output channels per tile (a divisor of O); depthwise also ``rows`` output rows
    per register tile."""

    reg_n: int = 4
    ocb: int = 0
    rows: int = 1


@dataclasses.dataclass(frozen=True)
class TileConfig(RowConfig):
    """The blocked sliding-window kernels (``depthwise_nchwc``, pooling on NCHWc): a ``RowConfig``
    tile plus the order of the parallel loop. ``"channels"``: each thread takes whole channel
    blocks (every row of a block before the next); ``"rows"``: each thread takes a band of rows of
    every block, the split of a ``rows``-ordered blocked conv before it, so a thread reads more of what
    its own core has just written. Measured in place (each kernel timed inside the model, both
    orders alternated): rows won on MobileNetV1's 112x112 depthwise layers (0.87-0.95x), channels on
    most 56x56 and smaller planes and on GoogLeNet's pools; the default stays ``channels``, the
    tuner tries both."""

    order: str = "channels"


def _try(fn, *args) -> bool:
    """Whether the schedule step ``fn(*args)`` went through (a rejected one is skipped)."""
    return try_step(lambda: (fn(*args), True)[1]) is True


def _vectorize_split(sch, loop, lanes: int) -> None:
    """Vectorize ``loop`` in ``lanes``-wide pieces when it divides, else leave it (a run-time
    extent too: LLVM's loop vectorizer takes such a loop, with a scalar tail)."""
    if not isinstance(sch.get(loop).extent, tirx.IntImm):
        return
    n = extent(sch, loop)
    if n == lanes:
        sch.vectorize(loop)
    elif n % lanes == 0:
        _, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)


def parallel_outer(sch: s_tir.Schedule, loops: list, min_prefix: int = 8):
    """Fuse the spatial ``loops`` into one parallel loop and return it.

    TVM cannot invert a fused index with a symbolic extent (a run-time image height) inside it:
    the tile regions it derived spanned images and the write-back ran past the output. So with
    a symbolic loop, the static loops before the first one are the parallel loop when they give
    ``min_prefix`` iterations or more (a channels-first conv keeps its order: each thread takes
    whole output-channel blocks and reads their weights once; putting the rows outside re-read
    a 3x3 512->512 layer's 9 MB of weights once per row, 1.35x the static kernel's time), the
    rest serial inside it; otherwise the symbolic loops go first, the fused loop starts at the
    last of them and the loops outside it stay serial."""
    symbolic = [i for i, lp in enumerate(loops) if not isinstance(sch.get(lp).extent, tirx.IntImm)]
    if symbolic:
        prefix = loops[:symbolic[0]]
        if prefix and math.prod(extent(sch, lp) for lp in prefix) >= min_prefix:
            loops = prefix
        else:
            loops = [loops[i] for i in symbolic] + [lp for i, lp in enumerate(loops) if i not in symbolic]
            sch.reorder(*loops)
            loops = loops[len(symbolic) - 1:]
    row = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(row)
    return row


def schedule_pack(sch: s_tir.Schedule, block: str, lanes: int, n_outer: int, by_rows: bool = False) -> None:
    """Padding/packing stage: parallel over the first ``n_outer`` loops, innermost vectorized;
    ``by_rows`` (blocked packs ``(n, cb, hp, wp, ci)``): rows before channel blocks."""
    b = sch.get_sblock(block)
    loops = sch.get_loops(b)
    if by_rows:
        loops = [loops[0], loops[2], loops[1], *loops[3:]]
        sch.reorder(*loops)
    parallel_outer(sch, loops[:n_outer])
    _vectorize_split(sch, loops[-1], lanes)


def schedule_direct_nchwc(sch: s_tir.Schedule, cfg: DirectConfig, lanes: int) -> None:
    """Blocks ``P`` (pack), ``C`` (blocked conv), ``D`` (unpack + epilogue); see module doc."""
    rows = cfg.order == "rows"
    if _try(sch.get_sblock, "P"):  # 1x1 stride-1 convs read X in place
        schedule_pack(sch, "P", lanes, 3, by_rows=rows)
    c = sch.get_sblock("C")
    n, ob, oh, ow, oi, rc, kh, kw, ri = sch.get_loops(c)
    owo, owi = sch.split(ow, [None, cfg.reg_n])
    vecs = []
    if cfg.ocb > lanes:
        oio, oii = sch.split(oi, [None, lanes])
        vecs = [oio]
    else:
        oii = oi
    outer = (n, oh, ob) if rows else (n, ob, oh)
    sch.reorder(*outer, owo, rc, kh, kw, ri, owi, *vecs, oii)
    row = parallel_outer(sch, list(outer))
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, owo)
    if has_block(sch, "E"):  # per-channel epilogue steps applied as the register tile is written back
        sch.reverse_compute_inline(sch.get_sblock("E"))
    _vectorize_split(sch, sch.get_loops(cw)[-1], lanes)
    sch.unroll(owi)
    for v in vecs:
        sch.unroll(v)
    sch.vectorize(oii)
    d = sch.get_sblock("D")
    blocked = len(sch.get(d).writes[0].source.shape) == 5  # NCHWc out: whole-vector copies
    if not _try(sch.reverse_compute_at, d, row):  # separate unpack pass
        parallel_outer(sch, sch.get_loops(d)[:3])
    if blocked:
        _vectorize_split(sch, sch.get_loops(d)[-1], lanes)
    sch.decompose_reduction(c, rc)


#: the largest padded plane a depthwise/pooling thread writes whole before use (of a 48 KiB L1)
PLANE_BYTES = 32 << 10


def schedule_depthwise(sch: s_tir.Schedule, cfg: RowConfig, lanes: int, interior: tuple) -> None:
    """Blocks ``P`` (phase-split padded plane), ``C`` (over padded rows and width), ``D``.

    One thread takes a whole (n, o) plane: it pads its own input plane into ``P``
    just before use (L2-resident, not a separate pass over memory), then runs
    register tiles of ``rows`` output rows x ``reg_n`` columns (vectors of
    ``reg_n``'s vector width), the taps unrolled so LLVM loads each input vector
    once for every output row that uses it, and writes each finished row block
    through the epilogue while it is in L1. A padded plane larger than
    ``PLANE_BYTES`` is written per row block instead (the rows its taps read), so
    it is read back from L1 (96x112x112 stride 2: 0.28 -> 0.15 ms with the
    interior pieces). ``interior``: ``P``'s column range read from inside the
    image (``topi_kernels.conv2d.phase_interior``), see :func:`schedule_phase_pack`. With a
    symbolic batch, height or width (``*_dyn`` candidates) the planes are still the parallel
    loop and the pad is written per row block."""
    c = sch.get_sblock("C")
    n, o, oh, ow, kh, kw = sch.get_loops(c)
    ohb, ohi = sch.split(oh, [None, cfg.rows])
    owo, owi = sch.split(ow, [None, cfg.reg_n])
    plane = parallel_outer(sch, [n, o])
    sch.reorder(plane, ohb, owo, kh, kw, ohi, owi)
    p = sch.get_sblock("P")
    _, _, hp, phases, q = sch.get(p).writes[0].source.shape
    # a plane's pad that outgrows L1 (or may: a run-time image size) is written per row block
    # (overlapping rows written twice)
    whole = all(isinstance(d, tirx.IntImm) for d in (hp, q)) and int(hp) * int(phases) * int(q) * 4 <= PLANE_BYTES
    sch.compute_at(p, plane if whole else ohb)
    schedule_phase_pack(sch, p, interior)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, owo)
    for loop in (kh, kw, ohi):
        sch.unroll(loop)
    _row_vectors(sch, owi, cw, cfg.reg_n, lanes)
    d = sch.get_sblock("D")
    if _try(sch.reverse_compute_at, d, ohb):
        dl = sch.get_loops(d)
        _vectorize_widest(sch, dl[-1], lanes)
    else:
        parallel_outer(sch, sch.get_loops(d)[:3])
    sch.decompose_reduction(c, kh)


def schedule_depthwise_nchwc(sch: s_tir.Schedule, cfg: TileConfig, lanes: int) -> None:
    """Blocks ``P`` (padded rows), ``C``, ``D`` of ``conv2d_blocked.depthwise_nchwc``: parallel over
    (image, channel block, row block), or (image, row block, channel block) with ``order="rows"``; each thread pads the rows its ``rows`` x ``reg_n`` tiles
    read (a few KiB, in L1), then per tile the taps unrolled, each a vector load and an FMA
    into ``rows * reg_n`` accumulators; the finished row block goes through the epilogue."""
    c = sch.get_sblock("C")
    n, q, oh, ow, r, kh, kw = sch.get_loops(c)
    ohb, ohi = sch.split(oh, [None, cfg.rows])
    owo, owi = sch.split(ow, [None, cfg.reg_n])
    if cfg.order == "rows":
        sch.reorder(ohb, q)
    par = sch.fuse(*((n, ohb, q) if cfg.order == "rows" else (n, q, ohb)))
    sch.parallel(par)
    sch.reorder(par, owo, kh, kw, ohi, owi, r)
    if has_block(sch, "P"):  # no pad stage when the taps read the input in place
        p = sch.get_sblock("P")
        sch.compute_at(p, par)
        _vectorize_split(sch, sch.get_loops(p)[-1], lanes)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, owo)
    _vectorize_split(sch, sch.get_loops(cw)[-1], lanes)
    for loop in (kh, kw, ohi, owi):
        sch.unroll(loop)
    _vectorize_split(sch, r, lanes)
    d = sch.get_sblock("D")
    if _try(sch.reverse_compute_inline, d):  # tiles divide the output: the epilogue on the write-back
        pass
    elif _try(sch.reverse_compute_at, d, par):
        _vectorize_split(sch, sch.get_loops(d)[-1], lanes)
    else:
        parallel_outer(sch, sch.get_loops(d)[:3])
    sch.decompose_reduction(c, kh)


def schedule_rows(sch: s_tir.Schedule, cfg: RowConfig, lanes: int, interior: tuple) -> None:
    """Blocks ``P``, ``C``, ``D`` of ``topi_kernels.conv2d.rows_nchw``: parallel over (image,
    block of ``rows`` output rows); each thread pads the input rows its block reads (every
    input channel, phase-split), then per ``ocb`` output channels and ``reg_n`` columns a
    register tile of ``ocb * rows`` row vectors: per tap one vector load per row, shared by
    ``ocb`` broadcast weights. The finished channel block goes through the epilogue in place."""
    c = sch.get_sblock("C")
    n, o, oh, ow, rc, kh, kw = sch.get_loops(c)
    ob, oi = sch.split(o, [None, cfg.ocb])
    ohb, ohi = sch.split(oh, [None, cfg.rows])
    owo, owi = sch.split(ow, [None, cfg.reg_n])
    sch.reorder(n, ohb, ob, owo, rc, kh, kw, oi, ohi, owi)
    par = sch.fuse(n, ohb)
    sch.parallel(par)
    p = sch.get_sblock("P")
    sch.compute_at(p, par)
    schedule_phase_pack(sch, p, interior)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, owo)
    for loop in (kh, kw, oi, ohi):
        sch.unroll(loop)
    _row_vectors(sch, owi, cw, cfg.reg_n, lanes)
    d = sch.get_sblock("D")
    if _try(sch.reverse_compute_at, d, ob):
        _vectorize_widest(sch, sch.get_loops(d)[-1], lanes)
    else:
        sch.parallel(sch.fuse(*sch.get_loops(d)[:3]))
    sch.decompose_reduction(c, rc)


def _row_vectors(sch: s_tir.Schedule, owi, cw, reg_n: int, lanes: int) -> None:
    """A row tile's ``reg_n`` columns as vectors of the widest width dividing them (unrolled when
    none does), and its write-back ``cw`` likewise."""
    vw = vector_width(reg_n, lanes)
    if vw:
        _, vec = sch.split(owi, [None, vw])
        sch.vectorize(vec)
        _vectorize_split(sch, sch.get_loops(cw)[-1], vw)
    else:
        sch.unroll(owi)


def schedule_phase_pack(sch: s_tir.Schedule, p, interior: tuple) -> None:
    """The phase-split pad ``P[hp, ph, q] = Xpad[hp, q*sw + ph]`` (loops ``hp, ph, q``).

    ``interior = (lo, hi, sw)``: the columns ``q`` whose ``sw`` phases all lie inside the image
    (``topi_kernels.conv2d.phase_interior``). The column loop is cut into border, interior and
    border pieces: in the interior the clamps and the bounds test simplify away, the phases run
    innermost (unrolled), and LLVM's loop vectorizer turns the ``sw`` interleaved reads into
    whole-vector loads and shuffles (stride-2 depthwise 144x56x56: 0.12 -> 0.05 ms). TVM's own
    vectorizer would load a clamped or stride-2 ramp lane by lane."""
    ph, q = sch.get_loops(p)[-2:]
    lo, hi, sw = interior
    if sw > 1:
        sch.reorder(q, ph)
        sch.unroll(ph)
    partition_interior(sch, q, lo, hi)


def partition_interior(sch: s_tir.Schedule, loop, lo: int, hi: int) -> None:
    """Cut ``loop`` into ``[0, lo)``, ``[lo, hi)`` and the rest, so that the simplifier sees the
    interior's bounds (clamps and bounds tests inside it fold away); a loop too short for an
    interior stays one loop."""
    if not all(isinstance(v, int) for v in (lo, hi)) or not isinstance(sch.get(loop).extent, tirx.IntImm):
        return  # a run-time width: one loop, bounds tested throughout
    n = extent(sch, loop)
    cuts = [c for c in (lo, min(hi, n)) if 0 < c < n]
    if cuts and min(hi, n) > lo:
        sch.loop_partition(loop, [cuts[0]] + [b - a for a, b in zip(cuts, cuts[1:])] + [None])


@dataclasses.dataclass(frozen=True)
class Conv1x1Config:
    """``rows`` output rows (whole rows: a rectangular tile) x ``ob`` output channels per
    register tile; ``rows * W / lanes * ob`` accumulators. ``cols`` > 0 (with ``rows == 1``):
    the tile is ``cols`` columns of one row instead, for rows wider than a register tile
    (160 px and up); 0, the default and every record before the knob, is whole rows."""

    rows: int = 1
    ob: int = 3
    cols: int = 0


def schedule_conv1x1(sch: s_tir.Schedule, cfg: Conv1x1Config, lanes: int) -> None:
    """Blocks ``C``, ``D``: parallel over (n, row tiles); per tile every output-channel block
    in turn (the tile's input, ``C x rows x W`` floats, stays in L1), input channels outermost
    in the register tile, the epilogue applied in the write-back straight to NCHW."""
    c = sch.get_sblock("C")
    n, o, h, w, rc = sch.get_loops(c)
    ho, hi = sch.split(h, [None, cfg.rows])
    oo, oi = sch.split(o, [None, cfg.ob])
    if cfg.cols:  # column tiles of one row: (n, row, column tile) in parallel
        wo, w = sch.split(w, [None, cfg.cols])
        outer = (n, ho, wo)
    else:
        outer = (n, ho)
    sch.reorder(*outer, oo, rc, oi, hi, w)
    px = sch.fuse(hi, w)
    vec_w = vector_width(extent(sch, px), lanes)
    pv, lane = sch.split(px, [None, vec_w])
    par = sch.fuse(*outer)
    sch.parallel(par)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, oo)
    sch.unroll(oi)
    sch.unroll(pv)
    sch.vectorize(lane)
    _try(sch.reverse_compute_inline, sch.get_sblock("D"))
    wl = sch.get_loops(cw)
    # (h, w) of the tile are one contiguous run per output channel; with one row the h loop
    # is gone (extent 1 is not a loop) and w alone is the run
    inner = sch.fuse(*wl[-2:]) if cfg.rows > 1 else wl[-1]
    _vectorize_widest(sch, inner, lanes)
    sch.decompose_reduction(c, rc)


def _vectorize_widest(sch, loop, lanes: int) -> None:
    """Vectorize ``loop`` by the widest vector dividing its extent; leave it when none does (or
    the extent is a run-time value)."""
    if not isinstance(sch.get(loop).extent, tirx.IntImm):
        return
    width = vector_width(extent(sch, loop), lanes)
    if width:
        _vectorize_split(sch, loop, width)


def vector_width(n: int, lanes: int) -> int:
    """The widest vector (``lanes``, then half of it, down to 4) dividing ``n``; 0 if none does."""
    w = lanes
    while w >= 4:
        if n % w == 0:
            return w
        w //= 2
    return 0


def schedule_nhwc(sch: s_tir.Schedule, cfg: RowConfig, lanes: int) -> None:
    """Blocks ``P`` (padded NHWC copy), ``C``, ``D`` (epilogue inlined into the write-back)."""
    schedule_pack(sch, "P", lanes, 2)
    c = sch.get_sblock("C")
    n, oh, ow, o, kh, kw, rc = sch.get_loops(c)
    owo, owi = sch.split(ow, [None, cfg.reg_n])
    oo, oi = sch.split(o, [None, cfg.ocb])
    row = sch.fuse(n, oh)
    sch.parallel(row)
    sch.reorder(row, owo, oo, kh, kw, rc, owi, oi)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, oo)
    sch.unroll(owi)
    _vectorize_split(sch, oi, lanes)
    _try(sch.reverse_compute_inline, sch.get_sblock("D"))
    sch.decompose_reduction(c, kh)
