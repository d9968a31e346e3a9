"""Registry, Selector and SelectionReport behaviour (no kernels run)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from ext.strategies import PLEVEL, REGISTRY, Candidate, Registry, Selector, SelectionReport, candidates
from ext.workload import Workload


@dataclasses.dataclass(frozen=True)
class Cfg:
    tile: int = 4


def fake(name, plevel=PLEVEL.DIRECT, check=None, suits=None, targets=("llvm",), estimate=None):
    return Candidate(name, targets, plevel, check or (lambda wl, t: None), Cfg,
                     space=lambda wl, t: [Cfg(2), Cfg(4), Cfg(8)], default=lambda wl, t: Cfg(4),
                     build=lambda wl, cfg, t: None, suits=suits,
                     estimate=None if estimate is None else (lambda wl, t: estimate))


WL = Workload("toy", [(4, 4)], ["float32"], "float32", attrs={"out_shape": (4, 4)})


def test_duplicate_and_malformed_registrations_fail_loudly():
    reg = Registry()
    reg.register(fake("toy.a"))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(fake("toy.a"))
    with pytest.raises(ValueError, match="unknown target kinds"):
        reg.register(fake("toy.b", targets=("vulkan",)))
    with pytest.raises(ValueError, match="<op>.<variant>"):
        reg.register(fake("toyb"))
    with pytest.raises(KeyError, match="no candidate named"):
        reg.get("toy.zzz")


def test_selector_plevel_suits_only_and_fallback(cpu_target):
    reg = Registry()
    reg.register(fake("toy.direct", PLEVEL.DIRECT))
    reg.register(fake("toy.blocked", PLEVEL.BLOCKED, suits=lambda wl, t: "too small for blocking"))
    reg.register(fake("toy.special", PLEVEL.SPECIALIZED, check=lambda wl, t: "needs M == 1"))
    d = Selector(cpu_target, registry=reg).choose(WL)
    assert (d.name, d.source, d.config) == ("toy.direct", "plevel", Cfg(4))
    status = {a.candidate: (a.status, a.reason) for a in d.alternatives}
    assert status == {"toy.blocked": ("unsuited", "too small for blocking"), "toy.special": ("declined", "needs M == 1")}

    reg.unregister("toy.blocked")
    d = Selector(cpu_target, registry=reg).choose(WL)
    assert (d.name, d.source) == ("toy.direct", "only")

    reg.unregister("toy.direct")
    d = Selector(cpu_target, registry=reg).choose(WL)
    assert d.candidate is None and d.source == "fallback" and "no candidate applies" in d.reason


def test_selector_estimates_beat_plevel_only_when_every_suited_candidate_declares_one(cpu_target):
    reg = Registry()
    reg.register(fake("toy.blocked", PLEVEL.BLOCKED, estimate=2e-3))
    reg.register(fake("toy.special", PLEVEL.SPECIALIZED, estimate=3e-3))
    reg.register(fake("toy.cheap", PLEVEL.DIRECT, estimate=1e-3, suits=lambda wl, t: "not here"))
    d = Selector(cpu_target, registry=reg).choose(WL)
    assert (d.name, d.source, d.cost) == ("toy.blocked", "estimate", 2e-3)
    status = {a.candidate: (a.status, a.reason) for a in d.alternatives}
    assert status["toy.special"] == ("lost", "estimated 3 ms, 1.50x the winner's")
    assert status["toy.cheap"] == ("unsuited", "not here")  # an unsuited estimate never wins

    reg.register(fake("toy.silent", PLEVEL.DIRECT))  # declares nothing: the plevel rule decides
    d = Selector(cpu_target, registry=reg).choose(WL)
    assert (d.name, d.source) == ("toy.special", "plevel")


def test_selector_prefers_log_then_model(cpu_target):
    reg = Registry()
    reg.register(fake("toy.direct", PLEVEL.DIRECT))
    reg.register(fake("toy.blocked", PLEVEL.BLOCKED))

    class Log:
        def best(self, wl, target):
            return ("toy.direct", {"tile": 8}, 1e-3)

    class Model:
        def predict(self, wl, target, points):
            return [1.0 if c.name == "toy.blocked" else 0.1 * cfg.tile for c, cfg in points]

    d = Selector(cpu_target, history=Log(), model=Model(), registry=reg).choose(WL)
    assert (d.name, d.source, d.config) == ("toy.direct", "log", Cfg(8))
    d = Selector(cpu_target, model=Model(), registry=reg).choose(WL)
    assert (d.name, d.source, d.config) == ("toy.direct", "model", Cfg(2))
    assert [a.status for a in d.alternatives] == ["lost"]


def test_broken_model_never_breaks_selection(cpu_target):
    class Broken:
        def predict(self, wl, target, points):
            raise RuntimeError("untrained")

    reg = Registry()
    reg.register(fake("toy.direct"))
    reg.register(fake("toy.blocked", PLEVEL.BLOCKED))
    assert Selector(cpu_target, model=Broken(), registry=reg).choose(WL).source == "plevel"


def test_report_table_and_json(cpu_target, tmp_path):
    reg = Registry()
    reg.register(fake("toy.direct"))
    reg.register(fake("toy.blocked", PLEVEL.BLOCKED))
    rep = SelectionReport("test target")
    sel = Selector(cpu_target, registry=reg)
    rep.add(sel.choose(WL))
    rep.add(sel.choose(WL))
    path = tmp_path / "r.json"
    rep.save(path)
    data = json.loads(path.read_text())
    (d,) = data["decisions"]
    assert {"workload", "op", "candidate", "config", "source", "alternatives"} <= set(d)
    assert d["candidate"] == "toy.blocked" and d["uses"] == 2 and d["config"] == {"tile": 4}
    assert d["alternatives"][0]["candidate"] == "toy.direct"
    text = rep.table()
    assert "toy.blocked" in text and "plevel" in text and "toy.direct: lost" in text


def test_cuda_only_candidates_are_invisible_on_cpu(cpu_target):
    reg = Registry()
    reg.register(fake("toy.gpu", targets=("cuda",)))
    reg.register(fake("toy.cpu"))
    verdicts = {c.name: v for c, v in candidates(WL, cpu_target, registry=reg)}
    assert not verdicts["toy.gpu"] and "serves cuda" in verdicts["toy.gpu"].reason
    assert Selector(cpu_target, registry=reg).choose(WL).source == "only"


def test_global_registry_names_are_well_formed():
    names = [c.name for c in REGISTRY]
    assert len(names) == len(set(names))
    assert all(n.count(".") == 1 for n in names)
    assert {"matmul.direct", "matmul.packed", "matmul.gemv", "matmul.batch"} <= set(names)
