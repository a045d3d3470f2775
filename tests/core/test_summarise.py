"""``summarise`` (the reconciler's fast path) equals ``select`` wherever it answers.

Checked on every rule of tests/core/test_select_rules.py (as given, and again as an
``externalTrafficPolicy: Local`` Service with endpoints on some of the Nodes), on the
kind-4node case of tests/data/cases, and on random clusters covering selectors, KEP-3458
predicates, families, ExternalIP preference, NotReady grace and eTP=Local endpoints.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import yaml

from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import (
    MEMO_POSITIONS,
    Summary,
    SummaryMemo,
    has_candidates,
    select,
    summarise,
)
from app.core.options import SelectionSettings
from app.core.pools import pool_from_object
from app.core.views import (
    EndpointSliceView,
    NodeView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    service_view,
)
from tests.cases import CASES as CASES_DIR
from tests.core.builders import NOW, endpoint, endpoint_slice, node, service
from tests.core.select_cases import CASES, EXCLUDE


def expected(
    svc: ServiceView,
    nodes: Sequence[NodeView],
    slices: Sequence[EndpointSliceView],
    settings: SelectionSettings,
    now: float,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
) -> Summary | None:
    """What ``summarise`` must give, derived from ``select``'s full Selection."""
    selection = select(
        service=svc, nodes=nodes, endpoint_slices=slices, settings=settings, now=now,
        unhealthy=unhealthy,
    )  # fmt: skip
    if not selection.ingress:
        return None
    hidden = tuple(v.name for v in selection.nodes if v.code == "ExternalIPPreferred")
    failing = tuple(v.name for v in selection.nodes if v.code == "Unhealthy")
    assert selection.code == "Assigned"
    advertised = sum(v.selected for v in selection.nodes)
    # Advertised although failing: the Selected nodes health checks would keep out.
    anyway = tuple(v.name for v in selection.nodes if v.selected and v.name in unhealthy)
    return Summary(
        selection.ingress,
        selection.reason,
        selection.recheck_at,
        hidden,
        advertised,
        failing,
        anyway,
    )


def check(
    svc: ServiceView,
    nodes: Sequence[NodeView],
    slices: Sequence[EndpointSliceView] = (),
    *,
    now: float = NOW,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
    **settings: Any,
) -> Summary | None:
    """Assert ``summarise`` equals :func:`expected`; return it."""
    options = SelectionSettings(**settings)
    got = summarise(
        service=svc, nodes=NodeIndex(nodes), endpoint_slices=slices, settings=options, now=now,
        unhealthy=unhealthy,
    )  # fmt: skip
    assert got == expected(svc, nodes, slices, options, now, unhealthy)
    return got


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_rule_as_given(case: Any) -> None:
    got = check(case.svc, case.nodes, case.slices, unhealthy=case.unhealthy, **case.settings)
    assert (got is None) == (not case.ips)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_rule_as_a_local_service(case: Any) -> None:
    svc = dataclasses.replace(case.svc, external_traffic_policy="Local")
    names = [n.name for n in case.nodes]
    for hosts in (names, names[::2], names[1:], []):
        slices = [
            endpoint_slice(svc.name, [endpoint(h) for h in hosts] + [endpoint("elsewhere")]),
            endpoint_slice(svc.name, [endpoint(n, ready=False) for n in names], name="b"),
        ]
        check(svc, case.nodes, slices, unhealthy=case.unhealthy, **case.settings)


def test_the_kind_4node_case() -> None:
    docs = yaml.safe_load((CASES_DIR / "kind-4node" / "cluster.yaml").read_text())
    items = docs["items"]
    nodes = [node_view(o) for o in items if o["kind"] == "Node"]
    services = [service_view(o) for o in items if o["kind"] == "Service"]
    slices = [endpoint_slice_view(o) for o in items if o["kind"] == "EndpointSlice"]
    assert nodes and services
    answered = [
        check(svc, nodes, slices, default_lb_service_ipam=ipam)
        for svc in services
        for ipam in ("lbipam", "nodeipam")
    ]
    assert any(answered)


def test_hidden_nodes_are_named_in_node_order() -> None:
    nodes = [
        node("c", internal=["10.0.0.3"]),
        node("a", internal=["10.0.0.1"], external=["203.0.113.1"]),
        node("b", internal=["10.0.0.2"]),
    ]
    got = check(service(), nodes)
    assert got is not None and got.hidden == ("c", "b")
    local = service(etp="Local")
    slices = [endpoint_slice("web", [endpoint("b"), endpoint("a"), endpoint("c")])]
    got = check(local, nodes, slices)
    assert got is not None and got.hidden == ("c", "b")


def test_empty_malformed_and_unmanaged_give_none() -> None:
    nodes = [node("w1", internal=["10.0.0.1"])]
    assert check(service(selector="pool=gpu"), nodes) is None
    assert check(service(selector="a=b,"), nodes) is None
    assert check(service(cls="other"), nodes) is None
    assert check(service(etp="Local"), nodes) is None


POOLS = ("a", "b", "c")
SELECTORS = (
    None,
    "",
    "pool=a",
    "pool in (a,b)",
    "pool!=c",
    "!pool",
    "zone",
    "pool notin (a),zone=z1",
    "kubernetes.io/hostname in (n1,n3,n5)",
)


def random_node(rng: random.Random, i: int) -> NodeView:
    labels: dict[str, str] = {}
    if rng.random() < 0.8:
        labels["pool"] = rng.choice(POOLS)
    if rng.random() < 0.5:
        labels["zone"] = rng.choice(("z1", "z2"))
    if rng.random() < 0.1:
        labels[EXCLUDE] = ""
    taints = [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]
    internal = rng.choice(([], [f"10.0.0.{i}"], [f"fd00::{i:x}"], [f"10.0.0.{i}", f"fd00::{i:x}"]))
    external = rng.choice(([], [], [f"203.0.113.{i}"], [f"2001:db8::{i:x}"], ["not-an-ip"]))
    if rng.random() < 0.05:
        internal = ["10.0.0.250"]  # an address shared by two Nodes
    return node(
        f"n{i}",
        internal=internal,
        external=external,
        labels=labels,
        deleting=rng.random() < 0.05,
        taints=taints if rng.random() < 0.05 else [],
        ready=rng.choice(("True", "True", "True", "False", "Unknown", None)),
        ready_since=NOW - rng.choice((5, 30, 120, 3600)),
    )


def random_service(rng: random.Random, i: int) -> ServiceView:
    return service(
        f"s{i}",
        selector=rng.choice(SELECTORS),
        etp=rng.choice(("Cluster", "Local", "Local", None)),
        families=rng.choice((("IPv4",), ("IPv6",), ("IPv4", "IPv6"), ("IPv6", "IPv4"), ())),
        policy=rng.choice((None, "SingleStack", "PreferDualStack")),
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [random_node(rng, i) for i in range(rng.randint(0, 30))]
    names = [n.name for n in nodes] + ["n999"]
    settings = {
        "per_node_address_fallback": rng.random() < 0.3,
        "exclude_not_ready_nodes": rng.random() < 0.5,
        "not_ready_grace_seconds": rng.choice((0.0, 60.0)),
        "ip_mode": rng.choice(("VIP", "Proxy")),
    }
    index = NodeIndex(nodes)  # one index for every Service, as in the reconciler
    options = SelectionSettings(**settings)
    unhealthy = {n.name: "down" for n in nodes if rng.random() < 0.3}
    memo = SummaryMemo()
    answered = 0
    for i in range(25):
        svc = random_service(rng, i)
        readiness = (True, None, False)
        slices = [
            endpoint_slice(
                svc.name,
                [endpoint(rng.choice(names), ready=rng.choice(readiness)) for _ in range(4)],
                name=f"{svc.name}-{k}",
            )
            for k in range(rng.randint(0, 2))
        ]
        got = summarise(
            service=svc, nodes=index, endpoint_slices=slices, settings=options, now=NOW,
            unhealthy=unhealthy,
        )  # fmt: skip
        assert got == expected(svc, nodes, slices, options, NOW, unhealthy), (seed, i, svc)
        # One memo for every Service of the index, as the Decider keeps it: a result kept
        # for other Services with the same candidates is this Service's too.
        kept = summarise(
            service=svc, nodes=index, endpoint_slices=slices, settings=options, now=NOW,
            unhealthy=unhealthy, memo=memo,
        )  # fmt: skip
        assert kept == got, (seed, i, svc)
        answered += got is not None
    if len(nodes) > 10:
        assert answered, "no Service had an ingress: the generator is too strict"


def test_a_local_service_without_a_selector_stays_inside_its_pools_nodes() -> None:
    # Before: summarise kept every Node holding a ready endpoint when the Service had no
    # selector annotation, so a tenant's Local Service was published on Nodes outside its
    # NodeAddressPool (found by bench_peer --pools, bench/README.md §13); select refused.
    pool = pool_from_object(
        {"metadata": {"name": "edge"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "a"}}}}
    )
    nodes = [
        node("in", internal=["10.0.0.1"], labels={"pool": "a"}),
        node("out", internal=["10.0.0.2"], labels={"pool": "b"}),
    ]
    local = service(etp="Local")
    settings = SelectionSettings()
    args: dict[str, Any] = {
        "service": local, "nodes": NodeIndex(nodes), "settings": settings, "now": NOW, "pool": pool,
    }  # fmt: skip
    outside = [endpoint_slice("web", [endpoint("out")])]
    assert select(endpoint_slices=outside, **args).ingress == ()
    assert summarise(endpoint_slices=outside, **args) is None
    both = [endpoint_slice("web", [endpoint("out"), endpoint("in")])]
    got = summarise(endpoint_slices=both, **args)
    assert got is not None and got.ingress == select(endpoint_slices=both, **args).ingress
    assert [e["ip"] for e in got.ingress] == ["10.0.0.1"]


CANDIDATE_CODES = {"Selected", "ExternalIPPreferred", "NoAddressOfFamily", "NotReady", "Unhealthy"}
"""Verdicts only a candidate gets (``_advertise``'s): a Node that passed the selector, the
pool, the KEP-3458 predicates and the ready-endpoint filter."""
RANDOM_POOLS = (
    None,
    pool_from_object(
        {"metadata": {"name": "ab"}, "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}}
    ),
    pool_from_object(
        {
            "metadata": {"name": "both"},
            "spec": {
                "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]},
                "addressTypes": ["ExternalIP", "InternalIP"],
                "ignoreExcludeLabel": True,
            },
        }
    ),
)


@pytest.mark.parametrize("seed", range(40))
def test_a_local_service_without_candidates_selects_as_if_it_had_no_endpoints(seed: int) -> None:
    """``has_candidates`` is what lets the decision path share the outcome of every
    eTP=Local Service without a candidate (app/core/decision.py): when it says ``False``,
    ``select`` gives the Selection it gives with no EndpointSlice at all; it says ``True``
    exactly when some Node gets a candidate's verdict, ``None`` exactly when ``select``
    does not select (not managed, malformed selector)."""
    rng = random.Random(seed)
    nodes = [random_node(rng, i) for i in range(rng.randint(0, 30))]
    names = [n.name for n in nodes] + ["n999"]
    options = SelectionSettings(
        exclude_not_ready_nodes=rng.random() < 0.5,
        per_node_address_fallback=rng.random() < 0.3,
    )
    index = NodeIndex(nodes)
    unhealthy = {n.name: "down" for n in nodes if rng.random() < 0.3}
    seen = set()
    for i in range(25):
        svc = random_service(rng, i)
        pool = rng.choice(RANDOM_POOLS)
        slices = [
            endpoint_slice(
                svc.name,
                [endpoint(rng.choice(names), ready=rng.choice((True, None, False)))],
                name=f"{svc.name}-{k}",
            )
            for k in range(rng.randint(0, 2))
        ]
        args: dict[str, Any] = {
            "service": svc, "nodes": index, "settings": options, "pool": pool,
        }  # fmt: skip
        has = has_candidates(endpoint_slices=slices, **args)
        full = select(endpoint_slices=slices, now=NOW, unhealthy=unhealthy, **args)
        seen.add(has)
        if has is None:
            assert full.ingress is None or not full.managed, (seed, i)
            continue
        assert has == any(v.code in CANDIDATE_CODES for v in full.nodes), (seed, i, svc)
        if not has and svc.external_traffic_policy == "Local":
            bare = select(endpoint_slices=(), now=NOW, unhealthy=unhealthy, **args)
            assert full == bare, (seed, i, svc)
    if len(nodes) > 10:
        assert {True, False} <= seen, "the generator never covered both answers"


def test_the_memo_shares_one_result_between_selectors_that_leave_the_same_nodes() -> None:
    nodes = NodeIndex(
        [
            node("a", internal=["10.0.0.1"], labels={"pool": "a"}),
            node("b", internal=["10.0.0.2"], labels={"pool": "b"}),
        ]
    )
    memo, settings = SummaryMemo(), SelectionSettings()
    args: dict[str, Any] = {"nodes": nodes, "endpoint_slices": (), "settings": settings, "now": NOW}
    first = summarise(service=service("x", selector="pool=a"), memo=memo, **args)
    second = summarise(service=service("y", selector="pool in (a)"), memo=memo, **args)
    other = summarise(service=service("z", selector="pool=b"), memo=memo, **args)
    assert first is not None and first is second and len(memo) == 2
    assert other is not None and [e["ip"] for e in other.ingress] == ["10.0.0.2"]
    # Another family is another result.
    six = summarise(service=service("v", selector="pool=a", families=("IPv6",)), memo=memo, **args)
    assert six is None and len(memo) == 3


def test_the_memo_starts_over_past_its_position_bound() -> None:
    memo = SummaryMemo()
    memo.put((b"\0" * 4 * (MEMO_POSITIONS - 1), ("IPv4",), None), None)
    assert len(memo) == 1
    memo.put((b"\0" * 8, ("IPv4",), None), None)
    assert len(memo) == 1 and memo.get((b"\0" * 8, ("IPv4",), None)) == (None,)
