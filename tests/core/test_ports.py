"""Port ownership (docs/design.md §4.9, app/core/ports.py): every rule, on small clusters.

Each test builds a few Services over two nodes (n1: 10.0.0.1, n2: 10.0.0.2) and asks
:func:`app.core.ports.decide` / :meth:`app.core.decision.Decider.preview` which addresses a Service
keeps, as preview and the reconciler do.
"""

from __future__ import annotations

import itertools
import random

import pytest

from app.core.nodeindex import NodeIndex
from app.core.options import SelectionSettings
from app.core.ports import (
    MAX_PORT_RECORDS,
    PortRange,
    decide,
    parse_port_exceptions,
    parse_port_ranges,
    pinned_ports,
    record_count,
)
from app.core.views import PodView, ServiceView, pod_view, service_view
from tests.core.builders import NOW, node, rfc3339, service_obj
from tests.core.ports_support import BOTH, NODES, host_pod, index_of, svc
from tests.core.ports_support import owned_on as _owned


def kept(
    target: ServiceView,
    *others: ServiceView,
    pods: tuple[PodView, ...] = (),
    settings: SelectionSettings | None = None,
) -> tuple[str, ...]:
    """The ingress IPs ``target`` publishes among ``others`` (and itself)."""
    settings = settings or SelectionSettings()
    ports = index_of(target, *others, pods=pods, settings=settings)
    selection = _owned(target, ports, settings)
    assert selection.ingress is not None
    return tuple(e["ip"] for e in selection.ingress)


# -- one owner per (address, protocol, port) --------------------------------------------


def test_the_older_service_owns_a_shared_port() -> None:
    alpha = svc("alpha", 80, namespace="team-a", created=NOW - 60)
    beta = svc("beta", 80, namespace="team-b", created=NOW)
    assert kept(alpha, beta) == BOTH
    assert kept(beta, alpha) == ()


def test_equal_age_is_decided_by_namespace_then_name() -> None:
    a = svc("zz", 80, namespace="a")
    b = svc("aa", 80, namespace="b")
    assert (kept(a, b), kept(b, a)) == (BOTH, ())


def test_the_stored_holder_keeps_its_address_against_an_older_newcomer() -> None:
    established = svc("established", 80, created=NOW, ingress=BOTH)
    older = svc("older", 80, created=NOW - 3600)
    assert kept(established, older) == BOTH
    assert kept(older, established) == ()


def test_a_stored_holder_of_one_address_keeps_that_one_only() -> None:
    alpha = svc("alpha", 80, created=NOW, ingress=("10.0.0.2",))
    older = svc("older", 80, created=NOW - 3600)
    assert kept(alpha, older) == ("10.0.0.2",)
    assert kept(older, alpha) == ("10.0.0.1",)


def test_only_overlapping_addresses_conflict() -> None:
    one = svc("one", 80, selector="kubernetes.io/hostname=n1", created=NOW - 60)
    two = svc("two", 80, selector="kubernetes.io/hostname=n2")
    everywhere = svc("everywhere", 80, created=NOW + 60)
    assert kept(one, two, everywhere) == ("10.0.0.1",)
    assert kept(two, one, everywhere) == ("10.0.0.2",)
    assert kept(everywhere, one, two) == ()


def test_another_protocol_or_port_is_no_conflict() -> None:
    dns_udp = svc("dns-udp", (53, "UDP"), created=NOW - 60)
    dns_tcp = svc("dns-tcp", (53, "TCP"))
    web = svc("web", 8080)
    assert kept(dns_tcp, dns_udp, web) == BOTH
    assert kept(web, dns_udp, dns_tcp) == BOTH


def test_an_address_is_kept_only_when_every_port_is_owned() -> None:
    alpha = svc("alpha", 80, created=NOW - 60)
    both = svc("both", 80, 443)
    tls = svc("tls", 443, created=NOW + 60)
    assert kept(both, alpha, tls) == ()
    # "both" publishes nowhere (alpha owns 80), so it claims nothing: tls gets 443
    # (docs/design.md §4.9 rule 3; before, claims were by candidates and tls got nothing).
    assert kept(tls, alpha, both) == BOTH


def test_a_service_blocked_everywhere_claims_nothing() -> None:
    """A Service that may publish nowhere (a reserved port) does not take its other ports
    from anyone: only competition between publishable claims propagates."""
    greedy = svc("greedy", 22, 80, created=NOW - 3600)
    web = svc("web", 80)
    assert kept(greedy, web) == ()
    assert kept(web, greedy) == BOTH


def test_services_not_ours_do_not_compete_but_their_ingress_holds() -> None:
    other = svc("other", 80, cls="example.com/lb", ingress=("10.0.0.1",), created=NOW + 60)
    cluster_ip = svc("internal", 80, cls=None)  # class-less: not ours by default
    web = svc("web", 80)
    assert kept(web, other, cluster_ip) == ("10.0.0.2",)


def test_a_proxy_mode_ingress_of_another_class_captures_nothing() -> None:
    other = svc("other", 80, cls="example.com/lb", ingress=BOTH, proxy=True)
    assert kept(svc("web", 80), other) == BOTH


def test_external_ips_of_any_service_hold_their_port() -> None:
    pinned = svc("pinned", 80, cls=None, external_ips=("10.0.0.2",))
    assert kept(svc("web", 80), pinned) == ("10.0.0.1",)
    assert kept(svc("web", 81), pinned) == BOTH


# -- node ports, reserved ports, host-network Pods, namespaces ---------------------------


def test_another_services_node_port_is_taken_on_every_address() -> None:
    other = svc("other", 80, cls=None, node_ports=(31000,))
    assert kept(svc("web", 31000), other) == ()
    assert kept(svc("web", (31000, "UDP")), other) == BOTH


def test_a_services_own_node_port_is_no_conflict() -> None:
    web = svc("web", 31000, node_ports=(31000,))
    assert kept(web) == BOTH


def test_a_health_check_node_port_is_taken_too() -> None:
    local = svc("local", 80, cls=None, health=32000)
    assert kept(svc("web", 32000), local) == ()


@pytest.mark.parametrize("port", [22, 2379, 2380, 6443, 10250, 10256, 10257, 10259])
def test_the_nodes_own_ports_are_reserved_by_default(port: int) -> None:
    assert kept(svc("web", port)) == ()


def test_an_exception_grants_a_reserved_port_to_one_named_service() -> None:
    settings = SelectionSettings(reserved_port_exceptions="ops/bastion:22")
    assert kept(svc("bastion", 22, namespace="ops"), settings=settings) == BOTH
    assert kept(svc("bastion", 22, namespace="dev"), settings=settings) == ()
    assert kept(svc("other", 22, namespace="ops"), settings=settings) == ()


def test_reserved_ports_are_a_setting() -> None:
    settings = SelectionSettings(reserved_node_ports="8000-8099/TCP")
    assert kept(svc("web", 8080), settings=settings) == ()
    assert kept(svc("web", (8080, "UDP")), settings=settings) == BOTH
    assert kept(svc("ssh", 22), settings=settings) == BOTH


def test_a_host_network_pod_takes_its_port_on_its_node_only() -> None:
    pod = host_pod("node-exporter", "n1", 9100)
    assert kept(svc("metrics", 9100), pods=(pod,)) == ("10.0.0.2",)
    assert kept(svc("web", 80), pods=(pod,)) == BOTH


def test_a_host_network_pod_that_ended_holds_nothing() -> None:
    obj = {
        "metadata": {"name": "done", "namespace": "x"},
        "spec": {"hostNetwork": True, "nodeName": "n1", "containers": [
            {"name": "c", "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Succeeded"},
    }  # fmt: skip
    assert pod_view(obj).ports == ()


def test_a_namespace_outside_allowed_namespaces_gets_nothing() -> None:
    settings = SelectionSettings(allowed_namespaces="prod, edge")
    ports = index_of(settings=settings)
    denied = _owned(svc("web", 80, namespace="dev"), ports, settings)
    assert denied.ingress == () and denied.code == "NamespaceNotAllowed"
    assert {v.code for v in denied.nodes} == {"NamespaceNotAllowed"}
    assert kept(svc("web", 80, namespace="prod"), settings=settings) == BOTH
    # The reason names the namespace, the setting's value and what to do (issue 37).
    assert denied.reason == (
        "namespace dev is not in the setting allowed-namespaces (edge, prod): an"
        " administrator adds the namespace there to publish it"
    )


def test_a_service_that_keeps_no_address_says_what_its_author_can_do() -> None:
    settings = SelectionSettings()
    alpha = svc("alpha", 80, namespace="team-a", created=NOW - 3600, ingress=BOTH)
    web = svc("web", 80, namespace="team-b")
    lost = _owned(web, index_of(alpha, web, settings=settings), settings)
    assert lost.ingress == () and lost.reason == (
        "every address is taken: TCP/80 on 10.0.0.1, 10.0.0.2: owned by Service team-a/alpha;"
        " use another port, or a node selector that avoids the holders' nodes"
    )


def test_a_denied_namespace_does_not_take_ports_from_an_allowed_one() -> None:
    settings = SelectionSettings(allowed_namespaces="prod")
    squatter = svc("squat", 80, namespace="dev", created=NOW - 3600)
    assert kept(svc("web", 80, namespace="prod"), squatter, settings=settings) == BOTH


# -- what preview shows ------------------------------------------------------------------


def test_a_partial_loss_keeps_the_rest_and_names_the_owner() -> None:
    alpha = svc("alpha", 80, selector="kubernetes.io/hostname=n1", created=NOW - 60)
    web = svc("web", 80)
    settings = SelectionSettings()
    selection = _owned(web, index_of(alpha, web, settings=settings), settings)
    assert [e["ip"] for e in selection.ingress] == ["10.0.0.2"]
    assert selection.code == "Assigned"
    verdicts = {v.name: v for v in selection.nodes}
    assert verdicts["n1"].code == "PortInUse" and not verdicts["n1"].selected
    assert "TCP/80 on 10.0.0.1: owned by Service default/alpha" in verdicts["n1"].reason
    assert verdicts["n2"].code == "Selected"


def test_a_total_loss_is_pending_with_its_own_code_and_reason() -> None:
    alpha = svc("alpha", 80, created=NOW - 60)
    web = svc("web", 80)
    settings = SelectionSettings()
    selection = _owned(web, index_of(alpha, web, settings=settings), settings)
    assert selection.ingress == () and selection.code == "PortInUse"
    assert selection.reason.startswith("every address is taken: TCP/80 on 10.0.0.1, 10.0.0.2")


# -- the outcome does not depend on order -------------------------------------------------


def test_the_outcome_does_not_depend_on_the_order_services_were_indexed() -> None:
    rng = random.Random(29)
    services = [
        svc(
            f"s{i}",
            *rng.sample([80, 443, 8080, (53, "UDP")], rng.randint(1, 2)),
            namespace=rng.choice(("a", "b")),
            created=NOW - rng.choice((0, 60, 120)),
            ingress=tuple(rng.sample(BOTH, rng.randint(0, 1))),
            selector=rng.choice((None, "kubernetes.io/hostname=n1", "kubernetes.io/hostname=n2")),
        )
        for i in range(8)
    ]
    settings = SelectionSettings()
    results = set()
    for order in itertools.islice(itertools.permutations(services), 0, 200, 7):
        ports = index_of(*order, settings=settings)
        results.add(
            tuple(tuple(e["ip"] for e in _owned(s, ports, settings).ingress) for s in services)
        )
    assert len(results) == 1
    # and no (address, protocol, port) is published by two Services
    (outcome,) = results
    published: dict[tuple[str, str, int], str] = {}
    for s, ips in zip(services, outcome, strict=True):
        for ip in ips:
            for protocol, port in s.ports:
                assert (ip, protocol, port) not in published, (s.name, ip, port)
                published[ip, protocol, port] = s.name


def test_the_index_forgets_a_deleted_owner() -> None:
    settings = SelectionSettings()
    alpha = svc("alpha", 80, created=NOW - 60)
    beta = svc("beta", 80)
    ports = index_of(alpha, beta, settings=settings)
    assert _owned(beta, ports, settings).ingress == ()
    ports.put_service("default/alpha", alpha, None)
    assert [e["ip"] for e in _owned(beta, ports, settings).ingress] == list(BOTH)
    assert ports.related([("TCP", 80)]) == {"default/beta"}


def test_decide_without_ports_or_candidates_changes_nothing() -> None:
    settings = SelectionSettings()
    no_ports = svc("bare")
    result = decide(
        no_ports,
        list(BOTH),
        ports=index_of(settings=settings),
        claims_of=lambda s: frozenset(),
        node_of=NODES.node_of,
        policy=settings.ports,
    )
    assert not result.lost


# -- settings ----------------------------------------------------------------------------


def test_port_ranges_parse_and_refuse_garbage() -> None:
    assert parse_port_ranges(" 22, 8000-8099/udp ,", flag="f") == (
        PortRange(22, 22),
        PortRange(8000, 8099, "UDP"),
    )
    for bad, why in (
        ("22x", "must be PORT"),
        ("0", "1-65535"),
        ("70000", "1-65535"),
        ("90-80", "ends before it starts"),
        ("80/ICMP", "TCP, UDP or SCTP"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_port_ranges(bad, flag="reserved-node-ports")


def test_exceptions_parse_and_refuse_garbage() -> None:
    assert parse_port_exceptions("ops/bastion:22+2222/TCP; a/b:53/UDP", flag="f") == (
        ("ops", "bastion", PortRange(22, 22)),
        ("ops", "bastion", PortRange(2222, 2222, "TCP")),
        ("a", "b", PortRange(53, 53, "UDP")),
    )
    with pytest.raises(ValueError, match="NAMESPACE/NAME:PORTS"):
        parse_port_exceptions("bastion:22", flag="reserved-port-exceptions")
    with pytest.raises(ValueError, match="DNS-1123"):
        SelectionSettings(allowed_namespaces="Prod")


def test_service_ports_garbage_is_an_error_naming_the_field_or_ignored() -> None:
    obj = service_obj("web")
    obj["spec"]["ports"] = [{"port": "eighty"}]
    with pytest.raises(ValueError, match=r"spec.ports\[0\].port: Invalid value"):
        service_view(obj)
    obj["spec"]["ports"] = [{"port": 70000}, {"port": 80, "nodePort": 0}, "junk"]
    view = service_view(obj)
    assert (view.ports, view.node_ports) == ((("TCP", 80),), ())


# -- addresses are compared as kube-proxy reads them --------------------------------------


@pytest.mark.parametrize("spelled", ["::ffff:10.0.0.1", "010.000.000.001"])
def test_another_classs_ingress_holds_the_address_however_it_is_spelled(spelled: str) -> None:
    other = svc("other", 80, cls="example.com/lb", ingress=(spelled,))
    assert kept(svc("web", 80), other) == ("10.0.0.2",)


def test_an_incumbent_keeps_an_address_its_stored_ingress_spells_otherwise() -> None:
    """Cilium writes a Node address as the Node spells it (docs/design.md §4.8): after a
    migration the incumbent still holds ``FD00::A`` against an older newcomer."""
    v6 = NodeIndex([node("n6", internal=["FD00::A"])])
    settings = SelectionSettings()

    def published(target: ServiceView, *others: ServiceView) -> tuple[str, ...]:
        got = _owned(target, index_of(target, *others, settings=settings), settings, v6)
        return tuple(e["ip"] for e in got.ingress or ())

    def v6_service(name: str, created: float, ingress: tuple[str, ...] = ()) -> ServiceView:
        obj = service_obj(
            name, families=("IPv6",), ingress=[{"ip": ip, "ipMode": "VIP"} for ip in ingress]
        )
        obj["metadata"]["creationTimestamp"] = rfc3339(created)
        obj["spec"]["ports"] = [{"port": 80, "protocol": "TCP"}]
        return service_view(obj)

    incumbent = v6_service("incumbent", NOW, ingress=("FD00::A",))
    older = v6_service("older", NOW - 3600)
    assert published(incumbent, older) == ("fd00::a",)
    assert published(older, incumbent) == ()


@pytest.mark.parametrize("entry", ["TENANT/kubelet:10250", "tenant/*:10250", "a/B_c:22"])
def test_an_exception_that_can_never_match_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="lower case DNS-1123"):
        SelectionSettings(reserved_port_exceptions=entry)


def test_pinned_ports_records_the_ports_only_where_an_entry_has_none() -> None:
    """docs/design.md §4.9: entries without ``ports`` (or ``ports: []``) get the Service's
    ports; an entry that records its own keeps those the Service still has; nothing to do
    gives ``None``; the records are not cut at MAX_PORT_RECORDS (the reconciler withdraws
    such an ingress, record_count tells)."""
    cilium = svc("s", 80, (53, "UDP"), ingress=("10.0.0.1", "10.0.0.2", "10.0.0.3"))
    assert cilium.ingress_ports is None
    raw = [dict(e) for e in cilium.ingress or ()]
    raw[1]["ports"] = [{"port": 80, "protocol": "TCP"}]
    raw[2]["ports"] = []
    obj = service_obj("s", ingress=raw)
    obj["spec"]["ports"] = [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "dns", "port": 53, "protocol": "UDP"},
    ]
    mixed = service_view(obj)
    both = [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]
    assert pinned_ports(mixed) == (
        {"ip": "10.0.0.1", "ipMode": "VIP", "ports": both},
        {"ip": "10.0.0.2", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
        {"ip": "10.0.0.3", "ipMode": "VIP", "ports": both},
    )
    recorded = service_view({**obj, "status": {"loadBalancer": {"ingress": list(
        pinned_ports(mixed) or ()
    )}}})  # fmt: skip
    assert pinned_ports(recorded) is None
    assert pinned_ports(svc("s", 80)) is None  # no stored ingress
    hog = svc("hog", *range(20000, 22000), ingress=tuple(f"10.0.0.{i}" for i in range(1, 6)))
    assert record_count(pinned_ports(hog) or ()) == 10_000 > MAX_PORT_RECORDS


def test_pinned_ports_narrow_an_entry_to_the_ports_the_service_still_has() -> None:
    """A port the Service dropped leaves the record (so adding it back is a newcomer's
    claim, §4.9), whether the entries share one list (as we write) or each has its own;
    a port never recorded is never added to an entry that records some."""
    wrote = [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]
    obj = service_obj("s", ingress=[{"ip": ip, "ipMode": "VIP", "ports": wrote} for ip in BOTH])
    obj["spec"]["ports"] = [{"name": "http", "port": 80, "protocol": "TCP"}]
    shared = service_view(obj)
    assert shared.ingress_ports is not None
    only_80 = [{"port": 80, "protocol": "TCP"}]
    assert pinned_ports(shared) == tuple(
        {"ip": ip, "ipMode": "VIP", "ports": only_80} for ip in BOTH
    )
    obj["status"]["loadBalancer"]["ingress"][1]["ports"] = [*wrote, {"port": 8080}]
    apart = service_view(obj)
    assert apart.ingress_ports is None
    assert pinned_ports(apart) == tuple(
        {"ip": ip, "ipMode": "VIP", "ports": only_80} for ip in BOTH
    )
