"""Build-time measurement: a library candidate against ext's own pick, timed once and cached.

``ext.build(mod, target, libraries="measure")`` puts a :class:`LibraryTimings`
in front of the selector. For every workload where a vendor-library candidate
applies, it compiles ext's own choice (what ``libraries=False`` would pick)
and each applicable library candidate at every point of its small space (its
thread counts) with ``CompiledCandidate``, checks each
library's output against ours (a wrong or crashing library is never chosen),
times them in alternating rounds (rotating the order, so a library's spinning
thread pool does not always slow the same contender) and returns the fastest
as a history record (decision source ``"measured"``); a library must beat
ours by 10% in most rounds (``MARGIN``), so noise on shared cores does not
swap in a library that is slower in steady state. Records are cached in
memory and in a JSON file keyed by workload, target, candidate versions and
TVM version, so a rebuild costs nothing. A tuning log, when given, is asked
first.

Cost: one extra compile of ext's kernel and of each library's epilogue, plus
``rounds x (contenders) x min_seconds`` of timing (about 0.3 s) per workload.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading

import numpy as np
import tvm

from .. import bench

#: context-manager factory held around each timing race (benchmarks set a file lock here so
#: concurrent benchmarks on shared cores do not overlap; compilation stays outside it)
timing_lock = contextlib.nullcontext

#: default cache file (override with the EXT_LIBRARY_TIMINGS environment variable)
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "ext", "library_timings.json")


def _suffix(cfg, space) -> str:
    """``@threads=1`` etc. when a library has several configs, so each is timed apart."""
    if len(space) < 2:
        return ""
    from ..strategies.registry import config_to_dict

    return "@" + ",".join(f"{k}={v}" for k, v in config_to_dict(cfg).items())


#: a library must beat ext's kernel by this factor, in most rounds, to be chosen: on shared
#: cores a noisy round must not swap in a library that is slower in steady state
MARGIN = 0.9

#: pause before each burst so a library's spinning threads go idle before the next contender
SETTLE_S = 0.01


def race(calls: dict, rounds: int = 5, min_seconds: float = 0.02) -> dict:
    """Per-round mean seconds per call of each contender, in rotated-order rounds (``ext.bench.rounds``
    with this module's settle and a 2000-call cap per burst)."""
    return bench.rounds(calls, rounds, min_seconds, settle=SETTLE_S, rotate=True, max_iters=2000)


def pick(times: dict, ours: str) -> str:
    """``ours`` unless a contender's median is below ``MARGIN`` x ours and it won most rounds."""
    med = {n: statistics.median(ts) for n, ts in times.items()}
    best = min(med, key=med.get)
    if best == ours:
        return ours
    wins = sum(a < b for a, b in zip(times[best], times[ours]))
    return best if med[best] < MARGIN * med[ours] and wins > len(times[ours]) // 2 else ours


class LibraryTimings:
    """A selector history that measures library candidates against ours at build time.

    Parameters
    ----------
    target : the target being compiled for.
    inner : a tuning-log history asked first (or None).
    cache_path : JSON cache file; ``EXT_LIBRARY_TIMINGS`` or ``~/.cache/ext/library_timings.json``
        when None, no file when ``""``.
    rounds, min_seconds : timing budget per contender.
    """

    source = "measured"
    _lock = threading.Lock()

    def __init__(self, target, inner=None, cache_path: str | None = None, rounds: int = 5,
                 min_seconds: float = 0.02):
        self.target, self.inner, self.rounds, self.min_seconds = target, inner, rounds, min_seconds
        self.path = os.environ.get("EXT_LIBRARY_TIMINGS", DEFAULT_CACHE) if cache_path is None else cache_path
        self.memo: dict = {}
        self.last: dict = {}  # workload key -> {candidate: seconds or error string}

    # -- the History protocol --------------------------------------------------------------------
    def best(self, wl, target):
        if self.inner is not None:
            rec = self.inner.best(wl, target)
            if rec is not None:
                return rec
        from ..strategies.registry import REGISTRY

        libs = [c for c in REGISTRY.for_op(wl.op) if c.library and c.applies(wl, target)]
        if not libs:
            return None
        key = self._key(wl, target, libs)
        if key not in self.memo:
            self.memo[key] = self._load(key) or self._measure(wl, target, libs, key)
        rec = self.memo[key]
        return None if rec is None else (rec["candidate"], rec["config"], rec["seconds"])

    def costs(self, wl) -> dict:
        """Best measured seconds per candidate (over its configs) for ``wl`` (for the report)."""
        out = {}
        for key, rec in self.memo.items():
            if rec is not None and key.startswith(wl.key + "|"):
                for k, v in rec.get("times", {}).items():
                    if isinstance(v, float):
                        name = k.split("@", 1)[0]
                        out[name] = min(v, out.get(name, v))
        return out

    # -- measurement -------------------------------------------------------------------------------
    def _measure(self, wl, target, libs, key):
        from ..runner import CompiledCandidate, random_inputs
        from ..strategies.registry import config_to_dict
        from ..strategies.select import Selector

        ours = Selector(target, libraries=False).choose(wl)
        if ours.candidate is None:
            return None  # only libraries apply: plain selection handles that
        inputs = random_inputs(wl, seed=0)
        contenders = {ours.name: (ours.candidate, ours.config)}
        for c in libs:  # every point of a library's (small) space: its thread counts
            for cfg in c.space(wl, target):
                contenders[c.name + _suffix(cfg, c.space(wl, target))] = (c, cfg)
        calls, results, ref = {}, {}, None
        for name, (cand, cfg) in contenders.items():
            try:
                cc = CompiledCandidate(cand, wl, cfg, target)
                out = cc.run(inputs)
                if ref is None:
                    ref = out
                elif not np.allclose(out, ref, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(ref).max()))):
                    raise ValueError("output differs from ext's kernel")
                calls[name] = self._call(cc, inputs)
            except Exception as err:  # a failing or wrong candidate is never chosen
                if name == ours.name:
                    return None
                results[name] = f"failed: {type(err).__name__}: {err}"
        if len(calls) < 2:
            return None
        with timing_lock():
            rounds = race(calls, self.rounds, self.min_seconds)
        times = {n: statistics.median(ts) for n, ts in rounds.items()}
        results.update(times)
        self.last[wl.key] = results
        winner = pick(rounds, ours.name)
        cand, cfg = contenders[winner]
        rec = {"candidate": cand.name, "config": config_to_dict(cfg), "seconds": times[winner],
               "times": {k: v for k, v in results.items()}}
        self._save(key, rec)
        return rec

    @staticmethod
    def _call(cc, inputs):
        args = cc.prepare(inputs)
        out = tvm.runtime.empty(tuple(int(d) for d in cc.wl.attr("out_shape")), cc.wl.out_dtype, cc.dev)
        fn = cc.kernel["kernel"]
        return lambda: fn(*args, out)

    # -- cache -------------------------------------------------------------------------------------
    def _key(self, wl, target, libs) -> str:
        from ..target import describe

        versions = ",".join(f"{c.name}@{c.version}" for c in libs)
        return f"{wl.key}|{describe(target)}|{versions}|tvm {tvm.__version__}"

    def _read(self) -> dict:
        if not self.path or not os.path.exists(self.path):
            return {}
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}  # a damaged cache only costs a re-measurement

    def _load(self, key):
        rec = self._read().get(key)
        return rec if isinstance(rec, dict) and "candidate" in rec else None

    def _save(self, key, rec) -> None:
        if not self.path:
            return
        with self._lock:
            data = self._read()
            data[key] = rec
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
