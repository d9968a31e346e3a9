"""An xgboost cost model over (workload, candidate, config) points.

Features (``features``; a fixed-length float vector, stable across processes):

* workload: op one-hot, log2 of M, N, K (the family's dims; generic: the first
  input and output shapes), log2 flops, epilogue length, ``transpose_b``;
* candidate: one-hot over the registry's candidate names (sorted);
* knobs: every config field hashed (crc32) into ``KNOB_SLOTS`` slots: numbers as
  value and log2, strings as an indicator of ``field=value``;
* derived (matmul tiles ``mb x nb``): accumulator vectors vs the 32 vector
  registers, panel bytes ``K * nb * 4`` vs L1/L2, A rows ``mb * K * 4`` vs L1,
  padding waste of the tiles, parallel work units per core and their load
  imbalance.

Target: ``log(GFLOPS)`` of the measured point, so one model serves workloads of
any size and predicts unseen shapes; ``predict`` turns it back into seconds.

Options (``loss``):

* ``"reg"`` (default): squared error on log-throughput. Choose it when the
  model must compare points across workloads (the Selector on held-out shapes)
  or give a time (reports show the predicted cost).
* ``"rank"``: pairwise ranking within each workload. Choose it for ranking
  one workload's space during search when absolute times vary a lot between
  runs (noisy machines); its predictions are only ordered, not seconds.

Interface: ``fit(records, target)``, ``predict(wl, target, points)``,
``save(path)`` / ``load(path)`` (predictions identical after a round trip).

Held-out error (``error``, ``margin``): the Selector asks the model about
workloads the log has never measured, so what matters is how well it ranks two
points of an *unseen* workload. ``fit`` therefore first trains on the records of
three quarters of the workloads and predicts the held-out quarter: for every
pair of points of one held-out workload, the error of the predicted time ratio
against the measured one, in log space; ``error`` is the 90th percentile of
those (``margin`` = ``exp(error) - 1``, e.g. 0.18: ratios within 18%). Only then
is the final model trained on everything. With fewer than two workloads (or no
held-out pair) nothing can be held out: ``error`` is infinite and the Selector
never trusts the model over the defaults.
"""
from __future__ import annotations

import json
import math
import os
import zlib

import numpy as np

from ..workload import Workload

KNOB_SLOTS = 32
#: share of the workloads held out to estimate ``CostModel.error``
HOLDOUT_SHARE = 0.25
#: percentile of the held-out pairwise ratio errors reported as ``CostModel.error``
ERROR_PERCENTILE = 90
#: held-out pairs sampled per workload (keeps validation linear in the records)
MAX_PAIRS_PER_WORKLOAD = 400
_OPS = ("matmul", "conv2d", "softmax", "layer_norm", "attention", "reduce", "elemwise")


def _log2(x) -> float:
    return math.log2(max(float(x), 1.0))


def _dims(wl: Workload) -> tuple[int, int, int]:
    if wl.op == "matmul" and len(wl.shapes[0]) >= 2 and len(wl.shapes[1]) >= 2:
        out = wl.attr("out_shape") or ()
        m = math.prod(out[:-1]) if out else wl.shapes[0][-2]
        n = out[-1] if out else wl.shapes[1][-1]
        return int(m), int(n), int(wl.shapes[0][-1])
    a = [int(d) for d in wl.shapes[0]] + [1, 1, 1]
    return a[0], a[1], math.prod(a[2:]) or 1


def _hw(target) -> dict:
    from ..target import target_kind

    return target_kind(target).cost_features(target)


def _derived(wl: Workload, cfg: dict, hw: dict) -> list[float]:
    M, N, K = _dims(wl)
    mb, nb = cfg.get("mb"), cfg.get("nb")
    if not (isinstance(mb, int) and isinstance(nb, int)) or mb <= 0 or nb <= 0:
        rows = cfg.get("rows")
        if isinstance(rows, int) and rows > 0:  # GEMV dot form: rows x lanes partial sums
            units = -(-max(M, N) // rows)
            return [rows * cfg.get("lanes", hw["lanes"]) / hw["lanes"] / hw["regs"], 0, 0, 0, 1.0,
                    units / hw["cores"], _imbalance(units, hw["cores"]), 0]
        return [0.0] * 8
    acc = mb * (-(-nb // hw["lanes"]))
    panel = K * nb * 4
    mp, np_ = -(-M // mb) * mb, -(-N // nb) * nb
    panels, tiles = np_ // nb, (np_ // nb) * (mp // mb)
    units = tiles if cfg.get("parallel") == "tiles" else panels
    return [acc / hw["regs"], panel / hw["l2"], panel / hw["l1"], mb * K * 4 / hw["l1"],
            (mp * np_) / max(M * N, 1), units / hw["cores"], _imbalance(units, hw["cores"]),
            float(acc > hw["regs"] - 4)]


def _imbalance(units: int, cores: int) -> float:
    return (-(-units // cores) * cores) / max(units, 1)


def _slot(text: str) -> int:
    return zlib.crc32(text.encode()) % KNOB_SLOTS


def features(wl: Workload, cand_name: str, cfg: dict, hw: dict, cand_names: list[str]) -> list[float]:
    """The feature vector of one point (see the module doc)."""
    M, N, K = _dims(wl)
    flops = wl.flops if wl.flops == wl.flops else 0.0
    f = [float(wl.op == op) for op in _OPS]
    f += [_log2(M), _log2(N), _log2(K), _log2(flops), float(len(wl.epilogue)), float(bool(wl.attr("transpose_b")))]
    f += [float(cand_name == n) for n in cand_names]
    knobs = [0.0] * (2 * KNOB_SLOTS)
    for name, value in sorted(cfg.items()):
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)):
            s = _slot(name)
            knobs[2 * s] += float(value)
            knobs[2 * s + 1] += _log2(value) if value > 0 else 0.0
        else:
            knobs[2 * _slot(f"{name}={value}")] += 1.0
    f += knobs
    f += _derived(wl, cfg, hw)
    return f


class CostModel:
    """xgboost model of log-throughput (see the module doc for features and options).

    Parameters
    ----------
    loss : ``"reg"`` or ``"rank"``.
    rounds : boosting rounds.
    seed : xgboost seed (training is deterministic for a given seed and data).
    min_records : fewer ``ok`` records than this leave the model untrained (``predict`` raises).
    """

    def __init__(self, loss: str = "reg", rounds: int = 150, seed: int = 0, min_records: int = 8,
                 max_depth: int = 6, eta: float = 0.15):
        if loss not in ("reg", "rank"):
            raise ValueError(f"cost model loss must be 'reg' or 'rank', got {loss!r}")
        self.loss, self.rounds, self.seed, self.min_records = loss, int(rounds), int(seed), int(min_records)
        self.params = {"max_depth": int(max_depth), "eta": float(eta), "seed": self.seed, "nthread": 1,
                       "objective": "reg:squarederror" if loss == "reg" else "rank:pairwise",
                       "min_child_weight": 1, "subsample": 1.0, "verbosity": 0}
        self.booster = None
        self.cand_names: list[str] = []
        self.n_train = 0
        self.error = math.inf  # log-space ratio error on held-out workloads (see the module doc)
        self.n_heldout = 0  # held-out pairs behind ``error``

    @property
    def margin(self) -> float:
        """``error`` as a fraction: a predicted gain below it is within the model's held-out error."""
        return math.exp(self.error) - 1 if math.isfinite(self.error) else math.inf

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def _names(self) -> list[str]:
        from ..strategies.registry import REGISTRY

        return sorted(c.name for c in REGISTRY)

    def fit(self, records, target, validate: bool = True) -> "CostModel":
        """Train on the ``ok`` records (any workloads); returns self (untrained if too few).

        ``validate``: first estimate ``error`` on held-out workloads (module doc); without it
        ``error`` stays infinite (the search only ranks, it does not need the error).
        """
        ok = [r for r in records if r.status == "ok" and r.seconds]
        self.error, self.n_heldout = math.inf, 0
        if len(ok) < self.min_records:
            self.booster, self.n_train = None, len(ok)
            return self
        if validate:
            self.error, self.n_heldout = self._held_out_error(ok, target)
        self.booster = self._train(ok, target)
        self.n_train = len(ok)
        return self

    def _held_out_error(self, ok: list, target) -> tuple[float, int]:
        """(percentile log-ratio error over held-out pairs, pair count); ``(inf, 0)`` when impossible."""
        import random

        wls = sorted({r.workload for r in ok})
        if len(wls) < 2 or self.loss == "rank":  # ranking scores are no times: their ratios mean nothing
            return math.inf, 0
        rng = random.Random(self.seed)
        rng.shuffle(wls)
        held = set(wls[: max(1, round(len(wls) * HOLDOUT_SHARE))])
        train = [r for r in ok if r.workload not in held]
        if len(train) < self.min_records:
            return math.inf, 0
        probe = CostModel(self.loss, self.rounds, self.seed, self.min_records)
        probe.params = dict(self.params)
        probe.booster, probe.cand_names = probe._train(train, target), self._names()
        errs = []
        for key in sorted(held):
            recs = [r for r in ok if r.workload == key]
            if len(recs) < 2:
                continue
            pred = probe.predict(recs[0].wl, target, [(r.candidate, r.config) for r in recs])
            logs = [(math.log(p), math.log(r.seconds)) for p, r in zip(pred, recs)]
            pairs = [(i, j) for i in range(len(logs)) for j in range(i + 1, len(logs))]
            if len(pairs) > MAX_PAIRS_PER_WORKLOAD:
                pairs = rng.sample(pairs, MAX_PAIRS_PER_WORKLOAD)
            errs += [abs((logs[i][0] - logs[j][0]) - (logs[i][1] - logs[j][1])) for i, j in pairs]
        if not errs:
            return math.inf, 0
        return float(np.percentile(errs, ERROR_PERCENTILE)), len(errs)

    def _train(self, ok: list, target):
        import xgboost as xgb

        if self.loss == "rank":
            ok = sorted(ok, key=lambda r: r.workload)
        self.cand_names = self._names()
        hw = _hw(target)
        X = np.array([features(r.wl, r.candidate, r.config, hw, self.cand_names) for r in ok], dtype="float64")
        y = np.array([math.log(r.wl.flops / r.seconds / 1e9) for r in ok], dtype="float64")
        dtrain = xgb.DMatrix(X, label=y)
        if self.loss == "rank":
            groups, last = [], None
            for r in ok:
                if r.workload != last:
                    groups.append(0)
                    last = r.workload
                groups[-1] += 1
            dtrain.set_group(groups)
        return xgb.train(self.params, dtrain, num_boost_round=self.rounds)

    def predict_scores(self, wl: Workload, target, points) -> np.ndarray:
        """Predicted log-GFLOPS (``reg``) or ranking scores (``rank``) of ``[(candidate, config)]``."""
        import xgboost as xgb

        from ..strategies.registry import config_to_dict

        if self.booster is None:
            raise RuntimeError("cost model is not trained (too few ok records)")
        hw = _hw(target)
        X = np.array([features(wl, c.name if hasattr(c, "name") else str(c),
                               cfg if isinstance(cfg, dict) else config_to_dict(cfg), hw, self.cand_names)
                      for c, cfg in points], dtype="float64")
        return self.booster.predict(xgb.DMatrix(X))

    def predict(self, wl: Workload, target, points) -> list[float]:
        """Predicted seconds of each ``(candidate, config)`` (``rank``: a monotone stand-in)."""
        scores = self.predict_scores(wl, target, points)
        flops = wl.flops if wl.flops == wl.flops and wl.flops > 0 else 1e9
        return [float(flops / (math.exp(min(s, 50.0)) * 1e9)) for s in scores]

    # -- persistence -----------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write ``path`` (xgboost JSON) and ``path.meta.json`` (options, candidate names)."""
        if self.booster is None:
            raise RuntimeError("cannot save an untrained cost model")
        self.booster.save_model(os.fspath(path))
        with open(os.fspath(path) + ".meta.json", "w") as f:
            json.dump({"loss": self.loss, "rounds": self.rounds, "seed": self.seed, "params": self.params,
                       "cand_names": self.cand_names, "n_train": self.n_train,
                       "error": self.error if math.isfinite(self.error) else None, "n_heldout": self.n_heldout}, f)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostModel":
        import xgboost as xgb

        with open(os.fspath(path) + ".meta.json") as f:
            meta = json.load(f)
        model = cls(loss=meta["loss"], rounds=meta["rounds"], seed=meta["seed"])
        model.params, model.cand_names, model.n_train = meta["params"], meta["cand_names"], meta["n_train"]
        err = meta.get("error")
        model.error, model.n_heldout = (float(err) if err is not None else math.inf), int(meta.get("n_heldout", 0))
        model.booster = xgb.Booster()
        model.booster.load_model(os.fspath(path))
        return model
