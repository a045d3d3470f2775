"""The selection rules as cases (``CASES``: nodes, slices, a Service and the expected
ingress) that test_select_rules.py runs through ``select`` and other tests reuse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.views import EndpointSliceView, NodeView, ServiceView
from tests.core.builders import NOW, endpoint, endpoint_slice, node, service

EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


@dataclass
class Case:
    id: str
    nodes: list[NodeView]
    svc: ServiceView = field(default_factory=service)
    slices: list[EndpointSliceView] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    ips: list[str] | None = None
    codes: dict[str, str] = field(default_factory=dict)
    warning: str | None = None  # substring expected in one warning
    unhealthy: dict[str, str] = field(default_factory=dict)  # node -> why (health checks)


W1 = node("w1", internal=["10.0.0.1"])


W2 = node("w2", internal=["10.0.0.2"])


W3 = node("w3", internal=["10.0.0.3"])


CASES = [
    # §4.1 selector
    Case(
        "no annotation selects every node", [W1, W2, W3], ips=["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    ),
    Case(
        "empty annotation selects every node and warns",
        [W1, W2],
        svc=service(selector=""),
        ips=["10.0.0.1", "10.0.0.2"],
        warning="is empty: every node matches",
    ),
    Case(
        "equality selector keeps the one matching node",
        [W1, W2, W3],
        svc=service(selector="kubernetes.io/hostname=w2"),
        ips=["10.0.0.2"],
        codes={"w1": "SelectorMismatch", "w2": "Selected", "w3": "SelectorMismatch"},
    ),
    Case(
        "set-based selector keeps two nodes",
        [W1, W2, W3],
        svc=service(selector="kubernetes.io/hostname in (w1,w3)"),
        ips=["10.0.0.1", "10.0.0.3"],
    ),
    Case(
        "notin also matches nodes without the key",
        [node("a", internal=["10.0.0.1"], labels={"group": "first"}), W2],
        svc=service(selector="group notin (first)"),
        ips=["10.0.0.2"],
    ),
    Case(
        "selector matching no node leaves the Service pending",
        [W1, W2],
        svc=service(selector="pool=gpu"),
        ips=[],
        codes={"w1": "SelectorMismatch", "w2": "SelectorMismatch"},
    ),
    # §4.2 node predicates (KEP-3458)
    Case(
        "node being deleted is dropped",
        [node("gone", internal=["10.0.0.9"], deleting=True), W1],
        ips=["10.0.0.1"],
        codes={"gone": "Deleting"},
    ),
    Case(
        "control-plane node excluded by kubeadm label (empty value)",
        [node("cp", internal=["10.0.0.9"], labels={EXCLUDE: ""}), W1],
        ips=["10.0.0.1"],
        codes={"cp": "ExcludedByLabel"},
    ),
    Case(
        "exclusion label with value false still excludes (presence counts)",
        [node("cp", internal=["10.0.0.9"], labels={EXCLUDE: "false"}), W1],
        ips=["10.0.0.1"],
        codes={"cp": "ExcludedByLabel"},
    ),
    Case(
        "single control-plane node: pending by default (KEP-3458, Cilium)",
        [node("cp", internal=["10.0.0.9"], labels={EXCLUDE: ""})],
        ips=[],
        codes={"cp": "ExcludedByLabel"},
    ),
    Case(
        "single control-plane node: served with ignore-exclude-lb",
        [node("cp", internal=["10.0.0.9"], labels={EXCLUDE: ""})],
        settings={"ignore_exclude_lb": True},
        ips=["10.0.0.9"],
        codes={"cp": "Selected"},
    ),
    Case(
        "ignore-exclude-lb still drops a labelled node being deleted or autoscaled away",
        [
            node("gone", internal=["10.0.0.8"], labels={EXCLUDE: ""}, deleting=True),
            node(
                "scaling",
                internal=["10.0.0.9"],
                labels={EXCLUDE: ""},
                taints=[{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}],
            ),
            W1,
        ],
        settings={"ignore_exclude_lb": True},
        ips=["10.0.0.1"],
        codes={"gone": "Deleting", "scaling": "AutoscalerTaint"},
    ),
    Case(
        "autoscaler taint excludes by key whatever its value and effect",
        [
            node(
                "scaling",
                internal=["10.0.0.9"],
                taints=[
                    {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
                ],
            ),
            W1,
        ],
        ips=["10.0.0.1"],
        codes={"scaling": "AutoscalerTaint"},
    ),
    Case(
        "control-plane NoSchedule and unreachable taints do not exclude",
        [
            node(
                "cp",
                internal=["10.0.0.9"],
                taints=[
                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                ],
            )
        ],
        ips=["10.0.0.9"],
    ),
    Case(
        "cordoned and NotReady nodes stay advertised by default",
        [
            node("cordoned", internal=["10.0.0.8"], unschedulable=True),
            node("down", internal=["10.0.0.9"], ready="False"),
        ],
        ips=["10.0.0.8", "10.0.0.9"],
    ),
    Case(
        "every matching node excluded leaves the Service pending",
        [node("cp", internal=["10.0.0.9"], labels={EXCLUDE: ""})],
        ips=[],
    ),
    # §4.3 externalTrafficPolicy
    Case(
        "eTP=Local keeps only nodes with a ready endpoint",
        [W1, W2, W3],
        svc=service(etp="Local"),
        slices=[endpoint_slice("web", [endpoint("w1"), endpoint("w3", ready=False)])],
        ips=["10.0.0.1"],
        codes={"w2": "NoReadyEndpoint", "w3": "NoReadyEndpoint"},
    ),
    Case(
        "eTP=Local: endpoint without a ready condition counts as ready",
        [W1, W2],
        svc=service(etp="Local"),
        slices=[endpoint_slice("web", [endpoint("w2", ready=None)])],
        ips=["10.0.0.2"],
    ),
    Case(
        "eTP=Local: endpoint without nodeName is ignored",
        [W1],
        svc=service(etp="Local"),
        slices=[endpoint_slice("web", [endpoint(None)])],
        ips=[],
    ),
    Case(
        "eTP=Local: slices of other Services and other namespaces are ignored",
        [W1, W2, W3],
        svc=service(etp="Local"),
        slices=[
            endpoint_slice("web", [endpoint("w1")]),
            endpoint_slice("api", [endpoint("w2")]),
            endpoint_slice("web", [endpoint("w3")], namespace="staging"),
            endpoint_slice(None, [endpoint("w3")], name="unlabelled"),
        ],
        ips=["10.0.0.1"],
    ),
    Case(
        "eTP=Local: endpoints merged across several slices",
        [W1, W2, W3],
        svc=service(etp="Local"),
        slices=[
            endpoint_slice("web", [endpoint("w1")], name="web-1"),
            endpoint_slice("web", [endpoint("w3")], name="web-2"),
        ],
        ips=["10.0.0.1", "10.0.0.3"],
    ),
    Case(
        "eTP=Local with no EndpointSlice at all gives an empty list, not all nodes",
        [W1, W2],
        svc=service(etp="Local"),
        ips=[],
        codes={"w1": "NoReadyEndpoint"},
    ),
    Case(
        "eTP=Cluster ignores EndpointSlices",
        [W1, W2],
        svc=service(etp="Cluster"),
        slices=[endpoint_slice("web", [endpoint("w1")])],
        ips=["10.0.0.1", "10.0.0.2"],
    ),
    Case(
        "only the exact value Local filters (lower-case local does not)",
        [W1, W2],
        svc=service(etp="local"),
        ips=["10.0.0.1", "10.0.0.2"],
    ),
    # §4.4 addresses
    Case(
        "InternalIPs are used when no node has an ExternalIP",
        [node("a", internal=["10.0.0.1"], other=[("Hostname", "a"), ("InternalDNS", "a.local")])],
        ips=["10.0.0.1"],
    ),
    Case(
        "address-types InternalIP: InternalIPs only, nothing hidden by a neighbour's ExternalIP",
        [node("pub", internal=["10.0.0.1"], external=["203.0.113.1"]), W2],
        settings={"address_types": "InternalIP"},
        ips=["10.0.0.1", "10.0.0.2"],
        codes={"pub": "Selected", "w2": "Selected"},
    ),
    Case(
        "address-types InternalIP: a node with only an ExternalIP has no address of the family",
        [node("pub", external=["203.0.113.1"]), W2],
        settings={"address_types": "InternalIP"},
        ips=["10.0.0.2"],
        codes={"pub": "NoAddressOfFamily"},
    ),
    Case(
        "address-types both (1:1 NAT): the public and the internal address of each node",
        [node("nat", internal=["10.0.0.1"], external=["203.0.113.1"]), W2],
        settings={"address_types": "InternalIP, ExternalIP"},
        ips=["10.0.0.1", "10.0.0.2", "203.0.113.1"],
        codes={"nat": "Selected", "w2": "Selected"},
    ),
    Case(
        "ExternalIP preferred globally: a node with only an InternalIP is hidden",
        [node("pub", internal=["10.0.0.1"], external=["203.0.113.1"]), W2],
        ips=["203.0.113.1"],
        codes={"pub": "Selected", "w2": "ExternalIPPreferred"},
        warning="1 eligible node(s) without an ExternalIP",
    ),
    Case(
        "per-node fallback: a node without ExternalIP contributes its InternalIP",
        [node("pub", internal=["10.0.0.1"], external=["203.0.113.1"]), W2],
        settings={"per_node_address_fallback": True},
        ips=["10.0.0.2", "203.0.113.1"],
        codes={"pub": "Selected", "w2": "Selected"},
    ),
    Case(
        "dual-stack: an IPv6 ExternalIP hides every IPv4 InternalIP",
        [node("a", internal=["10.0.0.1"], external=["2001:db8::1"])],
        svc=service(families=("IPv4", "IPv6")),
        ips=["2001:db8::1"],
    ),
    Case(
        "dual-stack, IPv4 first: family order then numeric",
        [
            node("a", internal=["10.0.0.10", "fd00::2"]),
            node("b", internal=["10.0.0.9", "fd00::1"]),
        ],
        svc=service(families=("IPv4", "IPv6")),
        ips=["10.0.0.9", "10.0.0.10", "fd00::1", "fd00::2"],
    ),
    Case(
        "dual-stack, IPv6 first: spec.ipFamilies order wins",
        [node("a", internal=["10.0.0.1", "fd00::1"])],
        svc=service(families=("IPv6", "IPv4")),
        ips=["fd00::1", "10.0.0.1"],
    ),
    Case(
        "single-stack IPv6 ignores IPv4 addresses",
        [node("a", internal=["10.0.0.1", "fd00::1"])],
        svc=service(families=("IPv6",)),
        ips=["fd00::1"],
    ),
    Case(
        "numeric order: 10.0.0.9 before 10.0.0.10 before 10.0.0.100",
        [
            node("a", internal=["10.0.0.100"]),
            node("b", internal=["10.0.0.10"]),
            node("c", internal=["10.0.0.9"]),
        ],
        ips=["10.0.0.9", "10.0.0.10", "10.0.0.100"],
    ),
    Case(
        "IPv6 written in canonical form",
        [node("a", internal=["2001:0000::1", "2001:0DB8:0:0:0:0:0:5"])],
        svc=service(families=("IPv6",)),
        ips=["2001::1", "2001:db8::5"],
    ),
    Case(
        "IPv4-mapped IPv6 counts as IPv4 and is written as IPv4",
        [node("a", internal=["::ffff:192.0.2.1"])],
        ips=["192.0.2.1"],
    ),
    Case(
        "IPv4-mapped IPv6 is not an IPv6 address",
        [node("a", internal=["::ffff:192.0.2.1"])],
        svc=service(families=("IPv6",)),
        ips=[],
        codes={"a": "NoAddressOfFamily"},
    ),
    Case(
        "two spellings of one address give one entry",
        [
            node("a", internal=["2001:db8::1"]),
            node("b", internal=["2001:0db8:0000::1"]),
            node("c", internal=["::ffff:10.0.0.1", "10.0.0.1"]),
        ],
        svc=service(families=("IPv4", "IPv6")),
        ips=["10.0.0.1", "2001:db8::1"],
    ),
    Case(
        "zone-scoped IPv6 is dropped (Go rejects it)",
        [node("a", internal=["fe80::1%eth0", "fd00::1"])],
        svc=service(families=("IPv6",)),
        ips=["fd00::1"],
        warning="fe80::1%eth0",
    ),
    Case(
        "garbage addresses are dropped and reported, the node stays usable",
        [node("a", internal=["not-an-ip", "", "2001:0000:4", "10.0.0.1"])],
        ips=["10.0.0.1"],
        codes={"a": "Selected"},
        warning="not-an-ip",
    ),
    Case(
        "node without an address of a wanted family",
        [node("v6only", internal=["fd00::1"]), W1],
        ips=["10.0.0.1"],
        codes={"v6only": "NoAddressOfFamily"},
    ),
    Case(
        "empty spec.ipFamilies (manifest not applied yet) assumes IPv4 and warns",
        [node("a", internal=["10.0.0.1", "fd00::1"])],
        svc=service(families=()),
        ips=["10.0.0.1"],
        warning="spec.ipFamilies is empty",
    ),
    Case(
        "empty spec.ipFamilies with PreferDualStack assumes IPv4 then IPv6",
        [node("a", internal=["10.0.0.1", "fd00::1"])],
        svc=service(families=(), policy="PreferDualStack"),
        ips=["10.0.0.1", "fd00::1"],
    ),
    Case("no Nodes at all gives an empty list", [], ips=[]),
    # options: NotReady exclusion
    Case(
        "NotReady beyond the grace period is dropped when the option is on",
        [node("down", internal=["10.0.0.9"], ready="False", ready_since=NOW - 61), W1],
        settings={"exclude_not_ready_nodes": True},
        ips=["10.0.0.1"],
        codes={"down": "NotReady"},
    ),
    Case(
        "NotReady within the grace period stays",
        [node("flapping", internal=["10.0.0.9"], ready="False", ready_since=NOW - 30), W1],
        settings={"exclude_not_ready_nodes": True},
        ips=["10.0.0.1", "10.0.0.9"],
    ),
    Case(
        "Ready=Unknown beyond the grace period is dropped",
        [node("lost", internal=["10.0.0.9"], ready="Unknown", ready_since=NOW - 600), W1],
        settings={"exclude_not_ready_nodes": True, "not_ready_grace_seconds": 300},
        ips=["10.0.0.1"],
        codes={"lost": "NotReady"},
    ),
    Case(
        "node without a Ready condition counts as NotReady for long",
        [node("new", internal=["10.0.0.9"], ready=None), W1],
        settings={"exclude_not_ready_nodes": True},
        ips=["10.0.0.1"],
    ),
    Case(
        "every candidate NotReady: keep them all and warn (never empty for this alone)",
        [
            node("a", internal=["10.0.0.1"], ready="False"),
            node("b", internal=["10.0.0.2"], ready="False"),
        ],
        settings={"exclude_not_ready_nodes": True},
        ips=["10.0.0.1", "10.0.0.2"],
        codes={"a": "Selected", "b": "Selected"},
        warning="advertising them anyway",
    ),
    Case(
        "Ready nodes without a wanted address do not empty the list either",
        [node("down", internal=["10.0.0.1"], ready="False"), node("v6", internal=["fd00::1"])],
        settings={"exclude_not_ready_nodes": True},
        ips=["10.0.0.1"],
        warning="advertising them anyway",
    ),
    # §4.11 health checks
    Case(
        "a node failing its health checks is dropped",
        [W1, W2, W3],
        unhealthy={"w2": "failed 3 kube-proxy health checks in a row (the last: HTTP 503)"},
        ips=["10.0.0.1", "10.0.0.3"],
        codes={"w1": "Selected", "w2": "Unhealthy", "w3": "Selected"},
    ),
    Case(
        "health of a node the selector does not match changes nothing",
        [W1, W2],
        svc=service(selector="kubernetes.io/hostname=w1"),
        unhealthy={"w2": "down"},
        ips=["10.0.0.1"],
        codes={"w1": "Selected", "w2": "SelectorMismatch"},
    ),
    Case(
        "every candidate unhealthy: keep them all and warn (never empty for this alone)",
        [W1, W2],
        unhealthy={"w1": "down", "w2": "down"},
        ips=["10.0.0.1", "10.0.0.2"],
        codes={"w1": "Selected", "w2": "Selected"},
        warning="fails its health checks; advertising them anyway",
    ),
    Case(
        "healthy nodes without a wanted address do not empty the list either",
        [W1, node("v6", internal=["fd00::1"])],
        unhealthy={"w1": "down"},
        ips=["10.0.0.1"],
        warning="fails its health checks; advertising them anyway",
    ),
    Case(
        "unhealthy and NotReady: the healthy Ready node alone",
        [W1, node("down", internal=["10.0.0.2"], ready="False"), W3],
        settings={"exclude_not_ready_nodes": True},
        unhealthy={"w1": "down"},
        ips=["10.0.0.3"],
        codes={"w1": "Unhealthy", "down": "NotReady", "w3": "Selected"},
    ),
    Case(
        "unhealthy comes back before NotReady when nothing else is left",
        [W1, node("down", internal=["10.0.0.2"], ready="False")],
        settings={"exclude_not_ready_nodes": True},
        unhealthy={"w1": "down"},
        ips=["10.0.0.1"],
        codes={"w1": "Selected", "down": "NotReady"},
        warning="fails its health checks",
    ),
    Case(
        "eTP=Local: health applies among the nodes with a ready endpoint",
        [W1, W2, W3],
        svc=service(etp="Local"),
        slices=[endpoint_slice("web", [endpoint("w1"), endpoint("w2")])],
        unhealthy={"w1": "down", "w3": "down"},
        ips=["10.0.0.2"],
        codes={"w1": "Unhealthy", "w2": "Selected", "w3": "NoReadyEndpoint"},
    ),
]
