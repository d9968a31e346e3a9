"""OpenBLAS through NumPy: ``ext.lib.openblas.matmul``.

``np.matmul(a, b, out=c)`` on float32/float64 C-contiguous operands calls the
BLAS NumPy was built with (``cblas_sgemm``; ``sgemv`` when one side is a
vector; one call per matrix of a batch). A transposed ``b`` is passed as a
transposed view, which BLAS reads in place (``CblasTrans``), so no operand is
copied. The wheels on PyPI ship OpenBLAS (``scipy-openblas``), threaded on all
cores.
"""
from __future__ import annotations

import functools

import numpy as np
import tvm

FUNC = "ext.lib.openblas.matmul"
DTYPES = ("float32", "float64")


@functools.lru_cache(maxsize=None)
def blas_name() -> str:
    """Name of the BLAS NumPy is linked against ("scipy-openblas", "mkl", ...), or "unknown"."""
    try:
        cfg = np.show_config(mode="dicts")
        return str(cfg["Build Dependencies"]["blas"]["name"])
    except Exception:  # very old NumPy, or an unusual build
        return "unknown"


def unavailable_reason() -> str | None:
    """None when NumPy's BLAS is OpenBLAS, else why the candidate declines."""
    name = blas_name()
    return None if "openblas" in name.lower() else f"NumPy is linked against {name!r}, not OpenBLAS"


@tvm.register_global_func(FUNC, override=True)
def _matmul(a, b, transpose_b, out):
    """``out = a @ b`` (``b`` swapped in its last two axes when ``transpose_b``), batched with broadcasting."""
    rhs = np.from_dlpack(b)
    if transpose_b:
        rhs = rhs.swapaxes(-1, -2)
    np.matmul(np.from_dlpack(a), rhs, out=np.from_dlpack(out))
