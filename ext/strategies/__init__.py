"""Op-strategy registry: candidates per op family, selection, reports."""
from .registry import PLEVEL, REGISTRY, Candidate, Registry, Verdict, candidates, register  # noqa: F401
from .report import SelectionReport  # noqa: F401
from .select import Alternative, Decision, Selector, choose  # noqa: F401
from . import matmul  # noqa: F401,E402  (family tables register on import)
