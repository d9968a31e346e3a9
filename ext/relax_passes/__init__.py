"""ext's Relax passes, one module per concern."""
from .canonicalize import Canonicalize  # noqa: F401
from .fold_constants import FoldConstants  # noqa: F401
from .fallback_schedule import FallbackSchedule  # noqa: F401
from .fuse_epilogue import FuseEpilogues  # noqa: F401
from .lower_to_candidates import LowerToCandidates  # noqa: F401
