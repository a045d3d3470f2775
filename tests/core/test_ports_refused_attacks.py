"""Port ownership (docs/design.md §4.9) against an untrusted Service author: the refused
attacks, attacks the rule already turns away, kept as regression tests (the attacker and
what it must not achieve: test_ports_attacks.py's docstring; the findings are there)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.core.ports import (
    decide,
    incumbent,
    published_ports,
)
from app.core.views import (
    service_view,
)
from tests.core.attacks_support import (
    SETTINGS,
    filled,
    plain_service,
    pod,
    published,
    slice_obj,
    stored,
    with_ingress,
)
from tests.core.builders import NOW, rfc3339
from tests.core.ports_support import BOTH, NODES, svc

VICTIM_POD = pod("web-1", "n1", [{"containerPort": 8080, "hostPort": 8091}], namespace="team-a")


@pytest.mark.parametrize(
    "ref",
    [
        {"kind": "Pod", "name": "web-1", "namespace": "team-a"},  # another namespace
        {"kind": "Pod", "name": "web-1"},  # no namespace: the slice's own, no such Pod
        {"kind": "Pod", "name": "web-1", "namespace": ""},
        {"kind": "pod", "name": "web-1", "namespace": "att"},  # kind in another case
        {"kind": "Node", "name": "n1"},
        {"kind": "Service", "name": "web", "namespace": "team-a"},
        {"kind": "Pod", "namespace": "team-a"},  # no name
        {"kind": "Pod", "name": ["web-1"], "namespace": "team-a"},  # garbage name
        "Pod/team-a/web-1",  # not a mapping
        None,
    ],
)
def test_a_forged_slice_never_makes_another_namespaces_pod_an_own_backend(ref: Any) -> None:
    thief = svc("thief", 8091, namespace="att")
    forged = slice_obj(
        "att", "thief", [ref], ports=[{"port": 8080, "protocol": "TCP"}, {"port": 8091}]
    )
    # a name without a namespace names a Pod of the slice's own namespace (att/web-1,
    # which is not team-a's), anything else names no backend at all
    assert forged.backends <= {"web-1"}
    for seed in range(3):
        assert published(thief, pods=(VICTIM_POD,), slices=(forged,), order_seed=seed) == (
            "10.0.0.2",
        )


def test_a_slice_labelled_for_another_namespaces_service_changes_nothing_there() -> None:
    """The label names a Service of the slice's own namespace only: a slice in ``att``
    labelled ``kubernetes.io/service-name: web`` is filed under att/web, never under
    team-a/web, so it can neither exempt team-a/web nor be read by its decision."""
    web = svc("web", 8091, namespace="team-a")
    forged = slice_obj(
        "att", "web", [{"kind": "Pod", "name": "web-1", "namespace": "team-a"}], ports=[]
    )
    index = filled(web, pods=(VICTIM_POD,), slices=(forged,))
    assert index.endpoint_slices("team-a", "web") == []
    assert index.endpoint_slices("att", "web") == [forged]
    # team-a/web has no slice of its own: its hostPort Pod is not its backend, so it blocks n1
    assert published(web, pods=(VICTIM_POD,), slices=(forged,)) == ("10.0.0.2",)


def test_a_pod_of_the_attackers_own_namespace_with_the_victims_pod_name_exempts_nothing() -> None:
    """A Pod of ``att`` named like the victim's Pod: the exemption is by (namespace, name),
    so only the attacker's own Pod is exempt, never team-a/web-1."""
    own = pod("web-1", "n2", [{"containerPort": 8080, "hostPort": 8091}], namespace="att")
    thief = svc("thief", 8091, namespace="att")
    mine = slice_obj("att", "thief", [{"kind": "Pod", "name": "web-1"}], ports=[{"port": 8080}])
    assert mine.backends == frozenset({"web-1"})
    assert published(thief, pods=(VICTIM_POD, own), slices=(mine,)) == ("10.0.0.2",)


@pytest.mark.parametrize(
    "host_ip", ["0.0.0.0", "::", "::ffff:0.0.0.0", "0:0:0:0:0:0:0:0", "000.000.000.000", "x", ""]
)
def test_a_host_ip_meaning_every_address_or_garbage_blocks_every_address(host_ip: str) -> None:
    holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
    assert holder.host_ports[0].host_ip is None
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == ("10.0.0.2",)


@pytest.mark.parametrize("host_ip", ["10.0.0.1", "::ffff:10.0.0.1", "010.000.000.001"])
def test_a_host_ip_in_another_spelling_still_blocks_that_address(host_ip: str) -> None:
    holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == ("10.0.0.2",)


def test_a_host_ip_of_another_family_or_loopback_blocks_nothing_here() -> None:
    for host_ip in ("fd00::1", "127.0.0.1"):
        holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
        assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == BOTH


@pytest.mark.parametrize(
    ("phase", "node_name", "holds"),
    [
        ("Running", "n1", True),
        ("Pending", "n1", True),  # bound, starting: the port is about to be taken
        ("Unknown", "n1", True),
        (None, "n1", True),
        ("Succeeded", "n1", False),
        ("Failed", "n1", False),
        ("Pending", None, False),  # not bound: no node yet (its binding requeues)
    ],
)
def test_which_pods_hold_their_port(phase: str | None, node_name: str | None, holds: bool) -> None:
    holder = pod("web-1", node_name, [{"containerPort": 80, "hostPort": 8091}], phase=phase)
    expected = ("10.0.0.2",) if holds else BOTH
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == expected


def test_init_containers_hold_their_host_port_only_when_they_are_sidecars() -> None:
    sidecar = pod(
        "p", "n1", [], init_ports=[{"containerPort": 9, "hostPort": 8091}], init_restart="Always"
    )
    one_shot = pod("p", "n1", [], init_ports=[{"containerPort": 9, "hostPort": 8091}])
    thief = svc("thief", 8091, namespace="att")
    assert published(thief, pods=(sidecar,)) == ("10.0.0.2",)
    assert published(thief, pods=(one_shot,)) == BOTH


def test_host_network_pod_ports_are_held_whatever_their_host_port_says() -> None:
    listener = pod(
        "node-exporter",
        "n1",
        [{"containerPort": 9100, "hostPort": 9100}, {"containerPort": 53, "protocol": "UDP"}],
        namespace="monitoring",
        host_network=True,
    )
    assert published(svc("a", 9100, namespace="att"), pods=(listener,)) == ("10.0.0.2",)
    assert published(svc("b", (53, "UDP"), namespace="att"), pods=(listener,)) == ("10.0.0.2",)
    assert published(svc("c", 53, namespace="att"), pods=(listener,)) == BOTH  # TCP/53: free


@pytest.mark.parametrize("protocol", ["TCP", "UDP", "SCTP", "tcp", "Tcp", "bogus"])
def test_reserved_ports_hold_whatever_the_protocol_spelling(protocol: str) -> None:
    """The default ranges have no protocol: any spelling, even one the API server refuses,
    is reserved."""
    kubelet = svc("k", (10250, protocol), namespace="att")
    assert published(kubelet) == ()
    ssh = svc("s", (22, protocol), 80, namespace="att")
    assert published(ssh) == ()


def test_a_port_equal_to_another_services_node_port_is_never_published() -> None:
    holder = svc("np", 80, namespace="team-a", node_ports=(30080,), cls=None)
    health = svc("hc", 81, namespace="team-a", health=30081, cls=None)
    assert published(svc("a", 30080, namespace="att"), holder) == ()
    assert published(svc("b", 30081, namespace="att"), health) == ()
    assert published(svc("c", (30080, "UDP"), namespace="att"), holder) == BOTH


@pytest.mark.parametrize(
    "spelling", ["10.0.0.1", "::ffff:10.0.0.1", "010.000.000.001", "::FFFF:10.0.0.1"]
)
def test_another_classs_ingress_and_external_ips_block_in_any_spelling(spelling: str) -> None:
    foreign = svc("lb", 8443, namespace="team-a", cls="example.com/other", ingress=(spelling,))
    external = plain_service("ext", 8443, namespace="team-a", external_ips=(spelling,))
    thief = svc("thief", 8443, namespace="att")
    assert published(thief, foreign) == ("10.0.0.2",)
    assert published(thief, external) == ("10.0.0.2",)


def test_a_foreign_proxy_entry_blocks_nothing() -> None:
    foreign = svc("lb", 8443, namespace="team-a", cls="example.com/other", ingress=BOTH, proxy=True)
    assert published(svc("thief", 8443, namespace="att"), foreign) == BOTH


def test_an_older_newcomer_never_takes_an_incumbents_port() -> None:
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    for created in (NOW - 10**6, NOW, NOW + 1):
        grab = svc("grab", 80, 443, namespace="att", created=created)
        for seed in range(3):
            assert published(web, grab, order_seed=seed) == BOTH
            assert published(grab, web, order_seed=seed) == ()


def test_swapping_ports_under_a_published_entry_makes_no_incumbent() -> None:
    """att/grab was published for 9999; it now has 80 only (or 9999 and 80): its entries
    record 9999, so it is no incumbent for 80 and the younger incumbent keeps it."""
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    was = svc("grab", 9999, namespace="att", created=NOW - 3600)
    for now_ports in ((80,), (9999, 80), (80, 9999)):
        grab = stored(
            svc("grab", *now_ports, namespace="att", created=NOW - 3600), BOTH, recorded=was
        )
        assert not incumbent(grab, "10.0.0.1")
        assert published(web, grab) == BOTH
        assert published(grab, web) == ()
    # and a protocol switch is no incumbency either
    udp = stored(
        svc("grab", (9999, "UDP"), namespace="att", created=NOW - 3600), BOTH, recorded=was
    )
    assert not incumbent(udp, "10.0.0.1")


def test_dropping_ports_keeps_incumbency_and_gains_nothing() -> None:
    """Recorded ports that are a superset of the current ones still make an incumbent
    (the Service published all of them there); it holds only its current ports."""
    was = svc("grab", 80, 443, namespace="att", created=NOW)
    grab = stored(svc("grab", 443, namespace="att", created=NOW), BOTH, recorded=was)
    assert incumbent(grab, "10.0.0.1")
    newcomer = svc("web", 80, namespace="team-v", created=NOW - 10**6)
    assert published(newcomer, grab) == BOTH


@pytest.mark.parametrize(
    "ports",
    [
        [{"port": True, "protocol": "TCP"}],
        [{"port": "80", "protocol": "TCP"}],
        [{"port": 80.0}],
        [{"port": None}],
        [{}],
        [None, 5, "x", [80]],
        [{"port": 80, "protocol": 7}],
        [{"port": 80, "protocol": {"x": 1}}],
        [{"port": 10**30, "protocol": "TCP"}],
    ],
)
def test_odd_recorded_ports_never_crash_and_never_make_a_newcomer_incumbent(ports: Any) -> None:
    """Only a status writer can put these there (``services/status`` is not in the ``edit``
    role); still, no content may raise, and none of them records ``TCP/80``."""
    entries = [{"ip": ip, "ipMode": "VIP", "ports": ports} for ip in BOTH]
    grab = with_ingress(svc("grab", 80, namespace="att", created=NOW - 3600), entries)
    published_ports(grab)
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    assert not incumbent(grab, "10.0.0.1")
    assert published(web, grab) == BOTH
    assert published(grab, web) == ()


@pytest.mark.parametrize(
    "entry",
    [
        {"ip": "10.0.0.1", "ipMode": "vip"},
        {"ip": "not-an-ip"},
        {"ip": 167772161},
        {"hostname": "10.0.0.1"},
        {"ip": "10.0.0.1%eth0"},
        {"ip": "fe80::1%eth0"},
    ],
)
def test_stored_entries_kube_proxy_skips_make_no_incumbent(entry: dict[str, Any]) -> None:
    grab = with_ingress(svc("grab", 80, namespace="att", created=NOW - 3600), [entry])
    assert "10.0.0.1" not in published_ports(grab)
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    assert published(web, grab) == BOTH


def test_garbage_stored_ingress_never_crashes_a_decision() -> None:
    for ingress in ([None, "x", 5, ["10.0.0.1"]], [{"ip": None, "ports": "80"}], []):
        obj: dict[str, Any] = {
            "metadata": {"name": "g", "namespace": "att", "creationTimestamp": rfc3339(NOW)},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": 80}],
            },
            "status": {"loadBalancer": {"ingress": ingress}},
        }
        garbage = service_view(obj)
        web = svc("web", 80, namespace="team-v", created=NOW)
        published(garbage, web)
        published(web, garbage)


def test_the_rank_order_cannot_be_forged_from_the_spec() -> None:
    """Only ``metadata.creationTimestamp`` (set by the API server) and the stored status
    rank a claimant; a manifest without a timestamp ranks last, never first."""
    web = svc("web", 80, namespace="team-v", created=NOW)
    raw = service_view(
        {
            "metadata": {"name": "aaa", "namespace": "aaa"},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": 80}],
            },
        }
    )
    assert raw.created is None
    assert published(web, raw) == BOTH
    assert published(raw, web) == ()


def test_a_linear_chain_past_max_chain_errs_on_the_safe_side_and_alike_everywhere() -> None:
    """A plain chain (each Service shares one port with the next older one): past
    MAX_CHAIN the one under decision may lose an address it would own, never gain one
    its neighbour owns, and every Service decides alike under shuffled index orders."""
    chain = [
        svc(f"r{i:03d}", 1000 + i, 1001 + i, namespace="att", created=NOW - 10_000 + i)
        for i in range(72)
    ]
    outcomes = []
    for seed in range(2):
        outcome = {}
        for target in chain[-8:]:
            others = [o for o in chain if o is not target]
            outcome[target.name] = published(target, *others, order_seed=seed)
        outcomes.append(outcome)
    assert outcomes[0] == outcomes[1]
    names = [s.name for s in chain[-8:]]
    for left, right in itertools.pairwise(names):
        assert not (outcomes[0][left] and outcomes[0][right]), (left, right)


def test_an_address_is_decided_alike_whatever_the_index_order() -> None:
    """A mixed cluster (incumbents, newcomers, a hostNetwork backend, a foreign hostPort
    Pod, externalIPs) decided from shuffled index orders: one outcome, one owner per
    (address, protocol, port)."""
    edge = svc("edge", 80, 443, namespace="edge", created=NOW - 900)
    edge_pod = pod(
        "edge-1",
        "n1",
        [{"containerPort": 80}, {"containerPort": 443}],
        namespace="edge",
        host_network=True,
    )
    edge_slice = slice_obj(
        "edge",
        "edge",
        [{"kind": "Pod", "name": "edge-1"}],
        ports=[{"port": 80}, {"port": 443}],
    )
    web = stored(svc("web", 8080, namespace="team-v", created=NOW), ("10.0.0.2",))
    grab = svc("grab", 8080, 443, namespace="att", created=NOW - 10**6)
    other = svc("other", 9000, namespace="att", created=NOW - 10)
    foreign = pod("hp", "n2", [{"containerPort": 1, "hostPort": 9000}], namespace="team-b")
    ext = plain_service("ext", 8080, namespace="team-c", external_ips=("10.0.0.1",))
    everyone = (edge, web, grab, other, ext)
    results = set()
    for seed in range(8):
        results.add(
            tuple(
                published(
                    s,
                    *(o for o in everyone if o is not s),
                    pods=(edge_pod, foreign),
                    slices=(edge_slice,),
                    order_seed=seed,
                )
                for s in everyone
            )
        )
    assert len(results) == 1
    (outcome,) = results
    owner: dict[tuple[str, str, int], str] = {}
    for s, ips in zip(everyone, outcome, strict=True):
        if s is ext:
            continue
        for ip in ips:
            for key in s.ports:
                assert (ip, *key) not in owner, (s.name, ip, key, owner)
                owner[ip, *key] = s.name
    assert outcome[0] == BOTH  # edge: its own backend on n1 is no rival
    assert outcome[1] == ("10.0.0.2",)  # web keeps n2; n1 is ext's
    assert outcome[2] == ()  # grab: 8080 is web's on n2, ext's on n1; 443 edge's
    assert outcome[3] == ("10.0.0.1",)  # other: the hostPort Pod holds n2's 9000


def test_decide_never_raises_on_addresses_no_node_has() -> None:
    web = svc("web", 80, namespace="team-v")
    index = filled(web, pods=(VICTIM_POD,))
    ownership = decide(
        web,
        ["10.9.9.9", "not-an-ip", "::ffff:10.0.0.1"],
        ports=index,
        claims_of=lambda other: frozenset(),
        node_of=NODES.node_of,
        policy=SETTINGS.ports,
    )
    assert ownership.code in (None, "PortInUse")
