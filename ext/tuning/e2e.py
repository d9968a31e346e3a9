"""End-to-end check: a tuned model must never run slower than the untuned one.

Why: each tuning record times one kernel alone, and a kernel that wins alone can
lose inside the model (its neighbours' data layouts, what stays in cache, the
thread pool's state between kernels). Only the whole model tells; so at the
end of a tuning run ``check`` builds the model twice, with the log's choices and
untuned, runs both on the same inputs in the same process and times them in
interleaved rounds (order alternating each round; each round a short burst of
calls, ``ext.bench.burst``); the ratio is the median of the per-round
``tuned / untuned`` times.

Two thresholds. Keeping the tuned choices needs a median ratio of at most
``1 + min_tol`` (2%), whatever the noise: on a noisy machine the check then
falls back to the untuned build, which can lose a gain but never slow the
model. Bisection, which looks for the culprits, calls a subset "slower beyond
noise" when its median ratio exceeds ``1 + tol``, where ``tol`` is the larger of
``min_tol`` and half the interquartile range of the per-round ratios (the
spread this machine showed in that very comparison). (A 900 s ResNet-18 run
in a slow spell of this VM kept choices at 1.09x, inside a 0.96-1.35 spread,
before the strict rule.)

When the tuned build is slower, bisection finds the culprits among the tasks
whose tuned choice differs from the untuned one ("changed"): the set is split
in halves, each half alone tuned (every other task untuned) is timed against
the untuned build, and a half that is slower is split again, down to single
choices, which are dropped. If neither half is slower alone but the two are
together, the slower half is dropped whole. Then the kept choices are timed
together once more; if they are still slower, all of them are dropped. A
choice that is slower in place but outweighed by the gains of the others is
kept: the check guarantees the model, not each kernel (per-task ablation would
cost one build per task).

Dropping writes ``dropped`` records (``log.py``), with the reason, for every
point of the task's workload that the ``History`` would otherwise prefer to
its untuned choice (the points measured faster than that baseline), so
``ext.build(..., tuning_log=log)`` uses the default there; a later run that
finds a new best for the task is checked again.

Per-kernel measurement (``measure.py``) runs with warm caches: the kernel is
timed in repeated calls on the same inputs, on the thread pool the model uses
(the worker inherits ``TVM_NUM_THREADS``). That matches how the model runs for
activations (each kernel reads what the previous one has just written) and,
on the development VM (lscpu: a 260 MB L3), for weights as well: a whole
ResNet-50 (100 MB of packed weights) stays in the last-level cache between
inferences, so a flushed cache would time DRAM reads the model never does
(TVM's ``cache_flush_cpu_non_first_arg`` would be the tool on a machine with a
small last-level cache). Where the two differ (a small layer's weights in L2
alone, in L3 inside the model), this check is what decides.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable

from ..strategies.registry import config_to_dict
from .log import TuningLog, make_dropped, make_record, point_key

#: smallest slowdown that counts (below it: noise)
MIN_TOL = 0.02


@dataclasses.dataclass
class Comparison:
    """Per-round seconds of a build with some tuned choices (``tuned``) and of the untuned build."""

    tuned: list
    untuned: list

    @property
    def ratios(self) -> list[float]:
        return [t / u for t, u in zip(self.tuned, self.untuned)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    def tol(self, min_tol: float = MIN_TOL) -> float:
        r = sorted(self.ratios)
        if len(r) < 4:
            return min_tol
        q1, q3 = r[len(r) // 4], r[(3 * len(r)) // 4]
        return max(min_tol, (q3 - q1) / 2)

    def slower(self, min_tol: float = MIN_TOL) -> bool:
        """Slower beyond this comparison's noise (bisection's test)."""
        return self.ratio > 1 + self.tol(min_tol)

    def keepable(self, min_tol: float = MIN_TOL) -> bool:
        """At most ``1 + min_tol`` the untuned time, noise or not (the test for keeping choices)."""
        return self.ratio <= 1 + min_tol

    def describe(self, min_tol: float = MIN_TOL) -> str:
        r = self.ratios
        return (f"{self.ratio:.3f}x the untuned time (median of {len(r)} interleaved rounds, "
                f"spread {min(r):.3f}-{max(r):.3f}, noise tolerance {self.tol(min_tol):.1%})")


def find_slow_choices(changed: list[str], compare: Callable[[frozenset], Comparison],
                      min_tol: float = MIN_TOL) -> tuple[dict, Comparison | None, Comparison | None, int]:
    """Bisection over ``changed`` task keys (module doc).

    Returns ``(dropped {key: reason}, comparison of all changed, comparison of the kept ones or None
    when nothing is kept or nothing was dropped, number of comparisons)``.
    """
    count = [0]

    def cmp(keys) -> Comparison:
        count[0] += 1
        return compare(frozenset(keys))

    dropped: dict[str, str] = {}
    whole = cmp(changed)
    if whole.keepable(min_tol):
        return dropped, whole, None, count[0]

    def bisect(keys: list[str], c: Comparison) -> None:
        if len(keys) == 1:
            dropped[keys[0]] = f"end-to-end check: with only this choice tuned the model ran {c.describe(min_tol)}"
            return
        a, b = keys[: len(keys) // 2], keys[len(keys) // 2:]
        ca, cb = cmp(a), cmp(b)
        slow_a, slow_b = ca.slower(min_tol), cb.slower(min_tol)
        if slow_a:
            bisect(a, ca)
        if slow_b:
            bisect(b, cb)
        if not (slow_a or slow_b):
            worse, cw = (a, ca) if ca.ratio >= cb.ratio else (b, cb)
            for k in worse:
                dropped[k] = (f"end-to-end check: {len(keys)} tuned choices together ran {c.describe(min_tol)}; "
                              f"neither half alone was slower, this half ({len(worse)} choices) {cw.ratio:.3f}x")

    bisect(list(changed), whole)
    kept = [k for k in changed if k not in dropped]
    final = cmp(kept) if kept else None
    if final is not None and not final.keepable(min_tol):
        for k in kept:
            dropped[k] = (f"end-to-end check: the {len(kept)} kept tuned choices together still ran "
                          f"{final.describe(min_tol)}")
        final = None
    return dropped, whole, final, count[0]


@dataclasses.dataclass
class E2EResult:
    """What the end-to-end check found (times in seconds; ``dropped``: task key -> reason)."""

    changed: list
    dropped: dict
    untuned_s: float | None = None
    tuned_s: float | None = None  # the final tuned build (after drops)
    ratio: float | None = None
    spread: tuple | None = None
    before_ratio: float | None = None  # all changed choices, before any drop
    comparisons: int = 0
    seconds: float = 0.0
    max_abs_diff: float | None = None

    @property
    def summary(self) -> str:
        head = f"end-to-end check ({self.seconds:.1f} s, {self.comparisons} comparisons): "
        if not self.changed:
            return head + "every tuned choice equals the untuned one; the tuned build is the untuned build"
        if self.ratio is None:
            return (head + f"all {len(self.changed)} tuned choices dropped (together {self.before_ratio:.3f}x the "
                    "untuned time); the tuned build is the untuned build")
        drop = f", dropped {len(self.dropped)} of {len(self.changed)} tuned choices" if self.dropped else ""
        return (head + f"tuned {self.tuned_s * 1e3:.3f} ms vs untuned {self.untuned_s * 1e3:.3f} ms, "
                f"{self.ratio:.3f}x (median of per-round ratios, spread {self.spread[0]:.3f}-{self.spread[1]:.3f})"
                + drop)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["summary"] = self.summary
        return out


class _Pinned:
    """A history that answers with fixed decisions for some workloads (None elsewhere: untuned)."""

    def __init__(self, decisions: dict):
        self.decisions = decisions

    def best(self, wl, target):
        d = self.decisions.get(wl.key)
        if d is None or d.candidate is None:
            return None
        return d.candidate.name, config_to_dict(d.config), float(d.cost or 1e-9)


def decisions(tasks, target, log_path) -> tuple[dict, dict]:
    """``({key: tuned Decision}, {key: untuned Decision})`` for ``tasks``, as ``ext.build`` would choose
    with and without the tuning log."""
    from ..strategies.select import Selector
    from .apply import load_history

    hist, model = load_history(log_path, target)
    tuned = Selector(target, history=hist, model=model)
    plain = Selector(target)
    return ({t.workload.key: tuned.choose(t.workload) for t in tasks},
            {t.workload.key: plain.choose(t.workload) for t in tasks})


def same_choice(a, b) -> bool:
    return a.name == b.name and config_to_dict(a.config) == config_to_dict(b.config)


def model_inputs(mod, seed: int = 0) -> list:
    """NumPy inputs for ``mod["main"]``: floats ~ N(0, 1), integers 0 (a valid token id / index)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        sinfo = p.ty
        shape = getattr(sinfo, "shape", None)
        try:
            dims = [int(d) for d in shape.values]
        except (AttributeError, TypeError):
            name = str(getattr(p, "name", p))
            raise ValueError(f"end-to-end check: input {name!r} has no static shape ({sinfo}); "
                             "pass inputs=") from None
        dtype = str(sinfo.dtype)
        out.append(rng.standard_normal(dims).astype(dtype) if dtype.startswith(("float", "bfloat"))
                   else np.zeros(dims, dtype))
    return out


class ModelTimer:
    """Builds ``mod`` with some tuned choices pinned and times it against the untuned build."""

    #: tuned builds kept alive at once (besides the untuned one)
    KEEP = 3

    def __init__(self, mod, target, tuned: dict, inputs, rounds: int = 7, min_seconds: float = 0.05,
                 settle: float = 0.1):
        import tvm

        self.mod, self.target, self.tuned = mod, target, tuned
        self.rounds, self.min_seconds, self.settle = int(rounds), float(min_seconds), float(settle)
        self.dev = tvm.cpu()
        self.args = [tvm.runtime.tensor(x, self.dev) for x in inputs]
        self._vms: dict = {}

    def vm(self, keys: frozenset):
        if keys not in self._vms:
            from tvm import relax

            from ..pipeline import pipeline
            from ..target import target_kind

            pinned = _Pinned({k: self.tuned[k] for k in keys})
            ex = relax.build(self.mod, self.target, relax_pipeline=pipeline(self.target, history=pinned),
                             tir_pipeline=target_kind(self.target).tir_pipeline)
            old = [k for k in self._vms if k]  # keep the untuned build and the last few: weights are big
            for k in old[: max(0, len(old) - self.KEEP + 1)]:
                del self._vms[k]
            self._vms[keys] = relax.VirtualMachine(ex, self.dev)
        return self._vms[keys]

    def run(self, keys: frozenset):
        out = self.vm(keys)["main"](*self.args)
        return out[0] if not hasattr(out, "numpy") else out

    def compare(self, keys: frozenset) -> Comparison:
        from ..bench import burst

        fns = {"tuned": lambda vm=self.vm(keys): vm["main"](*self.args),
               "untuned": lambda vm=self.vm(frozenset()): vm["main"](*self.args)}
        times = {"tuned": [], "untuned": []}
        for r in range(self.rounds):
            for name in (("tuned", "untuned") if r % 2 == 0 else ("untuned", "tuned")):
                time.sleep(self.settle)
                times[name].append(burst(fns[name], self.min_seconds))
        return Comparison(times["tuned"], times["untuned"])


def drop(log: TuningLog, target, wl, untuned, reason: str, tuned=None) -> int:
    """Append ``dropped`` records so the ``History`` picks ``untuned`` (or nothing) for ``wl``; returns how many.

    Every valid ``ok`` point of ``wl`` measured faster than the untuned choice's own record (all of
    them when that has no ``ok`` record) is dropped; a tuned choice with no record (the cost model's
    pick) gets a ``dropped`` record of its own so the model does not pick it again.
    """
    valid, _ = log.split(target, warn=False)
    mine = [r for r in valid if r.workload == wl.key]
    skip = {r.key for r in mine if r.status in ("wrong", "dropped")}
    base_key = point_key(wl.key, untuned.name, config_to_dict(untuned.config)) if untuned.candidate else None
    base = [r.seconds for r in mine if r.key == base_key and r.status == "ok" and r.key not in skip]
    limit = min(base) if base else math.inf
    n, seen = 0, set()
    for r in mine:
        if r.status == "ok" and r.key not in skip and r.key != base_key and r.seconds <= limit and r.key not in seen:
            seen.add(r.key)
            log.append(make_dropped(r, reason))
            n += 1
    if n == 0 and tuned is not None and tuned.candidate is not None:
        from .measure import Result

        cfg = config_to_dict(tuned.config)
        if point_key(wl.key, tuned.name, cfg) not in skip:
            log.append(make_record(wl, target, tuned.candidate, cfg, Result("dropped", error=reason)))
            n += 1
    return n


def check(mod, target, log, *, tasks=None, inputs=None, rounds: int = 7, min_seconds: float = 0.05,
          min_tol: float = MIN_TOL, compare: Callable[[frozenset], Comparison] | None = None,
          say: Callable[[str], None] | None = None) -> E2EResult:
    """Time ``mod`` built with the tuning ``log`` against the untuned build; drop tuned choices that make
    it slower (module doc) by appending ``dropped`` records to the log.

    Parameters
    ----------
    mod : the Relax IRModule that was tuned.
    target : its target (local CPU: the check runs the model here).
    log : path of the tuning log.
    tasks : ``extract_tasks(mod, target)`` when already known.
    inputs : NumPy inputs of ``mod["main"]`` (default ``model_inputs``).
    rounds, min_seconds : interleaved rounds and burst length of each comparison.
    min_tol : the smallest slowdown that counts.
    compare : ``f(frozenset of task keys) -> Comparison`` instead of building and timing (tests).
    say : ``f(line)`` for progress lines.
    """
    from .tasks import extract_tasks

    t0 = time.time()
    tasks = tasks if tasks is not None else extract_tasks(mod, target)
    path = log.path if isinstance(log, TuningLog) else log
    tuned, untuned = decisions(tasks, target, path)
    changed = [k for k in tuned if not same_choice(tuned[k], untuned[k])]
    if not changed:
        return E2EResult([], {}, seconds=time.time() - t0)
    timer = None
    if compare is None:
        timer = ModelTimer(mod, target, tuned, inputs if inputs is not None else model_inputs(mod),
                           rounds=rounds, min_seconds=min_seconds)
        compare = timer.compare
    if say:
        say(f"end-to-end check: {len(changed)} of {len(tasks)} tasks tuned away from the untuned choice; "
            "timing the tuned build against the untuned one")
    dropped, whole, final, n = find_slow_choices(changed, compare, min_tol)
    tlog = log if isinstance(log, TuningLog) else TuningLog(path)
    wls = {t.workload.key: t.workload for t in tasks}
    for key, reason in dropped.items():
        drop(tlog, target, wls[key], untuned[key], reason, tuned[key])
        if say:
            say(f"  dropped {tuned[key].name} for {key[:60]}: {reason}")
    last = whole if not dropped else final
    res = E2EResult(changed, dropped, before_ratio=whole.ratio, comparisons=n)
    if last is not None:
        res.tuned_s, res.untuned_s = statistics.median(last.tuned), statistics.median(last.untuned)
        res.ratio, res.spread = last.ratio, (min(last.ratios), max(last.ratios))
    if timer is not None and last is not None:
        import numpy as np

        kept = frozenset(k for k in changed if k not in dropped)
        res.max_abs_diff = float(np.abs(timer.run(kept).numpy().astype("float64")
                                        - timer.run(frozenset()).numpy().astype("float64")).max())
    res.seconds = time.time() - t0
    if say:
        say(res.summary)
    return res
