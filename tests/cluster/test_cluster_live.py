"""node-ipam-lb as users run it: installed by Helm on a real cluster (kubelet, containerd,
kube-proxy per node, README.md here), its webhooks called through their Service, and
traffic sent from a client namespace to every address it publishes.

The tests run in order on one cluster (the session fixture ``cluster``); each module
fixture builds on the previous state. Measured figures are printed (``-s`` shows them)
and asserted only where the contract gives a bound.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster, Node
from tests.cluster.images import BACKEND_IMAGE, product_ref
from tests.cluster.traffic import Prober, http_get, in_netns, parse_answer
from tests.controlplane.plane import KubectlError
from tests.deploy.helmchart import CHART, RELEASE, environment, run
from tests.deploy.readme import code_blocks, section
from tests.deploy.render import ROOT

NAMESPACE = "node-ipam-lb"
APP = "traffic"
CLASS = "io.cilium/node"
SELECTOR = "io.cilium.nodeipam/match-node-labels"
INTERNAL_NODES = "kubernetes.io/hostname in (node-1,node-2)"
# Service name -> (port, externalTrafficPolicy, node selector annotation or None)
SERVICES: dict[str, tuple[int, str, str | None]] = {
    "web": (80, "Cluster", None),
    "web-internal": (8081, "Cluster", INTERNAL_NODES),
    "web-local": (8082, "Local", INTERNAL_NODES),
}
FIGURES: dict[str, Any] = {}
# Tests that roll the release (a helm upgrade replaces both Pods one by one, 20-40 s each
# on a loaded 2-core machine) get more than the suite's 120 s.
ROLLING_TIMEOUT = 240
INSTALLED: dict[str, float] = {}


def figure(name: str, value: Any) -> None:
    """Record and print a measured figure (collected in ``FIGURES``)."""
    FIGURES[name] = value
    print(f"\nmeasured: {name} = {value}")


def wait_for(
    what: str, check: Callable[[], Any], *, timeout: float = 90, interval: float = 0.5
) -> Any:
    """Poll ``check()`` until it returns something truthy; return it. Fails the test with
    ``what`` and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    assert cluster.plane is not None
    return json.loads(cluster.plane.kubectl(*args, "-o", "json").stdout)


def kubectl(cluster: Cluster, *args: str, **kwargs: Any) -> str:
    assert cluster.plane is not None
    return cluster.plane.kubectl(*args, **kwargs).stdout


def run_helm(helm_binary: Path, cluster: Cluster, *args: str) -> str:
    result = run(helm_binary, *args, kubeconfig=cluster.kubeconfig_path, timeout=150)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


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


def ask(cluster: Cluster, ip: str, port: int) -> dict[str, str]:
    """One GET from the client namespace; the backend's answer as a dict."""
    return parse_answer(in_netns(cluster.client_netns, lambda: http_get(ip, port)))


def answers(cluster: Cluster, ip: str, port: int) -> dict[str, str] | None:
    """The answer, or ``None`` when the request failed."""
    try:
        return ask(cluster, ip, port)
    except (OSError, RuntimeError):
        return None


def backend_manifest(replicas: int, version: str) -> dict[str, Any]:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "VERSION", "value": version},
        {"name": "SHUTDOWN_DELAY", "value": "5s"},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "backend", "namespace": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "backend"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "backend"}},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": "backend"}},
                        }
                    ],
                    "containers": [
                        {
                            "name": "backend",
                            "image": BACKEND_IMAGE,
                            "imagePullPolicy": "Never",
                            "env": env,
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": 8080},
                                "periodSeconds": 1,
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def service_manifest(name: str, port: int, policy: str, selector: str | None) -> dict[str, Any]:
    annotations = {SELECTOR: selector} if selector is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": APP, "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "externalTrafficPolicy": policy,
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "selector": {"app": "backend"},
            "ports": [{"port": port, "targetPort": 8080, "name": "http"}],
        },
    }


def apply(cluster: Cluster, *objects: dict[str, Any]) -> None:
    kubectl(
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": list(objects)}),
    )


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


def rolled_out(cluster: Cluster, namespace: str, deployment: str) -> None:
    kubectl(
        cluster,
        "-n",
        namespace,
        "rollout",
        "status",
        f"deployment/{deployment}",
        "--timeout=100s",
        timeout=110,
    )


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
    kubectl(cluster, "create", "namespace", NAMESPACE)
    kubectl(
        cluster, "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    started = INSTALLED["at"] = time.monotonic()
    run_helm(helm, cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE)
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
