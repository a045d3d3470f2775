"""node-ipam-lb as users run it: installed by Helm on a real cluster (kubelet, containerd,
kube-proxy per node, README.md here), its webhooks called through their Service, and
traffic sent from a client namespace to every address it publishes.

The tests run in order on one cluster (the session fixture ``cluster``); each module
fixture builds on the previous state. Measured figures are printed (``-s`` shows them)
and asserted only where the contract gives a bound.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster, Node
from tests.cluster.helpers import (
    APP,
    NAMESPACE,
    SELECTOR,
    all_from,
    answers,
    apply,
    ask,
    backend_manifest,
    backend_pods,
    by_whom,
    external_ip_column,
    figure,
    helm_install,
    ingress_of,
    kubectl,
    kubectl_json,
    namespaces,
    our_service,
    pod_ready,
    port_in_use,
    requests_to,
    rolled_out,
    run_helm,
    service_manifest,
    team_backend,
    wait_for,
)
from tests.cluster.images import BACKEND_IMAGE, product_ref
from tests.cluster.traffic import Prober
from tests.controlplane.plane import KubectlError
from tests.deploy.helmchart import CHART, RELEASE, environment
from tests.deploy.readme import code_blocks, section
from tests.deploy.render import ROOT

INTERNAL_NODES = "kubernetes.io/hostname in (node-1,node-2)"
# Service name -> (port, externalTrafficPolicy, node selector annotation or None)
SERVICES: dict[str, tuple[int, str, str | None]] = {
    "web": (80, "Cluster", None),
    "web-internal": (8081, "Cluster", INTERNAL_NODES),
    "web-local": (8082, "Local", INTERNAL_NODES),
}
# Tests that roll the release (a helm upgrade replaces both Pods one by one, 20-40 s each
# on a loaded 2-core machine) get more than the suite's 120 s.
ROLLING_TIMEOUT = 240
INSTALLED: dict[str, float] = {}
MALFORMED = "role in (edge"
# kubectl's error for a malformed selector applied with --dry-run=server at once after an
# install returned (None: admitted), by how it was installed (issue 31, "Ready means in force").
AT_ONCE: dict[str, str | None] = {}


def ingress(cluster: Cluster, name: str) -> list[dict[str, str]]:
    svc = kubectl_json(cluster, "-n", APP, "get", "service", name)
    return list(svc["status"].get("loadBalancer", {}).get("ingress", []))


def ingress_ips(cluster: Cluster, name: str) -> list[str]:
    return [entry["ip"] for entry in ingress(cluster, name)]


def node_by_address(cluster: Cluster) -> dict[str, Node]:
    found: dict[str, Node] = {}
    for node in cluster.nodes:
        for ip in (node.ipv4, node.ipv6, node.external_ipv4, node.external_ipv6):
            if ip:
                found[ip] = node
    return found


def every_address_answers(cluster: Cluster) -> dict[str, list[str]] | None:
    """Each Service's listed addresses, once every one of them answers; else None."""
    listed: dict[str, list[str]] = {}
    for name, (port, _, _) in SERVICES.items():
        ips = ingress_ips(cluster, name)
        if not ips or any(answers(cluster, ip, port) is None for ip in ips):
            return None
        listed[name] = ips
    return listed


def until_denied(cluster: Cluster, manifest: dict[str, Any], *, timeout: float) -> tuple[str, int]:
    """Apply ``manifest`` (a Service with a malformed selector) until the webhook denies
    it, deleting each admitted copy; returns (kubectl's error, copies admitted before)."""
    admitted = 0
    name = manifest["metadata"]["name"]

    def denied() -> str | None:
        nonlocal admitted
        try:
            apply(cluster, manifest)
        except KubectlError as err:
            return str(err.stderr)
        admitted += 1
        kubectl(cluster, "-n", APP, "delete", "service", name, "--wait=false")
        return None

    message = wait_for(f"the webhook to deny {name}", denied, timeout=timeout)
    return message, admitted


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend(cluster: Cluster) -> Cluster:
    """The backend Deployment (3 replicas, one per node) and the three Services, created
    before node-ipam-lb is installed (they stay <pending> until then)."""
    kubectl(cluster, "create", "namespace", APP)
    apply(
        cluster,
        backend_manifest(3, "1"),
        *(service_manifest(name, *spec) for name, spec in SERVICES.items()),
    )
    rolled_out(cluster, APP, "backend")
    return cluster


@pytest.fixture(scope="module")
def release(backend: Cluster, helm: Path) -> Iterator[Cluster]:
    """``helm install`` as deploy/README.md says, default image settings (the image
    ``node-ipam-lb:<version>`` the cluster imported on every node), 2 replicas,
    self-managed certificates; measured until every listed address answers."""
    cluster = backend
    started = INSTALLED["at"] = helm_install(helm, cluster)
    # What a CI pipeline does next: one apply, no retry (see the test using it).
    AT_ONCE["helm install --wait"] = applied(
        cluster, service_manifest("bad-at-once", 9997, "Cluster", MALFORMED), "--dry-run=server"
    )
    figure("helm install --wait returned (s)", round(time.monotonic() - started, 1))
    rolled_out(cluster, NAMESPACE, "node-ipam-lb")
    figure("helm install -> rollout complete (s)", round(time.monotonic() - started, 1))
    wait_for("every listed EXTERNAL-IP to answer", lambda: every_address_answers(cluster))
    figure("helm install -> every EXTERNAL-IP answers (s)", round(time.monotonic() - started, 1))
    yield cluster


# -- the cluster itself -----------------------------------------------------------------


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


# -- install ----------------------------------------------------------------------------


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


def readyz_of_each_pod(cluster: Cluster) -> dict[str, str]:
    """Each node-ipam-lb Pod's ``/readyz`` text on its health-probe port, through the API
    server's Pod proxy (deploy/README.md: what ``kubectl describe pod`` does not show)."""
    pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
    texts = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:8081/proxy/readyz"
        texts[name] = kubectl(cluster, "get", "--raw", path, check=False)
    return texts


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


# -- traffic ----------------------------------------------------------------------------


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


def probe_targets(cluster: Cluster) -> list[tuple[str, int]]:
    return [
        (ip, port)
        for name, (port, policy, _) in SERVICES.items()
        if policy == "Cluster"
        for ip in ingress_ips(cluster, name)
    ]


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

    (node,) = wait_for("web-local to follow the one endpoint", one_node_left, timeout=60)
    for ip in ingress_ips(release, "web-local"):
        assert ask(release, ip, 8082)["node"] == node
    kubectl(release, "-n", APP, "scale", "deployment/backend", "--replicas=3")
    rolled_out(release, APP, "backend")
    wait_for(
        "web-local to list node-1 and node-2 again",
        lambda: len(ingress_ips(release, "web-local")) == 4,
        timeout=60,
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
    )
    assert all(not value.startswith("answered") for value in outcomes.values()), outcomes


def helm_upgrade(helm_binary: Path, cluster: Cluster, *args: str) -> None:
    run_helm(
        helm_binary,
        cluster,
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        *args,
    )
    rolled_out(cluster, NAMESPACE, "node-ipam-lb")


# -- cluster life -----------------------------------------------------------------------


def select_nodes(cluster: Cluster, service: str, selector: str) -> None:
    """Set the Service's node selector annotation (``kubectl annotate --overwrite``)."""
    kubectl(
        cluster, "-n", APP, "annotate", "--overwrite", "service", service, f"{SELECTOR}={selector}"
    )


def lease_holder(cluster: Cluster) -> str:
    lease = kubectl_json(cluster, "-n", NAMESPACE, "get", "lease", "node-ipam-lb")
    return str(lease["spec"].get("holderIdentity") or "")


def test_deleting_the_leader_pod_fails_over(release: Cluster) -> None:
    holder = lease_holder(release)
    pod = holder.split("_")[0]
    started = time.monotonic()
    kubectl(release, "-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
    new = wait_for(
        "another replica to hold the Lease",
        lambda: (h := lease_holder(release)) and h.split("_")[0] != pod and h,
        interval=0.2,
    )
    failover = time.monotonic() - started
    # The new leader reconciles: a changed selector reaches the status.
    select_nodes(release, "web-internal", "kubernetes.io/hostname=node-1")
    wait_for(
        "the new leader to write web-internal",
        lambda: len(ingress_ips(release, "web-internal")) == 2,
    )
    reconciled = time.monotonic() - started
    select_nodes(release, "web-internal", INTERNAL_NODES)
    wait_for("web-internal back", lambda: len(ingress_ips(release, "web-internal")) == 4)
    figure("leader Pod deleted -> new Lease holder (s)", round(failover, 1))
    figure("leader Pod deleted -> new leader wrote a status (s)", round(reconciled, 1))
    assert new
    rolled_out(release, NAMESPACE, "node-ipam-lb")


def product_containers(cluster: Cluster) -> dict[str, tuple[str, int]]:
    """Pod name -> (containerID, restartCount) of node-ipam-lb's Pods."""
    pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
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
    holder = wait_for("a Lease holder again", lambda: lease_holder(release), timeout=60)
    select_nodes(release, "web-internal", "kubernetes.io/hostname=node-1")
    wait_for(
        "web-internal to follow a change made after the outage",
        lambda: len(ingress_ips(release, "web-internal")) == 2,
    )
    figure("kube-apiserver back -> a new change written (s)", round(time.monotonic() - back, 1))
    select_nodes(release, "web-internal", INTERNAL_NODES)
    wait_for("every address answering again", lambda: every_address_answers(release))
    assert holder.split("_")[0] in containers
    assert restarts(product_containers(release)) == restarts(containers), "a Pod restarted"


def resource_versions(cluster: Cluster) -> dict[str, str]:
    """Each Service's ``metadata.resourceVersion`` (any write, status included, bumps it)."""
    return {
        name: kubectl_json(cluster, "-n", APP, "get", "service", name)["metadata"][
            "resourceVersion"
        ]
        for name in SERVICES
    }


def settled_versions(
    cluster: Cluster, *, quiet: float = 5.0, timeout: float = 90.0
) -> dict[str, str]:
    """:func:`resource_versions` once the cluster has settled: every Node Ready, web-local
    listing its 4 addresses (node-1 and node-2, both families: each with a ready endpoint),
    and no Service written for ``quiet`` seconds. A test that asserts "no write" starts
    here: the previous test's tail writes legitimately (after kube-apiserver is back, Nodes
    may go NotReady for a moment, their endpoints with them, and web-local follows)."""

    def nodes_ready() -> bool:
        return all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
            for n in kubectl_json(cluster, "get", "nodes")["items"]
        )

    wait_for(
        "every Node Ready and web-local listing its 4 addresses",
        lambda: nodes_ready() and len(ingress_ips(cluster, "web-local")) == 4,
        timeout=timeout,
    )
    deadline = time.monotonic() + timeout
    versions, since = resource_versions(cluster), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            pytest.fail(f"Services still written after {timeout:.0f} s: {versions}")
        time.sleep(1)
        now = resource_versions(cluster)
        if now != versions:
            versions, since = now, time.monotonic()
    return versions


def slice_versions(cluster: Cluster, service: str) -> dict[str, str]:
    """``service``'s EndpointSlices (in APP), name -> resourceVersion: an endpoint's
    readiness changing bumps it."""
    slices = kubectl_json(
        cluster, "-n", APP, "get", "endpointslices", "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}


def pod_names(cluster: Cluster) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
    }


@pytest.mark.timeout(ROLLING_TIMEOUT)
def test_helm_upgrade_rolls_the_pods_without_a_status_write(release: Cluster, helm: Path) -> None:
    # Before: resource_versions() at once, and any write failed the test; web-local's
    # status was written during the upgrade because its endpoints changed (below), not
    # because the Pods rolled.
    before, pods = settled_versions(release), pod_names(release)
    slices_before = slice_versions(release, "web-local")
    helm_upgrade(helm, release, "--set", "settings.log-level=debug")
    wait_for("a new leader", lambda: lease_holder(release).split("_")[0] not in pods)
    time.sleep(5)  # the new leader's first full reconcile
    # The old Pods may still be terminating (their grace period) on a loaded machine.
    wait_for("the old Pods to be gone", lambda: not (pod_names(release) & pods), timeout=60)
    after = resource_versions(release)
    written = {name for name in SERVICES if after[name] != before[name]}
    # The previous test's kube-apiserver outage has a tail: the node lifecycle and
    # EndpointSlice controllers catch up for about a minute (in .ci/run, twice: web-local's
    # endpoint on node-2 not ready for 13 s, a minute after the outage, inside this test),
    # and web-local is then rightly written. The Cluster Services never depend on that.
    if slice_versions(release, "web-local") != slices_before:
        written.discard("web-local")
        figure("helm upgrade: web-local's endpoints changed meanwhile (its writes allowed)", True)
    assert written == set(), {name: (before[name], after[name]) for name in written}
    wait_for(
        "web-local listing its 4 addresses after the upgrade",
        lambda: len(ingress_ips(release, "web-local")) == 4,
        timeout=60,
    )


def secret_ca_count(cluster: Cluster) -> int:
    """How many CA certificates the self-managed Secret's ``ca.crt`` holds (2: a rotation's
    overlap, the new CA and the previous one)."""
    secret = kubectl_json(cluster, "-n", NAMESPACE, "get", "secret", "node-ipam-lb-webhook-tls")
    return base64.b64decode(secret["data"]["ca.crt"]).count(b"-----BEGIN CERTIFICATE-----")


def ca_bundle_counts(cluster: Cluster) -> list[int]:
    """The number of CA certificates in each webhook's caBundle, both configurations."""
    counts = []
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        for hook in kubectl_json(cluster, "get", kind, "node-ipam-lb")["webhooks"]:
            bundle = base64.b64decode(hook["clientConfig"].get("caBundle") or "")
            counts.append(bundle.count(b"-----BEGIN CERTIFICATE-----"))
    return counts


def not_ready_pods(cluster: Cluster) -> list[str]:
    pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and not all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
    ]


@pytest.mark.timeout(ROLLING_TIMEOUT + 60)
def test_a_ca_rotation_keeps_the_webhook_in_force(release: Cluster, helm: Path) -> None:
    """Issue 31: Ready stays true, and in force, through a CA rotation. A renewal window longer
    than the CA's remaining ten years (with lifetimes longer than the window, as serve
    requires) makes the CA due: the first Lease holder with the new settings rotates it at
    the start of its term (the new Pods' bootstrap does not: a rotation is not urgent). The
    Secret and both caBundles then hold the new and the previous CA; each replica keeps
    serving its old certificate for the hand-over (kube-apiserver's webhook informer may
    not have the new caBundle yet: CI of 2026-12-03 was admitted right after the rotation
    when the leader switched at once), then one of the new CA. A malformed selector applied
    over and over from the rotation until both replicas serve the new CA is denied every
    time, and both stay Ready. Afterwards the new CA (15 years) is outside the 12-year
    window, so nothing rotates again."""
    assert secret_ca_count(release) == 1
    years = 365 * 86400
    helm_upgrade(
        helm, release, "--wait", "--timeout", "120s",
        "--set", f"settings.cert-renew-before-seconds={12 * years}",
        "--set", f"settings.cert-validity-seconds={15 * years}",
        "--set", f"settings.ca-validity-seconds={15 * years}",
    )  # fmt: skip
    flips: list[list[str]] = []

    def rotated() -> bool:
        if not_ready := not_ready_pods(release):
            flips.append(not_ready)
        return secret_ca_count(release) == 2

    started = time.monotonic()
    wait_for("the new Lease holder to rotate the CA", rotated, timeout=90, interval=0.2)
    figure("helm upgrade --wait -> CA rotated (s)", round(time.monotonic() - started, 1))
    rotated_at = time.monotonic()
    admitted: list[float] = []
    applies = 0
    # Hand-over (10 s) plus the other replica's next check (every 30 s), with room.
    while time.monotonic() - rotated_at < 45:
        error = applied(
            release,
            service_manifest("bad-rotation", 9996, "Cluster", MALFORMED),
            "--dry-run=server",
        )
        applies += 1
        if error is None:
            admitted.append(round(time.monotonic() - rotated_at, 1))
        else:
            assert "denied the request" in error and SELECTOR in error, error
        if not_ready := not_ready_pods(release):
            flips.append(not_ready)
    figure("malformed selectors applied during the rotation", applies)
    assert admitted == [], f"admitted at these seconds after the rotation: {admitted}"
    assert set(ca_bundle_counts(release)) == {2}
    assert flips == [], "a Pod went not Ready during the rotation"
    texts = readyz_of_each_pod(release)
    assert set(texts.values()) == {"ok\n"}, texts


@pytest.mark.timeout(ROLLING_TIMEOUT)
def test_a_stopped_kubelet_makes_its_node_leave_after_the_grace_period(
    release: Cluster, helm: Path
) -> None:
    grace = 10
    helm_upgrade(
        helm,
        release,
        "--set",
        "settings.exclude-not-ready-nodes=true",
        "--set",
        f"settings.not-ready-grace-seconds={grace}",
    )
    node = next(n for n in release.nodes if n.name == "node-2")
    release.stop_kubelet(node)
    stopped = time.monotonic()
    try:

        def not_ready() -> str | None:
            item = kubectl_json(release, "get", "node", node.name)
            (cond,) = [c for c in item["status"]["conditions"] if c["type"] == "Ready"]
            taints = {t["key"] for t in item["spec"].get("taints", [])}
            if cond["status"] != "True" and "node.kubernetes.io/unreachable" in taints:
                return str(cond["lastTransitionTime"])
            return None

        transition = wait_for("node-2 NotReady and tainted", not_ready, timeout=60)
        marked = time.monotonic()
        wait_for(
            "node-2's addresses to leave web-internal",
            lambda: {node.ipv4, node.ipv6}.isdisjoint(ingress_ips(release, "web-internal")),
            timeout=60,
            interval=0.2,
        )
        left, left_wall = time.monotonic(), time.time()
        # lastTransitionTime has whole seconds: the grace is checked to +-1 s.
        since = left_wall - datetime.datetime.fromisoformat(transition).timestamp()
        figure("kubelet stopped -> NotReady + taint (s)", round(marked - stopped, 1))
        figure(f"Ready transition -> address gone (s, grace {grace})", round(since, 1))
        remaining = ingress_ips(release, "web-internal")
        assert remaining and all(ask(release, ip, 8081) for ip in remaining)
        # Not before the grace period (-1 s: whole seconds); the upper bound is loose (a
        # loaded machine), the figure is what the README reports.
        assert grace - 1 <= since <= grace + 10, f"left {since:.1f} s after the transition"
        assert left > marked
    finally:
        release.start_kubelet(node)
    wait_for(
        "node-2 Ready again and listed",
        lambda: len(ingress_ips(release, "web-internal")) == 4,
        timeout=90,
    )


def test_draining_a_node_moves_its_pods(release: Cluster) -> None:
    kubectl(
        release,
        "drain",
        "node-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=90s",
        timeout=100,
    )
    try:
        pods = kubectl_json(
            release, "get", "pods", "-A", "--field-selector", "spec.nodeName=node-1"
        )
        assert [p["metadata"]["name"] for p in pods["items"]] == []
        wait_for(
            "web-local to drop node-1",
            lambda: all(
                ip not in ingress_ips(release, "web-local")
                for ip in (release.nodes[0].ipv4, release.nodes[0].ipv6)
            ),
        )
        assert every_address_answers_cluster(release)
    finally:
        kubectl(release, "uncordon", "node-1")


def every_address_answers_cluster(cluster: Cluster) -> bool:
    return all(answers(cluster, ip, port) for ip, port in probe_targets(cluster))


def test_deleting_a_namespace_really_deletes_it(release: Cluster) -> None:
    kubectl(release, "create", "namespace", "short-lived")
    apply(
        release,
        {**backend_manifest(1, "1"), "metadata": {"name": "backend", "namespace": "short-lived"}},
    )
    rolled_out(release, "short-lived", "backend")
    started = time.monotonic()
    kubectl(release, "delete", "namespace", "short-lived", "--timeout=90s", timeout=100)
    figure("namespace with a running Pod deleted (s)", round(time.monotonic() - started, 1))
    assert kubectl(release, "get", "namespace", "short-lived", "--ignore-not-found") == ""


# -- port ownership, proven with packets (docs/design.md §4.9) -------------------------
#
# Each test leaves the cluster as it found it: what it creates is deleted (namespaces
# with their Pods, Services, the host-network Pod), the validating webhook it removes is
# put back (the saved object, caBundle included) and seen denying again.

# Each scenario rolls out Pods, waits for the reconciler and for kube-proxy, and deletes
# a namespace (~20 s) on a loaded 2-core machine.
PORTS_TIMEOUT = 300
SHARED_PORT = 8090
KUBELET_PORT = 10250
HOST_PORT = 8095
NODE_1 = "kubernetes.io/hostname=node-1"


def applied(cluster: Cluster, manifest: dict[str, Any], *args: str) -> str | None:
    """``kubectl apply`` (extra ``args``, e.g. ``--dry-run=server``): ``None`` when
    admitted, else kubectl's error."""
    try:
        kubectl(
            cluster,
            "apply",
            *args,
            "-f",
            "-",
            input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [manifest]}),
        )
    except KubectlError as err:
        return str(err.stderr)
    return None


def denied_at_apply(
    cluster: Cluster, manifest: dict[str, Any], *, dry_run: bool = False, timeout: float = 60
) -> tuple[str, int]:
    """Apply ``manifest`` (a Service) until the webhook denies it, deleting each admitted
    copy (none with ``dry_run``: ``--dry-run=server`` calls the webhooks, stores nothing);
    returns (kubectl's error, copies admitted before)."""
    admitted = 0
    meta = manifest["metadata"]
    args = ("--dry-run=server",) if dry_run else ()

    def denied() -> str | None:
        nonlocal admitted
        error = applied(cluster, manifest, *args)
        if error is not None:
            return error
        admitted += 1
        if not dry_run:
            kubectl(cluster, "-n", meta["namespace"], "delete", "service", meta["name"])
        return None

    message = wait_for(f"the webhook to deny {meta['name']}", denied, timeout=timeout)
    return message, admitted


def admitted_at_apply(cluster: Cluster, manifest: dict[str, Any], *, timeout: float = 30) -> None:
    """Apply ``manifest`` until admitted: kube-apiserver may call a webhook whose
    configuration was just deleted for a moment (its informer)."""
    errors: list[str] = []

    def admitted() -> bool:
        error = applied(cluster, manifest)
        if error is not None:
            errors.append(error)
        return error is None

    wait_for(f"{manifest['metadata']['name']} to be admitted", admitted, timeout=timeout)
    if errors:
        print(f"\n{manifest['metadata']['name']}: denied {len(errors)}x first: {errors[-1]}")


@contextlib.contextmanager
def validating_webhook_removed(cluster: Cluster) -> Iterator[str]:
    """The release's ValidatingWebhookConfiguration deleted; on the way out created again
    from the saved object (labels, annotations, webhooks with their caBundle), so Helm
    still owns it and kube-apiserver can call it at once. Yields its name."""
    (config,) = kubectl_json(
        cluster,
        "get",
        "validatingwebhookconfigurations",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
    )["items"]
    name = str(config["metadata"]["name"])
    keep = ("name", "labels", "annotations")
    saved = {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "metadata": {k: v for k, v in config["metadata"].items() if k in keep},
        "webhooks": config["webhooks"],
    }
    kubectl(cluster, "delete", "validatingwebhookconfiguration", name)
    try:
        yield name
    finally:
        kubectl(cluster, "create", "-f", "-", input=json.dumps(saved))


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_two_services_on_one_port_the_first_owns_it_then_the_second(release: Cluster) -> None:
    """``alpha`` (team-a) and then ``beta`` (team-b) on one port over every node: alpha
    publishes, beta stays ``<pending>`` with a ``PortInUse`` Event naming alpha, and every
    request to alpha's addresses is served by team-a's Pods (kube-proxy has one Service on
    each address:port). alpha deleted: beta takes the addresses, team-b serves."""
    port = SHARED_PORT
    with namespaces(release, "team-a", "team-b"):
        apply(release, team_backend("team-a", "team-a"), team_backend("team-b", "team-b"))
        rolled_out(release, "team-a", "backend")
        rolled_out(release, "team-b", "backend")
        pods = {team: backend_pods(release, team) for team in ("team-a", "team-b")}
        apply(release, our_service("team-a", "alpha", port))
        alpha_ips = wait_for(
            "alpha's addresses", lambda: ingress_of(release, "team-a", "alpha"), timeout=60
        )
        targets = [(ip, port) for ip in alpha_ips]
        wait_for(
            f"alpha's addresses {alpha_ips} to answer",
            lambda: all(answers(release, ip, port) for ip in alpha_ips),
            timeout=30,
        )
        apply(release, our_service("team-b", "beta", port))
        created = time.monotonic()
        event = wait_for(
            "beta's PortInUse Warning Event",
            lambda: port_in_use(release, "team-b", "beta"),
            timeout=60,
        )
        figure("beta created -> PortInUse Event (s)", round(time.monotonic() - created, 1))
        figure("beta's PortInUse Event", event)
        assert "team-a/alpha" in event, event
        assert ingress_of(release, "team-b", "beta") == [], "beta was published too"
        assert external_ip_column(release, "team-b", "beta") == "<pending>"
        served = requests_to(release, targets, 12)
        figure(f"alpha and beta on {port}: alpha's addresses answered by", by_whom(served))
        assert all_from(served, pods["team-a"]), (
            f"not every answer from team-a's Pods {sorted(pods['team-a'])}: {by_whom(served)}"
        )
        assert ingress_of(release, "team-b", "beta") == [], "beta published meanwhile"
        assert ingress_of(release, "team-a", "alpha") == alpha_ips

        kubectl(release, "-n", "team-a", "delete", "service", "alpha")
        deleted = time.monotonic()
        beta_ips = wait_for(
            "beta to take the addresses", lambda: ingress_of(release, "team-b", "beta"), timeout=60
        )
        took = time.monotonic() - deleted

        def team_b_everywhere() -> bool:
            for ip in beta_ips:
                answer = answers(release, ip, port)
                if answer is None or answer.get("pod") not in pods["team-b"]:
                    return False
            return True

        wait_for("team-b to answer on every address of beta", team_b_everywhere, timeout=30)
        answering = time.monotonic() - deleted
        figure("alpha deleted -> beta published (s)", round(took, 1))
        figure("alpha deleted -> team-b answers on every address (s)", round(answering, 1))
        assert sorted(beta_ips) == sorted(alpha_ips), (beta_ips, alpha_ips)
        served = requests_to(release, [(ip, port) for ip in beta_ips], 12)
        figure(f"alpha deleted: beta's addresses on {port} answered by", by_whom(served))
        assert all_from(served, pods["team-b"]), (
            f"not every answer from team-b's Pods {sorted(pods['team-b'])}: {by_whom(served)}"
        )


def node_1_pod(namespace: str) -> dict[str, Any]:
    """A Pod on node-1 (``nodeName``) with two containers: ``backend`` (it logs one line
    at start) and ``shell`` (the project's image, Debian: ``/bin/true`` for exec)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-node-1", "namespace": namespace, "labels": {"app": "on-node-1"}},
        "spec": {
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "backend",
                    "image": BACKEND_IMAGE,
                    "imagePullPolicy": "Never",
                    "env": [{"name": "SHUTDOWN_DELAY", "value": "0s"}],
                    "ports": [{"containerPort": 8080}],
                },
                {
                    "name": "shell",
                    "image": product_ref(),
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                },
            ],
        },
    }


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_the_kubelet_port_is_never_published_and_logs_and_exec_keep_working(
    release: Cluster,
) -> None:
    """Port 10250 on node-1: denied by the webhook; with the ValidatingWebhookConfiguration
    deleted it is admitted but the reconciler publishes nothing (``PortInUse``, reserved
    port), so kube-apiserver still reaches node-1's kubelet (it dials the InternalIP,
    which kube-proxy would capture for an ingress IP): ``kubectl logs`` and ``kubectl
    exec`` work. The webhook is put back and denies again."""
    namespace = "ports-kubelet"
    service = our_service(namespace, "kubelet-port", KUBELET_PORT, selector=NODE_1, app="on-node-1")
    reserved = f"{KUBELET_PORT}/TCP is reserved for the node itself"
    with namespaces(release, namespace):
        apply(release, node_1_pod(namespace))
        pod_ready(release, namespace, "on-node-1")
        message, _ = denied_at_apply(release, service)
        assert reserved in message, message
        with validating_webhook_removed(release) as name:
            figure("validating webhook removed", name)
            admitted_at_apply(release, service)
            created = time.monotonic()
            event = wait_for(
                "kubelet-port's PortInUse Warning Event",
                lambda: port_in_use(release, namespace, "kubelet-port"),
                timeout=60,
            )
            figure(
                "port 10250 (no webhook): created -> PortInUse Event (s)",
                round(time.monotonic() - created, 1),
            )
            figure("port 10250 (no webhook): PortInUse Event", event)
            assert "reserved" in event, event
            assert ingress_of(release, namespace, "kubelet-port") == [], "10250 published"
            assert release.plane is not None
            logs = release.plane.kubectl(
                "-n", namespace, "logs", "on-node-1", "-c", "backend", check=False
            )
            execd = release.plane.kubectl(
                "-n",
                namespace,
                "exec",
                "on-node-1",
                "-c",
                "shell",
                "--",
                "/bin/true",
                check=False,
            )
            figure(
                "port 10250 (no webhook): kubectl logs / exec on node-1 exit codes",
                (logs.returncode, execd.returncode),
            )
            assert logs.returncode == 0 and "listening on" in logs.stdout, logs.stdout + logs.stderr
            assert execd.returncode == 0, execd.stdout + execd.stderr
            assert ingress_of(release, namespace, "kubelet-port") == [], "10250 published"
            kubectl(release, "-n", namespace, "delete", "service", "kubelet-port")
        message, admitted = denied_at_apply(release, service)
        figure("webhook restored: 10250 copies admitted before the first denial", admitted)
        assert reserved in message, message


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_another_services_node_port_is_never_published(release: Cluster) -> None:
    """A Service of our class whose port is ``web``'s allocated nodePort: denied by the
    webhook (naming traffic/web, seen with ``--dry-run=server``); created with the
    ValidatingWebhookConfiguration deleted, it is never published (``PortInUse``), and
    every node address that serves node ports (iptables mode: web's ingress, node-3's
    ExternalIPs, too) keeps answering on the nodePort from the ``traffic`` backend (the
    intruder has a backend of its own, which would answer if kube-proxy captured the port
    for it)."""
    web = kubectl_json(release, "-n", APP, "get", "service", "web")
    node_port = int(web["spec"]["ports"][0]["nodePort"])
    # nftables mode with nodePortAddresses unset serves node ports on the node's primary
    # addresses only (its InternalIPs here), iptables mode on every local address.
    addresses = ingress_ips(release, "web") if release.proxy_mode == "iptables" else []
    for node in release.nodes:
        addresses += [ip for ip in (node.ipv4, node.ipv6) if ip not in addresses]
    targets = [(ip, node_port) for ip in addresses]
    traffic = backend_pods(release, APP)
    before = requests_to(release, targets, 1)
    figure(f"web's nodePort {node_port} before: answered by", by_whom(before))
    assert all_from(before, traffic), f"baseline: {by_whom(before)}"
    namespace = "ports-nodeport"
    service = our_service(namespace, "intruder", node_port)
    with namespaces(release, namespace):
        apply(release, team_backend(namespace, "intruder", replicas=1))
        rolled_out(release, namespace, "backend")
        message, _ = denied_at_apply(release, service, dry_run=True)
        assert "traffic/web" in message and "nodePort" in message, message
        with validating_webhook_removed(release):
            admitted_at_apply(release, service)
            created = time.monotonic()
            event = wait_for(
                "intruder's PortInUse Warning Event",
                lambda: port_in_use(release, namespace, "intruder"),
                timeout=60,
            )
            figure(
                f"nodePort {node_port} as a port (no webhook): created -> PortInUse (s)",
                round(time.monotonic() - created, 1),
            )
            figure(f"nodePort {node_port} as a port (no webhook): PortInUse Event", event)
            assert "traffic/web" in event, event
            assert ingress_of(release, namespace, "intruder") == [], "published"
            after = requests_to(release, targets, 1)
            served = sum(1 for _, a in after if isinstance(a, dict) and a.get("pod") in traffic)
            figure(f"web's nodePort {node_port} with the intruder: answered by", by_whom(after))
            figure("answered by the traffic backend", f"{served} of {len(after)}")
            assert all_from(after, traffic), by_whom(after)
            assert ingress_of(release, namespace, "intruder") == [], "published"
            kubectl(release, "-n", namespace, "delete", "service", "intruder")
        message, _ = denied_at_apply(release, service, dry_run=True)
        assert "traffic/web" in message, message


def host_network_backend(name: str, port: int, node: str) -> dict[str, Any]:
    """The backend on ``node``'s host network, listening on ``port`` (``PORT``), which it
    declares as a containerPort (hostPort = containerPort on the host network)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APP, "labels": {"app": "host-port-holder"}},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "backend",
                    "image": BACKEND_IMAGE,
                    "imagePullPolicy": "Never",
                    "env": [
                        {"name": "POD_NAME", "value": name},
                        {"name": "NODE_NAME", "value": node},
                        {"name": "VERSION", "value": "host"},
                        {"name": "PORT", "value": str(port)},
                        {"name": "SHUTDOWN_DELAY", "value": "0s"},
                    ],
                    "ports": [{"containerPort": port, "protocol": "TCP"}],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": port},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_a_host_network_pods_port_keeps_its_node_out(release: Cluster) -> None:
    """A ``hostNetwork`` Pod on node-1 declaring (and serving) port 8095; a Service of our
    class on 8095 over node-1 and node-2 (InternalIPs: every node selected, node-3's
    ExternalIPs would be all it lists, §4.4) is published on node-2's addresses only
    (``PortInUse`` naming the Pod), so node-1:8095 still reaches the Pod's own server.
    The Pod deleted, node-1's addresses join and answer from the Service's backend."""
    node_1 = next(n for n in release.nodes if n.name == "node-1")
    node_2 = next(n for n in release.nodes if n.name == "node-2")
    holder = "host-port-holder"
    service = our_service(APP, "host-port", HOST_PORT, selector=INTERNAL_NODES)
    traffic = backend_pods(release, APP)
    try:
        apply(release, host_network_backend(holder, HOST_PORT, "node-1"))
        pod_ready(release, APP, holder)
        apply(release, service)
        created = time.monotonic()
        event = wait_for(
            "host-port's PortInUse Warning Event",
            lambda: port_in_use(release, APP, "host-port"),
            timeout=60,
        )
        figure(
            "hostNetwork Pod's port: created -> PortInUse Event (s)",
            round(time.monotonic() - created, 1),
        )
        figure("hostNetwork Pod's port: PortInUse Event", event)
        listed = wait_for(
            "host-port's addresses", lambda: ingress_ips(release, "host-port"), timeout=30
        )
        figure("hostNetwork Pod on node-1: host-port published on", listed)
        assert sorted(listed) == sorted([node_2.ipv4, node_2.ipv6]), (
            f"expected node-2's addresses only; published {listed}"
        )
        assert holder in event, event
        wait_for(
            f"host-port's addresses {listed} to answer (kube-proxy's rules)",
            lambda: all(answers(release, ip, HOST_PORT) for ip in listed),
            timeout=30,
        )
        served = requests_to(release, [(ip, HOST_PORT) for ip in listed], 4)
        own = requests_to(release, [(node_1.ipv4, HOST_PORT), (node_1.ipv6, HOST_PORT)], 4)
        figure("host-port's addresses answered by", by_whom(served))
        figure("node-1's addresses on 8095 answered by", by_whom(own))
        assert all_from(served, traffic), by_whom(served)
        assert all_from(own, {holder}), by_whom(own)

        kubectl(release, "-n", APP, "delete", "pod", holder)
        deleted = time.monotonic()
        wait_for(
            "node-1's addresses to join host-port",
            lambda: len(ingress_ips(release, "host-port")) == 4,
            timeout=60,
        )
        figure(
            "hostNetwork Pod deleted -> node-1 published (s)", round(time.monotonic() - deleted, 1)
        )
        wait_for(
            "node-1's addresses to answer from the traffic backend",
            lambda: all_from(
                requests_to(release, [(node_1.ipv4, HOST_PORT), (node_1.ipv6, HOST_PORT)], 1),
                traffic,
            ),
            timeout=30,
        )
    finally:
        kubectl(release, "-n", APP, "delete", "service", "host-port", "--ignore-not-found")
        kubectl(release, "-n", APP, "delete", "pod", holder, "--ignore-not-found")


def run_uninstall_block(cluster: Cluster, block: str, env: dict[str, str]) -> None:
    """Run a deploy/README.md uninstall block verbatim (``bash -euo pipefail``, from the
    repository root); assert it exits 0 and that the namespace controller then really
    deletes namespace node-ipam-lb."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wait_for(
        "namespace node-ipam-lb to be gone",
        lambda: kubectl(cluster, "get", "namespace", NAMESPACE, "--ignore-not-found") == "",
    )


def test_documented_helm_uninstall_leaves_nothing(release: Cluster, helm: Path) -> None:
    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "helm uninstall" in b]
    env = {
        **environment(release.kubeconfig_path),
        "PATH": f"{helm.parent}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(release.kubeconfig_path),
    }
    run_uninstall_block(release, block, env)
    left = kubectl(
        release,
        "get",
        "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,"
        "validatingwebhookconfigurations",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
    )
    assert left == ""
    # The Services keep their last status (no finalizer): traffic still flows.
    assert every_address_answers_cluster(release)


def test_kubectl_apply_k_deploy_then_the_documented_uninstall(release: Cluster) -> None:
    """After the Helm release is gone: ``kubectl apply -k deploy/`` (the default image
    name ``node-ipam-lb`` with the kustomization's tag, as on kind after ``kind load``),
    both Pods Ready, a new Service gets addresses that answer, the webhook Pod denies a
    malformed selector; then deploy/README.md's kustomize uninstall block, verbatim."""
    started = time.monotonic()
    kubectl(release, "apply", "-k", str(ROOT / "deploy"))
    rolled_out(release, NAMESPACE, "node-ipam-lb")
    # Issue 31: once rollout status returns the webhook is in force; one apply, no retry.
    at_once = applied(
        release, service_manifest("bad-at-once-k", 9995, "Cluster", MALFORMED), "--dry-run=server"
    )
    assert at_once is not None, "admitted: rollout status returned before the webhook was in force"
    assert "denied the request" in at_once and SELECTOR in at_once, at_once
    figure("kubectl apply -k deploy/ -> rollout complete (s)", round(time.monotonic() - started, 1))
    apply(release, service_manifest("web-kustomize", 8083, "Cluster", INTERNAL_NODES))
    ips = wait_for("web-kustomize's addresses", lambda: ingress_ips(release, "web-kustomize"))
    wait_for("each of them to answer", lambda: all(answers(release, ip, 8083) for ip in ips))
    figure(
        "kubectl apply -k deploy/ -> a new Service answers (s)",
        round(time.monotonic() - started, 1),
    )
    bad = service_manifest("bad-kustomize", 9998, "Cluster", "role in (edge")
    assert "denied the request" in until_denied(release, bad, timeout=90)[0]
    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "delete -k deploy/" in b]
    env = {**os.environ, "KUBECONFIG": str(release.kubeconfig_path)}
    run_uninstall_block(release, block, env)
