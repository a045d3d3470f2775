"""Cilium's own Node IPAM controller against ours on generated clusters (issue 20).

Each cluster of :data:`SUITE` (seeded, :mod:`tests.peers.cilium.clusters`) is created on
two dual-stack real API servers; Cilium's controller (the pinned version, in the test
ids) runs on one and ``serve`` on the other, both from blank statuses, until quiet. Per
Service, Cilium's ingress is compared with ``serve``'s and with ``preview``'s on a dump
of Cilium's cluster: identical, or a named rule of docs/design.md §4.8
(:data:`tests.peers.cilium.differential.RULES`, each shown side by side below), or the
test fails with the seed and a shrunk cluster. ``python -m bench.bench_differential``
runs more seeds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.ports import DEFAULT_RESERVED_NODE_PORTS, parse_port_ranges
from tests.peers.cilium.build import cilium_version
from tests.peers.cilium.clusters import (
    ANNOTATION,
    AUTOSCALER_TAINT,
    CLASS,
    EXCLUDE,
    LOOKALIKE_TAINTS,
    MALFORMED,
    Cluster,
    generate,
)
from tests.peers.cilium.differential import (
    IDENTICAL,
    RESERVED_BY_PROTOCOL,
    RESERVED_NODE_PORTS,
    RULES,
    ClusterResult,
    Differential,
    Outcome,
    classify,
    counts,
    port_ownership_losses,
    report,
)
from tests.peers.cilium.peer import MODES

VERSION = cilium_version()
# One mode after the other (a mode switch restarts both controllers): 10 clusters each.
SUITE = sorted(((seed, MODES[seed % 2]) for seed in range(20)), key=lambda r: r[1])
_RESULTS: dict[tuple[int, str], ClusterResult] = {}


# -- pure: the generator and the rules ----------------------------------------------------


def test_the_generator_is_reproducible() -> None:
    assert json.dumps(generate(7).__dict__) == json.dumps(generate(7).__dict__)
    assert json.dumps(generate(7).__dict__) != json.dumps(generate(8).__dict__)


def _everything(clusters: list[Cluster]) -> dict[str, set[Any]]:
    seen: dict[str, set[Any]] = {}

    def add(what: str, value: Any) -> None:
        seen.setdefault(what, set()).add(value)

    for c in clusters:
        shared: dict[str, int] = {}
        for node in c.nodes:
            labels = node["metadata"]["labels"]
            if EXCLUDE in labels:
                add("exclusion value", labels[EXCLUDE])
            for key in labels:
                add("label key", key)
            for taint in node["spec"].get("taints", []):
                add("taint", "autoscaler" if taint["key"] == AUTOSCALER_TAINT else "look-alike")
            types: dict[str, set[str]] = {}
            for a in node["status"]["addresses"]:
                add("address type", a["type"])
                types.setdefault(a["address"], set()).add(a["type"])
                ip = a["address"]
                if a["type"] in ("InternalIP", "ExternalIP"):
                    shared[ip] = shared.get(ip, 0) + 1
                    if ip.startswith("::ffff:"):
                        add("address", "ipv4-mapped")
                    elif ":" in ip and (ip != ip.lower() or "0000" in ip):
                        add("address", "non-canonical ipv6")
                    elif not any(ch.isdigit() for ch in ip) or ip.count(".") not in (0, 3):
                        add("address", "not an ip")
            if any(len(t) == 2 for t in types.values()):
                add("address", "one ip under both types")
            add("ready", next((x["status"] for x in node["status"].get("conditions", [])), None))
            add("deleting", node["metadata"]["name"] in c.deleting)
        if any(n > 1 for n in shared.values()):
            add("address", "shared between nodes")
        for svc in c.services:
            spec = svc["spec"]
            add("type", spec["type"])
            add("class", spec.get("loadBalancerClass"))
            add("etp", spec.get("externalTrafficPolicy"))
            add("families", (spec.get("ipFamilyPolicy"), tuple(spec.get("ipFamilies", []))))
            value = svc["metadata"].get("annotations", {}).get(ANNOTATION)
            kind = "absent" if value is None else "blank" if not value.strip() else "set"
            add("annotation", "malformed" if value in MALFORMED else kind)
            if value and (">" in value or "<" in value):
                add("annotation", "numeric")
        for s in c.slices:
            add("slice family", s["addressType"])
            for e in s["endpoints"]:
                add("ready", ("endpoint", e.get("conditions", {}).get("ready")))
                add("nodeName", "unset" if "nodeName" not in e else e["nodeName"] == "no-such-node")
        per_service: dict[str, int] = {}
        for s in c.slices:
            label = s["metadata"]["labels"]["kubernetes.io/service-name"]
            per_service[label] = per_service.get(label, 0) + 1
            add("slice labelled for another", not s["metadata"]["name"].startswith(f"{label}-"))
        add("several slices", max(per_service.values(), default=0) > 1)
        ports: dict[int, list[dict[str, Any]]] = {}
        for svc in c.services:
            ports.setdefault(svc["spec"]["ports"][0]["port"], []).append(svc)
        for number, sharing in ports.items():
            if number in RESERVED_NODE_PORTS:
                add("port conflict", "reserved")
            for twin in sharing[1:]:
                assert twin["metadata"]["name"] in c.later
                kind = "udp" if twin["spec"]["ports"][0]["protocol"] == "UDP" else "tcp"
                add("port conflict", f"{kind} twin, {len(twin['spec']['ports'])} port(s)")
    return seen


def test_the_suite_covers_the_checklist() -> None:
    """Issue 20's list of inputs, every item drawn somewhere in :data:`SUITE`."""
    seen = _everything([generate(seed) for seed, _ in SUITE])
    assert seen["exclusion value"] == {"", "true", "false"}
    assert seen["taint"] == {"autoscaler", "look-alike"}
    assert {"example.com/tier", "rank", "zone"} <= seen["label key"]
    assert seen["deleting"] == {True, False}
    assert seen["address type"] == {"InternalIP", "ExternalIP", "Hostname", "InternalDNS"}
    assert seen["address"] == {
        "ipv4-mapped",
        "non-canonical ipv6",
        "not an ip",
        "one ip under both types",
        "shared between nodes",
    }
    assert {"True", "False", "Unknown", None} <= seen["ready"]
    assert {("endpoint", None), ("endpoint", True), ("endpoint", False)} <= seen["ready"]
    assert seen["type"] == {"LoadBalancer", "ClusterIP", "NodePort"}
    assert seen["class"] == {None, CLASS, "example.com/other"}
    assert {"Cluster", "Local"} <= seen["etp"]
    policies = {
        ("SingleStack", ("IPv4",)),
        ("SingleStack", ("IPv6",)),
        ("PreferDualStack", ("IPv4", "IPv6")),
        ("PreferDualStack", ("IPv6", "IPv4")),
        ("RequireDualStack", ("IPv4", "IPv6")),
        ("RequireDualStack", ("IPv6", "IPv4")),
        (None, ()),
    }
    assert policies <= seen["families"]
    assert seen["annotation"] == {"absent", "blank", "set", "malformed", "numeric"}
    assert seen["slice family"] == {"IPv4", "IPv6"}
    assert seen["nodeName"] == {"unset", True, False}
    assert seen["slice labelled for another"] == {True, False}
    assert seen["several slices"] == {True}
    assert seen["port conflict"] == {
        "reserved",
        "tcp twin, 1 port(s)",
        "tcp twin, 2 port(s)",
        "udp twin, 1 port(s)",
    }
    assert set(LOOKALIKE_TAINTS)  # the vocabulary is not empty


@pytest.mark.parametrize(
    ("cilium", "ours", "families", "rule"),
    [
        (["10.0.0.1"], ["10.0.0.1"], ["IPv4"], IDENTICAL),
        ([], [], ["IPv4"], IDENTICAL),
        (["10.0.0.10", "10.0.0.9"], ["10.0.0.9", "10.0.0.10"], ["IPv4"], "family-numeric-order"),
        (
            ["10.0.0.1", "fd00::1"],
            ["fd00::1", "10.0.0.1"],
            ["IPv6", "IPv4"],
            "family-numeric-order",
        ),
        (["FD00::A", "fd00::a"], ["fd00::a"], ["IPv6"], "canonical-addresses"),
        (["::ffff:10.0.0.7", "10.0.0.7"], ["10.0.0.7"], ["IPv4"], "canonical-addresses"),
        (["010.000.000.001"], ["10.0.0.1"], ["IPv4"], "canonical-addresses"),
        (["not-an-ip"], [], ["IPv4"], None),
        (["10.0.0.1"], ["10.0.0.2"], ["IPv4"], None),
        (["10.0.0.1"], [], ["IPv4"], None),
        ([], ["10.0.0.1"], ["IPv4"], None),
        (["10.0.0.1", "10.0.0.2"], ["10.0.0.1"], ["IPv4"], None),
    ],
)
def test_classify(cilium: list[str], ours: list[str], families: list[str], rule: str) -> None:
    assert classify(cilium, ours, families) == rule


@pytest.mark.parametrize(
    ("cilium", "ours", "lost", "rule"),
    [
        (["10.0.0.1", "10.0.0.2"], ["10.0.0.2"], {"10.0.0.1"}, "port-ownership"),
        (["10.0.0.1"], [], {"10.0.0.1"}, "port-ownership"),
        (["10.0.0.2", "FD00::1"], ["10.0.0.2"], {"fd00::1"}, "port-ownership"),
        (["10.0.0.1", "10.0.0.2"], ["10.0.0.1", "10.0.0.2"], {"10.0.0.1"}, None),
        (["10.0.0.1", "10.0.0.2"], [], {"10.0.0.1"}, None),
        (["10.0.0.1"], ["10.0.0.1"], {"10.0.0.1"}, None),
    ],
)
def test_classify_port_ownership(
    cilium: list[str], ours: list[str], lost: set[str], rule: str | None
) -> None:
    assert classify(cilium, ours, ["IPv4", "IPv6"], lost) == rule


def test_the_oracle_reserves_the_documented_ports() -> None:
    ranges = parse_port_ranges(DEFAULT_RESERVED_NODE_PORTS, flag="reserved-node-ports")
    anyone = {p for r in ranges if r.protocol is None for p in range(r.first, r.last + 1)}
    one = {(r.protocol, p) for r in ranges if r.protocol for p in range(r.first, r.last + 1)}
    assert (set(RESERVED_NODE_PORTS), set(RESERVED_BY_PROTOCOL)) == (anyone, one)


def _svc(name: str, created: str, *ports: tuple[str, int], node_port: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {
            "ports": [
                {"protocol": proto, "port": port, **({"nodePort": node_port} if node_port else {})}
                for proto, port in ports
            ]
        },
    }


def test_the_oracle_follows_the_rule_text() -> None:
    """§4.9 worked by hand: older wins, a stored address beats age, UDP does not meet TCP,
    a reserved port or another's nodePort blocks everywhere and claims nothing, and a
    Service keeps an address only where it owns every port."""
    t0, t1, t2 = "2026-12-03T00:00:00Z", "2026-12-03T00:00:01Z", "2026-12-03T00:00:02Z"
    held = [
        _svc("a", t1, ("TCP", 80)),
        _svc("b", t0, ("TCP", 80), ("TCP", 81)),
        _svc("c", t0, ("UDP", 80)),
        _svc("d", t0, ("TCP", 10250), ("TCP", 81)),
        _svc("e", t2, ("TCP", 31000)),
        _svc("f", t0, ("TCP", 82), node_port=31000),
    ]
    one, two = "10.0.0.1", "10.0.0.2"
    candidates = {name: [one, two] for name in "abcdef"}
    candidates["b"] = [one]
    assert port_ownership_losses(held, candidates) == {
        "a": {one},
        "b": set(),
        "c": set(),
        "d": {one, two},
        "e": {one, two},
        "f": set(),
    }
    stored = {"a": [one]}
    lost = port_ownership_losses(held, candidates, stored)
    assert lost["a"] == set() and lost["b"] == {one}
    # Rank order: y loses 10.0.0.1 to x (TCP/80), so it claims nothing there and z, the
    # newest, gets TCP/81 (claims by candidates gave z nothing).
    chain = [_svc("x", t0, ("TCP", 80)), _svc("y", t1, ("TCP", 80), ("TCP", 81)),
             _svc("z", t2, ("TCP", 81))]  # fmt: skip
    assert port_ownership_losses(chain, {n: [one] for n in "xyz"}) == {
        "x": set(),
        "y": {one},
        "z": set(),
    }


# -- each §4.8 rule side by side on the real servers --------------------------------------


def _node(name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]},
    }


def _lb(namespace: str, name: str, policy: str, families: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "ipFamilyPolicy": policy,
            "ipFamilies": families,
            "ports": [{"port": 80, "protocol": "TCP"}],
        },
    }


def _one(differential: Differential, cluster: Cluster, mode: str = "lbipam") -> Outcome:
    result = differential.run(cluster, mode)
    (outcome,) = result.outcomes
    assert not result.rejected, result.rejected
    assert not outcome.problem, outcome.problem
    return outcome


@pytest.mark.parametrize("version", [VERSION])
def test_rule_canonical_addresses(differential: Differential, version: str) -> None:
    """§4.8: Cilium writes Node addresses as spelled and dedups raw strings, so one IPv6
    address in two spellings is two entries, an IPv4-mapped address stays mapped and an
    IPv4 address with leading zeros keeps them; we write each address once, canonical."""
    ns = "rule-canonical"
    cluster = Cluster(
        9001,
        ns,
        [
            _node("rule-c-0", ("InternalIP", "FD00::A")),
            _node("rule-c-1", ("InternalIP", "fd00::a")),
            _node("rule-c-2", ("InternalIP", "::ffff:10.0.0.7")),
            _node("rule-c-3", ("InternalIP", "010.000.000.011")),
        ],
        [],
        [_lb(ns, "web", "RequireDualStack", ["IPv4", "IPv6"])],
        [],
    )
    outcome = _one(differential, cluster)
    assert differential.version == version
    assert outcome.cilium == ["010.000.000.011", "::ffff:10.0.0.7", "FD00::A", "fd00::a"]
    assert outcome.serve == outcome.preview == ["10.0.0.7", "10.0.0.11", "fd00::a"]
    assert outcome.rule == "canonical-addresses"


@pytest.mark.parametrize("version", [VERSION])
def test_rule_family_numeric_order(differential: Differential, version: str) -> None:
    """§4.8: Cilium sorts the address strings (10.0.0.10 before 10.0.0.9, IPv4 before IPv6
    whatever spec.ipFamilies says); we order by family as in spec.ipFamilies, then
    numerically."""
    ns = "rule-order"
    cluster = Cluster(
        9002,
        ns,
        [
            _node("rule-o-0", ("InternalIP", "10.0.0.9"), ("InternalIP", "fd00::1")),
            _node("rule-o-1", ("InternalIP", "10.0.0.10")),
        ],
        [],
        [_lb(ns, "web", "RequireDualStack", ["IPv6", "IPv4"])],
        [],
    )
    outcome = _one(differential, cluster)
    assert differential.version == version
    assert outcome.cilium == ["10.0.0.10", "10.0.0.9", "fd00::1"]
    assert outcome.serve == outcome.preview == ["fd00::1", "10.0.0.9", "10.0.0.10"]
    assert outcome.rule == "family-numeric-order"


@pytest.mark.parametrize("version", [VERSION])
def test_rule_port_ownership(differential: Differential, version: str) -> None:
    """§4.8, §4.9: Cilium publishes every Service on its Nodes whatever the port; we publish
    one owner per (address, protocol, port), the older Service, and nothing on a reserved
    node port (here the kubelet's 10250)."""
    ns = "rule-ports"
    web = _lb(ns, "web", "SingleStack", ["IPv4"])
    web["metadata"]["annotations"] = {ANNOTATION: "kubernetes.io/hostname=rule-p-0"}
    late = _lb(ns, "late", "SingleStack", ["IPv4"])
    kubelet = _lb(ns, "kubelet", "SingleStack", ["IPv4"])
    kubelet["spec"]["ports"] = [{"port": 10250, "protocol": "TCP"}]
    cluster = Cluster(
        9003,
        ns,
        [
            _node("rule-p-0", ("InternalIP", "10.0.0.21")),
            _node("rule-p-1", ("InternalIP", "10.0.0.22")),
        ],
        [],
        [web, late, kubelet],
        [],
        later=["late"],
    )
    result = differential.run(cluster, "lbipam")
    assert not result.rejected, result.rejected
    assert differential.version == version
    got = {o.key.split("/")[1]: o for o in result.outcomes}
    assert not any(o.problem for o in got.values()), got
    assert got["web"].cilium == got["web"].serve == ["10.0.0.21"]
    assert got["web"].rule == IDENTICAL
    assert got["late"].cilium == ["10.0.0.21", "10.0.0.22"]
    assert got["late"].serve == got["late"].preview == ["10.0.0.22"]
    assert got["late"].rule == "port-ownership"
    assert got["kubelet"].cilium == ["10.0.0.21", "10.0.0.22"]
    assert got["kubelet"].serve == [] and not got["kubelet"].preview
    assert got["kubelet"].rule == "port-ownership"


# -- the generated suite ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "mode"), SUITE, ids=[f"cilium-{VERSION}-{mode}-seed{seed}" for seed, mode in SUITE]
)
def test_generated_cluster(differential: Differential, seed: int, mode: str) -> None:
    result = differential.run(generate(seed), mode)
    _RESULTS[seed, mode] = result
    assert result.outcomes
    unexplained = result.unexplained()
    if unexplained:
        shrunk = differential.shrink(generate(seed), mode, unexplained[0].key, budget=45)
        pytest.fail(report(result, unexplained[0], shrunk))


def test_the_suite_ran_500_services_and_met_every_rule() -> None:
    """After the generated clusters (this module, in order): at least 500 Services over
    at least 20 clusters, both modes, and each rule of RULES met at least once."""
    if len(_RESULTS) < len(SUITE):
        pytest.skip("needs every test_generated_cluster of this module in this run")
    results = list(_RESULTS.values())
    tally = counts(results)
    print(f"cilium {VERSION}: {len(results)} clusters, Services per rule {dict(tally)}")
    assert len(results) >= 20 and {r.mode for r in results} == set(MODES)
    assert sum(tally.values()) >= 500, tally
    assert tally["unexplained"] == 0, tally
    assert set(RULES) <= set(tally), tally
