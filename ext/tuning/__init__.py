"""Autotuning: task extraction, search, cost model, measurement, tuning log.

``ext.tune(mod, target, log=...)`` measures (candidate, config) points of each
distinct workload of ``mod`` and appends them to a JSONL log; builds pick the
best valid record per workload with ``ext.build(..., tuning_log=log)`` or
inside ``with ext.apply_history_best(log):``, and ask a cost model trained on
the log for workloads it has not seen.

Modules: ``tasks`` (extraction), ``search`` (the loop), ``cost_model``
(xgboost), ``measure`` (subprocess / RPC measurement), ``log`` (records,
provenance), ``apply`` (history for the Selector).
"""
from __future__ import annotations

from .apply import apply_history_best, load_history  # noqa: F401
from .cost_model import CostModel  # noqa: F401
from .log import Record, TuningLog  # noqa: F401
from .measure import LocalMeasurer, RPCMeasurer, Settings  # noqa: F401
from .search import ProgressPrinter, Tuner, TuneSummary, task_space  # noqa: F401
from .tasks import Task, extract_tasks  # noqa: F401


def tune(mod, target=None, *, log, trials: int | None = None, seconds: float | None = None, rpc=None,
         timeout: float = 60.0, batch: int = 8, explore: float = 0.25, seed: int = 0, settings=None,
         plugins=(), progress=None, on_record=None) -> TuneSummary:
    """Autotune the kernels of ``mod`` for ``target``, appending one record per measurement to ``log``.

    Parameters
    ----------
    mod : a Relax IRModule, or a ``Workload`` / list of ``Workload`` s.
    target : ``ext.target.cpu()`` by default.
    log : path of the JSONL tuning log (appended to; points already in it, or appended meanwhile by
        another tuner sharing it, are not measured again). A log that cannot be written raises an
        ``OSError`` naming the path before anything is measured.
    trials : measurements per task in this run (None: each task's whole space).
    seconds : wall-clock budget of this run (None: unlimited).
    rpc : None to measure here; ``{"tracker": "HOST:PORT", "key": KEY}`` (optionally
        ``"connect_timeout"``, ``"retries"``, ``"session_timeout"``) or a ``(tracker, key)`` pair to
        measure on devices behind a TVM RPC tracker. An unreachable tracker, or one without a server
        for the key, raises ``ConnectionError`` naming the address within seconds, before measuring.
    timeout : seconds one measurement may take before its worker is killed (recorded ``timeout``).
    batch, explore, seed : search round size, share of random points, RNG / xgboost seed.
    settings : timing ``Settings`` (repeats, minimum repeat time, input seed).
    plugins : ``"module:function"`` run in each measurement worker (e.g. extra candidates).
    progress : ``f(state, tuner)`` after each measurement (``ProgressPrinter()`` prints bars).
    on_record : ``f(record)`` after each record is written.

    Returns
    -------
    ``TuneSummary`` (``.table()`` prints per-task best, trials, failures, speedup vs untuned).

    Example
    -------
    >>> import ext
    >>> mod, _ = ext.models.gemm.dense(256, 256, 256)        # doctest: +SKIP
    >>> print(ext.tune(mod, log="tune.jsonl", seconds=30).table())  # doctest: +SKIP
    >>> ex = ext.build(mod, tuning_log="tune.jsonl")          # doctest: +SKIP
    """
    import tvm

    from ..target import cpu, normalize
    from ..workload import Workload
    from .measure import make_measurer

    tgt = normalize(target) if target is not None else cpu()
    if isinstance(mod, Workload):
        tasks = [Task(mod)]
    elif isinstance(mod, (list, tuple)) and all(isinstance(w, Workload) for w in mod):
        tasks = [Task(w) for w in mod]
    elif isinstance(mod, tvm.IRModule):
        tasks = extract_tasks(mod, tgt)
    else:
        raise ValueError(f"ext.tune needs a Relax IRModule or Workload(s), got {type(mod).__name__}")
    if log is None or str(log) == "":
        raise ValueError("ext.tune needs log=<path of the JSONL tuning log>")
    measurer = make_measurer(rpc, timeout=timeout, settings=settings, plugins=plugins)
    try:
        tuner = Tuner(tasks, tgt, TuningLog(log), measurer, trials=trials, seconds=seconds, batch=batch,
                      explore=explore, seed=seed, progress=progress, on_record=on_record)
        return tuner.run()
    finally:
        measurer.close()
        if progress is not None and hasattr(progress, "close"):
            progress.close()
