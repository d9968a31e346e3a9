"""Shared fixtures (helpers live in ``ext.testing``)."""
from __future__ import annotations

import pytest

import ext


@pytest.fixture(scope="session")
def cpu_target():
    return ext.target.cpu()
