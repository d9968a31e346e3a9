"""NPU candidates: matmul and conv2d on the simulated systolic array (``ext.target.npu``).

=============  =======  ================================================================
name           targets  what
=============  =======  ================================================================
matmul.npu     npu      ``ext.npu.matmul``: GEMM tiles on the array (batched: one GEMM per
                        batch element; a single weight matrix takes every row at once)
conv2d.npu     npu      ``ext.npu.conv2d``: im2col + GEMM (NCHW/OIHW, groups 1)
=============  =======  ================================================================

Both are ``PackedCall`` s (``needs_python``: the simulator runs in this process) and
outrank every CPU kernel (``ACCELERATOR`` plevel): on an npu target the array takes every
matmul and conv it can, the host keeps the rest (their ``llvm`` candidates). Bias and
ReLU run on the array (bias preloaded into the accumulator, ReLU in the ``MvOut``); any
other epilogue (GELU, residual...) runs after it as ext's epilogue kernel on the host.

Knobs: ``dataflow`` (ws / os), ``tile_m``, ``tile_n``, ``tile_k``, plus ``array`` (the
target's array, constant over the space, so a config alone says what it was simulated
on). The default is the feasible tiling with the fewest simulated cycles (cycles are
deterministic from shapes: ``ext.npu.kernels.estimate``, equal to the simulator's count);
the space is the best few per dataflow, which ``ext.tune`` with ``ext.npu.SimMeasurer``
measures in simulated seconds. Each decision's ``cost`` is the simulated seconds at the
array's clock and its ``reason`` gives the cycles and utilization.
"""
from __future__ import annotations

import dataclasses
import math

from ..npu import kernels
from ..npu.runtime import CONV2D, MATMUL
from ..npu.target import array_config, parse
from ..workload import Workload, conv_dims
from .libraries import epilogue_func
from .registry import PLEVEL, Candidate, PackedCall, register

#: above every CPU kernel: an accelerator takes every op it can
ACCELERATOR = PLEVEL.SPECIALIZED + 5
#: tilings per dataflow in the knob space (best first by simulated cycles)
SPACE_PER_DATAFLOW = 6
#: epilogues the array applies itself (bias into the accumulator, relu in the MvOut)
ON_ARRAY = ((), ("bias",), ("relu",), ("bias", "relu"))


@dataclasses.dataclass(frozen=True)
class NPUConfig:
    dataflow: str = "ws"
    tile_m: int = 16
    tile_n: int = 16
    tile_k: int = 16
    array: str = ""

    @property
    def tiling(self) -> kernels.Tiling:
        return kernels.Tiling(self.dataflow, self.tile_m, self.tile_n, self.tile_k)

    def describe_decision(self, decision) -> None:
        """Fill ``decision.cost`` (simulated seconds) and add cycles / utilization to its reason
        (``SelectionReport.add`` calls this for configs that have it)."""
        if not self.array or " npu: " in decision.reason:
            return
        est = estimate_for(decision.workload, self)
        cfg = parse(self.array)
        decision.cost = cfg.seconds(est.cycles)
        decision.reason = (f"{decision.reason}; npu: {est.cycles} cycles ({est.compute_cycles} compute, "
                           f"{est.dma_cycles} DMA) on {cfg.rows}x{cfg.cols} {self.dataflow}, utilization "
                           f"{est.utilization:.1%}, tiles {self.tile_m}x{self.tile_n}x{self.tile_k}")


# -- workloads as GEMMs -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GemmShape:
    """A workload as ``batch`` GEMMs of ``M x N x K``; ``bias``: applied on the array."""

    batch: int
    M: int
    N: int
    K: int
    bias: bool
    act: str


def _on_array(wl: Workload, bias_ok: bool) -> tuple[bool, str]:
    """(bias on the array, activation on the array) when the epilogue runs there; else host does it."""
    if wl.epilogue in ON_ARRAY and (bias_ok or "bias" not in wl.epilogue):
        return "bias" in wl.epilogue, "relu" if "relu" in wl.epilogue else "none"
    return False, "none"


def _bias_along(shape, axis: int, rank: int, size: int) -> bool:
    """Whether a bias of ``shape`` broadcasts along output ``axis`` only (right-aligned, size ``size``)."""
    full = (1,) * (rank - len(shape)) + tuple(int(d) for d in shape)
    return len(full) == rank and full[axis] == size and math.prod(full) == size


def matmul_shape(wl: Workload) -> GemmShape:
    a, b = wl.shapes[0], wl.shapes[1]
    M, K = int(a[-2]), int(a[-1])
    N = int(b[-2] if wl.attr("transpose_b") else b[-1])
    out = wl.attr("out_shape")
    bias_ok = len(wl.shapes) > 2 and _bias_along(wl.shapes[2], len(out) - 1, len(out), N)
    bias, act = _on_array(wl, bias_ok)
    if len(b) == 2:
        return GemmShape(1, math.prod(int(d) for d in a[:-1]), N, K, bias, act)
    return GemmShape(math.prod(int(d) for d in a[:-2]), M, N, K, bias, act)


def conv_shape(wl: Workload) -> GemmShape:
    d = conv_dims(wl)
    g = kernels.conv_geometry((d["N"], d["C"], d["H"], d["W"]), (d["O"], d["I"], d["KH"], d["KW"]),
                              wl.attr("strides", (1, 1)), wl.attr("padding", (0, 0, 0, 0)), wl.attr("dilation", (1, 1)))
    bias_ok = len(wl.shapes) > 2 and _bias_along(wl.shapes[2], 1, 4, d["O"])
    bias, act = _on_array(wl, bias_ok)
    return GemmShape(1, g["M"], d["O"], g["K"], bias, act)


def gemm_shape(wl: Workload) -> GemmShape:
    return conv_shape(wl) if wl.op == "conv2d" else matmul_shape(wl)


def estimate_for(wl: Workload, cfg: NPUConfig) -> kernels.Estimate:
    """Simulated cycles and traffic of ``wl`` under ``cfg`` (all batch elements)."""
    g = gemm_shape(wl)
    e = kernels.estimate(g.M, g.N, g.K, parse(cfg.array), cfg.tiling, g.bias)
    return kernels.Estimate(e.compute_cycles * g.batch, e.dma_cycles * g.batch, e.macs * g.batch,
                            e.dram_bytes * g.batch, e.rows, e.cols)


# -- checks, space, build ---------------------------------------------------------------------------

def _common_check(wl: Workload) -> str | None:
    if any(dt != "float32" for dt in wl.dtypes) or wl.out_dtype != "float32":
        return f"the array computes float32 only, got {'/'.join(wl.dtypes)} -> {wl.out_dtype}"
    if any(int(d) == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    if wl.attr("out_shape") is None:
        return "workload has no out_shape"
    return None


def _matmul_check(wl: Workload, target) -> str | None:
    why = _common_check(wl)
    if why:
        return why
    a, b = wl.shapes[0], wl.shapes[1]
    if len(a) < 2 or len(b) < 2:
        return "needs operands of rank >= 2"
    if len(b) > 2 and tuple(b[:-2]) != tuple(a[:-2]):
        return f"batched right operand {tuple(b)} must have the left's batch dims {tuple(a[:-2])}"
    return None


def _conv_check(wl: Workload, target) -> str | None:
    why = _common_check(wl)
    if why:
        return why
    if (wl.attr("data_layout", "NCHW"), wl.attr("kernel_layout", "OIHW")) != ("NCHW", "OIHW"):
        return f"layout {wl.attr('data_layout')}/{wl.attr('kernel_layout')} not handled (needs NCHW/OIHW)"
    if int(wl.attr("groups", 1)) != 1:
        return f"groups={wl.attr('groups')}: the im2col mapping takes dense convolutions only"
    try:
        conv_shape(wl)
    except ValueError as err:
        return str(err)
    return None


def _ranked(wl: Workload, target):
    g, cfg = gemm_shape(wl), array_config(target)
    return cfg, kernels.ranked(g.M, g.N, g.K, cfg, g.bias)


def _config(t: kernels.Tiling, cfg) -> NPUConfig:
    return NPUConfig(t.dataflow, t.tile_m, t.tile_n, t.tile_k, cfg.model())


def _space(wl: Workload, target) -> list:
    cfg, ranked = _ranked(wl, target)
    out = []
    for df in cfg.dataflows:
        out += [_config(t, cfg) for t, _ in ranked if t.dataflow == df][:SPACE_PER_DATAFLOW]
    return out


def _default(wl: Workload, target) -> NPUConfig:
    cfg, ranked = _ranked(wl, target)
    return _config(ranked[0][0], cfg)


def _epilogue(wl: Workload, g: GemmShape, out, name: str):
    """Host epilogue kernel for what the array does not apply (None when it applies it all)."""
    if wl.epilogue in ON_ARRAY and (g.bias or "bias" not in wl.epilogue):
        return None
    return epilogue_func(wl, out, 2, name)


def _tail(cfg: NPUConfig, wl: Workload) -> tuple:
    if not cfg.array:
        raise ValueError(f"npu config {cfg} names no array (it comes from the npu target's space)")
    return (cfg.dataflow, cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.array, wl.key)


def _matmul_build(wl: Workload, cfg: NPUConfig, target) -> PackedCall:
    g, out = matmul_shape(wl), tuple(int(d) for d in wl.attr("out_shape"))
    statics = (int(bool(wl.attr("transpose_b"))), g.act) + _tail(cfg, wl)
    return PackedCall(MATMUL, 3 if g.bias else 2, out, wl.out_dtype, statics,
                      _epilogue(wl, g, out, "matmul.npu"))


def _conv_build(wl: Workload, cfg: NPUConfig, target) -> PackedCall:
    g, out = conv_shape(wl), tuple(int(d) for d in wl.attr("out_shape"))
    (sh, sw), pad = wl.attr("strides", (1, 1)), wl.attr("padding", (0, 0, 0, 0))
    dh, dw = wl.attr("dilation", (1, 1))
    statics = (int(sh), int(sw), *(int(p) for p in pad), int(dh), int(dw), g.act) + _tail(cfg, wl)
    return PackedCall(CONV2D, 3 if g.bias else 2, out, wl.out_dtype, statics, _epilogue(wl, g, out, "conv2d.npu"))


def _candidate(name: str, check, build) -> Candidate:
    return register(Candidate(name, ("npu",), ACCELERATOR, check, NPUConfig, space=_space, default=_default,
                              build=build, needs_python=True))


MATMUL_NPU = _candidate("matmul.npu", _matmul_check, _matmul_build)
CONV2D_NPU = _candidate("conv2d.npu", _conv_check, _conv_build)
