"""Informer: list, watch, resume, re-list on 410, back off on errors, stop promptly."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from app.controller.cache import Change, ClusterCache, View
from app.controller.informer import Informer
from app.core.views import node_view
from app.kube.client import HOST_NETWORK_PODS, ApiError, Kind
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
    wait_until(lambda: "nodes" not in cache.unsynced(), what="first list")
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
        wait_until(lambda: "nodes" not in cache.unsynced(), what="list after three failures")
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
        wait_until(lambda: "nodes" not in cache.unsynced(), what="list after the 429")
        first, second = api.call_times["list nodes"][:2]
        assert second - first >= 0.5
        assert api.calls["list nodes"] == 2
    finally:
        informer.stop()
        informer.join(5)


def test_an_unusable_object_is_left_out_not_fatal(running: Running, api: MemoryAPI) -> None:
    informer, cache, _ = running
    wait_until(lambda: "nodes" not in cache.unsynced(), what="first list")
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
        wait_until(lambda: "nodes" not in cache.unsynced(), what="first list")
        api.apply("nodes", node("poison"))
        api.apply("nodes", node("after-poison"))
        wait_until(lambda: "after-poison" in names(cache), what="event after the poison one")
        assert ("after-poison", False, True) in handler.changes
        assert informer.alive()
        assert api.calls["list nodes"] == 1, "the watch position is kept: no re-list"


class BrokenOnceAPI(MemoryAPI):
    """The first list fails with something that is not an ApiError (a client bug)."""

    broken = True

    def list_page(
        self,
        kind: Kind,
        *,
        limit: int,
        continue_token: str | None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        if self.broken:
            self.broken = False
            raise TypeError("client bug")
        return super().list_page(
            kind, limit=limit, continue_token=continue_token, field_selector=field_selector
        )


def test_an_unexpected_error_in_the_list_watch_cycle_backs_off_and_re_lists() -> None:
    api = BrokenOnceAPI()
    api.apply("nodes", node("n0"))
    with informer_with(api) as (informer, cache):
        wait_until(lambda: "nodes" not in cache.unsynced(), what="list after the failure")
        assert names(cache) == ["n0"]
        assert informer.alive()


def test_the_pod_informer_lists_and_watches_host_network_pods_only() -> None:
    """``fieldSelector=spec.hostNetwork=true`` (``host-port-pods`` off,
    app.kube.client.pod_field_selector) on every List page and watch, applied by the
    in-memory API as kube-apiserver applies it: the List pages hold host-network Pods
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
                        page_size=2, backoff_initial=0.01,
                        field_selector=HOST_NETWORK_PODS)  # fmt: skip
    informer.start()
    try:
        wait_until(lambda: "pods" not in cache.unsynced(), what="first list")
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
    sent = {call: set(selectors) for call, selectors in api.field_selectors.items()}
    assert sent == {"list pods": {HOST_NETWORK_PODS}, "watch pods": {HOST_NETWORK_PODS}}
    with pytest.raises(ApiError) as err:
        field_matcher("pods", "spec.hostPID=true")
    assert (err.value.status, err.value.reason) == (400, "field label not supported: spec.hostPID")
    assert field_matcher("pods", "spec.hostNetwork=false")(pod("x", False))


def pod_obj(
    name: str,
    *,
    node_name: str | None = "n1",
    host_network: bool = False,
    host_port: int | None = None,
    container_port: int = 8080,
    phase: str = "Running",
    ready: str = "True",
) -> dict[str, Any]:
    """A v1 Pod of namespace ``ns``: on the Pod network unless ``host_network``, declaring
    ``container_port`` (with ``host_port`` when given), ``status.phase`` ``phase`` and a
    Ready condition ``ready`` (what a kubelet's status updates change)."""
    port: dict[str, Any] = {"containerPort": container_port}
    if host_port is not None:
        port["hostPort"] = host_port
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i:1", "ports": [port]}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    if host_network:
        spec["hostNetwork"] = True
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status}


class CountingCache(ClusterCache):
    """A ClusterCache that records every ``put`` and every ``delete`` that removed a view."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    def put(self, kind: Kind, key: str, view: View) -> View | None:
        self.writes.append(("put", key))
        return super().put(kind, key, view)

    def delete(self, kind: Kind, key: str) -> View | None:
        old = super().delete(kind, key)
        if old is not None:
            self.writes.append(("delete", key))
        return old


@contextmanager
def pod_informer(
    api: MemoryAPI, *, host_port_pods: bool, field_selector: str | None
) -> Iterator[tuple[CountingCache, Recorder]]:
    """The Controller's Pod informer (``host_pod_view``) on ``api``, started and synced."""
    from functools import partial

    from app.controller.controller import host_pod_view

    cache, recorder = CountingCache(), Recorder()
    informer = Informer(kind="pods", api=api, cache=cache, handler=recorder, page_size=3,
                        to_view=partial(host_pod_view, host_port_pods=host_port_pods),
                        field_selector=field_selector, backoff_initial=0.01)  # fmt: skip
    informer.start()
    try:
        wait_until(lambda: "pods" not in cache.unsynced(), what="first list")
        yield cache, recorder
    finally:
        informer.stop()
        informer.join(5)


def settle(api: MemoryAPI, cache: ClusterCache, marker: str) -> None:
    """Apply a port-holding marker Pod and wait until it is cached: every event before it
    has been applied (one watch, in order)."""
    api.apply("pods", pod_obj(marker, host_network=True, container_port=1))
    wait_until(lambda: cache.get("pods", f"ns/{marker}"), what=f"{marker} cached")


def test_with_every_pod_listed_only_the_pods_that_hold_node_ports_are_kept() -> None:
    """``host-port-pods`` on (the default): the Pod informer lists and watches every Pod
    (no field selector) and keeps only those whose view holds a port (a host-network
    ``containerPort``, another Pod's ``hostPort``, sidecar init containers included): the
    cache and the port index hold nothing else, and the handler hears of nothing else."""
    api = MemoryAPI()
    for i in range(7):
        api.apply("pods", pod_obj(f"web-{i}"))  # Pod network, containerPort only
    api.apply("pods", pod_obj("exporter", host_network=True, container_port=9100))
    api.apply("pods", pod_obj("ingress", host_port=80))
    api.apply("pods", pod_obj("pending", host_port=81, node_name=None))  # not bound
    api.apply("pods", pod_obj("done", host_port=82, phase="Succeeded"))  # ended
    sidecar = pod_obj("sidecar")
    sidecar["spec"]["initContainers"] = [
        {"name": "proxy", "image": "p:1", "restartPolicy": "Always",
         "ports": [{"containerPort": 15001, "hostPort": 15001}]},
        {"name": "setup", "image": "s:1", "ports": [{"containerPort": 9, "hostPort": 9}]},
    ]  # fmt: skip
    api.apply("pods", sidecar)
    with pod_informer(api, host_port_pods=True, field_selector=None) as (cache, recorder):
        assert sorted(cache._stores["pods"]) == ["ns/exporter", "ns/ingress", "ns/sidecar"]
        assert sorted(recorder.changes) == [
            ("ns/exporter", False, True), ("ns/ingress", False, True), ("ns/sidecar", False, True)
        ]  # fmt: skip
        assert api.calls["list pods"] == 4, "12 Pods in pages of 3: all of them listed"
        assert cache.pods(("TCP", 80))[0].name == "ingress"
        assert cache.pods(("TCP", 15001))[0].name == "sidecar"
        assert cache.pods(("TCP", 9)) == [], "a plain init container holds no port"
        assert cache.pods(("TCP", 8080)) == [], "a containerPort off the host network"
    sent = {call: set(selectors) for call, selectors in api.field_selectors.items()}
    assert sent == {"list pods": {None}, "watch pods": {None}}


def test_watch_events_move_a_pod_in_and_out_of_the_cache_and_others_cost_nothing() -> None:
    """Every transition a watch of all Pods brings: a Pod that stops holding ports (ended,
    deleted) leaves the cache and the port index, its handler hears ``(key, old, None)``
    (``PortIndex.put_pod(key, old, None)``); one that starts holding (bound by the
    scheduler, re-created with a hostPort) enters it; and the events of a Pod never kept
    and still not kept (a status update, a delete) change nothing in the cache, the port
    index or the handler."""
    api = MemoryAPI()
    for i in range(3):
        api.apply("pods", pod_obj(f"web-{i}"))
    api.apply("pods", pod_obj("ingress", host_port=80))
    api.apply("pods", pod_obj("exporter", host_network=True, container_port=9100))
    api.apply("pods", pod_obj("pending", host_port=81, node_name=None))
    with pod_informer(api, host_port_pods=True, field_selector=None) as (cache, recorder):
        before = (len(recorder.changes), len(cache.writes), cache.port_version())

        # Ordinary Pods: status churn and a delete. Nothing of them is kept, ever.
        for i in range(3):
            api.apply("pods", pod_obj(f"web-{i}", ready="False"))
        api.delete("pods", "ns/web-2")
        settle(api, cache, "marker-1")
        assert recorder.changes[before[0] :] == [("ns/marker-1", False, True)]
        assert cache.writes[before[1] :] == [("put", "ns/marker-1")]
        held = cache.port_version()

        # A status update of a kept Pod that leaves its ports alone: the same view.
        api.apply("pods", pod_obj("ingress", host_port=80, ready="False"))
        settle(api, cache, "marker-2")
        assert recorder.changes[-1] == ("ns/marker-2", False, True)
        assert ("ns/ingress", True, True) not in recorder.changes

        # Holding -> not holding: the hostPort Pod ends; the host-network Pod is deleted.
        api.apply("pods", pod_obj("ingress", host_port=80, phase="Succeeded"))
        api.delete("pods", "ns/exporter")
        # Not holding -> holding: the pending Pod is bound.
        api.apply("pods", pod_obj("pending", host_port=81))
        settle(api, cache, "marker-3")
        assert recorder.changes[-4:] == [
            ("ns/ingress", True, False), ("ns/exporter", True, False),
            ("ns/pending", False, True), ("ns/marker-3", False, True),
        ]  # fmt: skip
        assert cache.get("pods", "ns/ingress") is None and cache.get("pods", "ns/exporter") is None
        assert cache.pods(("TCP", 80)) == [] and cache.pods(("TCP", 9100)) == []
        assert [p.name for p in cache.pods(("TCP", 81))] == ["pending"]
        assert cache.port_version() > held

        # A name re-used: an ordinary Pod re-created with a hostPort is kept, and back.
        api.delete("pods", "ns/web-0")
        api.apply("pods", pod_obj("web-0", host_port=8443))
        settle(api, cache, "marker-4")
        assert [p.name for p in cache.pods(("TCP", 8443))] == ["web-0"]
        api.delete("pods", "ns/web-0")
        api.apply("pods", pod_obj("web-0"))
        settle(api, cache, "marker-5")
        assert cache.get("pods", "ns/web-0") is None and cache.pods(("TCP", 8443)) == []
        assert recorder.changes[-4:] == [
            ("ns/web-0", False, True), ("ns/marker-4", False, True),
            ("ns/web-0", True, False), ("ns/marker-5", False, True),
        ]  # fmt: skip


def test_with_host_port_pods_off_only_host_network_pods_are_read_and_kept() -> None:
    """``host-port-pods`` off: ``fieldSelector=spec.hostNetwork=true`` on the List and
    the watch, so a hostPort Pod never crosses the wire; and should a server send one
    anyway (here: no selector), ``host_pod_view`` keeps it out too."""
    api = MemoryAPI()
    api.apply("pods", pod_obj("ingress", host_port=80))
    api.apply("pods", pod_obj("exporter", host_network=True, container_port=9100))
    for run, selector in enumerate((HOST_NETWORK_PODS, None)):
        with pod_informer(api, host_port_pods=False, field_selector=selector) as (cache, _):
            kept = sorted(cache._stores["pods"])
            assert kept == ["ns/exporter", *[f"ns/marker-{r}" for r in range(run)]], selector
            api.apply("pods", pod_obj(f"ingress-{run}", host_port=443))
            settle(api, cache, f"marker-{run}")
            assert cache.get("pods", f"ns/ingress-{run}") is None
            assert cache.pods(("TCP", 80)) == [] and cache.pods(("TCP", 443)) == []
