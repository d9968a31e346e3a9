"""Measurement helpers for the benchmark scripts (never used by tests).

``interleaved`` times several contenders in alternating short bursts, many
rounds, so that noise from other work on a shared 2-core machine hits them
alike; it reports each one's median and the per-round ratio to a reference.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable


def burst(fn: Callable[[], object], min_seconds: float = 0.05, max_iters: int = 1000) -> float:
    """Mean seconds per call over a short burst of calls (after one warm-up call)."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or n >= max_iters:
            return elapsed / n


def interleaved(contenders: dict[str, Callable[[], object]], reference: str, rounds: int = 7,
                min_seconds: float = 0.05, settle: float = 0.25) -> dict[str, dict]:
    """Median seconds and median per-round ratio to ``reference`` for each contender.

    Rounds where the reference ran over 1.5x its best are dropped (the machine
    was busy); at least half of the rounds are always kept. ``settle`` seconds of
    sleep separate contenders: OpenBLAS worker threads keep spinning for up to
    ~0.1 s after a call (its THREAD_TIMEOUT) and would steal the cores from
    whoever runs next (measured: the next contender ran 1.8x slower).
    """
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            time.sleep(settle)
            times[name].append(burst(fn, min_seconds))
    ref = times[reference]
    best = min(ref)
    keep = [i for i, t in enumerate(ref) if t <= 1.5 * best]
    if len(keep) < (rounds + 1) // 2:
        keep = sorted(range(rounds), key=lambda i: ref[i])[: (rounds + 1) // 2]
    out = {}
    for name, ts in times.items():
        kept = [ts[i] for i in keep]
        out[name] = {"median_s": statistics.median(kept),
                     "ratio": statistics.median(ts[i] / ref[i] for i in keep),
                     "spread": (min(kept), max(kept)), "best_s": min(ts)}
    return out


def gflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e9 if seconds > 0 else float("nan")
