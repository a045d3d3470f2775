"""Fixtures for the reconciler tests: the in-memory API and fast settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.controller.controller import Controller
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import Kubectl, Start, fast_settings
from tests.fakeapi.server import FakeApiServer


@pytest.fixture
def memory_api() -> MemoryAPI:
    return MemoryAPI()


@pytest.fixture
def start(memory_api: MemoryAPI) -> Iterator[Start]:
    """Start Controllers in-process against ``memory_api`` (stopped at teardown)."""
    controllers: list[Controller] = []

    def _start(identity: str = "pod-a", **overrides: Any) -> Controller:
        clock = overrides.pop("wall_clock", None)
        controller = Controller(
            settings=fast_settings(**overrides),
            api_client=None,
            identity=identity,
            api=memory_api,
            **({} if clock is None else {"wall_clock": clock}),
        )
        controller.start()
        controllers.append(controller)
        return controller

    yield _start
    for controller in controllers:
        controller.stop(timeout=5)


@pytest.fixture
def kubectl(fake_api: FakeApiServer) -> Iterator[Kubectl]:
    with Kubectl(fake_api.url) as client:
        yield client


@pytest.fixture
def run_controller(fake_api: FakeApiServer) -> Iterator[Callable[..., Controller]]:
    """Start Controllers in-process against ``fake_api`` (stopped at teardown).

    Each gets its own ApiClient whose User-Agent is its identity, so the fake's request log
    tells who wrote what.
    """
    controllers: list[Controller] = []

    def _run(identity: str = "pod-a", **overrides: Any) -> Controller:
        client = fake_api.client()
        client.user_agent = identity
        clock = overrides.pop("wall_clock", None)
        extra = {} if clock is None else {"wall_clock": clock}
        controller = Controller(
            settings=fast_settings(**overrides), api_client=client, identity=identity, **extra
        )
        controller.start()
        controllers.append(controller)
        return controller

    yield _run
    for controller in controllers:
        controller.stop(timeout=5)
