"""Shared fixtures (helpers live in ``ext.testing``) and hypothesis profiles.

Run in parallel (the README's command): ``pytest -n 2`` (pytest-xdist) starts one worker per
core; each worker keeps TVM's pool at the usable cores (so parallel kernels still run on several
threads) but limits PyTorch's and BLAS's OpenMP pools to one thread, whose spin-waits would
otherwise take the other worker's core.

Profiles: ``default`` keeps the suite deterministic and short (derandomized, no deadline:
an example is a TVM build); ``long`` is the 1,000-example fuzzing run,
``pytest --hypothesis-profile=long tests/test_fuzz.py``.
"""
from __future__ import annotations

import os

os.environ.setdefault("EXT_CACHE", "0")  # tests monkeypatch kernels: no build may come from an earlier run's cache
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import pytest
from hypothesis import HealthCheck, settings

import ext

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("default", max_examples=40, derandomize=True, database=None, **_COMMON)
settings.register_profile("long", max_examples=1000, derandomize=False, **_COMMON)
settings.load_profile("default")


@pytest.fixture(scope="session")
def cpu_target():
    return ext.target.cpu()
