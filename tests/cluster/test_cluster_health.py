"""Health-checked nodes on the real cluster (docs/design.md §4.11, issue 30), measured as a
user of the DNS name sees them: four faults, each first with health checks off (the
default, today's behaviour), then on (``helm upgrade --set settings.node-health-check=true``).

For every scenario, on ``web-internal`` (port 8081, published on node-1 and node-2, both
families): seconds from the fault until the node's addresses leave the Service's status,
until a fresh query of ``web-internal.traffic.lb.example.org`` (CoreDNS ``k8s_external``,
TTL 5 s) no longer answers them, until a client that follows the name (``DnsProber``:
keeps each answer its TTL) stops using them, and the requests that client saw fail
meanwhile. The faults (tests/cluster/faults.py):

- **network cut**: every packet in and out of the node's interface dropped; its Node stays
  Ready until the node lifecycle controller's grace period (10 s on this cluster), and
  NotReady nodes stay published by default (Cilium's rule);
- **kube-proxy stopped**: its rules stay in the kernel, so traffic still works; its
  ``/healthz`` no longer answers;
- **drained the cluster autoscaler's way**: taint ``ToBeDeletedByClusterAutoscaler``, then
  ``kubectl drain``: the taint is a KEP-3458 predicate, so the node leaves at once either
  way (kube-proxy's ``/healthz`` also turns 503);
- **the controller cut off**: the leader's Pod cannot reach port 10256 anywhere, every node
  fine: with health checks on, most probes fail and the last set is kept (no write).

The node faulted is one of node-1/node-2 without a node-ipam-lb Pod when there is one (a cut
node takes its Pods with it), else the one without the Lease holder. Figures are printed
(``-s``; FIGURES, the note's table); the asserts are the contract's: off, nothing leaves; on,
the node leaves within thresholds x period + timeouts + slack, comes back when healed,
and the hold writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.faults import cut_network, isolate_pod_port, stopped_kube_proxy
from tests.cluster.helpers import (
    APP,
    NAMESPACE,
    apply,
    figure,
    kubectl,
    kubectl_json,
    rolled_out,
    service_manifest,
    service_story,
)
from tests.cluster.netns import Node
from tests.cluster.release import (
    INTERNAL_NODES,
    helm_upgrade,
    ingress_ips,
    lease_holder,
)
from tests.cluster.statuswatch import IngressWatch
from tests.cluster.traffic import DnsProber, in_netns, resolve
from tests.support.waiting import wait_for

SERVICE, PORT = "web-internal", 8081
OFF_WINDOW = 20.0
"""Seconds a fault is watched with health checks off (nothing is expected to leave)."""
PERIOD, TIMEOUT, FAILURES, SUCCESSES = 1, 1, 3, 2
"""The thresholds set for the "on" half: a node leaves after 3 failed probes 1 s apart."""
ON_BOUND = 30.0
"""Seconds within which a failing node must leave with health checks on: 3 probes of at
most period + timeout each, the reconcile and a loaded 2-core machine's slack."""
RESULTS: dict[tuple[str, str], dict[str, Any]] = {}


def fault_node(cluster: Cluster) -> Node:
    """node-1 or node-2, never the Lease holder's node (cutting it would be a leader
    change, not a node fault); one without any node-ipam-lb Pod when there is one."""
    found: list[Any] = []

    def leader_is_running() -> bool:
        # Right after a rollout the Lease may still name a Pod that is gone, until a new
        # holder takes it (at most the lease duration): wait for that, do not guess.
        pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
        leader = lease_holder(cluster).split("_")[0]
        hosts = [p["spec"].get("nodeName") for p in pods if p["metadata"]["name"] == leader]
        found[:] = [pods, hosts]
        return len(hosts) == 1

    wait_for("the Lease holder among the running Pods", leader_is_running, timeout=60, interval=0.5)
    pods, (leader_host,) = found
    hosts = {p["spec"].get("nodeName") for p in pods}
    candidates = [n for n in cluster.nodes if n.name in ("node-1", "node-2")]
    candidates = [n for n in candidates if n.name != leader_host]
    free = [n for n in candidates if n.name not in hosts]
    return (free or candidates)[0]


def dns_answer(cluster: Cluster) -> list[str]:
    server, port = cluster.dns_server
    name = cluster.external_name(SERVICE, APP)
    ips, _ = in_netns(cluster.client_netns, lambda: resolve(name, server=server, port=port))
    return ips


def leader_pod(cluster: Cluster) -> dict[str, Any]:
    name = lease_holder(cluster).split("_")[0]
    return kubectl_json(cluster, "-n", NAMESPACE, "get", "pod", name)


class Watch:
    """Poll the status and the fresh DNS answer every 0.2 s on the test thread while a
    :class:`DnsProber` follows the name; record when the node's addresses left each."""

    def __init__(self, cluster: Cluster, node: Node) -> None:
        self.cluster, self.node = cluster, node
        self.addresses = {a for a in (node.ipv4, node.ipv6) if a}
        server, port = cluster.dns_server
        self.prober = DnsProber(
            cluster.client_netns, cluster.external_name(SERVICE, APP), PORT,
            server=server, dns_port=port,
        )  # fmt: skip
        self.start = 0.0
        self.left_status: float | None = None
        self.left_dns: float | None = None
        self.status_seen: list[str] = []

    def __enter__(self) -> Watch:
        self.prober.__enter__()
        time.sleep(1.0)  # a first answer in the client's hand
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.prober.__exit__(*exc)

    def observe(self, seconds: float, *, until_left: bool) -> None:
        """Poll for ``seconds`` from the fault; with ``until_left``, stop once the status
        and the fresh answer dropped the node and a client holding the last answer has
        had its TTL to follow (plus 1.5 s)."""
        deadline = self.start + seconds
        while time.monotonic() < deadline:
            now = time.monotonic()
            self.status_seen = ingress_ips(self.cluster, SERVICE)
            if self.left_status is None and self.addresses.isdisjoint(self.status_seen):
                self.left_status = now - self.start
            if self.left_dns is None and self.addresses.isdisjoint(dns_answer(self.cluster)):
                self.left_dns = time.monotonic() - self.start
            if until_left and self.left_status is not None and self.left_dns is not None:
                deadline = min(
                    deadline, self.start + self.left_dns + self.cluster.external_ttl + 1.5
                )
            time.sleep(0.2)

    def record(self, scenario: str, mode: str, **extra: Any) -> dict[str, Any]:
        """Stop the client and store the scenario's row (seconds relative to the fault)."""
        self.prober.stop()
        result = self.prober.result
        dropped = None
        if self.left_status is not None:
            for address in self.addresses:
                found = result.first_answer_without(address, self.start + self.left_status)
                if found is not None:
                    at = found.at - self.start
                    dropped = at if dropped is None else max(dropped, at)
        end = self.start + (dropped if dropped is not None else 1e9)
        row = {
            "status": None if self.left_status is None else round(self.left_status, 1),
            "dns": None if self.left_dns is None else round(self.left_dns, 1),
            "client": None if dropped is None else round(dropped, 1),
            "failed": len(result.failed_between(self.start, end)),
            "sent": result.sent,
            **extra,
        }
        RESULTS[scenario, mode] = row
        figure(f"{scenario}, health checks {mode}", row)
        return row


@contextlib.contextmanager
def drained(cluster: Cluster, node: Node) -> Iterator[None]:
    """The cluster autoscaler's scale-down: taint, then drain (in the background while the
    block runs, as the autoscaler evicts while the node is already tainted); undone on
    exit."""
    taint = "ToBeDeletedByClusterAutoscaler=1:NoSchedule"
    kubectl(cluster, "taint", "node", node.name, taint)
    assert cluster.plane is not None
    drain = threading.Thread(
        target=lambda: kubectl(
            cluster,
            "drain",
            node.name,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=60s",
            timeout=90,
            check=False,
        ),
        daemon=True,
    )
    drain.start()
    try:
        yield
    finally:
        drain.join(95)
        kubectl(cluster, "taint", "node", node.name, "ToBeDeletedByClusterAutoscaler-")
        kubectl(cluster, "uncordon", node.name)


def controller_cut_off(cluster: Cluster) -> contextlib.AbstractContextManager[None]:
    """The Lease holder's Pod cannot reach kube-proxy's healthz port anywhere."""
    pod = leader_pod(cluster)
    (container,) = pod["status"]["containerStatuses"]
    print(f"cutting off {pod['metadata']['name']} on {pod['spec']['nodeName']}: {container}")
    return isolate_pod_port(cluster, container["containerID"], 10256)


Scenario = Callable[[Cluster, Node], contextlib.AbstractContextManager[None]]
SCENARIOS: dict[str, Scenario] = {
    "network cut": lambda cluster, node: cut_network(node),
    "kube-proxy stopped": lambda cluster, node: stopped_kube_proxy(cluster, node),
    "drained (autoscaler)": drained,
}


def healed(cluster: Cluster, node: Node) -> None:
    """Wait until both the node's addresses are published again and CoreDNS answers them
    (its cache holds an answer up to the TTL: the next scenario must start from a name
    that answers every node)."""
    addresses = {a for a in (node.ipv4, node.ipv6) if a}
    wait_for(
        f"{node.name}'s addresses back in {SERVICE}",
        lambda: addresses <= set(ingress_ips(cluster, SERVICE)),
        timeout=120,
        interval=0.5,
    )
    wait_for(
        f"{node.name}'s addresses back in the DNS answer",
        lambda: addresses <= set(dns_answer(cluster)),
        timeout=30,
        interval=0.2,
    )


def health_checks_on(cluster: Cluster, helm: Path) -> None:
    """``helm upgrade`` to health checks on with the module's thresholds (unless the
    Deployment already runs with them), then every node published."""
    deployment = kubectl_json(cluster, "-n", NAMESPACE, "get", "deployment", "node-ipam-lb")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if env.get("NODE_IPAM_NODE_HEALTH_CHECK") != "true":
        helm_upgrade(
            helm, cluster, "--wait", "--timeout", "180s",
            "--set", "settings.node-health-check=true",
            "--set", f"settings.node-health-check-period-seconds={PERIOD}",
            "--set", f"settings.node-health-check-timeout-seconds={TIMEOUT}",
            "--set", f"settings.node-health-check-failure-threshold={FAILURES}",
            "--set", f"settings.node-health-check-success-threshold={SUCCESSES}",
        )  # fmt: skip
    wait_for(
        "every node published with health checks on",
        lambda: len(ingress_ips(cluster, SERVICE)) == 4,
        timeout=120,
        interval=0.5,
    )


@pytest.mark.timeout(600)
def test_with_health_checks_off_a_failing_node_stays_published(release: Cluster) -> None:
    """Today's behaviour, the baseline: none of the four faults takes the node out
    within the window, except the autoscaler's taint (a KEP-3458 predicate)."""
    for scenario, fault in SCENARIOS.items():
        node = fault_node(release)
        with Watch(release, node) as watch, fault(release, node):
            watch.observe(OFF_WINDOW, until_left=scenario == "drained (autoscaler)")
        row = watch.record(scenario, "off", node=node.name)
        if scenario == "drained (autoscaler)":
            assert row["status"] is not None, "the autoscaler taint is a KEP-3458 predicate"
        else:
            assert row["status"] is None, f"{scenario}: left with health checks off"
        healed(release, node)
    with Watch(release, fault_node(release)) as watch, controller_cut_off(release):
        watch.observe(OFF_WINDOW, until_left=False)
    row = watch.record("controller cut off", "off")
    assert row["status"] is None


@pytest.mark.timeout(900)
def test_with_health_checks_on_a_failing_node_leaves_and_comes_back(
    release: Cluster, helm: Path
) -> None:
    health_checks_on(release, helm)
    for scenario, fault in SCENARIOS.items():
        node = fault_node(release)
        with Watch(release, node) as watch, fault(release, node):
            watch.observe(ON_BOUND + 10, until_left=True)
            row = watch.record(scenario, "on", node=node.name)
            assert row["status"] is not None and row["status"] <= ON_BOUND, (scenario, row)
            assert row["dns"] is not None, (scenario, row)
            healed_at = time.monotonic()
        healed(release, node)
        figure(
            f"{scenario}: healed -> back in the status (s)", round(time.monotonic() - healed_at, 1)
        )
    # The controller cut off: every probe fails, the last set is kept, nothing written.
    before = ingress_ips(release, SERVICE)
    pod = leader_pod(release)["metadata"]["name"]

    seen: list[str] = []

    def hold_logged() -> bool:
        logs = kubectl(release, "-n", NAMESPACE, "logs", pod)
        seen[:] = [line for line in logs.splitlines() if "nodehealth" in line][-5:]
        return "too many probed nodes fail their health checks" in logs

    with Watch(release, fault_node(release)) as watch, controller_cut_off(release):
        try:
            held = wait_for(
                "the most-fail hold in the leader's log",
                hold_logged,
                timeout=ON_BOUND,
                interval=0.5,
            )
        finally:
            print(f"{pod} (Lease holder {lease_holder(release)}), last health lines: {seen}")
        held_after = round(time.monotonic() - watch.start, 1)
        watch.observe(OFF_WINDOW, until_left=False)
    row = watch.record("controller cut off", "on", held_after=held_after)
    assert held and row["status"] is None
    assert ingress_ips(release, SERVICE) == before
    assert row["failed"] == 0, row


TAKEOVER_WINDOW = 10.0
"""Seconds the status is watched after the new holder took the Lease: 10 of its probe
periods; the old leader-memory code republished the node 0.8 s after the deletion."""
AFTER, AFTER_PORT = "web-after-takeover", 8083
"""A Service created once the new holder has the Lease: a decision of its own."""
HEALTH_RECORD = "node-ipam-lb-node-health"
"""The Lease holding the leader's health decision (design §4.11, healthrecord.py)."""


def recorded_unhealthy(cluster: Cluster) -> dict[str, str]:
    """``{node: why}`` of the health record's annotation (``{}`` when there is none)."""
    lease = kubectl(
        cluster, "-n", NAMESPACE, "get", "lease", HEALTH_RECORD, "--ignore-not-found", "-o", "json"
    )
    if not lease.strip():
        return {}
    annotations = json.loads(lease)["metadata"].get("annotations") or {}
    return dict(json.loads(annotations.get("node-ipam-lb.io/unhealthy-nodes") or "{}"))


@pytest.mark.timeout(600)
def test_a_leader_change_during_a_health_failure_does_not_republish_the_node(
    release: Cluster, helm: Path
) -> None:
    """Health checks on, a node's kube-proxy stopped: the node leaves ``web-internal``.
    The leader Pod deleted: from before the deletion, through the takeover, a Service
    created after it (``AFTER``, node-1 and node-2: the new holder's own decision, on the
    healthy node only) and ``TAKEOVER_WINDOW`` after that, every status of both the API
    server hands out (watches: every write, not a poll between two) leaves the node out;
    healed, it comes back (design §4.11, "Across a leader change")."""
    health_checks_on(release, helm)
    node = fault_node(release)
    addresses = {node.ipv4, node.ipv6}
    with stopped_kube_proxy(release, node):
        stopped = time.monotonic()
        wait_for(
            f"{node.name} to leave {SERVICE}",
            lambda: addresses.isdisjoint(ingress_ips(release, SERVICE)),
            timeout=ON_BOUND,
            interval=0.2,
        )
        figure(
            "leader change: kube-proxy stopped -> left (s)", round(time.monotonic() - stopped, 1)
        )
        record = wait_for(
            f"{node.name} in the health record", lambda: recorded_unhealthy(release), timeout=10
        )
        assert node.name in record, record
        other = next(n for n in release.nodes if n.name in ("node-1", "node-2") and n != node)
        with (
            IngressWatch(release, APP, SERVICE) as watch,
            IngressWatch(release, APP, AFTER) as after,
        ):
            pod = lease_holder(release).split("_")[0]
            deleted = time.monotonic()
            kubectl(release, "-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
            new = wait_for(
                "another replica to hold the Lease",
                lambda: (h := lease_holder(release)) and h.split("_")[0] != pod and h,
                timeout=90,
                interval=0.2,
            )
            took_over = time.monotonic()
            # A Service the new holder alone decides: published on the healthy node only.
            apply(release, service_manifest(AFTER, AFTER_PORT, "Cluster", INTERNAL_NODES))
            try:
                wait_for(
                    f"the new holder to publish {AFTER}",
                    lambda: bool(after.observations) and bool(after.observations[-1].ips),
                    timeout=60,
                    interval=0.2,
                    explain=lambda: service_story(release, f"{APP}/{AFTER}"),
                )
                written = time.monotonic()
                time.sleep(TAKEOVER_WINDOW)
            finally:
                kubectl(release, "-n", APP, "delete", "service", AFTER, "--wait=false")
        seen = [(round(o.at - deleted, 1), o.ips) for o in watch.observations]
        seen_after = [(round(o.at - deleted, 1), o.ips) for o in after.observations]
        print(f"{SERVICE} statuses from the deletion of {pod} (new holder {new}): {seen}")
        print(f"{AFTER} statuses: {seen_after}; watch errors: {watch.errors + after.errors}")
        figure("leader change: Pod deleted -> new holder (s)", round(took_over - deleted, 1))
        figure(f"leader change: new holder published {AFTER} (s)", round(written - deleted, 1))
        figure("leader change: statuses watched", (len(seen), len(seen_after)))
        back = [(at, ips) for at, ips in seen + seen_after if addresses & set(ips)]
        assert not back, f"{node.name} republished while its kube-proxy was down: {back}"
        published = [ips for _, ips in seen_after if ips]
        assert published and all(set(ips) == {other.ipv4, other.ipv6} for ips in published), (
            seen_after
        )
        healed_at = time.monotonic()
    healed(release, node)
    figure(
        "leader change: healed -> back in the status (s)", round(time.monotonic() - healed_at, 1)
    )
    rolled_out(release, NAMESPACE, "node-ipam-lb")
