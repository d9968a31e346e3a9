"""The one timing harness: every benchmark script and the build-time library race time through it.

Why one: five copies with slightly different statistics made numbers from two scripts
impossible to compare and a fix in one copy never reached the others. The pieces:

* ``burst(fn, ...)``: mean seconds per call over a burst, after one warm-up call; either
  adaptive (calls until ``min_seconds`` or ``max_iters``) or a fixed ``number`` of calls,
  on a chosen ``clock`` (``time.thread_time`` for single-threaded CPU-time runs).
* ``rounds(contenders, ...)``: raw seconds per round of each contender, interleaved in
  short bursts so noise from other work on a shared 2-core machine hits them alike;
  ``settle`` seconds of sleep before each burst (OpenBLAS/OpenMP/TVM worker threads spin
  for up to ~0.1-0.2 s after a call and would steal the cores from whoever runs next:
  measured, the next contender ran 1.8x slower); ``rotate`` shifts the order by one each
  round so a spinning pool does not always slow the same contender.
* ``summarize(times, reference, ...)``: per contender the median over the kept rounds, the
  median per-round ratio to ``reference``, the 0.2/0.8 quantiles, the fastest round. Rounds
  where the reference ran over ``busy`` x its best are dropped (the machine was busy); with
  ``keep_half`` at least half of the rounds are always kept; ``busy=None`` keeps them all.
* ``interleaved(...) = summarize(rounds(...))``, the default the scripts use.
* ``Contender``: a contender that times itself (TVM's ``time_evaluator``: no Python overhead
  per call), needs untimed ``setup`` before each burst, or has its own call count
  (``calibrate``: as many calls as fit in a target burst time).

What each user reports (the statistics each used before this module, so numbers stay
comparable with older runs):

* ``bench_gemm.py``, ``demo.py``: ``interleaved``: median of the kept rounds and median per-round
  ratio to NumPy, rounds with NumPy over 1.5x its best dropped (at least half kept).
* ``compare_stock.py``, ``zoo.py``: the same against PyTorch / onnxruntime, plus the fastest round.
* ``bench_libraries.py``: the same with ``rotate=True``, plus the fastest round.
* ``bench_conv2d.py``: fixed ``--number`` calls per burst, ``--settle`` 0.3 s, wall or thread CPU
  clock; ratio = median ext/PyTorch per-round ratio over the rounds with PyTorch within 1.25x of
  its best (``busy=1.25, keep_half=False``); times = medians over all rounds; ``best`` = lowest
  per-round ratio.
* ``bench_ops.py``: calibrated bursts (~2 ms, at least 3 calls), 3 ms settle, rotated; the
  minimum over rounds (``--stat median``: median per-round ratios over all rounds, ``busy=None``).
* ``bench_fft.py``: ``Contender`` timers, median and 0.2/0.8 quantiles over all rounds.
* ``diagnose_machine.py``: single ``burst`` calls.
* ``ext/libraries/measure.py`` (``libraries="measure"``): ``rounds(rotate=True)`` with its own
  settle (10 ms) and bursts (20 ms, at most 2000 calls); its ``pick`` compares raw medians.

``bench_cuda.py`` is the exception: GPU times come from CUDA events and ``time_evaluator`` on
the device, which a host clock around Python calls cannot replace; ``bench_build.py`` times
whole builds in fresh processes (median of repeats), not calls; ``eval_cost_model.py`` re-times
its picks through the tuner's measurer (best of ``--rounds``), as the tuning log was measured.
Three of the old copies slept after each burst instead of before: the same bursts, the same gaps.
``output_errors`` and ``onnxruntime_session`` are shared by the model-comparison scripts
(compare_stock.py, zoo.py), so errors are measured the same way. ``tests/test_bench.py`` pins the
statistics on fake clocks.
"""
from __future__ import annotations

import io
import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Union


@dataclass(frozen=True)
class Contender:
    """A contender that is more than a plain callable.

    Exactly one of ``fn`` (called, timed on the harness's clock) or ``timer`` (``timer(n)``
    returns seconds per call over ``n`` calls it times itself, e.g. TVM's ``time_evaluator``).
    ``setup`` runs untimed before every burst (e.g. ``torch.set_num_threads``); ``number``
    fixes the calls per burst (required with ``timer``; ``calibrate`` picks one).
    """

    fn: Callable[[], object] | None = None
    timer: Callable[[int], float] | None = None
    setup: Callable[[], object] | None = None
    number: int | None = None

    def __post_init__(self):
        if (self.fn is None) == (self.timer is None):
            raise ValueError("Contender needs exactly one of fn (a callable to time) or timer (times n calls itself)")
        if self.number is not None and self.number < 1:
            raise ValueError(f"Contender number must be >= 1 calls per burst, got {self.number}")


ContenderLike = Union[Callable[[], object], Contender]


def burst(fn: Callable[[], object], min_seconds: float = 0.05, max_iters: int = 1000, number: int | None = None,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """Mean seconds per call over a burst, after one untimed warm-up call.

    ``number`` given: exactly that many calls; else calls until ``min_seconds`` have passed
    on ``clock`` or ``max_iters`` calls were made.
    """
    if number is not None and number < 1:
        raise ValueError(f"burst: number must be >= 1 calls, got {number}")
    if max_iters < 1 or not min_seconds >= 0:
        raise ValueError(f"burst: need max_iters >= 1 and min_seconds >= 0, got {max_iters}, {min_seconds}")
    fn()
    if number is not None:
        start = clock()
        for _ in range(number):
            fn()
        return (clock() - start) / number
    n, start = 0, clock()
    while True:
        fn()
        n += 1
        elapsed = clock() - start
        if elapsed >= min_seconds or n >= max_iters:
            return elapsed / n


def time_contender(c: ContenderLike, min_seconds: float = 0.05, max_iters: int = 1000, number: int | None = None,
                   clock: Callable[[], float] = time.perf_counter, name: str = "contender") -> float:
    """One burst of a plain callable or a :class:`Contender` (its own ``number`` wins)."""
    if not isinstance(c, Contender):
        return burst(c, min_seconds, max_iters, number, clock)
    if c.setup is not None:
        c.setup()
    n = c.number or number
    if c.timer is None:
        return burst(c.fn, min_seconds, max_iters, n, clock)
    if n is None:
        raise ValueError(f"{name} times itself (Contender.timer): give it a number of calls (ext.bench.calibrate)")
    c.timer(1)  # warm-up call, as burst makes one
    return c.timer(n)


def calibrate(c: ContenderLike, seconds: float, min_calls: int = 3, max_calls: int = 2000) -> Contender:
    """``c`` with a fixed number of calls per burst: as many as fit in ``seconds`` judged by one
    timed call (after a warm-up), clamped to ``[min_calls, max_calls]``."""
    c = c if isinstance(c, Contender) else Contender(fn=c)
    first = time_contender(replace(c, number=1))
    return replace(c, number=max(min_calls, min(max_calls, int(seconds / max(first, 1e-7)))))


def rounds(contenders: dict[str, ContenderLike], rounds: int = 7, min_seconds: float = 0.05, settle: float = 0.25,
           rotate: bool = False, *, max_iters: int = 1000, number: int | None = None,
           clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each contender in each round: ``{name: [s_round0, s_round1, ...]}``.

    Every round runs one burst of every contender, ``settle`` seconds of sleep before each
    burst; ``rotate`` starts round ``r`` at contender ``r`` (mod the count).
    """
    if not contenders:
        raise ValueError("rounds: no contenders to time")
    if rounds < 1:
        raise ValueError(f"rounds: need at least 1 round, got {rounds}")
    if settle < 0:
        raise ValueError(f"rounds: settle must be >= 0 seconds, got {settle}")
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names) if rotate else 0
        for n in names[shift:] + names[:shift]:
            time.sleep(settle)
            times[n].append(time_contender(contenders[n], min_seconds, max_iters, number, clock, name=n))
    return times


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (NumPy's default method) of a non-empty list."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def kept_rounds(ref: list[float], busy: float | None = 1.5, keep_half: bool = True) -> list[int]:
    """Indices of the rounds whose reference time is within ``busy`` x its best (all with ``None``);
    with ``keep_half``, the fastest half of the rounds when fewer than that qualify."""
    n = len(ref)
    if busy is None:
        return list(range(n))
    keep = [i for i, t in enumerate(ref) if t <= busy * min(ref)]
    if keep_half and len(keep) < (n + 1) // 2:
        keep = sorted(sorted(range(n), key=lambda i: ref[i])[: (n + 1) // 2])
    return keep


def summarize(times: dict[str, list[float]], reference: str, busy: float | None = 1.5,
              keep_half: bool = True) -> dict[str, dict]:
    """Statistics of raw per-round times (``rounds``' result) against ``reference``.

    Per contender: ``median_s`` and ``ratio`` (median per-round time ratio to the reference)
    over the kept rounds (``kept_rounds``), ``q20_s``/``q80_s`` and ``spread`` (min, max) of the
    kept rounds, ``best_s`` (fastest round of all), ``best_ratio`` (lowest per-round ratio),
    ``median_all_s`` and ``ratio_all`` (over every round) and ``kept`` (how many rounds).
    """
    if reference not in times:
        raise ValueError(f"summarize: reference {reference!r} is not a contender ({', '.join(times)})")
    ref = times[reference]
    bad = {n: len(ts) for n, ts in times.items() if len(ts) != len(ref) or not ts}
    if bad or not ref:
        raise ValueError(f"summarize: every contender needs the reference's {len(ref)} (>= 1) rounds; got {bad}")
    if busy is not None and busy < 1:
        raise ValueError(f"summarize: busy must be >= 1 (a factor over the reference's best round), got {busy}")
    keep = kept_rounds(ref, busy, keep_half)
    out = {}
    for name, ts in times.items():
        kept = [ts[i] for i in keep]
        ratios = [t / r for t, r in zip(ts, ref)]
        out[name] = {"median_s": statistics.median(kept), "ratio": statistics.median(ratios[i] for i in keep),
                     "q20_s": _quantile(kept, 0.2), "q80_s": _quantile(kept, 0.8), "spread": (min(kept), max(kept)),
                     "best_s": min(ts), "best_ratio": min(ratios), "median_all_s": statistics.median(ts),
                     "ratio_all": statistics.median(ratios), "kept": len(keep)}
    return out


def interleaved(contenders: dict[str, ContenderLike], reference: str, rounds: int = 7, min_seconds: float = 0.05,
                settle: float = 0.25, rotate: bool = False, **kw) -> dict[str, dict]:
    """``summarize(rounds(...), reference)``: median seconds, median per-round ratio to ``reference``
    (busy rounds dropped, at least half kept) and the fastest round of each contender. ``kw`` go
    to ``rounds`` (``max_iters``, ``number``, ``clock``)."""
    if reference not in contenders:
        raise ValueError(f"interleaved: reference {reference!r} is not a contender ({', '.join(contenders)})")
    return summarize(_rounds(contenders, rounds, min_seconds, settle, rotate, **kw), reference)


_rounds = rounds  # ``interleaved`` takes a ``rounds`` count that shadows the function


def gflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e9 if seconds > 0 else float("nan")


def output_errors(got, ref) -> dict:
    """Max abs error and max abs error relative to the largest magnitude of ``ref`` (float64)."""
    import numpy as np

    diff = np.abs(np.asarray(got, "float64") - np.asarray(ref, "float64"))
    return {"max_abs": float(diff.max()), "max_rel": float(diff.max() / max(np.abs(ref).max(), 1e-30))}


def _onnx_input_names(n: int) -> list[str]:
    return ["x"] if n == 1 else [f"x{i}" for i in range(n)]


def onnxruntime_session(model, inputs: tuple, threads: int, input_names: list[str] | None = None):
    """Export ``model`` to ONNX (TorchScript exporter, opset 17) and open an onnxruntime CPU session.

    Returns ``(run, seconds)``: ``run()`` runs the session on ``inputs`` and returns the first
    output as NumPy; ``seconds`` is the session creation time. ``input_names`` defaults to
    ``["x"]`` for one input and ``["x0", "x1", ...]`` otherwise.
    """
    names = input_names or _onnx_input_names(len(inputs))
    sess, seconds = onnxruntime_export(model, inputs, threads, names)
    feed = {n: t.numpy() for n, t in zip(names, inputs)}
    return (lambda: sess.run(None, feed)[0]), seconds


def onnxruntime_export(model, inputs: tuple, threads: int, input_names: list[str], *,
                       output_names: list[str] | None = None, dynamic_axes: dict | None = None,
                       profile_prefix: str | None = None):
    """``(session, seconds)``: ``model`` exported as :func:`onnxruntime_session` does, with
    ``dynamic_axes`` (``{name: {axis: label}}``, e.g. a cache's past length) left open;
    ``profile_prefix``: onnxruntime's per-node profiling on, its JSON written there."""
    import onnxruntime as ort

    if len(input_names) != len(inputs):
        raise ValueError(f"{len(input_names)} input names for {len(inputs)} inputs")
    data = onnx_export(model, inputs, input_names, output_names=output_names, dynamic_axes=dynamic_axes)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    t0 = time.perf_counter()
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return sess, time.perf_counter() - t0


def onnx_export(model, inputs: tuple, input_names: list[str] | None = None, *, output_names: list[str] | None = None,
                dynamic_axes: dict | None = None) -> bytes:
    """``model`` as the ONNX file (bytes) onnxruntime runs here: the TorchScript exporter, opset 17."""
    import torch

    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs), buf, opset_version=17,
                          input_names=input_names or _onnx_input_names(len(inputs)), output_names=output_names,
                          dynamic_axes=dynamic_axes, dynamo=False)
    return buf.getvalue()


def onnxruntime_op_profile(model, inputs: tuple, threads: int, runs: int = 10) -> list[dict]:
    """onnxruntime's own per-op-type time for ``model``: rows ``{"op", "nodes", "ms"}`` (ms per
    run, after 3 warm-up runs), largest first; its profiler's JSON is removed."""
    import json
    import os
    import tempfile
    from collections import defaultdict

    names = _onnx_input_names(len(inputs))
    with tempfile.TemporaryDirectory() as tmp:
        sess, _ = onnxruntime_export(model, inputs, threads, names, profile_prefix=os.path.join(tmp, "ort"))
        feed = {n: t.numpy() for n, t in zip(names, inputs)}
        for _ in range(3 + runs):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    seen, ms, nodes = defaultdict(int), defaultdict(float), defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        seen[e["name"]] += 1
        if seen[e["name"]] > 3:  # past the warm-up runs
            op = e["args"]["op_name"]
            ms[op] += e["dur"] / 1e3 / runs
            nodes[op].add(e["name"])
    return sorted(({"op": op, "nodes": len(nodes[op]), "ms": t} for op, t in ms.items()), key=lambda r: -r["ms"])
