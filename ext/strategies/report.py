"""``SelectionReport``: the decisions of one build, as a table or JSON."""
from __future__ import annotations

import json
import os

from .select import Decision


class SelectionReport:
    """Decisions in the order the build made them (one per distinct workload).

    ``uses`` counts how many calls in the model each workload serves.
    """

    def __init__(self, target_desc: str = ""):
        self.target = target_desc
        self.decisions: list[Decision] = []
        self.uses: dict[str, int] = {}

    def add(self, decision: Decision) -> None:
        key = decision.workload.key
        if key not in self.uses:
            self.decisions.append(decision)
        self.uses[key] = self.uses.get(key, 0) + 1

    def __len__(self) -> int:
        return len(self.decisions)

    def __iter__(self):
        return iter(self.decisions)

    def find(self, op: str | None = None) -> list[Decision]:
        return [d for d in self.decisions if op is None or d.workload.op == op]

    def to_json(self) -> list[dict]:
        return [dict(d.to_json(), uses=self.uses[d.workload.key]) for d in self.decisions]

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump({"target": self.target, "decisions": self.to_json()}, f, indent=1)

    def table(self, width: int = 60) -> str:
        """A fixed-width table: workload, candidate, source, config, alternatives."""
        rows = [("workload", "uses", "candidate", "source", "config / why", "alternatives")]
        for d in self.decisions:
            cfg = ",".join(f"{k}={v}" for k, v in d.to_json()["config"].items()) or "-"
            alts = "; ".join(f"{a.candidate}: {a.status} ({a.reason})" for a in d.alternatives) or "-"
            wk = d.workload.key
            rows.append((wk if len(wk) <= width else wk[: width - 3] + "...", str(self.uses[wk]), d.name,
                         d.source, cfg if d.candidate else d.reason, alts))
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
        return head + "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
