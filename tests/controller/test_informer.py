"""Informer: list, watch, resume, re-list on 410, back off on errors, stop promptly."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from app.controller.cache import Change, ClusterCache, View
from app.controller.informer import Informer
from app.core.views import node_view
from app.kube.client import ApiError, Kind
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import node, wait_until


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, bool, bool]] = []

    def __call__(self, kind: Kind, changes: list[Change]) -> None:
        self.changes.extend((key, old is not None, new is not None) for key, old, new in changes)


Running = tuple[Informer, ClusterCache, Recorder]


@pytest.fixture
def api() -> MemoryAPI:
    api = MemoryAPI()
    for i in range(7):
        api.apply("nodes", node(f"n{i}", internal=[f"10.0.0.{i}"]))
    return api


@pytest.fixture
def running(api: MemoryAPI) -> Iterator[Running]:
    cache, recorder = ClusterCache(), Recorder()
    informer = Informer(
        kind="nodes",
        api=api,
        cache=cache,
        to_view=node_view,
        handler=recorder,
        page_size=3,
        backoff_initial=0.01,
    )
    informer.start()
    yield informer, cache, recorder
    informer.stop()
    informer.join(5)


def names(cache: ClusterCache) -> list[str]:
    return sorted(n.name for n in cache.nodes())


def test_lists_in_pages_then_follows_the_watch(running: Running, api: MemoryAPI) -> None:
    _informer, cache, recorder = running
    wait_until(lambda: cache.kind_synced("nodes"), what="first list")
    assert len(names(cache)) == 7
    assert api.calls["list nodes"] == 3, "7 Nodes in pages of 3"
    api.apply("nodes", node("n7", internal=["10.0.0.7"]))
    api.delete("nodes", "n0")
    wait_until(lambda: "n7" in names(cache) and "n0" not in names(cache), what="watch events")
    assert ("n7", False, True) in recorder.changes and ("n0", True, False) in recorder.changes


def test_an_unchanged_view_is_not_reported(running: Running, api: MemoryAPI) -> None:
    _informer, cache, recorder = running
    # The cache is marked synced before the handler hears of the list's 7 adds.
    wait_until(lambda: len(recorder.changes) == 7, what="first list handled")
    before = len(recorder.changes)
    api.apply("nodes", node("n1", internal=["10.0.0.1"], heartbeat="2030-01-01T00:00:00Z"))
    api.apply("nodes", node("n8"))
    wait_until(lambda: "n8" in names(cache), what="marker event")
    assert recorder.changes[before:] == [("n8", False, True)]


def test_a_dropped_watch_resumes_without_a_re_list(running: Running, api: MemoryAPI) -> None:
    informer, cache, _ = running
    wait_until(lambda: informer.watches == 1, what="watch")
    api.break_watches()
    api.apply("nodes", node("n9"))
    wait_until(lambda: "n9" in names(cache), what="event after reconnect")
    assert informer.lists == 1
    assert informer.watches >= 2


def test_410_on_re_watch_re_lists_and_catches_deletions_made_in_the_gap(
    running, api: MemoryAPI
) -> None:  # type: ignore[no-untyped-def]
    informer, cache, recorder = running
    wait_until(lambda: informer.watches == 1, what="watch")
    api.delete("nodes", "n3")
    api.compact()
    api.break_watches()
    wait_until(lambda: informer.lists == 2, what="re-list after 410")
    assert "n3" not in names(cache)
    assert ("n3", True, False) in recorder.changes


@pytest.mark.parametrize(
    "failures",
    [
        pytest.param((503, 0, 500), id="API unavailable, connection refused, server error"),
        pytest.param((410, 410, 410), id="410 Gone again and again"),
    ],
)
def test_a_failing_list_is_retried_with_backoff(
    api: MemoryAPI, failures: tuple[int, int, int]
) -> None:
    api.fail("list nodes", *failures)
    cache = ClusterCache()
    informer = Informer(
        kind="nodes",
        api=api,
        cache=cache,
        to_view=node_view,
        handler=Recorder(),
        backoff_initial=0.01,
    )
    informer.start()
    try:
        wait_until(lambda: cache.kind_synced("nodes"), what="list after three failures")
        assert api.calls["list nodes"] == 4
    finally:
        informer.stop()
        informer.join(5)


def test_a_429_list_waits_for_its_retry_after(api: MemoryAPI) -> None:
    """A throttled List (429 + Retry-After) is tried again no sooner than the server asked,
    even though the informer's own backoff is shorter."""
    api.fail("list nodes", 429, retry_after=0.5)
    cache = ClusterCache()
    informer = Informer(
        kind="nodes",
        api=api,
        cache=cache,
        to_view=node_view,
        handler=Recorder(),
        backoff_initial=0.01,
    )
    informer.start()
    try:
        wait_until(lambda: cache.kind_synced("nodes"), what="list after the 429")
        first, second = api.call_times["list nodes"][:2]
        assert second - first >= 0.5
        assert api.calls["list nodes"] == 2
    finally:
        informer.stop()
        informer.join(5)


def test_an_unusable_object_is_left_out_not_fatal(running: Running, api: MemoryAPI) -> None:
    informer, cache, _ = running
    wait_until(lambda: cache.kind_synced("nodes"), what="first list")
    bad = node("bad")
    bad["status"]["addresses"] = "not a list"
    api.apply("nodes", bad)
    api.apply("nodes", node("after-bad"))
    wait_until(lambda: "after-bad" in names(cache), what="event after the bad one")
    assert "bad" not in names(cache)
    assert informer.alive()


def test_stop_is_prompt_while_a_watch_is_open(running: Running) -> None:
    informer, _cache, _ = running
    wait_until(lambda: informer.watches == 1, what="watch")
    informer.stop()
    informer.join(5)
    assert not informer.alive(), "stop() must interrupt the open watch"


class PoisonHandler(Recorder):
    """Raises on every change of Node ``poison`` (a handler bug), records the rest."""

    def __call__(self, kind: Kind, changes: list[Change]) -> None:
        if any(key == "poison" for key, _, _ in changes):
            raise RuntimeError("handler bug")
        super().__call__(kind, changes)


def poison_view(obj: Mapping[str, Any]) -> View:
    if obj["metadata"]["name"] == "poison":
        raise KeyError("view conversion bug")
    return node_view(obj)


@contextmanager
def informer_with(api: MemoryAPI, **kwargs: Any) -> Iterator[tuple[Informer, ClusterCache]]:
    cache = ClusterCache()
    arguments: dict[str, Any] = {"to_view": node_view, "handler": Recorder(), **kwargs}
    informer = Informer(kind="nodes", api=api, cache=cache, backoff_initial=0.01, **arguments)
    informer.start()
    try:
        yield informer, cache
    finally:
        informer.stop()
        informer.join(5)


@pytest.mark.parametrize("bug", ["handler", "view"])
def test_a_poison_event_is_skipped_and_later_events_still_arrive(api: MemoryAPI, bug: str) -> None:
    handler = PoisonHandler()
    to_view = poison_view if bug == "view" else node_view
    with informer_with(api, handler=handler, to_view=to_view) as (informer, cache):
        wait_until(lambda: cache.kind_synced("nodes"), what="first list")
        api.apply("nodes", node("poison"))
        api.apply("nodes", node("after-poison"))
        wait_until(lambda: "after-poison" in names(cache), what="event after the poison one")
        assert ("after-poison", False, True) in handler.changes
        assert informer.alive()
        assert api.calls["list nodes"] == 1, "the watch position is kept: no re-list"


class BrokenOnceAPI(MemoryAPI):
    """The first list fails with something that is not an ApiError (a client bug)."""

    broken = True

    def list_page(self, kind: Kind, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        if self.broken:
            self.broken = False
            raise TypeError("client bug")
        return super().list_page(kind, limit=limit, continue_token=continue_token)


def test_an_unexpected_error_in_the_list_watch_cycle_backs_off_and_re_lists() -> None:
    api = BrokenOnceAPI()
    api.apply("nodes", node("n0"))
    with informer_with(api) as (informer, cache):
        wait_until(lambda: cache.kind_synced("nodes"), what="list after the failure")
        assert names(cache) == ["n0"]
        assert informer.alive()


def test_the_pod_informer_lists_and_watches_host_network_pods_only() -> None:
    """``fieldSelector=spec.hostNetwork=true`` (app.kube.client.FIELD_SELECTORS), applied by
    the in-memory API as kube-apiserver applies it: the List pages hold host-network Pods
    only, a watch says nothing of the others, and an object leaving the selection is a
    DELETED event (entering it, ADDED)."""
    from app.core.views import pod_view
    from tests.controller.memory_api import field_matcher

    api = MemoryAPI()

    def pod(name: str, host: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": "c", "ports": [
            {"containerPort": 9100}]}]}  # fmt: skip
        if host:
            spec["hostNetwork"] = True
        return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}

    for i in range(5):
        api.apply("pods", pod(f"host-{i}", True))
        api.apply("pods", pod(f"pod-{i}", False))
    cache, recorder = ClusterCache(), Recorder()
    informer = Informer(kind="pods", api=api, cache=cache, to_view=pod_view, handler=recorder,
                        page_size=2, backoff_initial=0.01)  # fmt: skip
    informer.start()
    try:
        wait_until(lambda: cache.kind_synced("pods"), what="first list")
        assert api.calls["list pods"] == 3, "5 host-network Pods in pages of 2"
        assert sorted(recorder.changes) == [(f"ns/host-{i}", False, True) for i in range(5)]
        api.apply("pods", pod("pod-5", False))
        api.apply("pods", pod("host-0", False))  # leaves the selection
        api.apply("pods", pod("pod-0", True))  # enters it
        wait_until(lambda: cache.get("pods", "ns/pod-0"), what="pod-0 entered")
        assert cache.get("pods", "ns/host-0") is None and cache.get("pods", "ns/pod-5") is None
        assert recorder.changes[5:] == [("ns/host-0", True, False), ("ns/pod-0", False, True)]
    finally:
        informer.stop()
        informer.join(5)
    with pytest.raises(ApiError) as err:
        field_matcher("pods", "spec.hostPID=true")
    assert (err.value.status, err.value.reason) == (400, "field label not supported: spec.hostPID")
    assert field_matcher("pods", "spec.hostNetwork=false")(pod("x", False))
