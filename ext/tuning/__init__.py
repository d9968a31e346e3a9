"""Autotuning: task extraction, search, cost model, measurement, tuning log.

``ext.tune(mod, target, log=...)`` measures (candidate, config) points of each
distinct workload of ``mod`` and appends them to a JSONL log; builds pick the
best valid record per workload with ``ext.build(..., tuning_log=log)`` or
inside ``with ext.apply_history_best(log):``, and ask a cost model trained on
the log for workloads it has not seen (used only when it predicts a gain over
the untuned choice larger than its error on held-out workloads).

Modules: ``tasks`` (extraction), ``scheduler`` (whole-model task scheduler:
baselines first, then rounds by estimated end-to-end gain per second),
``search`` (per-task search steps, the older per-task loop), ``e2e`` (the
end-to-end check that drops tuned choices which make the model slower),
``cost_model`` (xgboost), ``measure`` (subprocess / RPC measurement), ``log``
(records, provenance), ``apply`` (history for the Selector).
"""
from __future__ import annotations

from .apply import apply_history_best, load_history  # noqa: F401
from .cost_model import CostModel  # noqa: F401
from .log import Record, TuningLog  # noqa: F401
from .measure import LocalMeasurer, RPCMeasurer, Settings  # noqa: F401
from .e2e import E2EResult  # noqa: F401
from .scheduler import TaskScheduler  # noqa: F401
from .search import ProgressPrinter, Tuner, TuneSummary, task_space  # noqa: F401
from .tasks import Task, extract_tasks  # noqa: F401


def tune(mod, target=None, *, log, trials: int | None = None, seconds: float | None = None, rpc=None,
         timeout: float = 60.0, batch: int = 8, explore: float = 0.25, seed: int = 0, settings=None,
         plugins=(), progress=None, on_record=None, scheduler: str = "gain", check: bool | None = None,
         inputs=None, tasks=None) -> TuneSummary:
    """Autotune the kernels of ``mod`` for ``target``, appending one record per measurement to ``log``.

    Parameters
    ----------
    mod : a Relax IRModule, or a ``Workload`` / list of ``Workload`` s.
    target : ``ext.target.cpu()`` by default.
    log : path of the JSONL tuning log (appended to; points already in it, or appended meanwhile by
        another tuner sharing it, are not measured again). A log that cannot be written raises an
        ``OSError`` naming the path before anything is measured.
    trials : measurements per task in this run (None: each task's whole space).
    seconds : wall-clock budget of the search (None: unlimited); the end-to-end check (``check``) comes on top.
    rpc : None to measure here; ``{"tracker": "HOST:PORT", "key": KEY}`` (optionally
        ``"connect_timeout"``, ``"retries"``, ``"session_timeout"``) or a ``(tracker, key)`` pair to
        measure on devices behind a TVM RPC tracker. An unreachable tracker, or one without a server
        for the key, raises ``ConnectionError`` naming the address within seconds, before measuring.
    timeout : seconds one measurement may take before its worker is killed (recorded ``timeout``).
    batch, explore, seed : search round size, share of random points, RNG / xgboost seed.
    settings : timing ``Settings`` (repeats, minimum repeat time, input seed).
    plugins : ``"module:function"`` run in each measurement worker (e.g. extra candidates).
    progress : ``f(state, tuner)`` after each measurement (``ProgressPrinter()`` prints bars, and
        after each scheduler round the estimated model latency).
    on_record : ``f(record)`` after each record is written.
    scheduler : ``"gain"`` (``TaskScheduler``: every task's untuned choice first, then rounds to the task
        with the largest estimated end-to-end gain per second) or ``"task"`` (``search.Tuner``: tasks
        by weight / (1 + trials)).
    check : run the end-to-end check (``e2e.check``) after tuning: build the model with the log and
        untuned, time both interleaved, drop tuned choices that make it slower (``dropped`` records).
        Default: on for an IRModule measured locally (the check runs the model on this machine).
    inputs : NumPy inputs of ``mod["main"]`` for the check (default: random floats, zero integers).
    tasks : ``extract_tasks(mod, target)`` when the caller has it already (extraction runs the
        pipeline up to lowering: seconds for a large model).

    Returns
    -------
    ``TuneSummary`` (``.table()`` prints per-task best, trials, failures, speedup vs untuned, the
    estimated model latency and the end-to-end check's result, ``.e2e``).

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
        tasks = list(tasks) if tasks is not None else extract_tasks(mod, tgt)
    else:
        raise ValueError(f"ext.tune needs a Relax IRModule or Workload(s), got {type(mod).__name__}")
    if log is None or str(log) == "":
        raise ValueError("ext.tune needs log=<path of the JSONL tuning log>")
    kinds = {"gain": TaskScheduler, "task": Tuner}
    if scheduler not in kinds:
        raise ValueError(f"scheduler must be one of {sorted(kinds)}, got {scheduler!r}")
    is_model = isinstance(mod, tvm.IRModule)
    if check is None:
        check = is_model and rpc is None
    if check and not is_model:
        raise ValueError("check=True needs the model (a Relax IRModule), not Workloads")
    if check:  # before measuring: a model the check cannot run fails now, not after the budget
        from .e2e import model_inputs

        n_params = len(mod["main"].params)
        inputs = list(inputs) if inputs is not None else model_inputs(mod, seed)
        if len(inputs) != n_params:
            raise ValueError(f"inputs: {len(inputs)} arrays for the {n_params} inputs of the model's main")
    measurer = make_measurer(rpc, timeout=timeout, settings=settings, plugins=plugins)
    try:
        tuner = kinds[scheduler](tasks, tgt, TuningLog(log), measurer, trials=trials, seconds=seconds,
                                 batch=batch, explore=explore, seed=seed, progress=progress, on_record=on_record)
        summary = tuner.run()
    finally:
        measurer.close()
        if progress is not None and hasattr(progress, "close"):
            progress.close()
    if check and summary.trials + sum(t["resumed"] for t in summary.tasks) > 0:
        from .e2e import check as e2e_check

        stream = getattr(progress, "stream", None)
        say = (lambda line: print(line, file=stream, flush=True)) if stream is not None else None
        summary.e2e = e2e_check(mod, tgt, log, tasks=tasks, inputs=inputs, say=say).to_json()
    return summary
