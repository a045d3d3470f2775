"""Cilium's nodesvclb_test.go matrix, with the product's results.

The matrix is docs/reference/cilium-node-ipam.md §11.

Where the product deliberately differs (canonical text, family-then-numeric order, explicit
``ipMode``), the expectation is docs/design.md's; the upstream value is kept in a comment.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.builders import UNSET, endpoint, endpoint_slice, ips, node, run, service

EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"

# Excluded-node fixtures of the upstream tests: they must never appear anywhere.
EXCLUDED = [
    node("deleting", internal=["10.9.0.1"], external=["42.9.0.1"], deleting=True),
    node("excluded", internal=["10.9.0.2"], external=["42.9.0.2"], labels={EXCLUDE: "true"}),
    node(
        "autoscaled",
        internal=["10.9.0.3"],
        external=["42.9.0.3"],
        taints=[
            {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}
        ],
    ),
]

RECONCILE = [
    # (name, nodes, service kwargs, settings, expected ips or None for "not written")
    (
        "unsupported service reset: class-less LoadBalancer, default lbipam",
        [node("n1", internal=["10.0.0.1"])],
        {"cls": UNSET, "ingress": [{"ip": "203.0.113.7"}]},
        {},
        None,
    ),
    (
        "unsupported service reset: ClusterIP Service with the class",
        [node("n1", internal=["10.0.0.1"])],
        {"type": "ClusterIP", "ingress": [{"ip": "203.0.113.7"}]},
        {},
        None,
    ),
    ("single stack IPv4 internal", [node("n1", internal=["10.0.0.1"])], {}, {}, ["10.0.0.1"]),
    (
        "single stack IPv4 external",
        [node("n1", internal=["10.0.0.1"], external=["42.0.0.2"])],
        {},
        {},
        ["42.0.0.2"],
    ),
    (
        "single stack IPv6 internal",
        [node("n1", internal=["10.0.0.1", "fd00:0000::1"])],
        {"families": ("IPv6",)},
        {},
        ["fd00::1"],  # upstream: fd00:0000::1 (verbatim)
    ),
    (
        "single stack IPv6 external",
        [node("n1", internal=["10.0.0.1"], external=["2001:0000::1"])],
        {"families": ("IPv6",)},
        {},
        ["2001::1"],  # upstream: 2001:0000::1
    ),
    (
        "dual stack",
        [node("n1", internal=["10.0.0.1"], external=["42.0.0.2", "2001:0000::1"])],
        {"families": ("IPv4", "IPv6")},
        {},
        ["42.0.0.2", "2001::1"],  # upstream: [2001:0000::1, 42.0.0.2] (string sort)
    ),
    (
        "external traffic policy cluster",
        [node("n1", internal=["10.0.0.1"]), node("n2", internal=["10.0.0.2"])],
        {"etp": "Cluster"},
        {},
        ["10.0.0.1", "10.0.0.2"],
    ),
    (
        "default IPAM nodeipam handles a class-less Service",
        [node("n1", internal=["10.0.0.1"])],
        {"cls": UNSET},
        {"default_lb_service_ipam": "nodeipam"},
        ["10.0.0.1"],
    ),
]


@pytest.mark.parametrize(
    ("nodes", "svc_args", "settings", "expected"),
    [c[1:] for c in RECONCILE],
    ids=[c[0] for c in RECONCILE],
)
def test_reconcile_matrix(
    nodes: list[Any], svc_args: dict[str, Any], settings: dict[str, Any], expected: list[str] | None
) -> None:
    slices = [endpoint_slice("web", [endpoint("n1")])]
    result = run(service(**svc_args), [*nodes, *EXCLUDED], slices, **settings)
    assert ips(result) == expected
    assert result.managed is (expected is not None)
    if expected is not None:
        assert all(e["ipMode"] == "VIP" for e in result.ingress or ())


def test_external_traffic_policy_local_uses_endpoint_nodes() -> None:
    nodes = [node("n1", internal=["10.0.0.1"]), node("n2", internal=["10.0.0.2"]), *EXCLUDED]
    slices = [endpoint_slice("web", [endpoint("n2"), endpoint("deleting")])]
    assert ips(run(service(etp="Local"), nodes, slices)) == ["10.0.0.2"]


LABELLED = [
    node(
        "node-1",
        internal=["10.0.0.1"],
        labels={"all": "true", "group": "first", "ingress-ready": "true"},
    ),
    node(
        "node-2",
        internal=["10.0.0.2"],
        labels={"all": "true", "group": "notfirst", "test/label": "is-good"},
    ),
    node("node-3", internal=["10.0.0.3"], labels={"all": "true", "group": "notfirst"}),
    *EXCLUDED,
]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("all=true", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
        ("ingress-ready=true", ["10.0.0.1"]),
        ("group=notfirst", ["10.0.0.2", "10.0.0.3"]),
        ("group notin (first),test/label=is-good", ["10.0.0.2"]),
        ("group=nonexistent", []),
    ],
)
def test_cilium_resources_node_label_filters(selector: str, expected: list[str]) -> None:
    result = run(service(selector=selector), LABELLED)
    assert ips(result) == expected
    assert result.error is None


def test_cilium_resources_bad_filter_is_an_error_and_writes_nothing() -> None:
    result = run(service(selector="this is completely/bad=!;lf"), LABELLED)
    assert result.ingress is None
    assert result.error is not None
    assert '"this is completely/bad=!;lf"' in result.error


def test_no_node_matches_explains_instead_of_logging() -> None:
    result = run(service(selector="group=nonexistent"), LABELLED)
    assert result.reason == "no Node matches the node selector group=nonexistent"
    assert {v.code for v in result.nodes} == {"SelectorMismatch"}
