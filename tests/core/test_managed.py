"""docs/design.md §3: which Services are ours (Cilium's isServiceSupported, in its order)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from tests.core.builders import UNSET, ips, node, run, service

CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool, str]] = [
    ("class io.cilium/node is ours", {}, {}, True, 'spec.loadBalancerClass is "io.cilium/node"'),
    (
        "being deleted is never ours",
        {"deleting": True},
        {},
        False,
        "metadata.deletionTimestamp is set",
    ),
    (
        "ClusterIP with our class is not ours",
        {"type": "ClusterIP"},
        {},
        False,
        "spec.type is ClusterIP",
    ),
    (
        "NodePort is not ours",
        {"type": "NodePort", "cls": UNSET},
        {},
        False,
        "spec.type is NodePort",
    ),
    ("type unset is ClusterIP", {"type": None}, {}, False, "spec.type is unset (ClusterIP)"),
    (
        "type match is case-sensitive",
        {"type": "loadbalancer"},
        {},
        False,
        "spec.type is loadbalancer",
    ),
    (
        "another class is not ours",
        {"cls": "example.com/other"},
        {},
        False,
        'spec.loadBalancerClass is "example.com/other", not "io.cilium/node"',
    ),
    (
        "class match is case-sensitive",
        {"cls": "io.cilium/Node"},
        {},
        False,
        'spec.loadBalancerClass is "io.cilium/Node"',
    ),
    (
        "empty-string class is a class, not unset",
        {"cls": ""},
        {"default_lb_service_ipam": "nodeipam"},
        False,
        'spec.loadBalancerClass is ""',
    ),
    (
        "class-less with default lbipam belongs to LB-IPAM",
        {"cls": UNSET},
        {"default_lb_service_ipam": "lbipam"},
        False,
        "default-lb-service-ipam is lbipam (class-less Services are LB-IPAM's)",
    ),
    (
        "class-less with default nodeipam is ours",
        {"cls": UNSET},
        {"default_lb_service_ipam": "nodeipam"},
        True,
        "default-lb-service-ipam is nodeipam",
    ),
    (
        "class-less with default none belongs to nobody",
        {"cls": UNSET},
        {"default_lb_service_ipam": "none"},
        False,
        "default-lb-service-ipam is none",
    ),
    (
        "custom load_balancer_class setting",
        {"cls": "example.com/nodes"},
        {"load_balancer_class": "example.com/nodes"},
        True,
        'spec.loadBalancerClass is "example.com/nodes"',
    ),
    (
        "deletion is checked before type",
        {"deleting": True, "type": "ClusterIP"},
        {},
        False,
        "metadata.deletionTimestamp is set",
    ),
]


@pytest.mark.parametrize(
    ("svc_args", "settings", "managed", "why"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_is_managed(
    svc_args: dict[str, Any], settings: dict[str, Any], managed: bool, why: str
) -> None:
    got, reason = is_managed(service(**svc_args), SelectionSettings(**settings))
    assert got is managed
    assert why in reason


def test_unmanaged_service_gets_no_ingress_and_no_verdicts() -> None:
    svc = service(cls="example.com/other", ingress=[{"ip": "203.0.113.10", "ipMode": "VIP"}])
    result = run(svc, [node("w1", internal=["10.0.0.1"])])
    assert result.managed is False
    assert ips(result) is None
    assert result.nodes == ()
    assert result.to_dict()["ingress"] is None


def test_selector_on_unmanaged_service_is_not_parsed_but_warned() -> None:
    result = run(service(cls="example.com/other", selector="this is bad"), [])
    assert result.error is None
    assert any("has no effect" in w for w in result.warnings)


@pytest.mark.parametrize("bad", ["NodeIPAM", "node-ipam", ""])
def test_unknown_default_lb_service_ipam_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="default-lb-service-ipam: Unsupported value"):
        SelectionSettings(default_lb_service_ipam=bad)


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("ExternalIP", "ExternalIP"),
        ("InternalIP", "InternalIP"),
        ("InternalIP,ExternalIP", "ExternalIP,InternalIP"),
        (" ExternalIP , InternalIP ", "ExternalIP,InternalIP"),
    ],
)
def test_address_types_are_normalised(given: str, normal: str) -> None:
    assert SelectionSettings(address_types=given).address_types == normal


@pytest.mark.parametrize("bad", ["externalip", "Hostname", "", "ExternalIP,,InternalIP"])
def test_unknown_address_types_are_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(ValueError, match="address-types: Unsupported value"):
        SelectionSettings(address_types=bad)


def test_per_node_address_fallback_needs_the_external_ip_preference() -> None:
    with pytest.raises(ValueError, match="per-node-address-fallback: Forbidden"):
        SelectionSettings(address_types="InternalIP", per_node_address_fallback=True)
