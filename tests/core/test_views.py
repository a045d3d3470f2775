"""app.core.views: projections parse once, never raise on garbage, name the field otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.views import (
    NodeAddress,
    ViewError,
    canonical_ip,
    endpoint_slice_view,
    node_view,
    service_view,
)
from tests.core.builders import NOW, node_obj, run, service, service_obj


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1", ("10.0.0.1", "IPv4")),
        ("2001:0000::1", ("2001::1", "IPv6")),
        ("2001:DB8::1", ("2001:db8::1", "IPv6")),
        ("::ffff:192.0.2.1", ("192.0.2.1", "IPv4")),
        ("::1.2.3.4", ("::102:304", "IPv6")),
        ("fe80::1%eth0", None),
        ("010.0.0.1", ("10.0.0.1", "IPv4")),  # ParseIPSloppy: decimal, as Cilium reads it
        ("010.000.000.001", ("10.0.0.1", "IPv4")),
        ("0010.0.0.1", ("10.0.0.1", "IPv4")),
        ("010.0.0.256", None),
        ("::ffff:010.0.0.1", ("10.0.0.1", "IPv4")),
        ("fd00::010.0.0.1", ("fd00::a00:1", "IPv6")),
        ("10.0.0.1:80", None),
        ("1.2.3", None),
        (" 10.0.0.1", None),
        ("10.0.0.1/32", None),
        ("2001:0000:4", None),
        ("", None),
        ("kind-worker", None),
    ],
)
def test_canonical_ip(text: str, expected: tuple[str, str] | None) -> None:
    got = canonical_ip(text)
    assert (got[:2] if got else None) == expected


def test_canonical_ip_dotted_quad_agrees_with_parse_ip_sloppy() -> None:
    """The IPv4 paths answer what k8s.io/utils/net's ParseIPSloppy does (ipaddress on the
    numbers read in decimal, leading zeros dropped), on every combination of edge octets
    (leading zeros, 255/256, empty, too few or many parts)."""
    import ipaddress
    import itertools

    octets = ["0", "00", "01", "1", "9", "10", "99", "100", "199", "200", "249", "250"]
    octets += ["255", "256", "300", "", "a", "1 ", "\u0661"]

    def reference(text: str) -> tuple[str, str, int] | None:
        parts = text.split(".")
        if not all(p.isascii() and p.isdigit() for p in parts):
            return None
        try:
            addr = ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))
        except ValueError:
            return None
        return str(addr), "IPv4", int(addr)

    samples = [".".join(p) for n in (3, 4) for p in itertools.product(octets, repeat=n)]
    samples += ["1.2.3.4.5", "1.2.3.4.", ".1.2.3.4"]
    assert len(samples) > 10_000
    for text in samples:
        assert canonical_ip(text) == reference(text), text


def test_node_view_keeps_external_and_internal_ips_in_api_order() -> None:
    obj = node_obj(
        "n1",
        internal=["10.0.0.1", "fd00::1"],
        external=["203.0.113.1"],
        other=[("Hostname", "n1"), ("InternalDNS", "n1.local"), ("ExternalDNS", "n1.example")],
    )
    view = node_view(obj)
    assert view.addresses == (
        NodeAddress(type="InternalIP", ip="10.0.0.1", family="IPv4"),
        NodeAddress(type="InternalIP", ip="fd00::1", family="IPv6"),
        NodeAddress(type="ExternalIP", ip="203.0.113.1", family="IPv4"),
    )
    assert view.invalid_addresses == ()
    assert view.external_families == 1
    assert view.internal_families == 3
    assert view.predicate is None


def test_node_view_records_garbage_addresses_instead_of_failing() -> None:
    obj = node_obj("n1", internal=["10.0.0.1", "bogus", "fe80::1%eth0"])
    obj["status"]["addresses"] += [
        {"type": "ExternalIP", "address": 42},
        "junk",
        {"type": "ExternalIP"},
    ]
    view = node_view(obj)
    assert [a.ip for a in view.addresses] == ["10.0.0.1"]
    assert view.invalid_addresses == ("bogus", "fe80::1%eth0", "42", "'junk'", "None")


@pytest.mark.parametrize(
    ("status", "ready"),
    [("True", True), ("False", False), ("Unknown", None), (True, True), (False, False)],
)
def test_node_view_ready_condition(status: Any, ready: bool | None) -> None:
    view = node_view(node_obj("n1", ready=status, ready_since=NOW))
    assert view.ready is ready
    assert view.ready_since == NOW


def test_node_view_without_ready_condition() -> None:
    view = node_view(node_obj("n1", ready=None))
    assert (view.ready, view.ready_since) == (None, None)


@pytest.mark.parametrize(
    ("kwargs", "predicate"),
    [
        ({"deleting": True}, "Deleting"),
        (
            {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "false"}},
            "ExcludedByLabel",
        ),
        (
            {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
            "AutoscalerTaint",
        ),
        ({"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}, None),
    ],
)
def test_node_predicates_are_precomputed(kwargs: dict[str, Any], predicate: str | None) -> None:
    assert node_view(node_obj("n1", **kwargs)).predicate == predicate


def test_node_views_compare_by_content_not_by_cache() -> None:
    a, b = (
        node_view(node_obj("n1", internal=["10.0.0.1"])),
        node_view(node_obj("n1", internal=["10.0.0.1"])),
    )
    a.verdict_cache["x"] = 1
    assert a == b
    assert a != node_view(node_obj("n1", internal=["10.0.0.2"]))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o.pop("metadata"), "metadata.name: Required value"),
        (lambda o: o["metadata"].pop("name"), "metadata.name: Required value"),
        (lambda o: o["status"].update(addresses="10.0.0.1"), "status.addresses: Invalid value"),
        (lambda o: o["metadata"]["labels"].update(all=True), "metadata.labels[all]: Invalid value"),
        (lambda o: o.update(spec=[]), "spec: Invalid value"),
    ],
)
def test_node_view_structural_errors_name_the_field(mutate: Any, field: str) -> None:
    obj = node_obj("n1")
    mutate(obj)
    with pytest.raises(ViewError, match=field.replace("[", r"\[").replace("]", r"\]")):
        node_view(obj)


def test_node_view_rejects_non_mapping() -> None:
    with pytest.raises(ViewError, match="must be an object"):
        node_view(["not", "a", "node"])  # type: ignore[arg-type]


def test_service_view_reads_the_fields_selection_needs() -> None:
    obj = service_obj(
        "web",
        namespace="shop",
        selector="pool=edge",
        etp="Local",
        families=("IPv6", "IPv4"),
        policy="PreferDualStack",
        ingress=[{"ip": "10.0.0.1", "ipMode": "VIP"}],
    )
    view = service_view(obj)
    assert (view.namespace, view.name, view.type) == ("shop", "web", "LoadBalancer")
    assert view.load_balancer_class == "io.cilium/node"
    assert view.match_node_labels == "pool=edge"
    assert view.external_traffic_policy == "Local"
    assert view.ip_families == ("IPv6", "IPv4")
    assert view.ip_family_policy == "PreferDualStack"
    assert view.ingress == ({"ip": "10.0.0.1", "ipMode": "VIP"},)
    assert view.resource_version == "1"
    assert view.deleting is False


def test_service_view_defaults() -> None:
    view = service_view({"metadata": {"name": "bare"}})
    assert view.namespace == "default"
    assert view.type is None
    assert view.load_balancer_class is None
    assert view.match_node_labels is None
    assert view.ingress is None
    assert view.ip_families == ()


def test_service_view_empty_annotation_is_present() -> None:
    assert service_view(service_obj(selector="")).match_node_labels == ""


def test_service_view_custom_annotation_key() -> None:
    obj = service_obj()
    obj["metadata"]["annotations"] = {"example.com/nodes": "a=b"}
    assert (
        service_view(obj, match_node_labels_annotation="example.com/nodes").match_node_labels
        == "a=b"
    )


def test_service_view_non_string_annotation_names_the_field() -> None:
    obj = service_obj()
    obj["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": True}
    with pytest.raises(
        ViewError, match=r"metadata.annotations\[io.cilium.nodeipam/match-node-labels\]"
    ):
        service_view(obj)


def test_endpoint_slice_view_ready_rule() -> None:
    view = endpoint_slice_view(
        {
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "endpoints": [
                {"nodeName": "ready", "conditions": {"ready": True}},
                {"nodeName": "nil-is-ready", "conditions": {}},
                {"nodeName": "no-conditions"},
                {"nodeName": "terminating", "conditions": {"ready": False, "serving": True}},
                {"conditions": {"ready": True}},
                "junk",
            ],
        }
    )
    assert view.service_name == "web"
    assert view.namespace == "shop"
    assert view.ready_node_names == frozenset({"ready", "nil-is-ready", "no-conditions"})


def test_endpoint_slice_without_endpoints() -> None:
    view = endpoint_slice_view({"metadata": {"name": "s"}, "endpoints": None})
    assert view.ready_node_names == frozenset()
    assert view.service_name is None


def test_node_view_lists_each_address_once_whatever_its_spelling() -> None:
    obj = node_obj(
        "n1",
        internal=["10.0.0.10", "::ffff:10.0.0.9", "2001:db8::1", "10.0.0.9", "2001:DB8::1"],
        external=["203.0.113.1", "203.0.113.1"],
    )
    view = node_view(obj)
    assert [ip for _, _, ip in view.internal_entries] == ["10.0.0.10", "10.0.0.9", "2001:db8::1"]
    assert [ip for _, _, ip in view.external_entries] == ["203.0.113.1"]


def test_selected_reason_names_each_advertised_address_once() -> None:
    n1 = node_view(node_obj("n1", internal=["10.0.0.10", "::ffff:10.0.0.9", "10.0.0.9"]))
    selection = run(service(), [n1])
    assert [e["ip"] for e in selection.ingress or ()] == ["10.0.0.9", "10.0.0.10"]
    assert selection.nodes[0].reason == "advertised: InternalIP 10.0.0.10, 10.0.0.9"


def test_equal_stored_ingress_lists_are_shared_between_services() -> None:
    from app.core.views import shared_ingress

    entries = [{"ip": "10.0.0.1", "ipMode": "VIP"}, {"ip": "10.0.0.2", "ipMode": "VIP"}]
    a = service_view(service_obj("a", ingress=[dict(e) for e in entries]))
    b = service_view(service_obj("b", ingress=[dict(e) for e in entries]))
    assert a.ingress == tuple(entries)
    assert a.ingress is b.ingress, "one tuple for equal lists"
    # A list that shares entries with another holds the same entry objects.
    longer = service_view(
        service_obj("d", ingress=[*(dict(e) for e in entries), {"ip": "10.0.0.3", "ipMode": "VIP"}])
    )
    assert longer.ingress is not None and a.ingress is not None
    assert longer.ingress[:2] == a.ingress
    assert all(x is y for x, y in zip(longer.ingress, a.ingress, strict=False))
    other = service_view(service_obj("c", ingress=[{"ip": "10.0.0.1", "ipMode": "Proxy"}]))
    assert other.ingress == ({"ip": "10.0.0.1", "ipMode": "Proxy"},)
    ports = [{"ip": "10.0.0.1", "ports": [{"port": 80, "protocol": "TCP"}]}]
    assert shared_ingress(ports) == tuple(ports)
    assert shared_ingress([{"ip": "10.0.0.1"}, "garbage", 7]) == ({"ip": "10.0.0.1"},)
    assert shared_ingress([{"ip": 1}]) == ({"ip": 1},)
    assert shared_ingress([{"ip": 1}])[0]["ip"] == 1
    assert shared_ingress([]) == ()


def test_shared_ingress_lists_are_bounded_by_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core import views

    monkeypatch.setattr(views, "MAX_SHARED_INGRESS_ENTRIES", 4)
    monkeypatch.setattr(views, "_SHARED_INGRESS", {})
    monkeypatch.setattr(views, "_shared_entries", [0])
    monkeypatch.setattr(views, "_SHARED_ENTRY", {})
    three = [{"ip": f"10.0.0.{i}"} for i in range(3)]
    first = views.shared_ingress(three)
    assert views.shared_ingress([dict(e) for e in three]) is first
    assert views._shared_entries == [3]
    other = views.shared_ingress([{"ip": "10.0.1.1"}, {"ip": "10.0.1.2"}])  # 5 > 4: start over
    assert views._shared_entries == [2] and len(views._SHARED_INGRESS) == 1
    assert len(views._SHARED_ENTRY) == 2, "the distinct entries started over too"
    assert views.shared_ingress([{"ip": "10.0.1.1"}, {"ip": "10.0.1.2"}]) is other
    assert views.shared_ingress(three) is not first, "dropped when the cache started over"
    five = [{"ip": f"10.0.2.{i}"} for i in range(5)]
    assert views.shared_ingress(five) == tuple(five)  # longer than the bound: not kept
    assert views._shared_entries[0] <= 4
