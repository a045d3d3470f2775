"""The official client's SharedInformer keeps in sync, and re-lists after 410 Gone."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.informer import SharedInformer

from tests.fakeapi import FakeApiServer

pytestmark = pytest.mark.fake_only(
    "holds the informer's watch, drops it and compacts history on demand (a real server "
    "compacts on its own schedule)"
)


def _wait(predicate: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _names(informer: SharedInformer) -> set[str]:
    return {o.metadata.name for o in informer.cache.list()}


def test_informer_syncs_and_recovers_from_compaction(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    core.create_node(body={"metadata": {"name": "a"}})
    # resync_period bounds each watch (timeoutSeconds), so stop() never waits on an idle watch.
    informer = SharedInformer(list_func=core.list_node, resync_period=30)
    errors: list[int] = []
    informer.add_event_handler("ERROR", lambda exc: errors.append(getattr(exc, "status", 0)))
    informer.start()
    try:
        assert _wait(lambda: _names(informer) == {"a"})
        core.create_node(body={"metadata": {"name": "b"}})
        assert _wait(lambda: _names(informer) == {"a", "b"})
        lists_before = fake_api.requests()["list nodes"]
        watches_before = fake_api.requests()["watch nodes"]
        # Hold the informer's next watch back while history moves on and is compacted.
        fake_api.hold(method="GET", path="/api/v1/nodes")
        fake_api.drop_watches()
        assert _wait(lambda: fake_api.requests()["watch nodes"] > watches_before)
        core.delete_node("a")
        core.create_node(body={"metadata": {"name": "c"}})
        fake_api.compact()
        fake_api.release()
        assert _wait(lambda: _names(informer) == {"b", "c"})
        assert 410 in errors
        assert fake_api.requests()["list nodes"] > lists_before
    finally:
        fake_api.release()
        informer.stop()
