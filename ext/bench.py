"""Measurement helpers for the benchmark scripts (never used by tests).

``interleaved`` times several contenders in alternating short bursts, many
rounds, so that noise from other work on a shared 2-core machine hits them
alike; it reports each one's median and the per-round ratio to a reference.
``bench_threads``, ``output_errors`` and ``onnxruntime_session`` are shared by the
model-comparison scripts (compare_stock.py, zoo.py), so every contender runs on the
same thread count and errors are measured the same way.
"""
from __future__ import annotations

import io
import os
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


def bench_threads() -> int:
    """The thread count every contender uses: ``TVM_NUM_THREADS`` (``import ext`` sets it), also
    applied to PyTorch's intra-op pool."""
    import torch

    threads = int(os.environ["TVM_NUM_THREADS"])
    torch.set_num_threads(threads)
    return threads


def output_errors(got, ref) -> dict:
    """Max abs error and max abs error relative to the largest magnitude of ``ref`` (float64)."""
    import numpy as np

    diff = np.abs(np.asarray(got, "float64") - np.asarray(ref, "float64"))
    return {"max_abs": float(diff.max()), "max_rel": float(diff.max() / max(np.abs(ref).max(), 1e-30))}


def onnxruntime_session(model, inputs: tuple, threads: int, input_names: list[str] | None = None):
    """Export ``model`` to ONNX (TorchScript exporter, opset 17) and open an onnxruntime CPU session.

    Returns ``(run, seconds)``: ``run()`` runs the session on ``inputs`` and returns the first
    output as NumPy; ``seconds`` is the session creation time. ``input_names`` defaults to
    ``["x"]`` for one input and ``["x0", "x1", ...]`` otherwise.
    """
    import onnxruntime as ort
    import torch

    names = input_names or (["x"] if len(inputs) == 1 else [f"x{i}" for i in range(len(inputs))])
    if len(names) != len(inputs):
        raise ValueError(f"{len(names)} input names for {len(inputs)} inputs")
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs), buf, opset_version=17, input_names=names, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    t0 = time.perf_counter()
    sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
    seconds = time.perf_counter() - t0
    feed = {n: t.numpy() for n, t in zip(names, inputs)}
    return (lambda: sess.run(None, feed)[0]), seconds
