"""The cluster itself, then node-ipam-lb installed by Helm (the package fixture
``release``): both replicas run, the webhooks are called through their Service and in
force once ``helm install --wait`` returns, ``kubectl get svc`` shows the addresses.
"""

from __future__ import annotations

import time
from typing import Any

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    NAMESPACE,
    SELECTOR,
    figure,
    kubectl,
    kubectl_json,
    service_manifest,
)
from tests.cluster.images import product_ref
from tests.cluster.release import (
    AT_ONCE,
    INSTALLED,
    SERVICES,
    ingress,
    ingress_ips,
    node_by_address,
    until_denied,
)
from tests.support.waiting import wait_for


def test_every_node_is_ready_with_dual_stack_addresses_and_pod_cidrs(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(cluster, "get", "nodes")["items"]}
    assert set(nodes) == {node.name for node in cluster.nodes}
    for node in cluster.nodes:
        item = nodes[node.name]
        addresses = {(a["type"], a["address"]) for a in item["status"]["addresses"]}
        assert ("InternalIP", node.ipv4) in addresses
        assert ("InternalIP", node.ipv6) in addresses
        if node.external_ipv4:
            assert ("ExternalIP", node.external_ipv4) in addresses
            assert ("ExternalIP", node.external_ipv6) in addresses
        assert len(item["spec"]["podCIDRs"]) == 2
        ready = [c for c in item["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"
    figure("cluster up (s)", {k: round(v, 1) for k, v in cluster.timings.items()})


def test_both_replicas_run_the_image_and_one_holds_the_lease(release: Cluster) -> None:
    pods = kubectl_json(release, "-n", NAMESPACE, "get", "pods")["items"]
    assert len(pods) == 2
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"], status
        assert status["image"] == product_ref()
    holder = kubectl_json(release, "-n", NAMESPACE, "get", "lease", "node-ipam-lb")
    assert holder["spec"]["holderIdentity"].split("_")[0] in {p["metadata"]["name"] for p in pods}


def test_webhooks_are_called_through_their_service(release: Cluster) -> None:
    """``service:`` (no ``url:``) in both configurations; the leader injects the CA of its
    self-managed certificate into each (measured from the install)."""

    def hooks() -> list[dict[str, Any]]:
        found = []
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            found += kubectl_json(release, "get", kind, "node-ipam-lb")["webhooks"]
        return found

    for hook in hooks():
        assert "url" not in hook["clientConfig"]
        assert hook["clientConfig"]["service"]["namespace"] == NAMESPACE
    wait_for(
        "the caBundle in every webhook",
        lambda: all(h["clientConfig"].get("caBundle") for h in hooks()),
        timeout=90,
        interval=0.5,
    )
    figure(
        "helm install -> caBundle in both webhook configurations (s)",
        round(time.monotonic() - INSTALLED["at"], 1),
    )


def test_helm_install_wait_returns_only_once_a_malformed_selector_is_denied(
    release: Cluster,
) -> None:
    """Issue 31: Ready means in force. A Pod is Ready only once the webhook configurations'
    caBundle verifies its certificate, so the first apply after ``helm install --wait``
    (a ``--dry-run=server`` made at once, in the fixture) is denied, not admitted by
    ``failurePolicy: Ignore``. Before: admitted, the first denial 10-17 s later."""
    error = AT_ONCE["helm install --wait"]
    assert error is not None, "admitted: --wait returned before the webhook was in force"
    assert "denied the request" in error and SELECTOR in error, error


def test_a_malformed_selector_is_denied_by_the_webhook_pod(release: Cluster) -> None:
    """The webhooks fail open (``failurePolicy: Ignore``): until kube-apiserver can call
    one, a malformed selector is admitted. Measured from the install; then denied."""
    bad = service_manifest("bad-selector", 9999, "Cluster", "role in (edge")
    message, admitted = until_denied(release, bad, timeout=90)
    figure(
        "helm install -> first denial by the webhook Pod (s)",
        round(time.monotonic() - INSTALLED["at"], 1),
    )
    figure("malformed selectors admitted before that (fail open)", admitted)
    assert "denied the request" in message and SELECTOR in message, message
    assert kubectl(release, "-n", APP, "get", "svc", "bad-selector", "--ignore-not-found") == ""


def test_kubectl_get_svc_shows_the_external_ips(release: Cluster) -> None:
    by_address = node_by_address(release)
    table = kubectl(release, "-n", APP, "get", "svc")
    for name in SERVICES:
        ips = ingress_ips(release, name)
        assert ips, name
        row = next(line for line in table.splitlines() if line.split()[0] == name)
        # kubectl joins the addresses with commas (and may cut a long list short).
        assert row.split()[3].startswith(ips[0]), row
    # Default settings, ExternalIP preference (design §4.4): one node has ExternalIPs,
    # so a Service that may use every node lists only those.
    external = next(n for n in release.nodes if n.external_ipv4)
    assert ingress_ips(release, "web") == [external.external_ipv4, external.external_ipv6]
    internal = [by_address[ip].name for ip in ingress_ips(release, "web-internal")]
    assert sorted(internal) == ["node-1", "node-1", "node-2", "node-2"]
    assert all(e.get("ipMode") == "VIP" for e in ingress(release, "web"))
