"""Port ownership against Pods that hold a node's port, and per-port incumbency, proven
with packets on the real cluster in both kube-proxy modes (docs/design.md §4.9; issue 35).

Every test runs twice: on a cluster whose kube-proxies run in iptables mode, then on one
in nftables mode (the module overrides the ``proxy_mode`` fixture; pytest brings up one
cluster per mode, one after the other, each with its own Helm release). Every node's CNI
chain has the ``portmap`` plugin, so a ``hostPort`` is served on its node's addresses.

- **mode**: kube-proxy's rules are those of the mode asked (``nft`` table ``ip
  kube-proxy`` or iptables chain ``KUBE-SERVICES``), the ConfigMap
  ``kube-system/kube-proxy`` states it, and node-ipam-lb read it from there.
- **hostPort (b)**: a Pod of ``team-a`` with ``hostPort: 8091`` on node-1 answers on
  node-1's addresses (portmap); a Service of ``team-b`` on 8091 pinned to node-1 stays
  ``<pending>`` with a ``PortInUse`` Event naming the Pod, and node-1:8091 keeps reaching
  the Pod.
- **a host-network DaemonSet behind its own Service (a)**: ``edge`` on the nodes labelled
  ``edge=true`` (node-1, node-2), serving 8095 on the host network; its Service (8095 →
  8095), ``Local`` and then ``Cluster`` (node selector ``edge=true``), gets exactly those
  nodes' addresses and every one answers (``Local``: from its own node's Pod). Its own
  backends are no rival for the port.
- **a port added to a published Service (c)**: X (team-a, 8093) and Y (team-b, 8094)
  published on node-1; X gets 8094 too: Y keeps node-1 (it publishes 8094 there; X only
  8093), node-1:8094 keeps answering from Y's Pods, X loses node-1.
- **a Service that publishes nothing claims nothing (d)**: A (8087) published; B (8087
  and 8088, after A) ``<pending>``; C (8088, after B) published.

Each test deletes the Services and Pods it made. A failure message says each Service's
status and Events, who answered the ports concerned, and the controller's log lines about
those Services.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import PROXY_MODES
from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    NAMESPACE,
    Answer,
    all_from,
    apply,
    backend_container,
    backend_pods,
    by_whom,
    external_ip_column,
    figure,
    helm_install,
    ingress_of,
    kubectl,
    kubectl_json,
    our_service,
    pod_ready,
    port_in_use,
    requests_to,
    rolled_out,
    service_manifest,
    service_story,
    team_backend,
)
from tests.cluster.netns import NETNS_DIR, Node
from tests.support.waiting import wait_for

# Each scenario rolls out Pods and waits for the reconciler and for kube-proxy on a loaded
# 2-core machine.
PORTS_TIMEOUT = 300
NODE_1 = "kubernetes.io/hostname=node-1"
TEAMS = ("team-a", "team-b")
HOST_PORT = 8091
EDGE, EDGE_PORT, EDGE_NODES = "edge", 8095, "edge=true"
"""Scenario a: namespace and DaemonSet, its port, the node label it runs on."""


@pytest.fixture(scope="module", params=PROXY_MODES)
def proxy_mode(request: pytest.FixtureRequest) -> str:
    """Every test of this module in each kube-proxy mode (one cluster per mode)."""
    return str(request.param)


@pytest.fixture(scope="module")
def release(cluster: Cluster, helm: Path) -> Cluster:
    """node-ipam-lb installed by Helm as deploy/README.md says, rolled out."""
    started = helm_install(helm, cluster)
    rolled_out(cluster, NAMESPACE, "node-ipam-lb")
    figure(
        f"{cluster.proxy_mode}: helm install -> rollout complete (s)",
        round(time.monotonic() - started, 1),
    )
    return cluster


@pytest.fixture(scope="module")
def teams(release: Cluster) -> dict[str, set[str]]:
    """Namespaces ``team-a`` and ``team-b``, each with the backend (2 Pods answering
    ``version=<team>``); the backend Pods of each."""
    for team in TEAMS:
        kubectl(release, "create", "namespace", team)
        apply(release, team_backend(team, team))
    for team in TEAMS:
        rolled_out(release, team, "backend")
    return {team: backend_pods(release, team) for team in TEAMS}


def node(cluster: Cluster, name: str) -> Node:
    return next(n for n in cluster.nodes if n.name == name)


def addresses(*nodes: Node) -> list[str]:
    """The InternalIPs (both families) of ``nodes``, sorted: what a Service of ours
    publishes on them (none of them has ExternalIPs)."""
    return sorted(ip for n in nodes for ip in (n.ipv4, n.ipv6))


def delete(cluster: Cluster, *keys: str, kind: str = "service") -> None:
    """Delete each ``namespace/name`` of ``kind`` (absent ones too) and wait for it."""
    for key in keys:
        namespace, name = key.split("/", 1)
        kubectl(cluster, "-n", namespace, "delete", kind, name, "--ignore-not-found")


def controller_lines(cluster: Cluster, *keys: str) -> list[str]:
    """node-ipam-lb's log lines (both Pods) that name one of the Services ``keys``."""
    text = kubectl(
        cluster, "-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/name=node-ipam-lb",
        "--tail=2000", "--prefix", check=False,
    )  # fmt: skip
    return [line for line in text.splitlines() if any(key in line for key in keys)][-12:]


def explainer(
    cluster: Cluster, keys: tuple[str, ...], targets: list[tuple[str, int]]
) -> Callable[[], str]:
    """What a failure message says (``wait_for(explain=)``): each Service's status and
    Events, who answered 4 requests to each target, and the controller's lines about the
    Services."""

    def explain() -> str:
        served = by_whom(requests_to(cluster, targets, 4)) if targets else {}
        log = "\n".join(controller_lines(cluster, *keys))
        return f"{service_story(cluster, *keys)}\nanswered: {served}\ncontroller:\n{log}"

    return explain


def published(
    cluster: Cluster, key: str, expected: list[str], explain: Callable[[], str]
) -> list[str]:
    """Wait (60 s) until Service ``key`` publishes exactly ``expected``; returns it."""
    namespace, name = key.split("/", 1)
    return list(
        wait_for(
            f"{key} to publish {expected}",
            lambda: (found := ingress_of(cluster, namespace, name)) == expected and found,
            timeout=60,
            explain=explain,
            interval=0.5,
        )
    )


def pinned(namespace: str, name: str, *ports: int, app: str = "backend") -> dict[str, Any]:
    """A Cluster Service of ours on node-1 only (node selector annotation) with ``ports``
    (each to the backend's 8080)."""
    manifest = our_service(namespace, name, ports[0], selector=NODE_1, app=app)
    for number, port in enumerate(ports[1:], start=2):
        manifest["spec"]["ports"].append({"port": port, "targetPort": 8080, "name": f"p{number}"})
    return manifest


# -- the mode ---------------------------------------------------------------------------


def netns_run(member: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={NETNS_DIR / member.netns}", "--", *args],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_kube_proxy_runs_in_the_mode_the_cluster_states(release: Cluster) -> None:
    """Every node's kube-proxy programs the mode's rules (and not the other's); the
    ConfigMap ``kube-system/kube-proxy`` states the mode, and node-ipam-lb read it there
    (its INFO line ``kube-proxy mode``, docs/design.md §4.10)."""
    mode = release.proxy_mode
    for member in release.nodes:
        nft = netns_run(member, "nft", "list", "table", "ip", "kube-proxy")
        chains = netns_run(member, "iptables-save", "-t", "nat").stdout
        rules = {"nftables": nft.returncode == 0, "iptables": ":KUBE-SERVICES" in chains}
        assert rules == {m: m == mode for m in PROXY_MODES}, (member.name, rules)
    config = kubectl_json(release, "-n", "kube-system", "get", "configmap", "kube-proxy")
    assert f"mode: {mode}\n" in config["data"]["config.conf"], config["data"]

    def mode_lines() -> list[dict[str, Any]]:
        """node-ipam-lb's ``kube-proxy mode`` lines (JSON), both Pods."""
        text = kubectl(
            release, "-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/name=node-ipam-lb",
            "--tail=-1",
        )  # fmt: skip
        lines = [json.loads(line) for line in text.splitlines() if "kube-proxy mode" in line]
        return [line for line in lines if line.get("mode") == mode]

    seen = wait_for(
        f"node-ipam-lb to log kube-proxy mode {mode}", mode_lines, timeout=30, interval=0.5
    )
    figure(f"{mode}: node-ipam-lb's kube-proxy mode lines", seen)


# -- b: a hostPort Pod ------------------------------------------------------------------


def host_port_pod(namespace: str, name: str, host_port: int, node_name: str) -> dict[str, Any]:
    """The backend as a bare Pod on ``node_name`` (``nodeName``) whose 8080 is also
    ``host_port`` of its node (``hostPort``: served by the CNI portmap plugin)."""
    container = backend_container("host-port")
    container["ports"] = [{"containerPort": 8080, "hostPort": host_port, "name": "http"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "host-port"}},
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_a_host_port_pod_keeps_its_node_out_of_another_teams_service(
    release: Cluster, teams: dict[str, set[str]]
) -> None:
    mode = release.proxy_mode
    node_1 = node(release, "node-1")
    targets = [(ip, HOST_PORT) for ip in (node_1.ipv4, node_1.ipv6)]
    holder, service = "team-a/host-port-holder", "team-b/on-host-port"
    explain = explainer(release, (service,), targets)
    try:
        apply(release, host_port_pod("team-a", "host-port-holder", HOST_PORT, "node-1"))
        pod_ready(release, "team-a", "host-port-holder")
        wait_for(
            f"node-1:{HOST_PORT} (both families) to answer from the hostPort Pod (portmap)",
            lambda: all_from(requests_to(release, targets, 1), {"host-port-holder"}),
            timeout=30,
            interval=0.5,
        )
        apply(release, pinned("team-b", "on-host-port", HOST_PORT))
        created = time.monotonic()
        event = wait_for(
            "on-host-port's PortInUse Warning Event",
            lambda: port_in_use(release, "team-b", "on-host-port"),
            timeout=60,
            explain=explain,
            interval=0.5,
        )
        figure(
            f"{mode}: hostPort: created -> PortInUse Event (s)",
            round(time.monotonic() - created, 1),
        )
        figure(f"{mode}: hostPort: PortInUse Event", event)
        assert holder in event, f"{event}\n{explain()}"
        assert ingress_of(release, "team-b", "on-host-port") == [], explain()
        assert external_ip_column(release, "team-b", "on-host-port") == "<pending>"
        served = requests_to(release, targets, 8)
        figure(
            f"{mode}: node-1:{HOST_PORT} with on-host-port <pending>: answered by", by_whom(served)
        )
        assert all_from(served, {"host-port-holder"}), explain()
        assert ingress_of(release, "team-b", "on-host-port") == [], explain()
    finally:
        delete(release, service)
        delete(release, holder, kind="pod")


# -- a: a host-network DaemonSet behind its own Service ---------------------------------


def edge_daemon_set() -> dict[str, Any]:
    """The backend on the host network of every node labelled ``edge=true``, serving (and
    declaring) ``EDGE_PORT`` there."""
    container = backend_container("edge", port=EDGE_PORT)
    key, value = EDGE_NODES.split("=")
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": EDGE, "namespace": EDGE},
        "spec": {
            "selector": {"matchLabels": {"app": EDGE}},
            "template": {
                "metadata": {"labels": {"app": EDGE}},
                "spec": {
                    "hostNetwork": True,
                    "nodeSelector": {key: value},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


@pytest.fixture(scope="module")
def edge(release: Cluster) -> Iterator[dict[str, str]]:
    """node-1 and node-2 labelled ``edge=true``, the DaemonSet ``edge/edge`` rolled out on
    them; its Pods (name → node). The labels are removed afterwards."""
    labelled = ("node-1", "node-2")
    kubectl(release, "label", "node", *labelled, EDGE_NODES)
    try:
        kubectl(release, "create", "namespace", EDGE)
        apply(release, edge_daemon_set())
        rolled_out(release, EDGE, EDGE, kind="daemonset")
        pods = kubectl_json(release, "-n", EDGE, "get", "pods", "-l", f"app={EDGE}")["items"]
        found = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert sorted(found.values()) == sorted(labelled), found
        yield found
    finally:
        kubectl(release, "label", "node", *labelled, f"{EDGE_NODES.split('=')[0]}-")


@pytest.mark.timeout(PORTS_TIMEOUT)
@pytest.mark.parametrize("policy", ["Local", "Cluster"])
def test_a_host_network_daemon_set_is_published_on_its_own_nodes(
    release: Cluster, edge: dict[str, str], policy: str
) -> None:
    """Its Service (``Local``: by its endpoints; ``Cluster``: node selector ``edge=true``)
    gets node-1's and node-2's addresses, and each answers on 8095 from the DaemonSet's
    Pods (``Local``: the Pod of the address's own node). A node's own Pod listens on
    8095 of its addresses whatever kube-proxy does, so ``Cluster`` must also show
    kube-proxy's rule in force: requests to each address answered by the other node's Pod
    too."""
    mode = release.proxy_mode
    name = f"edge-{policy.lower()}"
    manifest = service_manifest(
        name, EDGE_PORT, policy, EDGE_NODES if policy == "Cluster" else None
    )
    manifest["metadata"]["namespace"] = EDGE
    manifest["spec"]["selector"] = {"app": EDGE}
    manifest["spec"]["ports"][0]["targetPort"] = EDGE_PORT
    nodes = [node(release, n) for n in sorted(set(edge.values()))]
    expected = addresses(*nodes)
    targets = [(ip, EDGE_PORT) for ip in expected]
    explain = explainer(release, (f"{EDGE}/{name}",), targets)
    try:
        apply(release, manifest)
        created = time.monotonic()
        published(release, f"{EDGE}/{name}", expected, explain)
        figure(f"{mode}: {name}: created -> published (s)", round(time.monotonic() - created, 1))
        wait_for(
            f"every address of {name} to answer on {EDGE_PORT}",
            lambda: all(isinstance(a, dict) for _, a in requests_to(release, targets, 1)),
            timeout=30,
            explain=explain,
            interval=0.5,
        )
        owner = {ip: n.name for n in nodes for ip in (n.ipv4, n.ipv6)}
        served: list[tuple[str, Answer]] = []

        def spread() -> bool:
            """Every address answered from both nodes (``Cluster``: kube-proxy's rule)."""
            served.extend(requests_to(release, targets, 2))
            seen = {(ip, a["node"]) for ip, a in served if isinstance(a, dict)}
            return all((ip, n.name) in seen for ip in expected for n in nodes)

        if policy == "Cluster":
            wait_for(
                f"each address of {name} answered from both nodes' Pods",
                spread,
                timeout=30,
                explain=lambda: f"answered: {by_whom(served)}\n{explain()}",
                interval=0.5,
            )
        served += requests_to(release, targets, 4)
        figure(f"{mode}: {name}'s addresses answered by", by_whom(served))
        assert all_from(served, set(edge)), explain()
        if policy == "Local":
            wrong = [(ip, a) for ip, a in served if isinstance(a, dict) and a["node"] != owner[ip]]
            assert not wrong, f"Local answered from another node: {wrong}"
        assert ingress_of(release, EDGE, name) == expected, explain()
    finally:
        delete(release, f"{EDGE}/{name}")


# -- c: a port added to a published Service ---------------------------------------------


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_a_port_added_to_a_published_service_does_not_take_it_from_its_owner(
    release: Cluster, teams: dict[str, set[str]]
) -> None:
    mode = release.proxy_mode
    node_1 = node(release, "node-1")
    expected = addresses(node_1)
    x, y = "team-a/x", "team-b/y"
    targets = [(ip, 8094) for ip in expected]
    explain = explainer(release, (x, y), targets)
    try:
        apply(release, pinned("team-a", "x", 8093))
        published(release, x, expected, explain)
        apply(release, pinned("team-b", "y", 8094))
        published(release, y, expected, explain)
        wait_for(
            "node-1:8094 to answer from Y's Pods",
            lambda: all_from(requests_to(release, targets, 1), teams["team-b"]),
            timeout=30,
            explain=explain,
            interval=0.5,
        )
        kubectl(
            release, "-n", "team-a", "patch", "service", "x", "--type=json", "-p",
            json.dumps([{"op": "add", "path": "/spec/ports/-",
                         "value": {"name": "p2", "port": 8094, "targetPort": 8080}}]),
        )  # fmt: skip
        patched = time.monotonic()
        wait_for(
            "X to lose node-1 (it cannot publish 8094 there)",
            lambda: ingress_of(release, "team-a", "x") == [],
            timeout=60,
            explain=explain,
            interval=0.5,
        )
        figure(f"{mode}: X patched -> X lost node-1 (s)", round(time.monotonic() - patched, 1))
        event = wait_for(
            "X's PortInUse Event",
            lambda: port_in_use(release, "team-a", "x"),
            timeout=30,
            interval=0.5,
        )
        figure(f"{mode}: X's PortInUse Event", event)
        assert y in event, f"{event}\n{explain()}"
        assert ingress_of(release, "team-b", "y") == expected, explain()
        served = requests_to(release, targets, 12)
        figure(f"{mode}: node-1:8094 after X got 8094: answered by", by_whom(served))
        assert all_from(served, teams["team-b"]), explain()
        assert ingress_of(release, "team-b", "y") == expected, explain()
    finally:
        delete(release, x, y)


# -- d: a Service that publishes nothing claims nothing ---------------------------------


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_a_service_that_publishes_nothing_claims_none_of_its_ports(
    release: Cluster, teams: dict[str, set[str]]
) -> None:
    """A, B, C in one namespace, named in the order they are created (creationTimestamp
    has whole seconds; a tie goes by name, the same way)."""
    mode = release.proxy_mode
    node_1 = node(release, "node-1")
    expected = addresses(node_1)
    a, b, c = "team-a/a", "team-a/b", "team-a/c"
    explain = explainer(release, (a, b, c), [(ip, 8088) for ip in expected])
    try:
        apply(release, pinned("team-a", "a", 8087))
        published(release, a, expected, explain)
        apply(release, pinned("team-a", "b", 8087, 8088))
        event = wait_for(
            "B's PortInUse Warning Event",
            lambda: port_in_use(release, "team-a", "b"),
            timeout=60,
            explain=explain,
            interval=0.5,
        )
        figure(f"{mode}: B's PortInUse Event", event)
        assert a in event, f"{event}\n{explain()}"
        assert ingress_of(release, "team-a", "b") == [], explain()
        apply(release, pinned("team-a", "c", 8088))
        created = time.monotonic()
        published(release, c, expected, explain)
        figure(f"{mode}: C created -> published (s)", round(time.monotonic() - created, 1))
        wait_for(
            "node-1:8088 to answer from team-a's Pods",
            lambda: all_from(
                requests_to(release, [(ip, 8088) for ip in expected], 1), teams["team-a"]
            ),
            timeout=30,
            explain=explain,
            interval=0.5,
        )
        assert ingress_of(release, "team-a", "b") == [], explain()
        assert ingress_of(release, "team-a", "a") == expected, explain()
    finally:
        delete(release, a, b, c)
