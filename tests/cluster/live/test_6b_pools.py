"""Two tenants with NodeAddressPools, proven with packets (issue 37; docs/design.md §4.13;
deploy/README.md "Multi-tenant clusters").

The administrator's half of ``examples/multi-tenant/`` as written (``pools.yaml``: the
namespaces team-a and team-b, the pools ``team-a-edge`` and ``team-b-high-ports``), the
edge nodes labelled as its comment says (node-1 and node-2 ``role=edge``), and each
team's Service with the example's names and ports (``services.yaml``) in front of a
backend of its own. Only node-3 has ExternalIPs here, so team-b's pool as written gets
node-3's ExternalIPs alone (Cilium's global ExternalIP preference, §4.4, holds inside a
pool); ``addressTypes: [InternalIP]`` on that pool then gives it every node.

The first pool turns the rule on for every namespace: while the pools exist the release's
own Services (namespace ``traffic``, which no pool names) are ``NoPool``. The last test
removes the tenants (namespaces, then pools, then labels) and sees them get their
addresses back; the module fixture removes whatever a failed test left.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    Answer,
    all_from,
    apply,
    backend_pods,
    by_whom,
    external_ip_column,
    figure,
    ingress_of,
    kubectl,
    our_service,
    requests_to,
    rolled_out,
    service_story,
    team_backend,
    warning_event,
)
from tests.cluster.images import ROOT
from tests.cluster.netns import Node
from tests.cluster.release import (
    SERVICES,
    admitted_at_apply,
    denied_at_apply,
    every_address_answers,
    ingress_ips,
    validating_webhook_removed,
)
from tests.cluster.statuswatch import IngressWatch
from tests.support.waiting import wait_for

# Rolls out two backends, waits for the reconciler and kube-proxy, deletes two
# namespaces (~20 s each) on a loaded 2-core machine; the first test also brings up the
# package's cluster and release when this module runs alone.
POOLS_TIMEOUT = 480
EXAMPLE = ROOT / "examples" / "multi-tenant"
EDGE_LABEL = "role=edge"
EDGE_NODES = ("node-1", "node-2")
TEAM_A, TEAM_B = "team-a", "team-b"
TEAM_A_POOL, TEAM_B_POOL = "team-a-edge", "team-b-high-ports"
OUTSIDE_PORTS = (8080, 8443)
"""Ports team-a's pool does not grant: team-b's ``api`` port (a team-a Service there would
take team-b's traffic), and one no Service holds (8443: only the pool keeps it off)."""
OUTSIDE_PORT = OUTSIDE_PORTS[0]


def example(name: str) -> list[dict[str, Any]]:
    """The objects of ``examples/multi-tenant/<name>``, in file order."""
    return [doc for doc in yaml.safe_load_all((EXAMPLE / name).read_text()) if doc]


def example_ports(namespace: str) -> tuple[str, list[int]]:
    """The name and ports of the example's Service in ``namespace`` (``services.yaml``:
    team-a's ``web``, team-b's ``api``)."""
    (found,) = [s for s in example("services.yaml") if s["metadata"]["namespace"] == namespace]
    return found["metadata"]["name"], [p["port"] for p in found["spec"]["ports"]]


def tenant_service(namespace: str, name: str, ports: list[int]) -> dict[str, Any]:
    """A dual-stack Service of our class in front of ``namespace``'s backend, every port
    to the backend's 8080 (the example's targetPorts name ports our backend lacks)."""
    manifest = our_service(namespace, name, ports[0])
    manifest["spec"]["ports"] = [
        {"name": f"p{port}", "port": port, "targetPort": 8080} for port in ports
    ]
    return manifest


def pending_with(cluster: Cluster, namespace: str, name: str, reason: str) -> str | None:
    """The message of the Service's latest Warning Event ``reason`` once it has one and
    its ``status.loadBalancer.ingress`` is empty; else ``None``."""
    if ingress_of(cluster, namespace, name):
        return None
    return warning_event(cluster, namespace, name, reason)


def published_on(cluster: Cluster, namespace: str, name: str, ips: list[str]) -> float:
    """Wait (60 s) until the Service's ``status.loadBalancer.ingress`` lists exactly
    ``ips`` (any order); returns the seconds waited."""
    started = time.monotonic()
    wait_for(
        f"{namespace}/{name} on {ips}",
        lambda: sorted(ingress_of(cluster, namespace, name)) == sorted(ips),
        timeout=60,
        interval=0.5,
        explain=lambda: story(cluster),
    )
    return round(time.monotonic() - started, 1)


def served_by(
    cluster: Cluster, targets: list[tuple[str, int]], pods: set[str]
) -> dict[str, dict[str, int]]:
    """Wait (30 s: kube-proxy's rules) until two requests to each target
    (:func:`requests_to`) are all answered by ``pods``; returns who answered
    (:func:`by_whom`)."""

    def answered() -> list[tuple[str, Answer]] | None:
        results = requests_to(cluster, targets, 2)
        return results if all_from(results, pods) else None

    served = wait_for(f"{sorted(pods)} to answer {targets}", answered, timeout=30, interval=0.5)
    return by_whom(served or [])


def node(cluster: Cluster, name: str) -> Node:
    return next(n for n in cluster.nodes if n.name == name)


def internal_ips(*nodes: Node) -> list[str]:
    return sorted(ip for n in nodes for ip in (n.ipv4, n.ipv6))


def every_ip(*nodes: Node) -> list[str]:
    return sorted(
        ip for n in nodes for ip in (n.ipv4, n.ipv6, n.external_ipv4, n.external_ipv6) if ip
    )


def no_answer_from(results: list[tuple[str, Answer]], pods: set[str]) -> bool:
    """Whether none of ``results`` (:func:`requests_to`) was answered by one of ``pods``."""
    return not any(isinstance(a, dict) and a.get("pod") in pods for _, a in results)


def remove_tenants(cluster: Cluster) -> float | None:
    """Delete the tenants' namespaces (and wait), then the two pools, then the edge label;
    each step tolerates its objects being gone. Returns the ``time.monotonic()`` at which
    the pools were deleted, ``None`` when there were none."""
    kubectl(
        cluster, "delete", "namespace", TEAM_A, TEAM_B, "--ignore-not-found", "--timeout=150s",
        timeout=160,
    )  # fmt: skip
    deleted = kubectl(
        cluster, "delete", "nodeaddresspools", TEAM_A_POOL, TEAM_B_POOL, "--ignore-not-found"
    )
    at = time.monotonic() if deleted.strip() else None
    kubectl(cluster, "label", "node", *EDGE_NODES, f"{EDGE_LABEL.split('=')[0]}-")
    return at


@dataclass
class Tenants:
    """What the fixture set up: the release's Services' addresses before the pools, each
    team's backend Pods, and when the pools were applied (``time.monotonic()``)."""

    cluster: Cluster
    before: dict[str, list[str]]
    pods: dict[str, set[str]]
    pools_applied: float


@pytest.fixture(scope="module")
def tenants(release: Cluster) -> Iterator[Tenants]:
    """node-1 and node-2 labelled ``role=edge``, ``examples/multi-tenant/pools.yaml``
    applied, a backend in each team's namespace rolled out and each team's Service
    created; all removed afterwards (:func:`remove_tenants`)."""
    before = {name: sorted(ingress_ips(release, name)) for name in SERVICES}
    assert all(before.values()), f"the release's Services have no address to start: {before}"
    try:
        kubectl(release, "label", "node", *EDGE_NODES, EDGE_LABEL)
        kubectl(release, "apply", "-f", str(EXAMPLE / "pools.yaml"))
        applied_at = time.monotonic()
        apply(release, team_backend(TEAM_A, TEAM_A), team_backend(TEAM_B, TEAM_B))
        rolled_out(release, TEAM_A, "backend")
        rolled_out(release, TEAM_B, "backend")
        pods = {team: backend_pods(release, team) for team in (TEAM_A, TEAM_B)}
        apply(
            release,
            *(tenant_service(team, *example_ports(team)) for team in (TEAM_A, TEAM_B)),
        )
        yield Tenants(release, before, pods, applied_at)
    finally:
        remove_tenants(release)


def story(cluster: Cluster) -> str:
    keys = [f"{TEAM_A}/web", f"{TEAM_B}/api", *(f"{APP}/{name}" for name in SERVICES)]
    return service_story(cluster, *keys)


@pytest.mark.timeout(POOLS_TIMEOUT)
def test_each_tenant_is_published_on_its_pools_nodes_and_answers(tenants: Tenants) -> None:
    """team-a's ``web`` (80, 443) on the edge nodes only, answered there by team-a's Pods
    and by nobody of team-a on node-3; team-b's ``api`` (8080) on node-3's ExternalIPs
    with the example's pool, on every node's InternalIPs once the pool says
    ``addressTypes: [InternalIP]``, answered by team-b's Pods; the release's Services,
    which no pool names, ``<pending>`` with a ``NoPool`` Warning."""
    cluster = tenants.cluster
    edge = [node(cluster, name) for name in EDGE_NODES]
    node_3 = node(cluster, "node-3")
    assert not any(n.external_ipv4 or n.external_ipv6 for n in edge), (
        "edge nodes have no ExternalIP"
    )
    _, web_ports = example_ports(TEAM_A)
    took = published_on(cluster, TEAM_A, "web", internal_ips(*edge))
    figure("team-a/web created -> published on the edge nodes (s)", took)
    edge_targets = [(ip, port) for ip in internal_ips(*edge) for port in web_ports]
    served = served_by(cluster, edge_targets, tenants.pods[TEAM_A])
    figure("team-a/web: edge addresses answered by", served)
    off_edge = requests_to(cluster, [(ip, 80) for ip in every_ip(node_3)], 2)
    figure("team-a/web: node-3's addresses on port 80 answered by", by_whom(off_edge))
    assert no_answer_from(off_edge, tenants.pods[TEAM_A]), by_whom(off_edge)

    _, (api_port,) = example_ports(TEAM_B)
    external = [ip for ip in (node_3.external_ipv4, node_3.external_ipv6) if ip]
    published_on(cluster, TEAM_B, "api", external)
    patch = {"spec": {"addressTypes": ["InternalIP"]}}
    kubectl(
        cluster, "patch", "nodeaddresspool", TEAM_B_POOL, "--type=merge", "-p", json.dumps(patch)
    )
    everywhere = internal_ips(*cluster.nodes)
    took = published_on(cluster, TEAM_B, "api", everywhere)
    figure("team-b pool addressTypes InternalIP -> api on every node (s)", took)
    served = served_by(cluster, [(ip, api_port) for ip in everywhere], tenants.pods[TEAM_B])
    figure("team-b/api: every node's InternalIPs answered by", served)

    for name in SERVICES:
        event = wait_for(
            f"{APP}/{name} <pending> with a NoPool Warning Event",
            functools.partial(pending_with, cluster, APP, name, "NoPool"),
            timeout=60,
            interval=0.5,
            explain=lambda: story(cluster),
        )
        assert event and f"namespace {APP}" in event, event
    figure(
        "pools applied -> the release's Services NoPool and <pending> (s)",
        round(time.monotonic() - tenants.pools_applied, 1),
    )
    figure("traffic/web's NoPool Event", warning_event(cluster, APP, "web", "NoPool"))


@pytest.mark.timeout(POOLS_TIMEOUT)
def test_the_webhook_denies_a_port_outside_the_pool_naming_it(tenants: Tenants) -> None:
    """With the validating webhook in the path, team-a's new Service on 8080 and team-a's
    ``web`` changed to add 8080 are denied at ``kubectl apply``, each naming the port's
    field and the pool."""
    cluster = tenants.cluster
    web, ports = example_ports(TEAM_A)
    outside = tenant_service(TEAM_A, "web-8080", [OUTSIDE_PORT])
    message, admitted = denied_at_apply(cluster, outside)
    figure("team-a on 8080 (webhook): copies admitted before the denial", admitted)
    figure("team-a on 8080 (webhook): kubectl apply says", message.strip())
    assert "spec.ports[0].port: Forbidden" in message, message
    assert f"NodeAddressPool {TEAM_A_POOL}" in message and f"{OUTSIDE_PORT}/TCP" in message, message
    widened = tenant_service(TEAM_A, web, [*ports, OUTSIDE_PORT])
    message, _ = denied_at_apply(cluster, widened, dry_run=True)
    figure("team-a/web + 8080 (webhook, UPDATE): kubectl apply says", message.strip())
    assert f"spec.ports[{len(ports)}].port: Forbidden" in message, message
    assert f"NodeAddressPool {TEAM_A_POOL}" in message, message
    assert sorted(ingress_of(cluster, TEAM_A, "web")) == internal_ips(
        *(node(cluster, n) for n in EDGE_NODES)
    ), story(cluster)


@pytest.mark.timeout(POOLS_TIMEOUT)
def test_without_the_webhook_the_controller_refuses_it_and_captures_nothing(
    tenants: Tenants,
) -> None:
    """The ValidatingWebhookConfiguration deleted: team-a's Services on 8080 (team-b's
    ``api`` port) and on 8443 (a port nobody holds, so only the pool keeps it off the
    nodes) are admitted but never published (``PortNotInPool`` naming the pool and the
    port, ``<pending>``, and a watch from before their creation sees no status with an
    address); every node address on 8080 is answered by team-b's Pods or by
    nobody, on 8443 by nobody, never by team-a's. The webhook is put back and denies
    again."""
    cluster = tenants.cluster
    api = sorted(ingress_of(cluster, TEAM_B, "api"))
    assert api, story(cluster)
    outside = {port: tenant_service(TEAM_A, f"web-{port}", [port]) for port in OUTSIDE_PORTS}
    targets = {port: [(ip, port) for ip in every_ip(*cluster.nodes)] for port in OUTSIDE_PORTS}
    keys = [f"{TEAM_A}/web-{port}" for port in OUTSIDE_PORTS]
    with validating_webhook_removed(cluster) as name, contextlib.ExitStack() as stack:
        figure("validating webhook removed", name)
        watches = [
            stack.enter_context(IngressWatch(cluster, TEAM_A, m["metadata"]["name"]))
            for m in outside.values()
        ]
        for manifest in outside.values():
            admitted_at_apply(cluster, manifest)
        created = time.monotonic()
        for port in OUTSIDE_PORTS:
            event = wait_for(
                f"team-a/web-{port} <pending> with a PortNotInPool Warning Event",
                functools.partial(pending_with, cluster, TEAM_A, f"web-{port}", "PortNotInPool"),
                timeout=60,
                interval=0.5,
                explain=lambda: service_story(cluster, *keys),
            )
            figure(
                f"team-a on {port} (no webhook): created -> PortNotInPool Event (s)",
                round(time.monotonic() - created, 1),
            )
            figure(f"team-a on {port} (no webhook): PortNotInPool Event", event)
            assert event and f"NodeAddressPool {TEAM_A_POOL}" in event, event
            assert f"{port}/TCP" in event, event
            assert external_ip_column(cluster, TEAM_A, f"web-{port}") == "<pending>"
        served = {port: requests_to(cluster, targets[port], 2) for port in OUTSIDE_PORTS}
        for port, results in served.items():
            figure(f"{port} with team-a's Service (no webhook): answered by", by_whom(results))
            assert no_answer_from(results, tenants.pods[TEAM_A]), by_whom(results)
        on_api = [(ip, answer) for ip, answer in served[OUTSIDE_PORT] if ip in api]
        assert all_from(on_api, tenants.pods[TEAM_B]), by_whom(on_api)
        for watch in watches:
            seen = [o.ips for o in watch.observations]
            figure(f"{watch.name} (no webhook): statuses seen by a watch", seen)
            assert seen and not any(seen), f"{watch.name} published outside its pool: {seen}"
            kubectl(cluster, "-n", TEAM_A, "delete", "service", watch.name)
    message, admitted = denied_at_apply(cluster, outside[OUTSIDE_PORTS[0]])
    figure("webhook restored: team-a 8080 copies admitted before the first denial", admitted)
    assert f"NodeAddressPool {TEAM_A_POOL}" in message, message


@pytest.mark.timeout(POOLS_TIMEOUT)
def test_with_no_pool_left_the_other_services_get_their_addresses_back(
    tenants: Tenants,
) -> None:
    """The tenants removed (namespaces, pools, the edge label): no NodeAddressPool is left,
    and the release's Services get back the addresses they had before the pools (today's
    behaviour), each answering."""
    cluster = tenants.cluster
    deleted = remove_tenants(cluster)
    assert deleted is not None, "the pools were gone before the test deleted them"
    assert kubectl(cluster, "get", "nodeaddresspools", "-o", "name").strip() == ""
    wait_for(
        "the release's Services to get their addresses back",
        lambda: {name: sorted(ingress_ips(cluster, name)) for name in SERVICES} == tenants.before,
        timeout=60,
        interval=0.5,
        explain=lambda: f"before the pools: {tenants.before}\n{story(cluster)}",
    )
    figure(
        "pools deleted -> the release's Services' addresses back (s)",
        round(time.monotonic() - deleted, 1),
    )
    wait_for(
        "every address of the release's Services to answer",
        lambda: every_address_answers(cluster),
        timeout=60,
        interval=0.5,
    )
    figure("pools deleted -> every address answers (s)", round(time.monotonic() - deleted, 1))
