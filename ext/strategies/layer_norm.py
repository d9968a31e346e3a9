"""Candidate table for layer normalization (CPU).

Workload convention (built by ``relax_passes.families.layernorm``): inputs
``x (rows, n)`` (trailing normalized axes flattened to ``n``), ``gamma (n,)``,
``beta (n,)``; attrs ``eps``, ``center``, ``scale``, ``out_shape`` and, for a
``layer_norm -> dropout`` pair, ``dropout`` (the rate). Candidates:
``layer_norm.fused`` (one kernel, shifted one-sweep statistics, fused
scale/shift; also group norm, whose workloads carry ``channel_run`` and ``groups``
and a per-channel ``gamma``/``beta``) and ``layer_norm.dropout`` (the same kernel for the pair: dropout
is the identity at inference, so the pair costs one kernel and no copy).
"""
from __future__ import annotations

from tvm import te

from ..target import cpu_info
from ..tir_schedules.common import create_schedule, finish
from ..tir_schedules.cpu.norm import RowConfig, schedule_layer_norm
from ..topi_kernels import norm
from ..workload import Workload
from .registry import PLEVEL, Candidate, register
from .softmax import check_rows
from ._util import lanes as _lanes


def _check(wl: Workload, target) -> str | None:
    reason = check_rows(wl, target)
    if reason:
        return reason
    n = _affine_len(wl)
    if n is None:
        return f"group norm rows of {wl.shapes[0][1]} are not whole channels of {wl.attr('channel_run')}"
    if any(tuple(s) != (n,) for s in wl.shapes[1:]) or any(d != "float32" for d in wl.dtypes):
        return f"gamma/beta must be float32 ({n},), got {wl.shapes[1:]} {wl.dtypes[1:]}"
    return None


def _affine_len(wl: Workload) -> int | None:
    """Length of gamma/beta: the row's for layer norm, the channels' (``groups * n / HW``) for
    group norm (None when a row is not whole channels)."""
    n, run = wl.shapes[0][1], wl.attr("channel_run")
    if run is None:
        return n
    return None if n % run else int(wl.attr("groups", 1)) * (n // run)


def _fused_check(wl, target):
    if wl.attr("dropout") is not None:
        return "layer_norm + dropout pair: layer_norm.dropout takes it"
    return _check(wl, target)


def _dropout_check(wl, target):
    if wl.attr("dropout") is None:
        return "no dropout after this layer_norm"
    return _check(wl, target)


def _space(wl, target):
    rows = wl.shapes[0][0]
    return [RowConfig(rows_per_task=r, lanes=_lanes(target)) for r in (1, 2, 4, 8) if r <= rows]


def _default(wl, target):
    return RowConfig(rows_per_task=1, lanes=_lanes(target))


def layer_norm_tensors(wl: Workload, pad_to: int = 1) -> list[te.Tensor]:
    """``[X, gamma, beta, Y]`` of the workload's layer_norm compute (shared with ``cuda_norm.py``);
    ``pad_to``: rows padded to whole vectors of that many lanes for the row statistics."""
    rows, n = wl.shapes[0]
    na = _affine_len(wl)
    X = te.placeholder((norm._i64(rows), norm._i64(n)), dtype=wl.dtypes[0], name="X")
    G = te.placeholder((norm._i64(na),), dtype=wl.dtypes[1], name="gamma")
    B = te.placeholder((norm._i64(na),), dtype=wl.dtypes[2], name="beta")
    Y = norm.layer_norm_rows(X, G, B, rows, n, eps=float(wl.attr("eps", 1e-5)),
                             center=bool(wl.attr("center", True)), scale=bool(wl.attr("scale", True)), pad_to=pad_to,
                             channel_run=wl.attr("channel_run"), groups=int(wl.attr("groups", 1)))
    return [X, G, B, Y]


def _builder(name):
    def build(wl, cfg: RowConfig, target):
        n = wl.shapes[0][1]
        sch = create_schedule(layer_norm_tensors(wl, pad_to=cfg.lanes if n >= 2 * cfg.lanes else 1))
        schedule_layer_norm(sch, cfg)
        return finish(sch, name)

    return build


register(Candidate("layer_norm.fused", ("llvm",), PLEVEL.BLOCKED, _fused_check, RowConfig, space=_space,
                   default=_default, build=_builder("layer_norm.fused")))
register(Candidate("layer_norm.dropout", ("llvm",), PLEVEL.SPECIALIZED, _dropout_check, RowConfig, space=_space,
                   default=_default, build=_builder("layer_norm.dropout")))
