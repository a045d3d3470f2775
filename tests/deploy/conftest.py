"""Fixtures for the deploy tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakeapi.server import FakeApiServer


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A fresh fake Kubernetes API server (tests/fakeapi), stopped after the test."""
    with FakeApiServer() as server:
        yield server
