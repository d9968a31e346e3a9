"""Whole-model task scheduler: tuning time goes where the model gains most per second.

Why: tuning ResNet-18 for 240 s with the per-task loop of ``search.Tuner``
spent the whole budget on 3 of its 18 workloads and left the other 15 to a
cost model trained on those 3, which replaced hand-set defaults with
configurations nobody measured: the tuned model ran 17% slower (issue 18).
What a user wants is the model's latency, ``sum over tasks of uses x time``, so
the scheduler (in the spirit of Ansor's gradient-based task scheduler) works
on that sum:

1. Baselines: every task first gets its untuned choice measured (the Selector's
   pick without a log: candidate + default config). After this phase every
   workload has a record, so a build with the log never asks the cost model
   for a workload of this model, and the estimated model latency is known.
2. Rounds: each round measures one batch (``search.Tuner._next_batch``: on a
   task's first round every other candidate's default, then cost-model-ranked
   points plus a share of random ones) of the task with the largest estimated
   end-to-end gain per second::

       score = uses x best seconds x expected relative gain / seconds per round

   The expected relative gain of a task is the largest of: its recent
   improvement (relative improvement of its best over its last ``window``
   rounds, per round: Ansor's backward gradient), the cost model's view (the
   best predicted unmeasured point vs the best measured one, halved: the
   model is often optimistic), and an optimistic prior ``prior_gain`` for a task
   that has had no round yet, decaying by half with every round that brought
   nothing. Seconds per round come from the task's own measurements (big
   convolutions take longer to build and time than small GEMMs).
3. Progress: after each round ``progress.round_done(scheduler, state)`` (the
   ``ProgressPrinter`` prints one line) reports the estimated model latency,
   ``estimated_latency()``: sum over tasks of uses x best time so far, next to
   the same sum over the untuned baselines.

``trials`` caps measurements per task, ``seconds`` the wall clock of the search
(the end-to-end check of ``e2e.py``, run by ``ext.tune`` afterwards, comes on
top and prints its own time). Resuming, logs shared between tuners, infra
failures and unwritable logs behave as in ``search.Tuner`` (same helpers).
"""
from __future__ import annotations

import dataclasses
import math
import time

from .log import make_record
from .search import Point, TaskState, Tuner, TuneSummary

#: expected relative gain of a task's first round (optimistic: every task gets looked at)
PRIOR_GAIN = 0.25
#: cap on the cost model's predicted relative gain of a round
MODEL_GAIN_CAP = 0.5
#: rounds over which a task's recent improvement is measured
WINDOW = 3


@dataclasses.dataclass
class TaskProgress:
    """Per-task bookkeeping of the scheduler (beside ``search.TaskState``)."""

    rounds: int = 0
    history: list = dataclasses.field(default_factory=list)  # best seconds after each round
    spent: float = 0.0  # wall seconds of this task's measurements
    measured: int = 0  # measurements behind ``spent``
    idle_rounds: int = 0  # consecutive rounds without improvement


class TaskScheduler(Tuner):
    """Tune the tasks of one model by estimated end-to-end gain per second (see the module doc).

    Parameters as ``search.Tuner``, plus ``prior_gain`` and ``window`` (module doc) and
    ``total_trials``: measurements in this run over all tasks (None: no limit).
    """

    def __init__(self, tasks, target, log, measurer, *, prior_gain: float = PRIOR_GAIN, window: int = WINDOW,
                 total_trials: int | None = None, **kwargs):
        super().__init__(tasks, target, log, measurer, **kwargs)
        if total_trials is not None and int(total_trials) < 1:
            raise ValueError(f"total_trials must be a positive integer or None, got {total_trials!r}")
        self.total_trials = int(total_trials) if total_trials else None
        if not 0 < float(prior_gain) <= 1:
            raise ValueError(f"prior_gain must be in (0, 1], got {prior_gain!r}")
        if int(window) < 1:
            raise ValueError(f"window must be a positive number of rounds, got {window!r}")
        self.prior_gain, self.window = float(prior_gain), int(window)
        self.states: list[TaskState] = []
        self.info: dict[int, TaskProgress] = {}
        self.rounds: list[tuple[int, float]] = []  # (task index, estimated model latency) after each round
        self._gains: dict[int, tuple] = {}  # task index -> (cache key, model-predicted gain)

    # -- the estimate ---------------------------------------------------------------------------
    def estimated_latency(self) -> tuple[float, float, int]:
        """(sum of uses x best seconds, sum of uses x untuned baseline seconds, tasks without a time).

        A task without a measured time counts with its flops estimate in both sums."""
        tuned = untuned = 0.0
        missing = 0
        for st in self.states:
            guess = st.task.estimated_seconds(None)
            if st.best is None and st.default_seconds is None:
                missing += 1
            base = st.default_seconds or st.best_seconds or guess
            tuned += st.task.uses * min(st.best_seconds or base, base)
            untuned += st.task.uses * base
        return tuned, untuned, missing

    def expected_gain(self, st: TaskState) -> float:
        """Expected relative improvement of this task's best from one more round (module doc)."""
        info = self.info[st.index]
        if info.rounds == 0:
            return self.prior_gain
        hist = info.history
        w = min(self.window, len(hist) - 1)
        backward = 0.0
        if w >= 1 and hist[-1 - w] and hist[-1]:
            backward = max(0.0, (hist[-1 - w] - hist[-1]) / hist[-1 - w] / w)
        forward = self._model_gain(st)
        prior = self.prior_gain * 0.5 ** (info.idle_rounds + 1)
        return max(backward, forward, prior)

    def _model_gain(self, st: TaskState) -> float:
        """Cached per task until the model is refitted (after each round) or the task measured more."""
        key = (len(self.rounds), st.trials, st.resumed)
        hit = self._gains.get(st.index)
        if hit is None or hit[0] != key:
            hit = self._gains[st.index] = (key, self._predicted_gain(st))
        return hit[1]

    def _predicted_gain(self, st: TaskState) -> float:
        if not self.model.trained or st.best is None or self.model.loss != "reg":
            return 0.0
        todo = [p for p in st.points if p.key not in self._measured]
        if not todo:
            return 0.0
        cand = self.registry.get(st.best[1]) if st.best[1] in self.registry else None
        if cand is None:
            return 0.0
        try:
            pred = self.model.predict(st.task.workload, self.target,
                                      [(cand, st.best[2])] + [(p.cand, p.cfg) for p in todo])
        except Exception:  # noqa: BLE001 - a model that cannot predict this task gives no estimate
            return 0.0
        mine, best_new = pred[0], min(pred[1:])
        return min(MODEL_GAIN_CAP, max(0.0, 0.5 * (1 - best_new / mine))) if mine > 0 else 0.0

    def round_seconds(self, st: TaskState) -> float:
        """Estimated wall seconds of one round of ``st`` (its own trials; else all tasks' mean)."""
        info = self.info[st.index]
        if info.measured:
            per = info.spent / info.measured
        else:
            done = [i for i in self.info.values() if i.measured]
            per = sum(i.spent for i in done) / sum(i.measured for i in done) if done else 1.0
        return max(per, 1e-6) * self.batch

    def score(self, st: TaskState) -> float:
        """Estimated end-to-end seconds saved per second of tuning by one round of ``st``."""
        base = st.best_seconds or st.default_seconds or st.task.estimated_seconds(None)
        return st.task.uses * base * self.expected_gain(st) / self.round_seconds(st)

    # -- the loop -------------------------------------------------------------------------------
    def _active(self, st: TaskState) -> bool:
        return (any(p.key not in self._measured for p in st.points)
                and (self.trials is None or st.trials < self.trials))

    def _measure(self, st: TaskState, p: Point) -> str | None:
        """Measure one point and record it; returns a reason to stop, or None."""
        wl = st.task.workload
        started = time.time()
        cutoff = 4 * st.best_seconds if st.best_seconds else None
        res = self.measurer.measure(wl, p.cand, p.cfg, self.target, cutoff=cutoff)
        spent = time.time() - started
        self._costs.append(spent)
        info = self.info[st.index]
        info.spent, info.measured = info.spent + spent, info.measured + 1
        rec = make_record(wl, self.target, p.cand, p.cfg, res, device=res.device,
                          measure=dict(self.measurer.settings.to_json(), cutoff=cutoff))
        self.log.append(rec)
        self._total += 1
        st.trials += 1
        if res.status != "ok":
            st.failures += 1
        if res.status == "infra":
            self._infra += 1
        else:
            self._infra = 0
            self._measured.add(p.key)
            self._valid.append(rec)
            st.note(p.key, p.cand.name, p.cfg, res.status, res.seconds)
        if self.on_record:
            self.on_record(rec)
        if self.progress:
            self.progress(st, self)
        return f"measurement infrastructure failing: {res.error}" if self._infra >= 3 else None

    def _out_of_time(self) -> bool:
        costs = self._costs[-5:]
        est = sorted(costs)[len(costs) // 2] if costs else 0.0  # median recent trial
        return self._deadline is not None and time.time() + est > self._deadline

    def _run_batch(self, st: TaskState, batch: list[Point]) -> str | None:
        """Measure ``batch`` for ``st``; returns a reason to stop, or None."""
        for p in batch:
            if self._out_of_time():
                return "time budget spent"
            if self.total_trials is not None and self._total >= self.total_trials:
                return f"{self.total_trials} trials measured"
            self._refresh(self.states, self._measured, self._valid, self._stale, self._skipped)
            if p.key in self._measured:
                continue  # another tuner sharing the log measured it meanwhile
            stop = self._measure(st, p)
            if stop:
                return stop
        return None

    def _baselines(self) -> str | None:
        """Phase 1: the untuned choice of every task, before any task gets a round."""
        for st in self.states:
            if st.default_seconds is not None or st.default_key is None or not self._active(st):
                continue
            base = [p for p in st.points if p.key == st.default_key and p.key not in self._measured]
            stop = self._run_batch(st, base)
            if stop:
                return stop
        return None

    def _after_round(self, st: TaskState) -> None:
        info = self.info[st.index]
        before = info.history[-1] if info.history and info.history[-1] else (st.default_seconds or math.inf)
        now = st.best_seconds or math.inf
        info.rounds += 1
        info.idle_rounds = 0 if now < before * (1 - 1e-3) else info.idle_rounds + 1
        info.history.append(st.best_seconds)
        self.model.fit(self._valid, self.target, validate=False)
        self.rounds.append((st.index, self.estimated_latency()[0]))
        hook = getattr(self.progress, "round_done", None)
        if hook is not None:
            hook(self, st)

    def run(self) -> TuneSummary:
        t0 = time.time()
        self._valid, self._stale, self._skipped = self._open()
        self.states, self._measured = self._states(self._valid)
        self.info = {st.index: TaskProgress() for st in self.states}
        for st in self.states:
            if st.best_seconds is not None:
                self.info[st.index].history.append(st.best_seconds)
        self.model.fit(self._valid, self.target, validate=False)
        self._deadline = t0 + self.seconds if self.seconds else None
        self._costs, self._total, self._infra = [], 0, 0
        stopped = self._baselines() or "every task used its trials or space"
        for st in self.states:  # the baseline is where each task's improvement is measured from
            if not self.info[st.index].history and st.best_seconds is not None:
                self.info[st.index].history.append(st.best_seconds)
        hook = getattr(self.progress, "round_done", None)
        if hook is not None:
            hook(self, None)
        while stopped == "every task used its trials or space":
            self._refresh(self.states, self._measured, self._valid, self._stale, self._skipped)
            active = [s for s in self.states if self._active(s)]
            if not active:
                break
            st = max(active, key=self.score)
            batch = self._next_batch(st, self._measured)
            if not batch:
                break
            before = self._total
            stop = self._run_batch(st, batch)
            if self._total > before:  # a round that measured nothing (budget spent at once) is no round
                self._after_round(st)
            if stop:
                stopped = stop
        return self._summary(t0, stopped)

    def _summary(self, t0: float, stopped: str) -> TuneSummary:
        from ..target import describe

        rows = []
        for st in self.states:
            b = st.best
            rows.append({"workload": st.task.workload.key, "uses": st.task.uses, "trials": st.trials,
                         "resumed": st.resumed, "failures": st.failures, "candidate": b[1] if b else None,
                         "config": b[2] if b else None, "seconds": b[0] if b else None,
                         "gflops": st.best_gflops, "default_seconds": st.default_seconds,
                         "rounds": self.info[st.index].rounds})
        tuned, untuned, missing = self.estimated_latency()
        return TuneSummary(self.log.path, describe(self.target), rows, time.time() - t0, self._total, stopped,
                           dict(self._stale.counts), self._skipped["malformed"], self._skipped["invalid"],
                           estimate={"tuned_s": tuned, "untuned_s": untuned, "tasks_without_time": missing})
