"""Where each op of an NPU build ran, with simulated cycles per layer and for the model.

``ext.npu.report(rep)`` reads a ``SelectionReport`` (``ext.last_report()`` by default):
every decision whose candidate serves the ``npu`` kind ran on the array, with the cycles
of its config (``ext.npu.kernels.estimate``: what the simulator counts for that shape);
every other decision and every stock row ran on the host CPU. Model totals weigh each
layer by its number of calls (``uses``).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Row:
    layer: str
    op: str
    where: str  # "npu" | "host"
    candidate: str
    uses: int
    cycles: int = 0  # per call
    compute_cycles: int = 0
    macs: int = 0
    utilization: float = 0.0
    dataflow: str = ""
    tiles: str = ""
    array: str = ""  # the array's model string (npu rows)


@dataclasses.dataclass
class Summary:
    target: str
    rows: list

    def npu_rows(self) -> list:
        return [r for r in self.rows if r.where == "npu"]

    @property
    def cycles(self) -> int:
        """Simulated cycles of one run of the model on the array (host time not included)."""
        return sum(r.cycles * r.uses for r in self.npu_rows())

    @property
    def compute_cycles(self) -> int:
        return sum(r.compute_cycles * r.uses for r in self.npu_rows())

    @property
    def macs(self) -> int:
        return sum(r.macs * r.uses for r in self.npu_rows())

    def utilization(self, rows: int, cols: int) -> float:
        return self.macs / (rows * cols * self.compute_cycles) if self.compute_cycles else 0.0

    def where(self) -> dict:
        """``{"npu": calls, "host": calls}``."""
        out = {"npu": 0, "host": 0}
        for r in self.rows:
            out[r.where] += r.uses
        return out

    def to_json(self) -> dict:
        return {"target": self.target, "rows": [dataclasses.asdict(r) for r in self.rows],
                "cycles": self.cycles, "compute_cycles": self.compute_cycles, "macs": self.macs,
                "where": self.where()}

    def table(self, width: int = 56) -> str:
        head = ("layer", "where", "candidate", "uses", "cycles/call", "util", "dataflow", "tiles MxNxK")
        lines = [head]
        for r in self.rows:
            name = r.layer if len(r.layer) <= width else r.layer[: width - 3] + "..."
            npu = r.where == "npu"
            lines.append((name, r.where, r.candidate, str(r.uses), str(r.cycles) if npu else "-",
                          f"{r.utilization:.1%}" if npu else "-", r.dataflow or "-", r.tiles or "-"))
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        out = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
        out.insert(1, "-" * (sum(widths) + 2 * len(widths)))
        w = self.where()
        rows_cols = self._array()
        util = f", utilization {self.utilization(*rows_cols):.1%}" if rows_cols else ""
        out.append(f"model: {self.cycles} simulated cycles on the array ({self.compute_cycles} compute{util}); "
                   f"{w['npu']} op calls on the npu, {w['host']} on the host")
        return (f"npu summary ({self.target})\n" if self.target else "") + "\n".join(out)

    def _array(self):
        from .target import parse

        for r in self.npu_rows():
            cfg = parse(r.array)
            return cfg.rows, cfg.cols
        return None

    def __str__(self) -> str:
        return self.table()


def _short(key: str) -> str:
    """``op|shapes`` of a workload key (attrs dropped; the epilogue kept)."""
    parts = key.split("|")
    return "|".join([parts[0], parts[1]] + ([parts[-1]] if len(parts) > 3 else []))


def report(rep=None) -> Summary:
    """Per-layer placement and simulated cycles of a build (``ext.last_report()`` by default)."""
    from ..pipeline import last_report
    from ..strategies import npu as strat

    rep = rep if rep is not None else last_report()
    if rep is None:
        raise ValueError("no selection report: build a model first (ext.build(...)) or pass one")
    rows = []
    for d in rep.decisions:
        key = d.workload.key
        if d.candidate is not None and "npu" in d.candidate.targets and getattr(d.config, "array", ""):
            est = strat.estimate_for(d.workload, d.config)
            c = d.config
            rows.append(Row(_short(key), d.workload.op, "npu", d.name, rep.uses[key], est.cycles,
                            est.compute_cycles, est.macs, est.utilization, c.dataflow,
                            f"{c.tile_m}x{c.tile_n}x{c.tile_k}", c.array))
        else:
            rows.append(Row(_short(key), d.workload.op, "host", d.name, rep.uses[key]))
    for d in rep.stock:
        rows.append(Row(_short(d.workload.key), d.workload.op, "host", "stock", rep.stock_uses[d.workload.key]))
    return Summary(rep.target, rows)
