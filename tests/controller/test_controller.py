"""The Controller wired end to end on the in-memory API (threads, real time, short waits)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from typing import Any

import pytest

from app.controller.cache import KINDS, ClusterCache
from app.controller.controller import Controller
from app.telemetry import metrics
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import (
    EXCLUDE,
    QueueAdds,
    Start,
    converged,
    endpoint_slice,
    fast_settings,
    host_pod,
    kind_4node,
    node,
    service,
    wait_until,
)


def test_kind_4node_converges_to_the_expected_ingress(memory_api: MemoryAPI, start: Start) -> None:
    objects, expected = kind_4node()
    for kind, obj in objects:
        memory_api.apply(kind, obj)
    controller = start(leader_elect=False)
    wait_until(controller.ready, what="caches synced")
    for key, ips in expected.items():
        if ips is not None:
            wait_until(converged(memory_api, key, ips), what=f"{key} = {ips}")
    assert memory_api.ingress("default/other-class") == ["203.0.113.10"]
    # One write per Service of ours, a pending one too (its NodesServing condition, False).
    ours = [key for key, ips in expected.items() if ips is not None]
    wait_until(lambda: all(memory_api.serving(key) is not None for key in ours), what="conditions")
    assert memory_api.calls["patch services/status"] == len(ours)
    assert memory_api.serving("default/other-class") is None
    assert controller.healthy() == (True, "ok")


def test_nodes_edits_converge_and_heartbeats_cause_no_reconcile(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    memory_api.apply("services", service("web"))
    controller = start(leader_elect=False)
    wait_until(converged(memory_api, "default/web", ["10.0.0.1", "10.0.0.2"]), what="first")
    for step, ips in [
        (
            lambda: memory_api.apply(
                "nodes", node("w1", internal=["10.0.0.1"], labels={EXCLUDE: ""})
            ),
            ["10.0.0.2"],
        ),
        (
            lambda: memory_api.apply("nodes", node("w1", internal=["10.0.0.9"])),
            ["10.0.0.2", "10.0.0.9"],
        ),
        (lambda: memory_api.delete("nodes", "w2"), ["10.0.0.9"]),
    ]:
        step()
        wait_until(converged(memory_api, "default/web", ips), what=str(ips))
    writes = memory_api.calls["patch services/status"]
    adds = QueueAdds(controller)
    memory_api.apply("nodes", node("w1", internal=["10.0.0.9"], heartbeat="2031-01-01T00:00:00Z"))
    memory_api.apply("services", service("marker", lb_class="other"))
    wait_until(lambda: controller.cache.service("default", "marker"), what="marker seen")
    assert memory_api.calls["patch services/status"] == writes
    assert adds.count == 1, "only the marker Service was enqueued"


def test_local_service_follows_its_endpoints(memory_api: MemoryAPI, start: Start) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    memory_api.apply("services", service("web", local=True))
    memory_api.apply("endpointslices", endpoint_slice("web", nodes=["w2"]))
    start(leader_elect=False)
    wait_until(converged(memory_api, "default/web", ["10.0.0.2"]), what="one endpoint")
    memory_api.apply("endpointslices", endpoint_slice("web", nodes=[]))
    wait_until(converged(memory_api, "default/web", []), what="scaled to zero")
    memory_api.apply("endpointslices", endpoint_slice("web", nodes=["w1", "w2"]))
    wait_until(converged(memory_api, "default/web", ["10.0.0.1", "10.0.0.2"]), what="scaled up")


def test_write_failures_are_retried_without_a_storm(memory_api: MemoryAPI, start: Start) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    memory_api.fail("patch services/status", 409, 500, 503, 0)
    start(leader_elect=False)
    wait_until(converged(memory_api, "default/web", ["10.0.0.1"]), what="converged after faults")
    assert memory_api.calls["patch services/status"] == 5


def test_a_429_is_retried_no_sooner_than_its_retry_after(
    memory_api: MemoryAPI, start: Start
) -> None:
    """API Priority and Fairness answers 429 with Retry-After (1 s at first): the key is
    re-queued after that, not after the 5 ms backoff (client-go's rest.Request waits too)."""
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    memory_api.fail("patch services/status", 429, 429, retry_after=0.4)
    errors = metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER)
    failed_before = errors._value.get()
    start(leader_elect=False)
    wait_until(converged(memory_api, "default/web", ["10.0.0.1"]), what="converged after 429s")
    times = memory_api.call_times["patch services/status"]
    assert len(times) == 3, "one retry per 429, no storm"
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.4, gaps
    # The worker waited and retried (client-go rest.Request): no failed reconcile, so the
    # key's backoff did not grow and the worker did not move on to hammer other keys.
    assert errors._value.get() == failed_before


def test_only_the_leader_writes_and_a_standby_takes_over(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    a = start("pod-a")
    wait_until(a.is_leader, what="a leads")
    b = start("pod-b")
    wait_until(converged(memory_api, "default/web", ["10.0.0.1"]), what="a writes")
    wait_until(b.ready, what="b synced")
    assert not b.is_leader()
    a.stop(timeout=5)
    memory_api.apply("nodes", node("w1", internal=["10.0.0.7"]))
    wait_until(b.is_leader, timeout=3, what="b takes over")
    wait_until(converged(memory_api, "default/web", ["10.0.0.7"]), what="b writes")


def test_liveness_fails_naming_the_watch_that_is_stuck(memory_api: MemoryAPI, start: Start) -> None:
    controller = start(leader_elect=False, watch_timeout_seconds=5)
    wait_until(controller.ready, what="synced")
    assert controller.healthy() == (True, "ok")
    nodes = next(i for i in controller.informers if i.kind == "nodes")
    nodes.last_activity -= 1000  # as if the Node watch had hung for 1000 s
    healthy, why = controller.healthy()
    assert not healthy
    assert "watch on nodes" in why


@pytest.mark.parametrize("kind", ["endpointslices", "pods"])
def test_not_ready_before_the_first_full_list_of_every_kind(
    memory_api: MemoryAPI, start: Start, kind: str
) -> None:
    """Host-network Pods too: port ownership (docs/design.md §4.9) must not be decided,
    nor a status written, before they are known."""
    memory_api.apply("nodes", node("n1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    memory_api.fail(f"list {kind}", 503, 503, 503)
    controller = start(leader_elect=False)
    wait_until(lambda: "nodes" not in controller.cache.unsynced(), what="nodes listed")
    assert kind in controller.cache.unsynced()
    assert not controller.ready() and memory_api.calls["patch services/status"] == 0
    wait_until(controller.ready, what=f"ready after {kind} listed too")
    assert memory_api.calls[f"list {kind}"] == 4
    wait_until(converged(memory_api, "default/web", ["10.0.0.1"]), what="web written after")


def test_prometheus_metrics_are_exposed(memory_api: MemoryAPI, start: Start) -> None:
    from prometheus_client import generate_latest

    from app.telemetry.metrics import REGISTRY

    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    start(leader_elect=False)
    wait_until(converged(memory_api, "default/web", ["10.0.0.1"]), what="converged")
    text = generate_latest(REGISTRY).decode()
    for name in (
        'controller_runtime_reconcile_total{controller="service-nodeipam",result="success"}',
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_retries_total",
        "leader_election_master_status",
        "node_ipam_lb_managed_services 1.0",
        'node_ipam_lb_status_writes_total{result="success"}',
    ):
        assert name in text, name


def test_the_controller_counts_the_services_of_its_cluster(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    memory_api.apply("services", service("local", local=True))
    memory_api.apply("services", service("other", lb_class="example.com/other"))
    controller = start(leader_elect=False)
    tracker = controller.reconciler.states

    def counts() -> dict[tuple[str, str], int]:
        return {k: v for k, v in tracker.snapshot()[0].items() if v}

    wait_until(
        lambda: counts() == {("assigned", ""): 1, ("pending", "NoReadyEndpoint"): 1},
        what="web assigned, local pending",
    )
    memory_api.apply("endpointslices", endpoint_slice("local", nodes=["w1"]))
    wait_until(lambda: counts() == {("assigned", ""): 2}, what="local assigned")
    memory_api.delete("services", "default/web")
    wait_until(lambda: counts() == {("assigned", ""): 1}, what="web left")
    from prometheus_client import generate_latest

    from app.telemetry.metrics import REGISTRY

    text = generate_latest(REGISTRY).decode()
    assert 'node_ipam_lb_services{reason="",state="assigned"}' in text


def test_a_not_ready_node_is_dropped_when_its_grace_period_runs_out(
    memory_api: MemoryAPI, start: Start
) -> None:
    import datetime as dt
    import time

    since = dt.datetime.fromtimestamp(time.time() - 0.2, dt.UTC).isoformat()
    down = node("w1", internal=["10.0.0.1"])
    down["status"]["conditions"][0].update(status="False", lastTransitionTime=since)
    memory_api.apply("nodes", down)
    memory_api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    memory_api.apply("services", service("web"))
    start(leader_elect=False, exclude_not_ready_nodes=True, not_ready_grace_seconds=2)
    wait_until(converged(memory_api, "default/web", ["10.0.0.2"]), what="re-checked after grace")
    assert memory_api.calls["patch services/status"] == 2, "first both nodes, then only w2"


@pytest.mark.parametrize(
    "setting", ["reconciler", "enable_node_ipam"], ids=["--no-reconciler", "--no-enable-node-ipam"]
)
def test_writes_switched_off_keep_the_cache_but_never_write(
    memory_api: MemoryAPI, start: Start, setting: str
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    controller = start(**{setting: False})
    adds = QueueAdds(controller)  # before the caches sync: nothing is enqueued until then
    wait_until(controller.ready, what="cache synced")
    memory_api.apply("services", service("marker", lb_class="other"))
    wait_until(lambda: controller.cache.service("default", "marker"), what="marker seen")
    wait_until(controller.is_leader, what="the Lease (other leader-only duties need it)")
    assert memory_api.calls["patch services/status"] == 0
    assert len(controller.queue) == 0
    assert adds.count == 0


def test_liveness_fails_while_the_lease_namespace_does_not_exist(
    memory_api: MemoryAPI, start: Start
) -> None:
    """Leader election on, namespace missing: no status is ever written, so /healthz must
    not say ok (readiness stays: this replica still serves admission and preview)."""
    from app.kube.client import ApiError

    real_create = memory_api.create_lease

    def no_namespace(**kwargs: Any) -> dict[str, Any]:
        raise ApiError(404, 'namespaces "kube-system" not found')

    memory_api.create_lease = no_namespace  # type: ignore[method-assign]
    controller = start()
    wait_until(controller.ready, what="synced")
    wait_until(lambda: not controller.healthy()[0], what="unhealthy")
    healthy, why = controller.healthy()
    assert not healthy
    assert "namespace 'kube-system' not found" in why
    assert controller.ready(), "readiness is not affected"
    memory_api.create_lease = real_create  # type: ignore[method-assign]
    wait_until(controller.is_leader, what="leading once the namespace exists")
    assert controller.healthy() == (True, "ok")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_liveness_fails_when_a_reconcile_worker_has_died(
    memory_api: MemoryAPI, start: Start
) -> None:
    controller = start(leader_elect=False, workers=1)
    wait_until(controller.ready, what="synced")
    assert controller.healthy() == (True, "ok")

    def broken_get(timeout: float | None = None) -> str | None:
        raise RuntimeError("queue bug")

    controller.queue.get = broken_get  # type: ignore[method-assign]
    wait_until(lambda: not controller.healthy()[0], what="unhealthy once the worker died")
    assert controller.healthy() == (False, "the reconcile worker thread reconcile-0 has stopped")


def warnings_on(api: MemoryAPI, name: str) -> int:
    return sum(
        e["reason"] == "InvalidNodeSelector" and e["regarding"]["name"] == name for e in api.events
    )


def test_a_service_deleted_and_re_created_while_another_replica_led_is_warned_again(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web", selector="a in (b"))
    controller = start(leader_elect=False)
    wait_until(lambda: warnings_on(memory_api, "web") == 1, what="first Warning")
    controller.is_leader = lambda: False  # type: ignore[method-assign]
    memory_api.delete("services", "default/web")
    wait_until(lambda: controller.cache.service("default", "web") is None, what="deletion seen")
    controller.is_leader = lambda: True  # type: ignore[method-assign]
    memory_api.apply("services", service("web", selector="a in (b"))
    wait_until(lambda: warnings_on(memory_api, "web") == 2, what="Warning on the new Service")


def test_a_new_leadership_term_speaks_again_about_a_still_broken_service(
    memory_api: MemoryAPI, start: Start
) -> None:
    """What this replica said in an earlier term may not be the last Event any more
    (another replica led in between): a new term starts with no dedup memory and primes
    the series from a List. The unchanged Warning never becomes a second Event: soon
    after, its Event is current and nothing is written (docs/design.md §5); more than
    30 min after its last observation, the existing Event's series counts it."""
    offset = [0.0]
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web", selector="a in (b"))
    controller = start(wall_clock=lambda: time.time() + offset[0])
    wait_until(lambda: warnings_on(memory_api, "web") == 1, what="first Warning")

    def next_term(lists: int) -> None:
        memory_api.fail("update leases", *[0] * 30)  # renewals fail for ~3 s: the term ends
        wait_until(lambda: not controller.is_leader(), what="term ended")
        wait_until(controller.is_leader, what="next term")
        wait_until(lambda: memory_api.calls["list events"] >= lists, what="series primed")
        assert controller.recorder.flush(10)

    next_term(2)
    assert memory_api.calls["patch events"] == 0, "the Event is current"
    offset[0] = 1801.0
    next_term(3)
    wait_until(
        lambda: (memory_api.events[0].get("series") or {}).get("count") == 2,
        what="the Warning's series counted again in the new term",
    )
    assert warnings_on(memory_api, "web") == 1


def test_after_the_lease_moves_a_warning_that_comes_back_is_reported(
    memory_api: MemoryAPI, start: Start
) -> None:
    """New-user trial (2 nodes): Local ``web-local`` had ``NoEligibleNodes``, then
    addresses; the Lease moved to the other replica; scaled to 0, it was written
    ``ingress []`` with no Event and no series update, so ``kubectl describe`` showed an
    old Warning under a newer Normal Event. The new leader's resync saw the addresses
    first, so the Warning's return is a new occurrence (docs/design.md §5)."""
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    memory_api.apply("services", service("web-local", local=True))

    def warnings() -> list[dict[str, Any]]:
        return [e for e in memory_api.events if e["reason"] == "NoEligibleNodes"]

    a = start("pod-a")
    wait_until(lambda: len(warnings()) == 1, what="NoEligibleNodes while no Pod is ready")
    memory_api.apply("endpointslices", endpoint_slice("web-local", nodes=["w2"]))
    wait_until(converged(memory_api, "default/web-local", ["10.0.0.2"]), what="addresses")
    b = start("pod-b")
    wait_until(b.ready, what="b synced")
    a.stop(timeout=5)
    wait_until(b.is_leader, timeout=3, what="b takes over")
    wait_until(
        lambda: b.reconciler.states.snapshot()[0] == {("assigned", ""): 1, ("unreconciled", ""): 0},
        what="b's resync of web-local",
    )
    memory_api.apply("endpointslices", endpoint_slice("web-local", nodes=[]))  # scaled to 0
    wait_until(converged(memory_api, "default/web-local", []), what="ingress []")
    wait_until(
        lambda: (warnings()[0].get("series") or {}).get("count") == 2,
        what="the Warning's series counted on the new leader",
    )
    assert len(warnings()) == 1


class RacingSyncCache(ClusterCache):
    """``synced`` lets two callers in at once (a barrier) when nothing serialises them."""

    def __init__(self) -> None:
        super().__init__()
        for kind in KINDS:
            self.replace(kind, {})
        self.barrier = threading.Barrier(2, timeout=0.5)

    @property
    def synced(self) -> bool:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return True


def test_caches_synced_is_seen_once_when_two_kinds_finish_listing_together(
    memory_api: MemoryAPI, caplog: pytest.LogCaptureFixture
) -> None:
    controller = Controller(
        settings=fast_settings(leader_elect=False),
        api_client=None,
        identity="pod-a",
        api=memory_api,
    )
    controller.cache = RacingSyncCache()
    threads = [
        threading.Thread(target=controller._on_changes, args=(kind, []))
        for kind in ("services", "endpointslices")
    ]
    with caplog.at_level(logging.INFO, logger="node_ipam_lb.controller"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5)
    assert [r.getMessage() for r in caplog.records].count("caches synced") == 1


def test_leadership_listeners_run_when_the_lease_is_taken_and_one_failing_stops_none(
    memory_api: MemoryAPI, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """``on_started_leading`` callbacks (the certificate sync's wake-up) run once per term,
    after the term's own work; one that raises is logged and the next one still runs."""
    calls: list[str] = []
    controller = Controller(
        settings=fast_settings(leader_elect=True),
        api_client=None,
        identity="pod-a",
        api=memory_api,
    )

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("listener bug")

    controller.on_started_leading(broken)
    controller.on_started_leading(lambda: calls.append("second"))
    assert calls == []
    with caplog.at_level(logging.ERROR, logger="node_ipam_lb.controller"):
        controller.start()
        try:
            wait_until(lambda: calls == ["broken", "second"], what="both listeners called")
            assert controller.is_leader()
        finally:
            controller.stop(timeout=5)
    assert calls == ["broken", "second"], "called again without a new term"
    failed = [r for r in caplog.records if r.getMessage().startswith("leadership listener failed")]
    assert len(failed) == 1 and failed[0].exc_info is not None


def test_a_term_that_starts_as_the_caches_finish_syncing_misses_no_change(
    memory_api: MemoryAPI,
) -> None:
    """The last kind's List is in the cache (``cache.synced``) but its handler has not run
    yet when the term starts; a Service change in that window is dropped by ``_enqueue``,
    so the term's enqueue-all must wait for the first-sync step, not count as done
    (found by a review; driven step by step, no threads)."""
    from functools import partial

    from app.core.views import node_view, service_view
    from tests.controller.support import ANNOTATION

    controller = Controller(
        settings=fast_settings(leader_elect=True),
        api_client=None,
        identity="pod-a",
        api=memory_api,
    )
    assert controller.elector is not None
    controller.elector.is_leader = lambda: True  # type: ignore[method-assign]
    view = partial(service_view, match_node_labels_annotation=ANNOTATION)
    web = service("web")
    web["metadata"]["resourceVersion"] = "1"
    edge = service("web", selector="role=edge")
    edge["metadata"]["resourceVersion"] = "4"
    listed = node("n1", internal=["192.0.2.1"])
    listed["metadata"]["resourceVersion"] = "2"
    cache = controller.cache
    for kind, views in (
        ("services", {"default/web": view(web)}),
        ("nodes", {"n1": node_view(listed)}),
        ("pods", {}),
        ("namespaces", {}),
        ("nodeaddresspools", {}),
    ):
        controller._on_changes(kind, cache.replace(kind, views))  # type: ignore[arg-type]
    slices = cache.replace("endpointslices", {})  # the last kind: synced from here on
    controller._on_started_leading()  # the elector's thread, inside the window
    taken = controller.queue.get(timeout=0.1)
    if taken is not None:
        controller.queue.done(taken)  # a worker reconciled the old spec
    old = cache.put("services", "default/web", view(edge))  # the selector changes
    controller._on_changes("services", [("default/web", old, view(edge))])
    controller._on_changes("endpointslices", slices)  # the list's handler runs at last
    assert controller.queue.get(timeout=0.1) == "default/web", "the selector change was lost"


class OrderedAPI(MemoryAPI):
    """Records the order of status writes and Event creates; a status write takes 2 ms
    (a real server's round trip), so a backlog of keys lasts long enough to be seen."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self._order_lock = threading.Lock()

    def patch_service_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> str | None:
        time.sleep(0.002)
        written = super().patch_service_status(namespace=namespace, name=name, patch=patch)
        with self._order_lock:
            self.order.append("status")
        return written

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        super().create_event(namespace=namespace, body=body)
        with self._order_lock:
            self.order.append("event")


def test_a_cold_start_writes_the_statuses_before_the_events() -> None:
    # docs/design.md §5: the sender holds Events while keys wait in the work queue.
    api = OrderedAPI()
    api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    count = 300
    for index in range(count):
        api.apply("services", service(f"web-{index}"))
    controller = Controller(
        settings=fast_settings(leader_elect=False), api_client=None, identity="pod-a", api=api
    )
    controller.start()
    try:
        wait_until(lambda: api.order.count("event") == count, what="every IPsAssigned Event")
    finally:
        controller.stop(timeout=5)
    assert api.order.count("status") == count
    first_event = api.order.index("event")
    # Only the writes in flight when the queue ran empty (one per worker) may come later.
    late = api.order[first_event:].count("status")
    assert late <= controller.settings.workers, (late, api.order[:first_event][-5:])


def test_one_owner_per_port_and_the_next_takes_over_when_the_owner_goes(
    memory_api: MemoryAPI, start: Start
) -> None:
    """Port ownership (docs/design.md §4.9) in the running controller: two Services on
    TCP/8080 of the same nodes; the older publishes, the newer is pending with a PortInUse
    Warning and the state gauge's reason; deleting the owner requeues the newer through the
    port index (no event of its own), which then takes the addresses."""
    memory_api.apply("nodes", node("n1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("n2", internal=["10.0.0.2"]))
    alpha = service("alpha", namespace="team-a", port=8080)
    alpha["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    beta = service("beta", namespace="team-b", port=8080)
    beta["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    memory_api.apply("services", alpha)
    memory_api.apply("services", beta)
    controller = start(leader_elect=False)
    wait_until(converged(memory_api, "team-a/alpha", ["10.0.0.1", "10.0.0.2"]), what="alpha")

    def warned() -> list[dict[str, Any]]:
        return [
            e
            for e in memory_api.events
            if e.get("reason") == "PortInUse" and e["regarding"]["name"] == "beta"
        ]

    wait_until(warned, what="beta's PortInUse Warning")
    note = warned()[0]["note"]
    assert "TCP/8080 on 10.0.0.1, 10.0.0.2: owned by Service team-a/alpha" in note, note
    assert memory_api.ingress("team-b/beta") is None
    counts, _ = controller.reconciler.states.snapshot()
    assert counts.get(("pending", "PortInUse")) == 1, counts
    memory_api.delete("services", "team-a/alpha")
    wait_until(converged(memory_api, "team-b/beta", ["10.0.0.1", "10.0.0.2"]), what="beta")


def test_a_host_network_pod_takes_its_port_on_its_node_until_it_goes(
    memory_api: MemoryAPI, start: Start
) -> None:
    """Port ownership (docs/design.md §4.9) fed by the Pod informer: a host-network Pod on
    n1 declaring TCP/9100 keeps a Service on 9100 off n1's address (a PortInUse Warning
    names the Pod), not a Service on another port; deleting the Pod requeues the Service
    on 9100, and only it, through the port index (no Service event), and n1 comes back."""
    memory_api.apply("nodes", node("n1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("n2", internal=["10.0.0.2"]))
    memory_api.apply("pods", host_pod("exporter", node_name="n1", port=9100))
    memory_api.apply("services", service("metrics", port=9100))
    memory_api.apply("services", service("other", port=9200))
    controller = start(leader_elect=False)
    wait_until(converged(memory_api, "default/metrics", ["10.0.0.2"]), what="n2's address only")
    wait_until(converged(memory_api, "default/other", ["10.0.0.1", "10.0.0.2"]), what="other")
    notes = wait_until(
        lambda: [e["note"] for e in memory_api.events if e.get("reason") == "PortInUse"],
        what="the PortInUse Warning",
    )
    assert "TCP/9100 on 10.0.0.1: hostNetwork Pod monitoring/exporter" in notes[0], notes
    wait_until(lambda: len(controller.queue) == 0, what="the queue drained")
    adds, seen = QueueAdds(controller), len(memory_api.history)
    writes = memory_api.calls["patch services/status"]

    memory_api.delete("pods", "monitoring/exporter")
    wait_until(converged(memory_api, "default/metrics", ["10.0.0.1", "10.0.0.2"]), what="n1 back")
    assert adds.count == 1, "the one Service with the Pod's port"
    assert memory_api.calls["patch services/status"] - writes == 1
    services = [(e["type"], e["object"]["metadata"]["name"])
                for _, kind, e, _ in memory_api.history[seen:] if kind == "services"]  # fmt: skip
    assert services == [("MODIFIED", "metrics")], "only the echo of the status write"
    assert controller.cache.get("pods", "monitoring/exporter") is None


@pytest.mark.parametrize("host_port_pods", [True, False], ids=["host-port-pods", "off"])
def test_only_pods_that_hold_node_ports_reach_the_cache(
    memory_api: MemoryAPI, start: Start, host_port_pods: bool
) -> None:
    """The Pod informer keeps only the Pods that hold a node port. With ``host-port-pods``
    (the default) it lists and watches every Pod, and a ``hostPort`` Pod keeps a Service
    on that port off its node's address; off, it asks the API server for
    ``spec.hostNetwork=true`` only (the in-memory API filters as kube-apiserver does), so
    the hostPort Pod is never seen and the Service takes its port. Either way a Pod
    network Pod on the same port blocks nothing and is neither cached nor indexed, and a
    host-network Pod without a containerPort holds nothing and is not kept either."""
    memory_api.apply("nodes", node("n1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("n2", internal=["10.0.0.2"]))
    memory_api.apply("pods", host_pod("web-0", node_name="n1", port=9100, host=False))
    ingress = host_pod("ingress", node_name="n1", port=8443, host=False)
    ingress["spec"]["containers"][0]["ports"][0]["hostPort"] = 8443
    memory_api.apply("pods", ingress)
    memory_api.apply("services", service("metrics", port=9100))
    memory_api.apply("services", service("secure", port=8443))
    controller = start(leader_elect=False, host_port_pods=host_port_pods)
    both = ["10.0.0.1", "10.0.0.2"]
    wait_until(converged(memory_api, "default/metrics", both), what="published")
    secure = both if not host_port_pods else ["10.0.0.2"]
    wait_until(converged(memory_api, "default/secure", secure), what="secure")
    memory_api.apply("pods", host_pod("web-1", node_name="n1", port=9100, host=False))
    portless = host_pod("agent", node_name="n1", port=9100)
    portless["spec"]["containers"][0]["ports"] = []
    memory_api.apply("pods", portless)
    memory_api.apply("pods", host_pod("marker", node_name="n9", port=1))
    wait_until(lambda: controller.cache.get("pods", "monitoring/marker"), what="marker watched")
    pods = controller.cache._stores["pods"]
    kept = ["monitoring/ingress", "monitoring/marker"] if host_port_pods else ["monitoring/marker"]
    assert sorted(pods) == kept, pods
    assert memory_api.ingress("default/metrics") == both
    assert controller.cache.pods(("TCP", 9100)) == []
    selector = None if host_port_pods else "spec.hostNetwork=true"
    assert set(memory_api.field_selectors["list pods"]) == {selector}
    assert set(memory_api.field_selectors["watch pods"]) == {selector}
