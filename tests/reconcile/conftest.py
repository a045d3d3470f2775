"""Fixtures for the reconciler tests: the in-memory API and fast settings."""

from __future__ import annotations

import pytest

from tests.reconcile.memory_api import MemoryAPI


@pytest.fixture
def memory_api() -> MemoryAPI:
    return MemoryAPI()
