"""Cluster DNS on the real cluster (README.md here): CoreDNS in the control plane's
namespace behind the ``kube-dns`` Service, and the DNS name of a Service's published
addresses, ``<service>.<namespace>.lb.example.org`` (CoreDNS's ``k8s_external``), as a
user of node-ipam-lb reaches it.

This module's cluster gets what live/'s gets (the fixtures ``backend`` and ``release``,
conftest.py: the backend Deployment, the three Services, ``helm install``).
Measured figures are printed (``-s``); the bound asserted is the one DNS gives: a client
that honours the TTL stops using an address at most the cache's hold plus the record's
TTL after the Service's status dropped it.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import APP, figure, kubectl, kubectl_json
from tests.cluster.netns import Node
from tests.cluster.release import (
    INTERNAL_NODES,
    SERVICES,
    ingress_ips,
    node_by_address,
    select_nodes,
)
from tests.cluster.traffic import (
    DnsProber,
    ResolveError,
    http_get,
    in_netns,
    parse_answer,
    resolve,
)
from tests.support.waiting import wait_for

KUBERNETES_SERVICE_IP = "10.96.0.1"


def lookup(
    cluster: Cluster, name: str, *, netns: str | None = None, server: str = ""
) -> tuple[list[str], int]:
    """:func:`resolve` ``name`` from ``netns`` (the client's) at ``server`` (CoreDNS's
    address, ``cluster.dns_server``)."""
    address, port = cluster.dns_server
    return in_netns(
        netns or cluster.client_netns, lambda: resolve(name, server=server or address, port=port)
    )


def pod_get(cluster: Cluster, pod: str, path: str) -> str:
    """``GET <path>`` on a backend Pod's port 8080 through the API server's Pod proxy."""
    return kubectl(cluster, "get", "--raw", f"/api/v1/namespaces/{APP}/pods/{pod}:8080/proxy{path}")


# -- the DNS service --------------------------------------------------------------------


def test_coredns_serves_the_cluster_domain_behind_the_kube_dns_service(cluster: Cluster) -> None:
    """The ``kube-dns`` Service (``10.96.0.10``, no selector) and its EndpointSlice at
    CoreDNS's address; the cluster domain answered from the client namespace (CoreDNS's
    address) and from a node's namespace through the Service (kube-proxy's rules); a
    name outside its two zones refused (no ``forward``); nothing refused by RBAC."""
    assert cluster.dns_server == (f"{cluster.v4_prefix}.2", 53)
    svc = kubectl_json(cluster, "-n", "kube-system", "get", "service", "kube-dns")
    assert svc["spec"]["clusterIP"] == cluster.dns_service_ip == "10.96.0.10"
    assert "selector" not in svc["spec"]
    assert {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}
    slices = kubectl_json(
        cluster, "-n", "kube-system", "get", "endpointslices",
        "-l", "kubernetes.io/service-name=kube-dns",
    )["items"]  # fmt: skip
    assert [e["addresses"] for s in slices for e in s["endpoints"]] == [[cluster.dns_server[0]]]

    name = f"kubernetes.default.svc.{cluster.cluster_domain}"
    ips, ttl = lookup(cluster, name)
    assert ips == [KUBERNETES_SERVICE_IP] and 0 < ttl <= 5, (ips, ttl)
    node = cluster.nodes[0]
    through_service = lookup(cluster, name, netns=node.netns, server=cluster.dns_service_ip)
    assert through_service[0] == [KUBERNETES_SERVICE_IP], through_service
    with pytest.raises(ResolveError, match="REFUSED"):
        lookup(cluster, "example.com")
    log = (cluster.log_dir / "coredns.log").read_text()
    assert "forbidden" not in log.lower(), log[-2000:]
    figure("cluster up (s)", {k: round(v, 1) for k, v in cluster.timings.items()})
    figure("CoreDNS warnings and errors", [
        line for line in log.splitlines() if "[WARNING]" in line or "[ERROR]" in line
    ])  # fmt: skip


def test_a_pod_resolves_kubernetes_default_through_its_resolv_conf(backend: Cluster) -> None:
    """kubelet's ``clusterDNS``/``clusterDomain``: a ClusterFirst Pod's resolv.conf names
    the ``kube-dns`` Service with the search path, and the Pod's own resolver (the backend
    is a Go program: pure Go resolver, reading that file) finds short names through it."""
    cluster = backend
    pods = kubectl_json(cluster, "-n", APP, "get", "pods", "-l", "app=backend")["items"]
    pod = pods[0]["metadata"]["name"]
    conf = pod_get(cluster, pod, "/resolv.conf").splitlines()
    assert f"nameserver {cluster.dns_service_ip}" in conf, conf
    search = f"search {APP}.svc.cluster.local svc.cluster.local cluster.local"
    assert search in conf, conf
    assert "options ndots:5" in conf, conf
    assert pod_get(cluster, pod, "/resolve?name=kubernetes.default").split() == [
        KUBERNETES_SERVICE_IP
    ]
    web = kubectl_json(cluster, "-n", APP, "get", "service", "web")
    assert sorted(pod_get(cluster, pod, "/resolve?name=web").split()) == sorted(
        web["spec"]["clusterIPs"]
    )


# -- the load-balancer name -------------------------------------------------------------


def test_the_lb_name_answers_exactly_the_published_ingress_ips(release: Cluster) -> None:
    """``<service>.<namespace>.lb.example.org``: A and AAAA are the Service's
    ``status.loadBalancer.ingress`` IPs, no more, with the stated TTL (5 s; the first query
    of each name, so not a cached, shortened one), and every address answered serves."""
    answered = {}
    for name, (port, _, _) in SERVICES.items():
        published = ingress_ips(release, name)
        dns_name = release.external_name(name, APP)
        ips, ttl = lookup(release, dns_name)
        answered[dns_name] = ips
        assert sorted(ips) == sorted(published), (dns_name, ips, published)
        assert ttl == release.external_ttl == 5, (dns_name, ttl)
        for ip in ips:
            in_netns(release.client_netns, lambda ip=ip, port=port: http_get(ip, port))
    figure("lb.example.org answers", answered)
    ips, _ = lookup(release, release.external_name("no-such-service", APP))
    assert ips == []


def addresses_of(node: Node) -> set[str]:
    return {ip for ip in (node.ipv4, node.ipv6, node.external_ipv4, node.external_ipv6) if ip}


def test_the_answer_follows_an_ingress_change_within_the_ttl(release: Cluster) -> None:
    """A client following ``web-internal``'s name (resolving again when the TTL runs out,
    requests round-robin over the answer) while node-1 leaves the Service's node selector:
    measured, the seconds from the status write until the answer drops node-1 and the
    requests that failed meanwhile (sent to node-1's addresses, where kube-proxy no longer
    forwards the port); asserted, that the drop comes within the cache's hold plus the TTL
    (both 5 s) and that no request fails once the answer dropped it. Then node-1 back."""
    cluster = release
    name, (port, _, _) = "web-internal", SERVICES["web-internal"]
    dns_name = cluster.external_name(name, APP)
    node_1 = next(node for node in cluster.nodes if node.name == "node-1")
    dropped = addresses_of(node_1)
    server, dns_port = cluster.dns_server
    prober = DnsProber(cluster.client_netns, dns_name, port, server=server, dns_port=dns_port)
    with prober:
        wait_for(
            "the prober to send to every address of the answer",
            lambda: len({ip for ip, _ in prober.result.answered_by}) == 4,
            timeout=30,
            interval=0.5,
        )
        changed = time.monotonic()
        select_nodes(cluster, name, "kubernetes.io/hostname in (node-2)")
        wait_for(
            "node-1 to leave web-internal's status",
            lambda: not dropped & set(ingress_ips(cluster, name)),
            timeout=30,
            interval=0.1,
        )
        written = time.monotonic()
        resolution = wait_for(
            "the DNS answer to drop node-1",
            lambda: prober.result.first_answer_without(node_1.ipv4, changed),
            timeout=30,
            interval=0.1,
        )
        time.sleep(cluster.external_ttl + 1)  # one more TTL: nothing may fail any more
    result = prober.result
    failed_meanwhile = result.failed_between(written, resolution.at)
    failed_after = result.failed_between(resolution.at)
    figure(
        "web-internal node selector changed -> node-1 gone from the status -> from the "
        "DNS answer a client gets (s)",
        (round(written - changed, 1), round(resolution.at - changed, 1)),
    )
    figure(
        "status write -> DNS answer without node-1 (s); requests sent in all, failed in between",
        (round(resolution.at - written, 1), result.sent, len(failed_meanwhile)),
    )
    figure("resolutions (s after the change: answer size, TTL)", [
        (round(r.at - changed, 1), len(r.addresses), r.ttl)
        for r in result.resolutions if r.at >= changed - 6
    ])  # fmt: skip
    assert sorted(resolution.addresses) == sorted(ingress_ips(cluster, name))
    # A client keeps an answer for the TTL it was given, after the cache held it for at
    # most the records' TTL: the bound is the TTL plus the cache's hold, + 1 s as both
    # count whole seconds. (The cache hands out the TTL it has left: ~5 s is measured.)
    assert resolution.at - written <= 2 * cluster.external_ttl + 1, resolution
    assert failed_after == [], failed_after[:10]
    # Whatever failed was sent to node-1 (not a DNS error, not node-2).
    assert all(
        any(what.startswith(f"{ip}:{port}:") for ip in dropped) for what in failed_meanwhile
    ), failed_meanwhile[:10]
    # Back as release.py's SERVICES are: node-1 and node-2; the answer follows.
    back = time.monotonic()
    select_nodes(cluster, name, INTERNAL_NODES)
    wait_for(
        "node-1 back in the DNS answer",
        lambda: dropped <= set(lookup(cluster, dns_name)[0]),
        timeout=2 * cluster.external_ttl + 20,
        interval=0.2,
    )
    figure("node selector restored -> node-1 back in the DNS answer (s)",
           round(time.monotonic() - back, 1))  # fmt: skip
    by_address = node_by_address(cluster)
    served = {
        ip: parse_answer(in_netns(cluster.client_netns, lambda ip=ip: http_get(ip, port)))["node"]
        for ip in lookup(cluster, dns_name)[0]
    }
    assert {by_address[ip].name for ip in served} == {"node-1", "node-2"}, served
