"""The controller's failures: the leader Pod deleted, hung webhook Pods, kube-apiserver
down for 20 s.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    NAMESPACE,
    apply,
    figure,
    kubectl,
    kubectl_json,
    rolled_out,
    service_manifest,
)
from tests.cluster.release import (
    INTERNAL_NODES,
    ROLLING_TIMEOUT,
    every_address_answers,
    ingress,
    ingress_ips,
    lease_holder,
    probe_targets,
    select_nodes,
    until_denied,
)
from tests.cluster.traffic import Prober
from tests.support.waiting import wait_for


def test_deleting_the_leader_pod_fails_over(release: Cluster) -> None:
    holder = lease_holder(release)
    pod = holder.split("_")[0]
    started = time.monotonic()
    kubectl(release, "-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
    new = wait_for(
        "another replica to hold the Lease",
        lambda: (h := lease_holder(release)) and h.split("_")[0] != pod and h,
        interval=0.2,
        timeout=90,
    )
    failover = time.monotonic() - started
    # The new leader reconciles: a changed selector reaches the status.
    select_nodes(release, "web-internal", "kubernetes.io/hostname=node-1")
    wait_for(
        "the new leader to write web-internal",
        lambda: len(ingress_ips(release, "web-internal")) == 2,
        timeout=90,
        interval=0.5,
    )
    reconciled = time.monotonic() - started
    select_nodes(release, "web-internal", INTERNAL_NODES)
    wait_for(
        "web-internal back",
        lambda: len(ingress_ips(release, "web-internal")) == 4,
        timeout=90,
        interval=0.5,
    )
    figure("leader Pod deleted -> new Lease holder (s)", round(failover, 1))
    figure("leader Pod deleted -> new leader wrote a status (s)", round(reconciled, 1))
    assert new
    rolled_out(release, NAMESPACE, "node-ipam-lb")
    # The deleted Pod serves through its shutdown delay (10 s), then stops: the next tests
    # count and signal the release's Pods, and must not find it half gone.
    wait_for(
        "the deleted leader Pod to be gone",
        lambda: pod not in {p["metadata"]["name"] for p in pods_of(release)},
        timeout=60,
        interval=0.5,
    )
    figure("leader Pod deleted -> gone (s)", round(time.monotonic() - started, 1))


def pods_of(cluster: Cluster) -> list[dict[str, Any]]:
    """node-ipam-lb's Pods, terminating ones included."""
    return list(kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"])


def product_containers(cluster: Cluster) -> dict[str, tuple[str, int]]:
    """Pod name -> (containerID, restartCount) of node-ipam-lb's Pods."""
    pods = pods_of(cluster)
    return {
        p["metadata"]["name"]: (s["containerID"], s["restartCount"])
        for p in pods
        for s in p["status"]["containerStatuses"]
    }


def restarts(containers: dict[str, tuple[str, int]]) -> dict[str, int]:
    return {pod: count for pod, (_, count) in containers.items()}


def event_reasons(cluster: Cluster, service: str) -> list[str]:
    events = kubectl_json(
        cluster, "-n", APP, "get", "events", "--field-selector", f"involvedObject.name={service}"
    )
    return [e.get("reason", "") for e in events["items"]]


def test_hung_webhook_pods_are_cut_off_after_timeout_seconds_and_ignored(
    release: Cluster,
) -> None:
    """Both node-ipam-lb Pods SIGSTOPped, as hung processes: the webhook Service still
    routes to them, connections open and nothing answers. ``kubectl apply`` of a
    malformed selector waits for the webhooks' ``timeoutSeconds`` (3 s) and is admitted
    (``failurePolicy: Ignore``); resumed, the leader reports ``InvalidNodeSelector`` and
    writes no status; the next malformed apply is denied again (issue 22)."""
    containers = product_containers(release)
    assert len(containers) == 2, containers
    bad = service_manifest("hung-bad", 9998, "Cluster", "role in (edge")
    for container, _ in containers.values():
        release.signal_container(container, signal.SIGSTOP)
    try:
        started = time.monotonic()
        apply(release, bad)  # admitted: raises KubectlError if denied
        took = time.monotonic() - started
    finally:
        for container, _ in containers.values():
            release.signal_container(container, signal.SIGCONT)
    figure("both webhook Pods SIGSTOPped: malformed selector admitted after (s)", round(took, 1))
    assert took >= 3.0, "answered before timeoutSeconds: the webhook Pods were not hung"
    wait_for(
        "an InvalidNodeSelector Event for hung-bad",
        lambda: "InvalidNodeSelector" in event_reasons(release, "hung-bad"),
        timeout=60,
        interval=0.5,
    )
    assert ingress(release, "hung-bad") == [], "a status was written for a malformed selector"
    again = service_manifest("hung-bad-2", 9997, "Cluster", "role in (edge")
    assert "denied the request" in until_denied(release, again, timeout=30)[0]
    kubectl(release, "-n", APP, "delete", "service", "hung-bad", "--wait=false")
    assert restarts(product_containers(release)) == restarts(containers), "liveness restart"


@pytest.mark.timeout(ROLLING_TIMEOUT)
def test_kube_apiserver_down_20s_traffic_flows_and_a_change_converges_after(
    release: Cluster,
) -> None:
    """kube-apiserver SIGKILLed and started 20 s later, longer than the Lease (15 s): the
    published addresses keep answering meanwhile (the data path is kube-proxy's rules,
    not the API server), node-ipam-lb's Pods keep running (an API outage does not fail
    liveness), the Lease has a holder again and a change made after converges (issue 22)."""
    assert release.plane is not None
    containers = product_containers(release)
    targets = probe_targets(release)
    with Prober(release.client_netns, targets) as prober:
        release.plane.stop_apiserver(kill=True)
        time.sleep(20)
    outage = prober.result
    ready_s = release.plane.start_apiserver()
    back = time.monotonic()
    figure("kube-apiserver down 20 s: requests, failed", (outage.sent, len(outage.failed)))
    figure("kube-apiserver started again -> /readyz (s)", round(ready_s, 1))
    assert outage.sent > 50
    assert outage.failed == [], outage.failed[:10]
    holder = wait_for(
        "a Lease holder again", lambda: lease_holder(release), timeout=60, interval=0.5
    )
    select_nodes(release, "web-internal", "kubernetes.io/hostname=node-1")
    wait_for(
        "web-internal to follow a change made after the outage",
        lambda: len(ingress_ips(release, "web-internal")) == 2,
        timeout=90,
        interval=0.5,
    )
    figure("kube-apiserver back -> a new change written (s)", round(time.monotonic() - back, 1))
    select_nodes(release, "web-internal", INTERNAL_NODES)
    wait_for(
        "every address answering again",
        lambda: every_address_answers(release),
        timeout=90,
        interval=0.5,
    )
    assert holder.split("_")[0] in containers
    assert restarts(product_containers(release)) == restarts(containers), "a Pod restarted"
