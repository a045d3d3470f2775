"""The controller against the fake API server over HTTP, with the real kubernetes client.

Operators' edits and API faults must converge to the right status without lost updates
and without write storms (asserted with the fake's request counters and log).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.controller.controller import Controller
from app.telemetry.metrics import CONTROLLER, REGISTRY
from tests.controller.memory_api import nodes_serving
from tests.controller.support import (
    CASE,
    EXCLUDE,
    Kubectl,
    QueueAdds,
    endpoint_slice,
    host_pod,
    kind_4node,
    node,
    service,
    wait_until,
)
from tests.fakeapi.server import FakeApiServer

RunController = Callable[..., Controller]
PATCH_STATUS = "patch services/status"


def status_patches(fake_api: FakeApiServer, *, name: str | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in fake_api.request_log()
        if r["verb"] == "patch"
        and r["resource"] == "services"
        and r["subresource"] == "status"
        and (name is None or r["name"] == name)
    ]


def settled(server: FakeApiServer, name: str, ips: list[str]) -> Callable[[], bool]:
    """The stored Service (read from the store: faults do not apply) has ingress ``ips``."""

    def check() -> bool:
        obj = server.get("services", name, "default") or {}
        entries = obj.get("status", {}).get("loadBalancer", {}).get("ingress")
        return [e["ip"] for e in entries or []] == ips

    return check


def serving(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    """The stored Service's ``node-ipam-lb.io/NodesServing`` condition, or ``None``."""
    return nodes_serving(server.get("services", name, "default"))


def reconciles() -> float:
    """Successful reconciles so far (process-wide counter)."""
    labels = {"controller": CONTROLLER, "result": "success"}
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) or 0.0


def seed_three_nodes(fake_api: FakeApiServer) -> None:
    fake_api.seed(
        [
            node("w1", internal=["10.0.0.1"]),
            node("w2", internal=["10.0.0.2"]),
            node("w3", internal=["10.0.0.3"]),
        ]
    )


def test_kind_4node_gets_exactly_the_expected_ingress(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    fake_api.seed(files=[str(CASE / "cluster.yaml")])
    _, expected = kind_4node()
    controller = run_controller()
    wait_until(controller.ready, what="caches synced")
    for key, ips in expected.items():
        name = key.split("/")[1]
        if ips is not None:
            wait_until(settled(fake_api, name, ips), what=f"{key} = {ips}")
    assert settled(fake_api, "other-class", ["203.0.113.10"])()
    assert status_patches(fake_api, name="other-class") == []
    ours = [key.split("/")[1] for key, ips in expected.items() if ips is not None]
    for name in ours:
        wait_until(lambda n=name: serving(fake_api, n) is not None, what=f"{name} condition")
    assert serving(fake_api, "other-class") is None
    # One write per Service of ours: the ingress and the condition, or the condition alone.
    assert fake_api.requests()[PATCH_STATUS] == len(ours)


def test_operator_edits_converge(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    kubectl.create("services", service("local", local=True))
    kubectl.create("endpointslices", endpoint_slice("local", nodes=["w2", "w3"]))
    run_controller()
    all_three = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    steps: list[tuple[str, Callable[[], object], list[str], list[str]]] = [
        ("start", lambda: None, all_three, ["10.0.0.2", "10.0.0.3"]),
        (
            "exclusion label on w1",
            lambda: kubectl.patch("nodes", "w1", {"metadata": {"labels": {EXCLUDE: ""}}}),
            ["10.0.0.2", "10.0.0.3"],
            ["10.0.0.2", "10.0.0.3"],
        ),
        (
            "exclusion label removed",
            lambda: kubectl.patch("nodes", "w1", {"metadata": {"labels": {EXCLUDE: None}}}),
            all_three,
            ["10.0.0.2", "10.0.0.3"],
        ),
        (
            "autoscaler taint on w2",
            lambda: kubectl.patch(
                "nodes",
                "w2",
                {
                    "spec": {
                        "taints": [
                            {"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}
                        ]
                    }
                },
            ),
            ["10.0.0.1", "10.0.0.3"],
            ["10.0.0.3"],
        ),
        (
            "w3 address changed",
            lambda: kubectl.patch(
                "nodes",
                "w3",
                {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.30"}]}},
                sub="status",
            ),
            ["10.0.0.1", "10.0.0.30"],
            ["10.0.0.30"],
        ),
        ("w1 deleted", lambda: kubectl.delete("nodes", "w1"), ["10.0.0.30"], ["10.0.0.30"]),
        (
            "local endpoints scaled to zero",
            lambda: kubectl.patch("endpointslices", "local-abcde", {"endpoints": []}),
            ["10.0.0.30"],
            [],
        ),
        (
            "local endpoints scaled back",
            lambda: kubectl.patch(
                "endpointslices",
                "local-abcde",
                {"endpoints": endpoint_slice("local", nodes=["w3"])["endpoints"]},
            ),
            ["10.0.0.30"],
            ["10.0.0.30"],
        ),
        (
            "annotation selects nobody",
            lambda: kubectl.patch(
                "services",
                "web",
                {"metadata": {"annotations": {"io.cilium.nodeipam/match-node-labels": "x=y"}}},
            ),
            [],
            ["10.0.0.30"],
        ),
        (
            "annotation removed",
            lambda: kubectl.patch(
                "services",
                "web",
                {"metadata": {"annotations": {"io.cilium.nodeipam/match-node-labels": None}}},
            ),
            ["10.0.0.30"],
            ["10.0.0.30"],
        ),
        (
            "switched to ClusterIP (the API server clears the status)",
            lambda: kubectl.patch("services", "web", {"spec": {"type": "ClusterIP"}}),
            [],
            ["10.0.0.30"],
        ),
        (
            "switched back to LoadBalancer",
            lambda: kubectl.patch(
                "services",
                "web",
                {"spec": {"type": "LoadBalancer", "loadBalancerClass": "io.cilium/node"}},
            ),
            ["10.0.0.30"],
            ["10.0.0.30"],
        ),
    ]
    for what, action, web, local in steps:
        action()
        wait_until(settled(fake_api, "web", web), what=f"{what}: web = {web}")
        wait_until(settled(fake_api, "local", local), what=f"{what}: local = {local}")
    writes = fake_api.requests()[PATCH_STATUS]
    assert writes <= 2 * len(steps), f"{writes} status writes for {len(steps)} steps"


def test_a_heartbeat_causes_no_reconcile_and_no_write(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    controller = run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    adds, writes = QueueAdds(controller), fake_api.requests()[PATCH_STATUS]
    heartbeat = node("w1", internal=["10.0.0.1"], heartbeat="2031-01-01T00:00:00Z")
    kubectl.patch("nodes", "w1", {"status": heartbeat["status"]}, sub="status")
    kubectl.create("services", service("marker", lb_class="example.com/other"))
    wait_until(lambda: controller.cache.service("default", "marker"), what="marker seen")
    assert controller.cache.nodes()  # the heartbeat was seen before the marker (same stream order)
    assert adds.count == 1, "only the marker Service was enqueued"
    assert fake_api.requests()[PATCH_STATUS] == writes


@pytest.mark.parametrize(
    ("status", "times"),
    [(409, 3), (500, 4), (503, 2)],
    ids=["409 conflicts on status writes", "500s on status writes", "503s on status writes"],
)
def test_failed_status_writes_are_retried_with_backoff(
    fake_api: FakeApiServer,
    kubectl: Kubectl,
    run_controller: RunController,
    status: int,
    times: int,
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    fake_api.fail(method="PATCH", path="*/services/web/status", status=status, times=times)
    run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    assert fake_api.requests()[PATCH_STATUS] == times + 1, "one retry per failure, no storm"


def test_a_throttled_status_write_waits_for_retry_after(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    """A 429 as API Priority and Fairness sends it (plain text, ``Retry-After: 1``) on the
    lean status write: retried once, no sooner than 1 s later (the 5 ms backoff alone
    would retry at once)."""
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    fake_api.fail(method="PATCH", path="*/services/web/status", status=429, times=1)
    started = time.monotonic()
    run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    assert time.monotonic() - started >= 1.0
    assert fake_api.requests()[PATCH_STATUS] == 2, "one retry, after Retry-After"


def test_dropped_watches_and_410_on_re_watch_lose_no_update(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    controller = run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    nodes_informer = next(i for i in controller.informers if i.kind == "nodes")
    fake_api.drop_watches()
    kubectl.delete("nodes", "w3")
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2"]), what="after a dropped watch")
    assert nodes_informer.lists == 1, "a dropped watch resumes from its resourceVersion"

    # The re-watch is held up while a Node changes and etcd is compacted: it resumes from a
    # resourceVersion that no longer exists and gets 410 Gone, so the informer re-lists.
    fake_api.add_latency(0.5, method="GET", path="/api/v1/nodes")
    fake_api.drop_watches()
    kubectl.patch("nodes", "w2", {"metadata": {"labels": {EXCLUDE: ""}}})
    fake_api.compact()
    wait_until(lambda: nodes_informer.lists == 2, what="re-list after 410")
    fake_api.clear_latency()
    wait_until(settled(fake_api, "web", ["10.0.0.1"]), what="after 410 Gone")


def test_api_unavailable_for_a_while_converges_afterwards(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    controller = run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    kubectl.patch("nodes", "w1", {"metadata": {"labels": {EXCLUDE: ""}}})
    fake_api.fail(path="/api*", status=503, times=30)
    fake_api.drop_watches()
    wait_until(settled(fake_api, "web", ["10.0.0.2", "10.0.0.3"]), timeout=20, what="recovered")
    assert controller.healthy()[0]
    # Retries back off exponentially from 5 ms: an outage of up to 20 s allows at most
    # log2(20 / 0.005) ≈ 12 failed attempts; a hot loop would make hundreds.
    assert fake_api.requests()[PATCH_STATUS] <= 2 + 12


def test_a_renew_that_hangs_past_the_deadline_then_succeeds_resyncs_the_new_term(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    """The fake's counterpart of bench_faults scenario 3 (etcd restart: kube-apiserver
    holds the renew): Lease requests take 1.5 s, past the 0.8 s renew deadline, and then
    succeed. A Node change seen while ``is_leader()`` is false by the clock is not
    queued; the late renew must start a new term whose resync writes it."""
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    controller = run_controller()
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    fake_api.add_latency(1.5, path="/apis/coordination.k8s.io/*")
    wait_until(lambda: not controller.is_leader(), timeout=5, what="the renew deadline passes")
    kubectl.patch("nodes", "w1", {"metadata": {"labels": {EXCLUDE: ""}}})
    wait_until(lambda: "w1" in {n.name for n in controller.cache.nodes() if n.predicate},
               what="the change is in the cache")  # fmt: skip
    fake_api.clear_latency()
    wait_until(settled(fake_api, "web", ["10.0.0.2", "10.0.0.3"]), timeout=10, what="resynced")
    assert controller.is_leader()


def test_only_the_leader_writes_and_a_standby_takes_over(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    a = run_controller("pod-a")
    wait_until(a.is_leader, what="pod-a leads")
    b = run_controller("pod-b")
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="converged")
    wait_until(b.ready, what="pod-b synced")
    kubectl.delete("nodes", "w3")
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2"]), what="w3 gone")
    assert {r["user_agent"] for r in status_patches(fake_api)} == {"pod-a"}
    assert not b.is_leader()

    a.stop(timeout=5)  # graceful: the Lease is released
    kubectl.delete("nodes", "w2")
    wait_until(settled(fake_api, "web", ["10.0.0.1"]), timeout=5, what="pod-b took over")
    assert b.is_leader()
    assert {r["user_agent"] for r in status_patches(fake_api)} == {"pod-a", "pod-b"}


def test_a_killed_leader_is_replaced_within_the_lease_duration(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    kubectl.create("services", service("web"))
    a = run_controller("pod-a")
    wait_until(a.is_leader, what="pod-a leads")
    b = run_controller("pod-b")
    wait_until(b.ready, what="pod-b synced")
    a.stop(timeout=5, release=False)  # as if the process died: the Lease stays pod-a's
    lease = fake_api.get("leases.coordination.k8s.io", "node-ipam-lb", "kube-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == "pod-a"
    kubectl.delete("nodes", "w3")
    wait_until(b.is_leader, timeout=3, what="pod-b leads after lease expiry (1 s)")
    wait_until(settled(fake_api, "web", ["10.0.0.1", "10.0.0.2"]), what="pod-b writes")
    lease = fake_api.get("leases.coordination.k8s.io", "node-ipam-lb", "kube-system")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "pod-b"
    assert lease["spec"]["leaseTransitions"] == 1


def test_a_malformed_annotation_warns_once_and_leaves_the_status_alone(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    seed_three_nodes(fake_api)
    broken = service("web", selector="zone in (a", ingress=["192.0.2.7"])
    fake_api.seed([broken])
    run_controller()
    wait_until(lambda: fake_api.requests().get("create events", 0) == 1, what="one Event")
    before = reconciles()
    kubectl.patch("services", "web", {"metadata": {"labels": {"touched": "yes"}}})
    wait_until(lambda: reconciles() > before, what="the edited Service reconciled again")
    [event] = [
        r for r in fake_api.request_log() if r["resource"] == "events" and r["verb"] == "create"
    ]
    assert event["group"] == "events.k8s.io"
    assert settled(fake_api, "web", ["192.0.2.7"])()
    # One write, of the condition alone (the ingress stays as stored), not repeated.
    assert len(status_patches(fake_api)) == 1
    condition = serving(fake_api, "web")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "InvalidNodeSelector")


def test_an_unchanged_warning_across_restarts_is_one_event_whose_series_counts_the_starts(
    fake_api: FakeApiServer, run_controller: RunController
) -> None:
    """Issue 13: the same InvalidNodeSelector Warning used to be created at every start.
    Now a start never creates it again: one soon after writes nothing (the Event is
    current, docs/design.md §5), one more than 30 min after the Event was last observed
    updates its series (a PATCH the fake validates like kube-apiserver's
    ValidateEventUpdate)."""
    seed_three_nodes(fake_api)
    fake_api.seed([service("web", selector="zone in (a")])
    offset = [0.0]

    def wall() -> float:
        return time.time() + offset[0]

    for start in range(1, 5):
        offset[0] = 0.0 if start < 3 else 1801.0 * (start - 2)
        controller = run_controller(f"pod-{start}", leader_elect=False, wall_clock=wall)
        wait_until(controller.ready, what="synced")
        if start == 1:
            wait_until(lambda: fake_api.requests().get("create events", 0) == 1, what="Event")
        else:
            wait_until(
                lambda n=start: (
                    fake_api.requests().get("list events", 0) == 2 * n
                ),  # Warnings, WaitingForEndpoints  # type: ignore[misc]
                what=f"start {start} primed its series",
            )
            assert controller.recorder.flush(10)
        controller.stop(timeout=5)
        patches = fake_api.requests().get("patch events", 0)
        assert patches == max(0, start - 2), f"start {start}"
    assert fake_api.requests().get("create events", 0) == 1
    url = f"{fake_api.url}/apis/events.k8s.io/v1/namespaces/default/events"
    [event] = httpx.get(url, timeout=10).json()["items"]
    assert event["reason"] == "InvalidNodeSelector"
    assert event["series"]["count"] == 3


def test_a_terminating_host_network_pod_holds_its_port_until_it_is_gone(
    fake_api: FakeApiServer, kubectl: Kubectl, run_controller: RunController
) -> None:
    """The Pod informer over HTTP (every Pod listed and watched, ``host-port-pods`` on): a
    host-network Pod on w1 declaring TCP/9100 keeps a Service on 9100 off w1; a Pod on the
    Pod network on w2 does not (listed, not kept); deleting the Pod
    marks it terminating (its process still serves the port until the kubelet ends it)
    and keeps w1 off; the Pod gone (a delete with period 0), w1 comes back."""
    seed_three_nodes(fake_api)
    kubectl.create("serviceaccounts", {"metadata": {"name": "default", "namespace": "default"}})
    kubectl.create("pods", host_pod("exporter", node_name="w1", port=9100, namespace="default"))
    kubectl.create(
        "pods", host_pod("web", node_name="w2", port=9100, namespace="default", host=False)
    )
    kubectl.create("services", service("metrics", port=9100))
    controller = run_controller()
    wait_until(settled(fake_api, "metrics", ["10.0.0.2", "10.0.0.3"]), what="w1 left out")
    assert controller.cache.get("pods", "default/web") is None
    marked = kubectl.delete("pods", "exporter")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    time.sleep(0.5)  # the MODIFIED event reaches the cache: still holding the port
    assert settled(fake_api, "metrics", ["10.0.0.2", "10.0.0.3"])()
    kubectl.delete("pods", "exporter", grace_period=0)
    wait_until(settled(fake_api, "metrics", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]), what="back")
    assert len(status_patches(fake_api, name="metrics")) == 2
