"""Traffic from the client namespace to every published address: IPv4 and IPv6, while
the backend scales and rolls, ``externalTrafficPolicy: Local``, ``ipMode: Proxy``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    apply,
    ask,
    backend_manifest,
    figure,
    kubectl,
    kubectl_json,
    rolled_out,
)
from tests.cluster.release import (
    ROLLING_TIMEOUT,
    SERVICES,
    every_address_answers,
    helm_upgrade,
    ingress,
    ingress_ips,
    node_by_address,
    probe_targets,
)
from tests.cluster.traffic import Prober
from tests.support.waiting import wait_for


@pytest.mark.parametrize("name", list(SERVICES))
def test_every_listed_address_answers_ipv4_and_ipv6(release: Cluster, name: str) -> None:
    port, policy, _ = SERVICES[name]
    by_address = node_by_address(release)
    ips = ingress_ips(release, name)
    assert any(":" in ip for ip in ips) and any(":" not in ip for ip in ips), ips
    for ip in ips:
        seen = {ask(release, ip, port)["node"] for _ in range(6)}
        if policy == "Local":
            # Local: the node that owns the address answers from its own Pod.
            assert seen == {by_address[ip].name}, (ip, seen)
        else:
            assert seen <= {node.name for node in release.nodes}, seen


def test_no_request_fails_while_the_backend_scales_3_1_3(release: Cluster) -> None:
    targets = probe_targets(release)
    with Prober(release.client_netns, targets) as prober:
        for replicas in (1, 3):
            kubectl(release, "-n", APP, "scale", "deployment/backend", f"--replicas={replicas}")
            rolled_out(release, APP, "backend")
            if replicas == 1:
                # Local lists only the node that keeps an endpoint, if it is selected.
                pods = kubectl_json(release, "-n", APP, "get", "pods", "-l", "app=backend")
                time.sleep(8)  # the terminated Pods' SHUTDOWN_DELAY, then their exit
                assert pods["items"]
            time.sleep(3)
    result = prober.result
    figure("scale 3->1->3: requests, failed", (result.sent, len(result.failed)))
    assert result.sent > 50
    assert result.failed == [], result.failed[:10]


def test_local_lists_only_nodes_with_a_ready_endpoint(release: Cluster) -> None:
    by_address = node_by_address(release)
    kubectl(release, "-n", APP, "scale", "deployment/backend", "--replicas=1")

    def one_node_left() -> list[str] | None:
        pods = kubectl_json(release, "-n", APP, "get", "pods", "-l", "app=backend")["items"]
        alive = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 1 or len(alive) != 1:
            return None
        node = alive[0]["spec"]["nodeName"]
        listed = {by_address[ip].name for ip in ingress_ips(release, "web-local")}
        expected = {node} & {"node-1", "node-2"}
        return [node] if listed == expected or (not expected and not listed) else None

    (node,) = wait_for(
        "web-local to follow the one endpoint", one_node_left, timeout=60, interval=0.5
    )
    for ip in ingress_ips(release, "web-local"):
        assert ask(release, ip, 8082)["node"] == node
    kubectl(release, "-n", APP, "scale", "deployment/backend", "--replicas=3")
    rolled_out(release, APP, "backend")
    wait_for(
        "web-local to list node-1 and node-2 again",
        lambda: len(ingress_ips(release, "web-local")) == 4,
        timeout=60,
        interval=0.5,
    )


def test_no_request_fails_during_a_rollout(release: Cluster) -> None:
    targets = probe_targets(release)
    with Prober(release.client_netns, targets) as prober:
        apply(release, backend_manifest(3, "2"))
        rolled_out(release, APP, "backend")
        time.sleep(8)  # the old Pods' SHUTDOWN_DELAY
    result = prober.result
    versions = {ask(release, ip, port)["version"] for ip, port in targets}
    figure("rollout: requests, failed", (result.sent, len(result.failed)))
    assert versions == {"2"}
    assert result.sent > 50
    assert result.failed == [], result.failed[:10]


@pytest.mark.timeout(ROLLING_TIMEOUT)
def test_ip_mode_proxy_is_published_and_kube_proxy_stops_answering(
    release: Cluster, helm: Path
) -> None:
    """With ``ipMode: Proxy`` kube-proxy installs no rule for the ingress IP (KEP-1860):
    the node's own address then has no listener on the Service port. Measured, then set
    back to VIP."""
    helm_upgrade(helm, release, "--set", "settings.ip-mode=Proxy")
    wait_for(
        "ipMode Proxy in the status",
        lambda: all(e.get("ipMode") == "Proxy" for e in ingress(release, "web-internal")),
        timeout=90,
        interval=0.5,
    )
    time.sleep(3)  # kube-proxy's resync
    outcomes = {}
    for ip in ingress_ips(release, "web-internal"):
        try:
            outcomes[ip] = "answered " + ask(release, ip, 8081)["node"]
        except (OSError, RuntimeError) as err:
            outcomes[ip] = type(err).__name__
    figure("ipMode Proxy: node address:port from the client", outcomes)
    helm_upgrade(helm, release, "--set", "settings.ip-mode=VIP")
    wait_for(
        "ipMode VIP again and every address answering",
        lambda: (
            all(e.get("ipMode") == "VIP" for e in ingress(release, "web-internal"))
            and every_address_answers(release)
        ),
        timeout=90,
        interval=0.5,
    )
    assert all(not value.startswith("answered") for value in outcomes.values()), outcomes
