"""Applying tuning logs to builds: the history and model the ``Selector`` consults.

``load_history(path, target)`` reads the log once per (file state, target):
the ``History`` answers ``best(workload, target)`` with the fastest correct
valid record (Selector source ``log``); a ``CostModel`` trained on every valid
``ok`` record of the log, across workloads, predicts for workloads the log has
not seen (source ``model``, only when its predicted gain over the untuned
choice exceeds its held-out error, ``CostModel.margin``); with too few records
there is no model and the Selector falls back to ``plevel``. Stale and malformed records are reported as
warnings with counts (``TuningLogWarning``) and never used.

``apply_history_best(path)`` makes every ext build inside the ``with`` block
use that log, as ``ext.build(..., tuning_log=path)`` does for one build.
"""
from __future__ import annotations

import contextlib
import os

_STACK: list = []
_CACHE: dict = {}


def _signature(path: str) -> tuple:
    st = os.stat(path)
    return (os.path.abspath(path), st.st_mtime_ns, st.st_size)


def load_history(path, target, model=None):
    """``(History, model)`` for the tuning log at ``path`` and ``target``.

    Parameters
    ----------
    path : the JSONL tuning log; a missing file raises ``FileNotFoundError`` naming it.
    target : the ``tvm.target.Target`` being compiled for.
    model : a cost model to use instead of one trained on the log.
    """
    from .cost_model import CostModel
    from .log import TuningLog

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"tuning log {path!r} does not exist")
    key = (_signature(path), str(target))
    if key not in _CACHE:
        log = TuningLog(path)
        hist = log.history(target)
        trained = CostModel().fit(hist.records, target)
        _CACHE.clear()  # one log at a time is plenty; keeps memory flat
        _CACHE[key] = (hist, trained if trained.trained else None)
    hist, trained = _CACHE[key]
    return hist, (model if model is not None else trained)


def current_history(target, history=None, model=None):
    """The innermost ``apply_history_best`` context's (history, model), else the given ones."""
    if _STACK:
        return _STACK[-1](target)
    return history, model


@contextlib.contextmanager
def apply_history_best(path):
    """Builds inside this context pick kernels from the tuning log at ``path``.

    Example
    -------
    >>> with ext.apply_history_best("tune.jsonl"):   # doctest: +SKIP
    ...     ex = ext.build(mod, ext.target.cpu())
    >>> ext.last_report().find("matmul")[0].source     # doctest: +SKIP
    'log'
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"tuning log {path!r} does not exist")
    _STACK.append(lambda target: load_history(path, target))
    try:
        yield
    finally:
        _STACK.pop()
