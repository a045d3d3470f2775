"""Fixtures for the reconciler tests: the in-memory API and fast settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.controller import Controller
from tests.fakeapi.server import FakeApiServer
from tests.reconcile.memory_api import MemoryAPI
from tests.reconcile.support import Kubectl, fast_settings


@pytest.fixture
def memory_api() -> MemoryAPI:
    return MemoryAPI()


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    """The fake Kubernetes API server over HTTP (tests/fakeapi), started per test."""
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kubectl(api_server: FakeApiServer) -> Iterator[Kubectl]:
    with Kubectl(api_server.url) as client:
        yield client


@pytest.fixture
def run_controller(api_server: FakeApiServer) -> Iterator[Callable[..., Controller]]:
    """Start Controllers in-process against ``api_server`` (stopped at teardown).

    Each gets its own ApiClient whose User-Agent is its identity, so the fake's request log
    tells who wrote what.
    """
    controllers: list[Controller] = []

    def _run(identity: str = "pod-a", **overrides: Any) -> Controller:
        client = api_server.client()
        client.user_agent = identity
        controller = Controller(
            settings=fast_settings(**overrides), api_client=client, identity=identity
        )
        controller.start()
        controllers.append(controller)
        return controller

    yield _run
    for controller in controllers:
        controller.stop(timeout=5)
