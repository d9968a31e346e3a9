"""``Selector``: choose (candidate, config) for a workload, and say why.

Order, written down once: keep the candidates whose ``applies`` holds (with
``libraries=False``, candidates with a ``library`` are left out entirely, so
the report lists our own kernels only); then

1. ``log``: the best valid tuning record for this workload and target (or
   ``measured``: ``ext.build(..., libraries="measure")`` timed the libraries
   against ext's own pick at build time, ``ext.libraries.measure``);
2. ``model``: a cost model trained on the log ranks (candidate, default config)
   pairs and the configs of the best one's space;
3. ``estimate``: among candidates that suit the shape (any applicable one if
   none suits), the lowest estimated time when every one of them declares an
   estimate (the family's declared preference, e.g. ``conv2d_cost.py``);
   otherwise ``plevel``: the highest priority level; ties go to table order;
4. ``only`` when a single candidate applies, ``fallback`` when none does
   (stock lowering plus ext's fallback schedule).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Protocol

from tvm.target import Target

from ..target import target_kind
from ..workload import Workload
from .registry import REGISTRY, Candidate, Registry, config_to_dict


@dataclasses.dataclass
class Alternative:
    candidate: str
    status: str  # "declined" | "unsuited" | "lost"
    reason: str
    cost: float | None = None  # measured or predicted seconds, when known

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Decision:
    workload: Workload
    candidate: Candidate | None
    config: Any
    source: str  # "log" | "measured" | "model" | "estimate" | "plevel" | "only" | "fallback"
    alternatives: list = dataclasses.field(default_factory=list)
    reason: str = ""
    cost: float | None = None

    @property
    def name(self) -> str:
        return self.candidate.name if self.candidate else "fallback"

    def to_json(self) -> dict:
        return {"workload": self.workload.key, "op": self.workload.op, "candidate": self.name,
                "config": config_to_dict(self.config), "source": self.source, "reason": self.reason,
                "cost": self.cost, "alternatives": [a.to_json() for a in self.alternatives],
                "library": self.candidate.library if self.candidate else None,
                "needs_python": bool(self.candidate and self.candidate.needs_python)}


class History(Protocol):
    def best(self, wl: Workload, target: Target) -> tuple[str, dict, float] | None: ...


class Model(Protocol):
    def predict(self, wl: Workload, target: Target, points: list[tuple[Candidate, Any]]) -> list[float]: ...


class Selector:
    """Choose kernels for one target.

    Parameters
    ----------
    target : the ``tvm.target.Target`` being compiled for.
    history : object with ``best(workload, target)`` (a tuning log), or None.
    model : object with ``predict(workload, target, points)``, or None.
    libraries : allow vendor-library candidates.
    exact_specials : turn off the tile-transform candidates (Winograd, FFT), so a NaN or
        infinite input gives NaN/inf exactly at the outputs PyTorch gives them.
    """

    def __init__(self, target: Target, history: History | None = None, model: Model | None = None,
                 libraries: bool = True, registry: Registry = REGISTRY, exact_specials: bool = False):
        self.target, self.history, self.model = target, history, model
        self.libraries, self.registry, self.exact_specials = libraries, registry, exact_specials

    def without_model(self) -> "Selector":
        """This selector with the tuning log but no cost model: for graph-level plans (the layout
        plan of ``BlockChannels``), which decide the workloads the tuner measures; a model's pick
        there would change the plan for a workload nobody measured, so a tuned build would not be
        the graph that was tuned (a 240 s ResNet-18 run: its stride-2 convs kept NCHW for an
        unmeasured im2col kernel the model favoured, and the tuned build ran 1.19x the untuned
        time although the end-to-end check had dropped every tuned choice)."""
        plain = copy.copy(self)
        plain.model = None
        return plain

    def _split(self, wl: Workload, failed: dict | None = None):
        usable, alts = [], []
        kind = target_kind(self.target)
        for cand in self.registry.for_op(wl.op):
            if cand.library is not None and not self.libraries:
                continue  # libraries off: the report shows our own kernels only
            if not kind.serves(cand.targets):
                continue  # another target's kernel is no alternative here; keep reports readable
            if cand.tile_transform and self.exact_specials:
                alts.append(Alternative(cand.name, "declined", "exact_specials: a tile transform would spread "
                                        "a NaN or inf input over its whole output tile"))
                continue
            if failed and cand.name in failed:
                alts.append(Alternative(cand.name, "failed", failed[cand.name]))
                continue
            verdict = cand.applies(wl, self.target)
            if verdict:
                usable.append(cand)
            elif kind.serves(cand.targets) or cand.library is None:
                alts.append(Alternative(cand.name, "declined", verdict.reason))
        return usable, alts

    def choose(self, wl: Workload, failed: dict | None = None) -> Decision:
        """The decision for ``wl``; ``failed`` maps candidate names that could not be built
        to the error, so the next choice skips them (reported with status ``failed``)."""
        usable, alts = self._split(wl, failed)
        if not usable:
            why = "no candidate applies" if alts else f"no {wl.op} candidate for {target_kind(self.target).name}"
            return Decision(wl, None, None, "fallback", alts, f"{why}: stock lowering + ext fallback schedule")
        if self.history is not None:
            rec = self.history.best(wl, self.target)
            if rec is not None and rec[0] in {c.name for c in usable}:
                cand = self.registry.get(rec[0])
                src = getattr(self.history, "source", "log")  # "measured": build-time library timing
                what = "tuning log" if src == "log" else "measured at build time"
                costs = self.history.costs(wl) if hasattr(self.history, "costs") else {}
                lost = [Alternative(c.name, "lost", f"{what}: {costs[c.name] * 1e3:.3f} ms, "
                                    f"{costs[c.name] / rec[2]:.2f}x the winner", costs[c.name])
                        if isinstance(costs.get(c.name), float) and rec[2] > 0 else
                        Alternative(c.name, "lost", f"{what}: slower or not better measured")
                        for c in usable if c is not cand]
                return Decision(wl, cand, cand.config_from_dict(rec[1]), src, alts + lost,
                                f"{'best tuning record' if src == 'log' else 'fastest measured'} "
                                f"({rec[2] * 1e3:.3f} ms)", rec[2])
        if self.model is not None and len(usable) > 0:
            picked = self._by_model(wl, usable, alts)
            if picked is not None:
                return picked
        if len(usable) == 1:
            cand = usable[0]
            return Decision(wl, cand, cand.default_config(wl, self.target), "only", alts,
                            "the only candidate that applies")
        return self._by_preference(wl, usable, alts)

    def _by_preference(self, wl, usable, alts) -> Decision:
        suited = [(c, c.suited(wl, self.target)) for c in usable]
        pool = [c for c, v in suited if v] or usable
        est = {c.name: c.estimated(wl, self.target) for c in pool}
        by_estimate = len(pool) > 1 and all(e is not None for e in est.values())
        if by_estimate:
            best = min(pool, key=lambda c: est[c.name])  # min() keeps the first of equals: table order
            why = lambda c: (f"estimated {est[c.name] * 1e3:.3g} ms, "  # noqa: E731
                             f"{est[c.name] / max(est[best.name], 1e-30):.2f}x the winner's")
        else:
            best = max(pool, key=lambda c: c.plevel)  # max() keeps the first of equals: table order
            why = lambda c: (f"plevel {c.plevel} < {best.plevel}" if c.plevel < best.plevel  # noqa: E731
                             else "equal plevel, later in table")
        for c, v in suited:
            if c is not best:
                alts.append(Alternative(c.name, "unsuited", v.reason) if not v
                            else Alternative(c.name, "lost", why(c), est.get(c.name)))
        if by_estimate:
            return Decision(wl, best, best.default_config(wl, self.target), "estimate", alts,
                            f"lowest estimated time ({est[best.name] * 1e3:.3g} ms) among candidates "
                            "that suit the shape", est[best.name])
        why = "the only candidate that suits the shape" if len(pool) == 1 else \
            f"highest plevel ({best.plevel}) among candidates that suit the shape"
        return Decision(wl, best, best.default_config(wl, self.target), "plevel", alts, why)

    def _by_model(self, wl, usable, alts) -> Decision | None:
        """The cost model's pick for a workload the log has not measured, only when it is confident.

        The model must predict its best (candidate, config) faster than the untuned choice (what
        this Selector picks without log or model: candidate + default config) by more than its
        error on held-out workloads (``model.margin``, a fraction; 10% for a model that reports
        none). Otherwise None (the rules after it decide), with a ``cost model: declined``
        alternative saying why: a model trained on a few workloads must not replace hand-set
        defaults with configurations nobody measured (issue 18: tuned ResNet-18 17% slower).
        """
        default = Selector(self.target, libraries=self.libraries, registry=self.registry).choose(
            wl, failed={c.name: "not usable" for c in self.registry.for_op(wl.op) if c not in usable})
        points = []
        for c in usable:
            space = c.space(wl, self.target) or [c.default_config(wl, self.target)]
            points += [(c, cfg) for cfg in space]
        dropped = getattr(self.history, "dropped", None)  # points the end-to-end check found slower in place
        if dropped:
            from ..tuning.log import point_key

            points = [(c, cfg) for c, cfg in points if point_key(wl.key, c.name, config_to_dict(cfg)) not in dropped]
        if default.candidate is not None and not any(
                c is default.candidate and config_to_dict(cfg) == config_to_dict(default.config) for c, cfg in points):
            points.append((default.candidate, default.config))
        try:
            costs = self.model.predict(wl, self.target, points)
        except Exception:  # an untrained or mismatched model must never break a build
            return None
        if costs is None or len(costs) != len(points):
            return None
        best_cost = {}
        for (c, cfg), cost in zip(points, costs):
            if c.name not in best_cost or cost < best_cost[c.name][0]:
                best_cost[c.name] = (float(cost), cfg)
        winner = min(best_cost, key=lambda n: best_cost[n][0])
        t_best, cfg_best = best_cost[winner]
        if default.candidate is not None:
            t_def = next(float(cost) for (c, cfg), cost in zip(points, costs) if c is default.candidate
                         and config_to_dict(cfg) == config_to_dict(default.config))
            if winner == default.name and config_to_dict(cfg_best) == config_to_dict(default.config):
                return None  # the model agrees with the default: the default's own rule says why
            margin = getattr(self.model, "margin", None)
            margin = 0.10 if margin is None else float(margin)
            gain = t_def / t_best - 1 if t_best > 0 else 0.0
            pick = f"{winner} " + (",".join(f"{k}={v}" for k, v in config_to_dict(cfg_best).items()) or "default")
            if not gain > margin:
                why = ("no held-out error (trained on too few workloads)" if margin == float("inf")
                       else f"predicted gain {gain:.0%} < margin {margin:.0%}")
                alts.append(Alternative("cost model", "declined", f"not confident: {why} (its pick: {pick}, "
                                        f"{t_best * 1e3:.3g} ms vs default {t_def * 1e3:.3g} ms)", t_best))
                return None
        cand = self.registry.get(winner)
        lost = [Alternative(n, "lost", "cost model predicts slower", float(v[0]))
                for n, v in best_cost.items() if n != winner]
        if default.candidate is None:
            why = "cost model's fastest predicted (candidate, config)"
        else:
            why = (f"cost model predicts {gain:.0%} faster than the default ({default.name}, "
                   f"{t_def * 1e3:.3g} ms), beyond its held-out error {margin:.0%}")
        return Decision(wl, cand, cfg_best, "model", alts + lost, why, t_best)


def choose(wl: Workload, target, **kwargs) -> Decision:
    """Shortcut: ``Selector(target, **kwargs).choose(wl)``."""
    from ..target import normalize

    return Selector(normalize(target), **kwargs).choose(wl)
