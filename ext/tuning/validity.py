"""Whether a tuning record can be used: stale (another target, TVM, ext or candidate version)
or invalid (an unknown candidate, a config outside its knob space). ``TuningLog`` sorts its
records with these; split from ``log.py`` (the file format and I/O) by concern.
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # log.py imports this module
    from .log import Record


class Staleness:
    """Why records do not apply to the current target/versions, with counts."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def add(self, reason: str) -> None:
        self.counts[reason] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        return ", ".join(f"{n} {r}" for r, n in self.counts.most_common()) or "none"


def stale_reason(rec: Record, target_fields: dict, vers: dict, registry=None) -> str | None:
    """Why ``rec`` does not apply (None when it is valid)."""
    from ..strategies.registry import REGISTRY

    from ..target import provenance_fields

    registry = registry or REGISTRY
    for f in ("kind",) + provenance_fields():  # the target fields that must match (``ext.target`` table)
        if rec.target.get(f) != target_fields.get(f):
            return f"target {f} {rec.target.get(f)!r} != {target_fields.get(f)!r}"
    if rec.tvm_version != vers["tvm_version"]:
        return f"TVM {rec.tvm_version} != {vers['tvm_version']}"
    if rec.ext_version != vers["ext_version"]:
        return f"ext {rec.ext_version} != {vers['ext_version']}"
    if rec.candidate not in registry:
        return None  # not stale: invalid (``invalid_reason``)
    cur = registry.get(rec.candidate).version
    if rec.candidate_version != cur:
        return f"{rec.candidate} version {rec.candidate_version} != {cur}"
    return None


def invalid_reason(rec: Record, target, registry=None, spaces: dict | None = None) -> str | None:
    """Why ``rec`` cannot be trusted (unknown candidate, config outside its knob space); None when it can.

    ``spaces``: a cache ``{(candidate, workload key): space points or reason}`` shared across records.
    """
    from ..strategies.registry import REGISTRY

    registry = registry or REGISTRY
    if rec.candidate not in registry:
        return f"unknown candidate {rec.candidate!r}"
    cand = registry.get(rec.candidate)
    spaces = {} if spaces is None else spaces
    key = (rec.candidate, rec.workload)
    if key not in spaces:
        try:
            verdict = cand.applies(rec.wl, target)
            spaces[key] = (cand.space_points(rec.wl, target) if verdict
                           else f"{cand.name} does not apply to the workload ({verdict.reason})")
        except Exception as err:  # noqa: BLE001 - a record that breaks the space is invalid, not fatal
            spaces[key] = f"{cand.name}: knob space raised {type(err).__name__}: {err}"
    points = spaces[key]
    if isinstance(points, str):
        return points
    return cand.config_problem(rec.config, rec.wl, target, points=points)
