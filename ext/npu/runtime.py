"""The NPU at run time: packed functions the VM calls, cycle counters, and the tuner's measurer.

``ext.npu.matmul`` / ``ext.npu.conv2d`` (registered from Python, called through
``relax.call_dps_packed`` like ``ext.lib.*``) run the simulator on the real tensors,
write its exact float32 result into the output and add the program's ``Stats`` to the
counters of their layer (``counters()``: layer key -> (calls, Stats); ``reset_counters()``).

``SimMeasurer`` measures NPU candidates in simulated time (cycles at the array's clock),
after checking their output on random inputs against NumPy; every other candidate goes
to the ordinary ``LocalMeasurer``. Use it as ``ext.tune(mod, ext.target.npu(), log=...,
rpc=ext.npu.SimMeasurer())``.
"""
from __future__ import annotations

import threading

import numpy as np
import tvm

from . import kernels
from .sim import Stats
from .target import parse

MATMUL = "ext.npu.matmul"
CONV2D = "ext.npu.conv2d"

_LOCK = threading.Lock()
_COUNTERS: dict = {}


def counters() -> dict:
    """Layer key -> ``(calls, Stats)`` summed over every run since the last reset."""
    with _LOCK:
        return dict(_COUNTERS)


def reset_counters() -> None:
    with _LOCK:
        _COUNTERS.clear()


def _count(layer: str, stats: Stats) -> None:
    with _LOCK:
        calls, total = _COUNTERS.get(layer, (0, Stats(rows=stats.rows, cols=stats.cols)))
        _COUNTERS[layer] = (calls + 1, total + stats)


def _np(t) -> np.ndarray:
    return np.from_dlpack(t)


def _tiling(dataflow, tm, tn, tk) -> kernels.Tiling:
    return kernels.Tiling(str(dataflow), int(tm), int(tn), int(tk))


def run_matmul(a: np.ndarray, b: np.ndarray, bias, transpose_b: bool, act: str, tiling,
               cfg) -> tuple[np.ndarray, Stats]:
    """``act(a @ b + bias)`` with ``a [..., M, K]`` and ``b [K, N]`` (``[N, K]`` when transposed) or
    ``b [..., K, N]`` with the same batch dims as ``a``: one GEMM per batch element."""
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if b.ndim == 2:  # one weight matrix: every batch row goes through one GEMM
        a2, b2 = np.ascontiguousarray(a.reshape(-1, K)), np.ascontiguousarray(b)
        out, stats = kernels.gemm(a2, b2, cfg, tiling, bias, act)
        return out.reshape(a.shape[:-1] + (N,)), stats
    a3, b3 = a.reshape(-1, M, K), np.broadcast_to(b, a.shape[:-2] + b.shape[-2:]).reshape(-1, K, N)
    outs, total = [], Stats(rows=cfg.rows, cols=cfg.cols)
    for i in range(a3.shape[0]):
        o, s = kernels.gemm(np.ascontiguousarray(a3[i]), np.ascontiguousarray(b3[i]), cfg, tiling, bias, act)
        outs.append(o)
        total = total + s
    return np.stack(outs).reshape(a.shape[:-1] + (N,)), total


@tvm.register_global_func(MATMUL, override=True)
def _matmul(*args):
    """``(a, b, [bias], transpose_b, act, dataflow, tile_m, tile_n, tile_k, model, layer, out)``."""
    *tensors, transpose_b, act, df, tm, tn, tk, model, layer, out = args
    a, b = _np(tensors[0]), _np(tensors[1])
    bias = _np(tensors[2]).reshape(-1) if len(tensors) > 2 else None
    res, stats = run_matmul(a, b, bias, bool(transpose_b), str(act), _tiling(df, tm, tn, tk), parse(str(model)))
    _np(out)[...] = res.reshape(_np(out).shape)
    _count(str(layer), stats)


@tvm.register_global_func(CONV2D, override=True)
def _conv2d(*args):
    """``(x, w, [bias], sh, sw, pt, pl, pb, pr, dh, dw, act, dataflow, tile_m, tile_n, tile_k, model, layer, out)``."""
    *tensors, sh, sw, pt, pl, pb, pr, dh, dw, act, df, tm, tn, tk, model, layer, out = args
    x, w = _np(tensors[0]), _np(tensors[1])
    bias = _np(tensors[2]).reshape(-1) if len(tensors) > 2 else None
    res, stats = kernels.conv2d(x, w, parse(str(model)), (int(sh), int(sw)), (int(pt), int(pl), int(pb), int(pr)),
                                (int(dh), int(dw)), _tiling(df, tm, tn, tk), bias, str(act))
    _np(out)[...] = res
    _count(str(layer), stats)


# -- tuning in simulated cycles ------------------------------------------------------------------

def _measure_sim(wl, cand, config: dict, target, settings):
    """Result of one NPU point: checked on random inputs, timed in simulated seconds."""
    from ..runner import CompiledCandidate, random_inputs
    from ..strategies import npu as strat
    from ..tuning.measure import Result, check_output
    from ..tuning.references import REFERENCES

    cfg = cand.config_from_dict(config)
    est = strat.estimate_for(wl, cfg)
    xs = random_inputs(wl, seed=settings.seed)
    out = CompiledCandidate(cand, wl, cfg, target).run(xs)
    fn, tol = REFERENCES[wl.op]
    rtol, atol = tol(wl)
    ok, err = check_output(out, np.asarray(fn(wl, xs), "float64"), rtol, atol)
    if not ok:
        return Result("wrong", max_error=err,
                      error=f"max abs error {err:.3g} exceeds atol {atol:.3g} + rtol {rtol:.3g}",
                      device="npu-sim")
    secs = parse(cfg.array).seconds(est.cycles)
    return Result("ok", seconds=secs, times=[secs], max_error=err,
                  error=f"simulated: {est.cycles} cycles ({est.compute_cycles} compute), "
                        f"utilization {est.utilization:.1%}", device="npu-sim")


def _sim_measurer_class():
    from ..tuning.measure import LocalMeasurer, Result

    class SimMeasurer(LocalMeasurer):
        """``LocalMeasurer`` whose NPU candidates are measured in simulated cycles (in this process:
        the simulator is deterministic NumPy, nothing to isolate); others are timed as usual
        (device ``local``). A tuning log then compares simulated array time with measured
        host time, so a layer too small to pay for the array can move to the host."""

        def measure(self, wl, cand, config, target, cutoff=None):
            if "npu" not in cand.targets:
                return super().measure(wl, cand, config, target, cutoff)
            try:
                return _measure_sim(wl, cand, config, target, self.settings)
            except Exception as err:  # noqa: BLE001 - a failing point is a record, not a crash
                return Result("failed", error=f"{type(err).__name__}: {err}", device="npu-sim")

    return SimMeasurer


def __getattr__(name):
    if name == "SimMeasurer":  # built lazily: ext.tuning imports much of ext
        cls = _sim_measurer_class()
        globals()["SimMeasurer"] = cls
        return cls
    raise AttributeError(name)
