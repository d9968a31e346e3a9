"""OpenBLAS through NumPy: ``ext.lib.openblas.matmul``.

``np.matmul(a, b, out=c)`` on float32/float64 C-contiguous operands calls the
BLAS NumPy was built with (``cblas_sgemm``; ``sgemv`` when one side is a
vector; one call per matrix of a batch). A transposed ``b`` is passed as a
transposed view, which BLAS reads in place (``CblasTrans``), so no operand is
copied. The wheels on PyPI ship OpenBLAS (``scipy-openblas``), threaded on all
cores; the candidate's ``threads`` knob limits that per call (via threadpoolctl).
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


@functools.lru_cache(maxsize=None)
def _controller():
    """threadpoolctl's handle on NumPy's OpenBLAS (sets its thread count directly), or None."""
    try:
        from threadpoolctl import ThreadpoolController

        ctls = [c for c in ThreadpoolController().lib_controllers if c.internal_api == "openblas"]
        return ctls[0] if ctls else None
    except Exception:  # threadpoolctl missing or unable to inspect the process
        return None


def call_with_threads(threads: int, fn, *args):
    """``fn(*args)`` with OpenBLAS limited to ``threads`` (0: leave as is), restored after."""
    ctl = _controller() if threads > 0 else None
    prev = ctl.get_num_threads() if ctl is not None else None
    if prev is None or prev == threads:
        return fn(*args)
    ctl.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        ctl.set_num_threads(prev)


@tvm.register_global_func(FUNC, override=True)
def _matmul(a, b, transpose_b, threads, out):
    """``out = a @ b`` (``b`` swapped in its last two axes when ``transpose_b``), batched with
    broadcasting, on ``threads`` OpenBLAS threads (0: OpenBLAS's own setting)."""
    rhs = np.from_dlpack(b)
    if transpose_b:
        rhs = rhs.swapaxes(-1, -2)
    call_with_threads(threads, np.matmul, np.from_dlpack(a), rhs, np.from_dlpack(out))
