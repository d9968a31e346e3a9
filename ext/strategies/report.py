"""``SelectionReport``: the decisions of one build, as a table or JSON."""
from __future__ import annotations

import json
import os

from ..workload import Workload
from .registry import REGISTRY, config_to_dict
from .select import Alternative, Decision


class SelectionReport:
    """Decisions in the order the build made them (one per distinct workload).

    ``uses`` counts how many calls in the model each workload serves.
    ``stock`` lists the ops ext left to stock lowering (source ``stock``, one row per
    distinct op instance, with why no ext kernel took it); they are kept apart from
    ``decisions`` (which ext's selector made) but printed and saved with them.
    """

    def __init__(self, target_desc: str = ""):
        self.target = target_desc
        self.decisions: list[Decision] = []
        self.uses: dict[str, int] = {}
        self.stock: list[Decision] = []
        self.stock_uses: dict[str, int] = {}
        #: ``[(stage, seconds, kernels)]`` of the build that made this report (``ext.build`` fills it)
        self.stages: list = []
        #: True when the build was served from the on-disk cache (``ext.cache``)
        self.cached = False

    def add(self, decision: Decision) -> None:
        key = decision.workload.key
        if key not in self.uses:
            describe = getattr(decision.config, "describe_decision", None)  # e.g. an NPU's simulated cycles
            if callable(describe):
                describe(decision)
            self.decisions.append(decision)
        self.uses[key] = self.uses.get(key, 0) + 1

    def add_stock(self, row: Decision) -> None:
        """An op left to stock lowering (``row.source == "stock"``, ``row.reason`` says why)."""
        key = row.workload.key
        if key not in self.stock_uses:
            self.stock.append(row)
        self.stock_uses[key] = self.stock_uses.get(key, 0) + 1

    def find_stock(self, op: str | None = None) -> list[Decision]:
        """Stock rows, optionally of one Relax op (``"relax.max"``)."""
        return [d for d in self.stock if op is None or d.workload.op == op]

    def __len__(self) -> int:
        return len(self.decisions)

    def __iter__(self):
        return iter(self.decisions)

    def find(self, op: str | None = None) -> list[Decision]:
        return [d for d in self.decisions if op is None or d.workload.op == op]

    #: the tuning log this build consulted and how many of its records it could not use
    #: (``{"path", "invalid", "stale", "malformed"}``; see ``ext.tuning.log``), or None
    tuning_log: dict | None = None

    def note_tuning_log(self, skipped: dict) -> None:
        """Remember the tuning log's skipped-record counts (printed under the table)."""
        self.tuning_log = dict(skipped)

    def _tuning_log_note(self) -> list[str]:
        t = self.tuning_log
        if not t or not any(t.get(k) for k in ("invalid", "stale", "malformed")):
            return []
        return [f"tuning log {t.get('path') or ''}: records not used: {t.get('invalid', 0)} invalid (config "
                f"outside its candidate's knob space, unknown candidate...), {t.get('stale', 0)} stale, "
                f"{t.get('malformed', 0)} malformed lines"]

    def to_json(self, stock: bool = False) -> list[dict]:
        """The decisions as dicts; ``stock=True`` appends the stock rows (``candidate: "stock"``)."""
        rows = [dict(d.to_json(), uses=self.uses[d.workload.key]) for d in self.decisions]
        return rows + (self.stock_json() if stock else [])

    def stock_json(self) -> list[dict]:
        return [dict(d.to_json(), candidate="stock", uses=self.stock_uses[d.workload.key]) for d in self.stock]

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump({"target": self.target, "decisions": self.to_json(), "stock": self.stock_json(),
                       "stages": [list(s) for s in self.stages], "cached": self.cached,
                       "tuning_log": self.tuning_log}, f, indent=1)

    def to_dict(self) -> dict:
        """Everything needed to rebuild this report (:meth:`from_dict`), e.g. for the build cache."""
        def state(d: Decision, uses: int) -> dict:
            return {"workload": d.workload.to_json(), "candidate": d.candidate.name if d.candidate else None,
                    "config": config_to_dict(d.config) if d.candidate else None, "source": d.source,
                    "reason": d.reason, "cost": d.cost, "uses": uses,
                    "alternatives": [a.to_json() for a in d.alternatives]}
        return {"target": self.target, "tuning_log": self.tuning_log, "stages": [list(s) for s in self.stages],
                "decisions": [state(d, self.uses[d.workload.key]) for d in self.decisions],
                "stock": [state(d, self.stock_uses[d.workload.key]) for d in self.stock]}

    @classmethod
    def from_dict(cls, data: dict) -> "SelectionReport":
        """The report :meth:`to_dict` wrote; a candidate no longer registered raises ``KeyError``."""
        rep = cls(data.get("target", ""))
        rep.tuning_log, rep.stages = data.get("tuning_log"), [tuple(s) for s in data.get("stages", [])]
        for rows, add in ((data["decisions"], rep.add), (data["stock"], rep.add_stock)):
            for row in rows:
                cand = REGISTRY.get(row["candidate"]) if row["candidate"] else None
                cfg = cand.config_from_dict(row["config"]) if cand is not None else None
                d = Decision(Workload.from_json(row["workload"]), cand, cfg, row["source"],
                             [Alternative(**a) for a in row["alternatives"]], row["reason"], row["cost"])
                for _ in range(row["uses"]):
                    add(d)
        return rep

    def table(self, width: int = 60) -> str:
        """A fixed-width table: workload, candidate, source, config, alternatives."""
        rows = [("workload", "uses", "candidate", "source", "config / why", "alternatives")]
        for d in self.decisions:
            cfg = ",".join(f"{k}={v}" for k, v in d.to_json()["config"].items()) or "-"
            alts = "; ".join(f"{a.candidate}: {a.status} ({a.reason})" for a in d.alternatives) or "-"
            wk = d.workload.key
            rows.append((wk if len(wk) <= width else wk[: width - 3] + "...", str(self.uses[wk]), d.name,
                         d.source, cfg if d.candidate else d.reason, alts))
        for d in self.stock:
            wk = d.workload.key
            rows.append((wk if len(wk) <= width else wk[: width - 3] + "...", str(self.stock_uses[wk]), "stock",
                         d.source, d.reason, "-"))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = []
        for n, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
            if n == 0:
                lines.append("-" * (sum(widths) + 12 + 20))
        head = f"ext selection report ({self.target})\n" if self.target else ""
        needy = sorted({d.name for d in self.decisions if d.candidate is not None and d.candidate.needs_python})
        if needy:  # vendor-library calls registered from Python (ext.libraries)
            lines.append(f"needs this Python process (packed functions registered by ext): {', '.join(needy)}; "
                         "ext.export_library refuses unless allow_python=True")
        return head + "\n".join(lines + self._tuning_log_note())

    def __str__(self) -> str:
        return self.table()
