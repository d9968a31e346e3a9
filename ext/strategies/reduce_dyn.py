"""Reductions with run-time extents (CPU): ``reduce.inner_dyn``, ``reduce.outer_dyn`` and
``reduce.cols_dyn``, the symbolic twins of ``strategies/reduce.py``'s kernels (the module doc of
``strategies/dynamic.py`` says how symbolic workloads are built)."""
from __future__ import annotations

from tvm import te

from ..relax_passes.symbolic import SymbolTable
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu import dynamic as sched
from ..tir_schedules.cpu.reduce import InnerConfig, OuterConfig
from ..topi_kernels import dynamic as dyn
from ..topi_kernels import reduce as red
from ._util import lanes as _lanes
from .dynamic import _float32, _static_suits
from .registry import PLEVEL, Candidate, register


# -- reduce.inner_dyn / reduce.outer_dyn ---------------------------------------------------------

def _reduce_check(wl, target):
    if wl.attr("kind") not in red.KINDS:
        return f"unknown reduction kind {wl.attr('kind')!r}"
    reason = _float32(wl)
    if reason:
        return reason
    if len(wl.shapes[0]) != 3:
        return "expects the canonical (O, R, I) form"
    return None


def _reduce_inner_check(wl, target):
    return _reduce_check(wl, target) or (None if wl.shapes[0][2] == 1 else "kept inner axis: reduce.outer_dyn")


def _reduce_cols_suits(wl, target):
    if isinstance(wl.shapes[0][1], int):
        return "static reduced extent: reduce.inner_dyn pads it to whole vectors"
    return None


def _reduce_cols_build(wl, cfg, target):
    X = te.placeholder(SymbolTable().shape(wl.shapes[0]), dtype=wl.dtypes[0], name="X")
    Y = dyn.reduce_cols(X, wl.attr("kind"), cfg.lanes)
    sch = create_schedule([X, Y])
    sched.schedule_reduce_cols(sch, cfg)
    return finish(sch, "reduce.cols_dyn")


def _reduce_outer_check(wl, target):
    return _reduce_check(wl, target) or (None if wl.shapes[0][2] != 1 else "nothing kept inside: reduce.inner_dyn")


def _reduce_build(name, schedule, padded: bool):
    def build(wl, cfg, target):
        X = te.placeholder(SymbolTable().shape(wl.shapes[0]), dtype=wl.dtypes[0], name="X")
        R = wl.shapes[0][1]
        Y = dyn.reduce_rows(X, wl.attr("kind"), pad_to=cfg.lanes if padded and R >= 2 * cfg.lanes else 1)
        sch = create_schedule([X, Y])
        schedule(sch, cfg)
        return finish(sch, name)

    return build


def _reduce_inner_default(wl, target):
    lanes = _lanes(target)
    return InnerConfig(1, 4 * lanes if wl.shapes[0][1] >= 32 * lanes else lanes)


def _reduce_outer_default(wl, target):
    lanes, I = _lanes(target), wl.shapes[0][2]
    return OuterConfig(cols=max(lanes, min(1024, -(-I // lanes) * lanes)), lanes=lanes)


register(Candidate("reduce.inner_dyn", ("llvm",), PLEVEL.BLOCKED, _reduce_inner_check, InnerConfig,
                   space=lambda wl, t: [InnerConfig(r, v * _lanes(t)) for r in (1, 2, 4, 8, 16) for v in (1, 4)],
                   default=_reduce_inner_default, build=_reduce_build("reduce.inner_dyn", sched.schedule_reduce_inner,
                                                                      True),
                   suits=_static_suits, dynamic=("outer",)))
register(Candidate("reduce.cols_dyn", ("llvm",), PLEVEL.BLOCKED, _reduce_inner_check, InnerConfig,
                   space=lambda wl, t: [InnerConfig(r, _lanes(t)) for r in (1, 2, 4, 8, 16)],
                   default=lambda wl, t: InnerConfig(1, _lanes(t)), build=_reduce_cols_build,
                   suits=_reduce_cols_suits, dynamic=("outer", "reduced")))
register(Candidate("reduce.outer_dyn", ("llvm",), PLEVEL.BLOCKED, _reduce_outer_check, OuterConfig,
                   space=lambda wl, t: [OuterConfig(c, _lanes(t)) for c in (1, 4, 16, 64)
                                        for c in [c * _lanes(t)] if c < -(-wl.shapes[0][2] // _lanes(t)) * _lanes(t)
                                        + _lanes(t)],
                   default=_reduce_outer_default, build=_reduce_build("reduce.outer_dyn", sched.schedule_reduce_outer,
                                                                      False),
                   suits=_static_suits, dynamic=("outer",)))
