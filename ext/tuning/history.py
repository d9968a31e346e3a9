"""``History``: the best valid record per workload of a tuning log, as the ``Selector`` sees it.

Never picked: points measured ``wrong`` once, and points the end-to-end check
``dropped`` (faster alone, slower inside the model: the workload keeps its
untuned choice, whose baseline record is then the best one left).

Built by ``TuningLog.history()`` once the log's records are read and validated (``log.py``).
"""
from __future__ import annotations

from ..workload import Workload
from .log import Record, Staleness


class History:
    """Best valid record per workload; what the ``Selector`` consults (source ``log``)."""

    def __init__(self, records: list[Record], stale: Staleness | None = None, registry=None, *,
                 invalid: int = 0, malformed: int = 0, path: str | None = None):
        from ..strategies.registry import REGISTRY

        self.registry = registry or REGISTRY
        self.records, self.stale = records, stale or Staleness()
        self.invalid, self.malformed, self.path = int(invalid), int(malformed), path
        self._best: dict[str, Record] = {}
        # once wrong, never trusted; dropped by the end-to-end check: slower in the model than the default
        skip = {r.key for r in records if r.status in ("wrong", "dropped")}
        self.dropped = {r.key for r in records if r.status == "dropped"}
        for r in records:
            if r.status != "ok" or r.key in skip:
                continue
            cur = self._best.get(r.workload)
            if cur is None or r.seconds < cur.seconds:
                self._best[r.workload] = r

    def __len__(self) -> int:
        return len(self._best)

    def skipped(self) -> dict:
        """The log's records not used, by kind (for the ``SelectionReport``)."""
        return {"path": self.path, "invalid": self.invalid, "stale": self.stale.total, "malformed": self.malformed}

    def best_record(self, wl: Workload) -> Record | None:
        return self._best.get(wl.key)

    def best(self, wl: Workload, target) -> tuple[str, dict, float] | None:
        """``(candidate name, config dict, seconds)`` of the fastest correct record, or None."""
        rec = self._best.get(wl.key)
        if rec is None:
            return None
        try:  # a config the candidate no longer accepts is unusable, not fatal
            self.registry.get(rec.candidate).config_from_dict(rec.config)
        except (KeyError, ValueError):
            return None
        return rec.candidate, dict(rec.config), float(rec.seconds)
