"""Op-strategy registry: candidates per op family, selection, reports.

Every module in this package other than ``registry``, ``select`` and
``report`` is a family's candidate table and registers itself on import
(``conv2d_cost`` registers nothing: it is the conv2d family's estimates).
"""
import importlib
import pkgutil

from .registry import PLEVEL, REGISTRY, Candidate, Registry, Verdict, candidates, register  # noqa: F401
from .report import SelectionReport  # noqa: F401
from .select import Alternative, Decision, Selector, choose  # noqa: F401

_CORE = {"registry", "report", "select"}
for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _m not in _CORE and not _m.startswith("_"):
        importlib.import_module(f"{__name__}.{_m}")
