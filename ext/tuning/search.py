"""The search over (candidate, config) for each task, guided by the xgboost cost model.

Space of a task: every candidate that applies to the workload (tuning ignores
the ``suits`` heuristic), its default config first, then its knob space.

Loop (until the time budget is spent, or every task used its trials or space)::

    pick the task with the largest  weight / (1 + trials so far)
        (weight = uses x best measured seconds, or a flops estimate)
    batch: on a task's first visit only the Selector's untuned choice and each
           candidate's default (every task gets a baseline first); then the cost model's best predicted unmeasured
           points, plus a share ``explore`` of random unmeasured points
    measure each point (subprocess, time limit, reference check), append its record
    retrain the cost model on every valid record of the log (all workloads)

Resuming: points with a final record in the log (``ok``/``wrong``/``failed``/
``timeout``, valid provenance) are never measured again; their results seed
each task's best. ``infra`` records (the measuring machinery failed) are not
final: those points are measured again. A trial's cost is bounded by the
measurer's timeout; the loop stops before a measurement that the remaining
budget can't cover (last trial's duration as the estimate).

Sharing a log: before every measurement the tuner reads what other tuners
appended since its last read and skips points they measured (two tuners that
start the same point at the same moment can still both measure it: there are
no claims). Before the first measurement it checks that the log can be written
and asks the measurer to check its devices (``preflight``): both fail with an
error naming the path or address instead of losing a measurement.
"""
from __future__ import annotations

import dataclasses
import random
import sys
import time

from ..strategies.registry import REGISTRY, config_to_dict
from ..workload import Workload
from .cost_model import CostModel
from .log import FINAL_STATUSES, TuningLog, make_record, point_key
from .tasks import Task


@dataclasses.dataclass
class Point:
    cand: object
    config: object
    cfg: dict
    key: tuple


def task_space(wl: Workload, target, registry=REGISTRY, remote: bool = False) -> list[Point]:
    """Every (candidate, config) of ``wl``: candidates by plevel (high first), default config first."""
    out, seen = [], set()
    # remote devices run stock TVM servers: kernels that need ext's Python (libraries) stay local
    cands = [c for c in registry.for_op(wl.op) if c.applies(wl, target)
             and not (remote and (c.needs_python or getattr(c, "library", None)))]
    for cand in sorted(cands, key=lambda c: -c.plevel):
        for cfg in [cand.default_config(wl, target)] + list(cand.space(wl, target) or []):
            d = config_to_dict(cfg)
            key = point_key(wl.key, cand.name, d)
            if key not in seen:
                seen.add(key)
                out.append(Point(cand, cfg, d, key))
    return out


@dataclasses.dataclass
class TaskState:
    """Progress of one task in this run."""

    task: Task
    points: list
    index: int = 0
    total: int = 1
    trials: int = 0
    failures: int = 0
    resumed: int = 0
    best: tuple | None = None  # (seconds, candidate name, config dict)
    default_key: tuple | None = None
    default_seconds: float | None = None
    visited: bool = False

    @property
    def best_seconds(self) -> float | None:
        return self.best[0] if self.best else None

    @property
    def best_gflops(self) -> float | None:
        return self.task.workload.flops / self.best[0] / 1e9 if self.best else None

    def note(self, key: tuple, cand_name: str, cfg: dict, status: str, seconds: float | None) -> None:
        if status == "ok" and (self.best is None or seconds < self.best[0]):
            self.best = (seconds, cand_name, cfg)
        if key == self.default_key and status == "ok":
            self.default_seconds = seconds


@dataclasses.dataclass
class TuneSummary:
    """What ``ext.tune`` did: per-task rows, budgets, stale/malformed counts."""

    log: str
    target: str
    tasks: list
    elapsed: float
    trials: int
    stopped: str
    stale: dict
    malformed: int
    invalid: int = 0  # records skipped: config outside its candidate's knob space, unknown candidate...
    #: the scheduler's estimated model latency: ``tuned_s`` / ``untuned_s`` (sums of uses x seconds)
    estimate: dict = dataclasses.field(default_factory=dict)
    #: the end-to-end check (``e2e.E2EResult.to_json()``), when one ran
    e2e: dict | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def table(self) -> str:
        head = ("task", "workload", "uses", "trials", "fail", "best candidate", "config", "ms", "GFLOPS",
                "vs untuned")
        rows = [head]
        for i, t in enumerate(self.tasks):
            cfg = ",".join(f"{k}={v}" for k, v in (t["config"] or {}).items()) or "-"
            wk = t["workload"] if len(t["workload"]) <= 48 else t["workload"][:45] + "..."
            speed = f"{t['default_seconds'] / t['seconds']:.2f}x" if t["seconds"] and t["default_seconds"] else "-"
            rows.append((str(i), wk, str(t["uses"]), f"{t['trials']}(+{t['resumed']})", str(t["failures"]),
                         t["candidate"] or "-", cfg, f"{t['seconds'] * 1e3:.3f}" if t["seconds"] else "-",
                         f"{t['gflops']:.1f}" if t["gflops"] else "-", speed))
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(c.ljust(x) for c, x in zip(r, w)) for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        foot = (f"{self.trials} trials in {self.elapsed:.1f} s ({self.stopped}); log {self.log}; "
                f"stale records: {sum(self.stale.values())}" + (f" ({self.stale})" if self.stale else "")
                + (f"; malformed lines skipped: {self.malformed}" if self.malformed else "")
                + (f"; invalid records skipped: {self.invalid}" if self.invalid else ""))
        out = lines + [foot]
        est = self.estimate
        if est.get("untuned_s"):
            out.append(f"estimated model latency (sum of uses x kernel time): {est['tuned_s'] * 1e3:.3f} ms tuned, "
                       f"{est['untuned_s'] * 1e3:.3f} ms untuned ({est['tuned_s'] / est['untuned_s']:.3f}x)")
        if self.e2e:
            out.append(self.e2e.get("summary", ""))
        return "\n".join(out)


class Tuner:
    """Tune ``tasks`` for ``target``, appending to ``log`` (see the module doc).

    Parameters
    ----------
    trials : measurements per task in this run (None: the whole space).
    seconds : wall-clock budget of this run (None: no limit).
    batch : points per round; ``explore`` of them random.
    progress : ``f(state, tuner)`` after every measurement (e.g. ``ProgressPrinter``).
    on_record : ``f(record)`` after every record is written.
    """

    def __init__(self, tasks, target, log: TuningLog, measurer, *, trials: int | None = None,
                 seconds: float | None = None, batch: int = 8, explore: float = 0.25, seed: int = 0,
                 model: CostModel | None = None, progress=None, on_record=None, registry=REGISTRY):
        if trials is not None and int(trials) < 1:
            raise ValueError(f"trials must be a positive integer or None, got {trials!r}")
        if seconds is not None and float(seconds) <= 0:
            raise ValueError(f"seconds must be positive or None, got {seconds!r}")
        self.tasks, self.target, self.log, self.measurer = list(tasks), target, log, measurer
        self.trials, self.seconds = (int(trials) if trials else None), (float(seconds) if seconds else None)
        self.batch, self.explore, self.rng = max(1, int(batch)), float(explore), random.Random(seed)
        self.model = model or CostModel(seed=seed)
        self.progress, self.on_record, self.registry = progress, on_record, registry

    def _states(self, valid):
        from ..strategies.select import Selector

        measured = {r.key for r in valid if r.status in FINAL_STATUSES}
        # never a task's best: points measured wrong, and points the end-to-end check dropped
        wrong = {r.key for r in valid if r.status in ("wrong", "dropped")}
        states = []
        for i, task in enumerate(self.tasks):
            wl = task.workload
            pts = task_space(wl, self.target, self.registry, self.measurer.remote)
            st = TaskState(task, [p for p in pts if p.key not in measured], index=i, total=len(self.tasks))
            st.resumed = len(pts) - len(st.points)
            dec = Selector(self.target, registry=self.registry).choose(wl)
            if dec.candidate is not None:
                st.default_key = point_key(wl.key, dec.candidate.name, config_to_dict(dec.config))
            for r in valid:
                if r.workload == wl.key and r.key not in wrong:
                    st.note(r.key, r.candidate, r.config, r.status, r.seconds)
            states.append(st)
        return states, measured

    def _next_batch(self, st: TaskState, measured: set) -> list[Point]:
        todo = [p for p in st.points if p.key not in measured]
        left = len(todo) if self.trials is None else min(len(todo), self.trials - st.trials)
        n = min(self.batch, left)
        picked: list[Point] = []
        if not st.visited:  # untuned choice first (the baseline), then each candidate's default
            st.visited = True
            firsts = [p for p in todo if p.key == st.default_key]
            seen_c = set()
            for p in todo:
                if p.cand.name not in seen_c:
                    seen_c.add(p.cand.name)
                    if p.key != st.default_key:
                        firsts.append(p)
            return firsts[:n]  # a baseline for every task before any task gets more
        rest = [p for p in todo if p not in picked]
        k = n - len(picked)
        if k > 0 and rest:
            n_explore = min(len(rest), max(1, round(k * self.explore))) if self.model.trained else k
            ranked = rest
            if self.model.trained:
                scores = self.model.predict_scores(st.task.workload, self.target, [(p.cand, p.cfg) for p in rest])
                ranked = [rest[i] for i in sorted(range(len(rest)), key=lambda i: -scores[i])]
            exploit = ranked[: k - n_explore]
            others = [p for p in rest if p not in exploit]
            picked += exploit + self.rng.sample(others, min(n_explore, len(others)))
        return picked

    def _refresh(self, states: list[TaskState], measured: set, valid: list, stale, skipped: dict) -> None:
        """Take in the records appended to the log since the last read (other tuners sharing it):
        their final points count as measured (never measured twice) and seed the tasks' best."""
        new, new_stale = self.log.split_new(self.target, self.registry)
        stale.counts.update(new_stale.counts)
        skipped["invalid"] += len(self.log.invalid)
        skipped["malformed"] += len(self.log.malformed)
        by_wl = {st.task.workload.key: st for st in states}
        for r in new:
            if r.status not in FINAL_STATUSES or r.key in measured:
                continue  # ours (already counted), or an infrastructure failure (measured again)
            measured.add(r.key)
            valid.append(r)
            st = by_wl.get(r.workload)
            if st is not None:
                st.resumed += 1
                if r.status != "wrong":
                    st.note(r.key, r.candidate, r.config, r.status, r.seconds)

    def _open(self):
        """Checks before anything is measured (an unwritable log, an unreachable RPC tracker fail
        here, in seconds), then the log's records: ``(valid, stale, skipped counts)``."""
        self.log.check_writable()  # a result that cannot be written would be lost
        preflight = getattr(self.measurer, "preflight", None)
        if preflight is not None:
            preflight()
        valid, stale = self.log.split(self.target, self.registry)
        return valid, stale, {"malformed": len(self.log.malformed), "invalid": len(self.log.invalid)}

    def run(self) -> TuneSummary:
        t0 = time.time()
        valid, stale, skipped = self._open()
        states, measured = self._states(valid)
        self.model.fit(valid, self.target, validate=False)
        deadline = t0 + self.seconds if self.seconds else None
        costs: list[float] = []
        total, infra_streak, stopped = 0, 0, "every task used its trials or space"
        while True:
            self._refresh(states, measured, valid, stale, skipped)
            active = [s for s in states if any(p.key not in measured for p in s.points)
                      and (self.trials is None or s.trials < self.trials)]
            if not active:
                break
            # every task gets its first batch (defaults: the untuned baseline) before any gets more
            st = max(active, key=lambda s: (not s.visited, s.task.weight(s.best_seconds) / (1 + s.trials)))
            batch = self._next_batch(st, measured)
            if not batch:
                break
            for p in batch:
                est = sorted(costs[-5:])[len(costs[-5:]) // 2] if costs else 0.0  # median recent trial
                if deadline is not None and time.time() + est > deadline:
                    stopped = "time budget spent"
                    break
                self._refresh(states, measured, valid, stale, skipped)
                if p.key in measured:
                    continue  # another tuner sharing the log measured it meanwhile
                wl = st.task.workload
                started = time.time()
                cutoff = 4 * st.best_seconds if st.best_seconds else None
                res = self.measurer.measure(wl, p.cand, p.cfg, self.target, cutoff=cutoff)
                costs.append(time.time() - started)
                rec = make_record(wl, self.target, p.cand, p.cfg, res, device=res.device,
                                  measure=dict(self.measurer.settings.to_json(), cutoff=cutoff))
                self.log.append(rec)
                total += 1
                st.trials += 1
                if res.status != "ok":
                    st.failures += 1
                if res.status == "infra":
                    infra_streak += 1
                else:
                    infra_streak = 0
                    measured.add(p.key)
                    valid.append(rec)
                    st.note(p.key, p.cand.name, p.cfg, res.status, res.seconds)
                if self.on_record:
                    self.on_record(rec)
                if self.progress:
                    self.progress(st, self)
                if infra_streak >= 3:
                    stopped = f"measurement infrastructure failing: {res.error}"
                    break
            else:
                self.model.fit(valid, self.target, validate=False)
                continue
            break
        rows = []
        for st in states:
            b = st.best
            rows.append({"workload": st.task.workload.key, "uses": st.task.uses, "trials": st.trials,
                         "resumed": st.resumed, "failures": st.failures, "candidate": b[1] if b else None,
                         "config": b[2] if b else None, "seconds": b[0] if b else None,
                         "gflops": st.best_gflops, "default_seconds": st.default_seconds})
        from ..target import describe

        return TuneSummary(self.log.path, describe(self.target), rows, time.time() - t0, total, stopped,
                           dict(stale.counts), skipped["malformed"], skipped["invalid"])


class ProgressPrinter:
    """One progress bar per task: trials, best GFLOPS so far, failures (``\\r`` updates on a terminal)."""

    def __init__(self, stream=None, width: int = 20):
        self.stream, self.width, self._last, self._key = stream or sys.stderr, width, None, None
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, st: TaskState, tuner: Tuner) -> None:
        budget = min(len(st.points), tuner.trials) if tuner.trials else len(st.points)
        done = min(st.trials, budget) if budget else 0
        fill = int(self.width * done / budget) if budget else self.width
        bar = "#" * fill + "." * (self.width - fill)
        best = f"{st.best_gflops:7.1f} GFLOPS" if st.best else "      - GFLOPS"
        cand = f" ({st.best[1]})" if st.best else ""
        wk = st.task.workload.key
        line = (f"[task {st.index + 1}/{st.total}] {wk[:40]:40s} |{bar}| {st.trials:3d}/{budget:<3d} "
                f"best {best}{cand} fail {st.failures}")
        if self.tty:
            end = "\n" if self._last not in (None, st.index) else ""
            self.stream.write(end + "\r" + line)
        else:  # a log file: a line per 10 trials, per new task, per failure and at the end of the budget
            key = (st.index, st.best, st.failures)
            if self._last != st.index or key != self._key or st.trials % 10 == 0 or st.trials == budget:
                self.stream.write(line + "\n")
            self._key = key
        self._last = st.index
        self.stream.flush()

    def round_done(self, sched, st) -> None:
        """After the baselines (``st`` None) and each scheduler round: the estimated model latency."""
        tuned, untuned, missing = sched.estimated_latency()
        what = "baselines measured" if st is None else \
            f"round {len(sched.rounds)} on task {st.index + 1} ({st.task.workload.key[:40]})"
        line = (f"{what}: estimated model latency {tuned * 1e3:.3f} ms (untuned {untuned * 1e3:.3f} ms, "
                f"{tuned / untuned if untuned else 1:.3f}x)" + (f", {missing} tasks not yet timed" if missing else ""))
        self.stream.write(("\n" if self.tty and self._last is not None else "") + line + "\n")
        self._last = None
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._last is not None:
            self.stream.write("\n")
            self.stream.flush()

