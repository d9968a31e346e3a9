"""Applying tuning logs to builds (history lookup and the ``apply_history_best`` context)."""
from __future__ import annotations

import contextlib

_STACK: list = []


def load_history(path, target, model=None):
    """(history, model) for a tuning log; the tuning issue fills this in."""
    from .log import TuningLog

    log = TuningLog(path)
    return log.history(target), model


def current_history(target, history=None, model=None):
    """The innermost ``apply_history_best`` context's (history, model), else the given ones."""
    if _STACK:
        return _STACK[-1](target)
    return history, model


@contextlib.contextmanager
def apply_history_best(path):
    """Builds inside this context use the best records of the tuning log at ``path``."""
    _STACK.append(lambda target: load_history(path, target))
    try:
        yield
    finally:
        _STACK.pop()
