"""The one decision path (app/core/decision.py) answers repeats exactly as ``select`` would.

Same inputs, same result: a memoised Outcome is reused only for a Service with the same
selection key (:data:`~app.core.decision.SHARED_FIELDS`; an eTP=Local Service adds its name
and EndpointSlices), the same Node snapshot and health view, and a ``now`` before the first
NotReady grace period runs out. Each case below changes one input and checks the Decider
asks ``select`` again and returns its new answer; the last ones check that every caller's
answer is the same decision.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from app.core import decision
from app.core.decision import (
    MAX_SELECTOR_CHARS,
    SHARED_FIELDS,
    Decider,
    NotMemoised,
    Outcome,
    Snapshot,
    selection_key,
)
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import select
from app.core.options import SelectionSettings
from app.core.pools import PoolSet, pool_from_object
from app.core.ports import OWNERSHIP_FIELDS
from app.core.views import EndpointSliceView, ServiceView
from tests.core.builders import NOW, endpoint, endpoint_slice, node, service

SETTINGS = SelectionSettings()


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ServiceView]]:
    """The Services each Decider had to compute (``select`` or ``summarise``) for."""
    calls: list[ServiceView] = []
    own = Decider._select

    def counting(self: Decider, svc: ServiceView, *args: Any) -> Outcome:
        calls.append(svc)
        return own(self, svc, *args)

    monkeypatch.setattr(Decider, "_select", counting)
    yield calls


def pool_nodes(pool: str = "edge") -> NodeIndex:
    return NodeIndex(
        [
            node("a", internal=["10.0.0.1"], labels={"pool": pool}),
            node("b", internal=["10.0.0.2"], labels={"pool": "core"}),
        ]
    )


def snap(
    nodes: NodeIndex,
    *,
    slices: Sequence[EndpointSliceView] = (),
    now: float = NOW,
    unhealthy: dict[str, str] | None = None,
) -> Snapshot:
    return Snapshot(
        nodes=nodes,
        now=now,
        endpoint_slices_of=lambda namespace, name: slices,
        unhealthy=unhealthy if unhealthy is not None else NO_UNHEALTHY,
    )


def direct(
    svc: ServiceView,
    nodes: NodeIndex,
    *,
    slices: Sequence[EndpointSliceView] = (),
    now: float = NOW,
    settings: SelectionSettings = SETTINGS,
    unhealthy: dict[str, str] | None = None,
) -> Outcome:
    """The Outcome of ``select`` itself, no memo, no fast path."""
    return Outcome.of(
        select(
            service=svc,
            nodes=nodes,
            endpoint_slices=slices,
            settings=settings,
            now=now,
            unhealthy=unhealthy or {},
        )
    )


def test_identical_request_is_answered_from_the_memo(computed: list[ServiceView]) -> None:
    decider, nodes = Decider(SETTINGS), pool_nodes()
    state = snap(nodes)
    svc = service(selector="pool=edge")
    first = decider.outcome(svc, state)
    again = decider.outcome(service(selector="pool=edge"), state)
    assert (len(computed), decider.hits, decider.misses) == (1, 1, 1)
    assert again == first == direct(svc, nodes)


def test_status_and_resource_version_are_not_part_of_the_key(computed: list[ServiceView]) -> None:
    """A GitOps re-apply carries a new resourceVersion and the current status."""
    decider, state = Decider(SETTINGS), snap(pool_nodes())
    decider.outcome(service(selector="pool=edge"), state)
    reapplied = dataclasses.replace(
        service(selector="pool=edge", ingress=[{"ip": "192.0.2.1"}]), resource_version="99"
    )
    decider.outcome(reapplied, state)
    assert len(computed) == 1


def test_select_reads_neither_status_nor_resource_version() -> None:
    """Why leaving them out of the key is exact: select gives the same Selection."""
    nodes = pool_nodes()
    plain = service(selector="pool=edge")
    other = dataclasses.replace(
        service(selector="pool=edge", ingress=[{"ip": "192.0.2.1"}]), resource_version="99"
    )
    assert plain.ingress != other.ingress and plain.resource_version != other.resource_version
    assert select(
        service=plain, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW
    ) == select(service=other, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW)


def test_node_change_drops_the_memo(computed: list[ServiceView]) -> None:
    """The selector matched no Node; a Node relabelled into the pool now matches."""
    decider = Decider(SETTINGS)
    svc = service(selector="pool=gpu")
    before = decider.outcome(svc, snap(pool_nodes("edge")))
    gpu = pool_nodes("gpu")
    after = decider.outcome(svc, snap(gpu))
    assert len(computed) == 2 and len(decider) == 1
    assert before != after
    assert after == direct(svc, gpu)
    assert after.ingress == ({"ip": "10.0.0.1", "ipMode": "VIP"},)


def test_health_view_change_drops_the_memo(computed: list[ServiceView]) -> None:
    """A new health view (docs/design.md §4.11) is a new object: node a fails its checks."""
    decider, nodes = Decider(SETTINGS), pool_nodes()
    svc = service()
    healthy = decider.outcome(svc, snap(nodes))
    failing = {"a": "healthz: connection refused"}
    after = decider.outcome(svc, snap(nodes, unhealthy=failing))
    assert len(computed) == 2
    assert len(healthy.ips) == 2 and after.ips == {"10.0.0.2"} and after.unhealthy == 1
    assert after == direct(svc, nodes, unhealthy=failing)


def test_endpoint_slice_change_is_a_miss(computed: list[ServiceView]) -> None:
    """eTP=Local: an endpoint becoming ready on node a gives the Service an ingress."""
    decider, nodes = Decider(SETTINGS), pool_nodes()
    svc = service(etp="Local")
    not_ready = (endpoint_slice("web", [endpoint("a", ready=False)]),)
    ready = (endpoint_slice("web", [endpoint("a", ready=True)]),)
    before = decider.outcome(svc, snap(nodes, slices=not_ready))
    after = decider.outcome(svc, snap(nodes, slices=ready))
    assert len(computed) == 2
    assert before.ingress == () and after.ingress == ({"ip": "10.0.0.1", "ipMode": "VIP"},)
    assert after == direct(svc, nodes, slices=ready)
    assert decider.outcome(svc, snap(nodes, slices=ready)) == after
    assert len(computed) == 2  # equal slices (new objects) are a hit


SERVICE_FIELD_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("type", {"type": "NodePort"}),
    ("loadBalancerClass", {"load_balancer_class": "example.com/other"}),
    ("deletionTimestamp", {"deleting": True}),
    ("node selector annotation", {"match_node_labels": "pool=core"}),
    ("externalTrafficPolicy", {"external_traffic_policy": "Local"}),
    ("ipFamilies", {"ip_families": ("IPv6",)}),
    ("ipFamilyPolicy", {"ip_family_policy": "RequireDualStack"}),
]
PER_SERVICE = [("namespace", {"namespace": "prod"}), ("name", {"name": "api"})]


@pytest.mark.parametrize(
    "changes", [c for _, c in SERVICE_FIELD_CHANGES], ids=[i for i, _ in SERVICE_FIELD_CHANGES]
)
def test_change_to_a_field_select_reads_is_a_miss(
    changes: dict[str, Any], computed: list[ServiceView]
) -> None:
    decider, nodes = Decider(SETTINGS), pool_nodes()
    svc = service(selector="pool=edge")
    changed = dataclasses.replace(svc, **changes)
    decider.outcome(svc, snap(nodes))
    assert decider.outcome(changed, snap(nodes)) == direct(changed, nodes)
    assert len(computed) == 2


@pytest.mark.parametrize("changes", [c for _, c in PER_SERVICE], ids=[i for i, _ in PER_SERVICE])
def test_namespace_and_name_key_only_a_local_service(
    changes: dict[str, Any], computed: list[ServiceView]
) -> None:
    """``select`` reads them only to pick a Local Service's EndpointSlices."""
    decider, nodes = Decider(SETTINGS), pool_nodes()
    state = snap(nodes, slices=(endpoint_slice("web", [endpoint("a")]),))
    for policy, calls in (("Cluster", 1), ("Local", 3)):
        svc = service(selector="pool=edge", etp=policy)
        decider.outcome(svc, state)
        changed = dataclasses.replace(svc, **changes)
        assert decider.outcome(changed, state) == direct(
            changed, nodes, slices=state.endpoint_slices_of("", "")
        )
        assert len(computed) == calls


def test_every_field_select_reads_is_covered_above() -> None:
    """A new ServiceView field must be added to the key or shown unread by select."""
    covered = {next(iter(c)) for _, c in (*SERVICE_FIELD_CHANGES, *PER_SERVICE)}
    # uid: Events only, compare=False; the port-ownership fields: app.core.ports only;
    # labels: they choose a NodeAddressPool only, whose name keys the entry itself;
    # generation and serving: our status condition's inputs, compare=False.
    unread = {
        *("ingress", "ingress_ports", "resource_version", "uid", "labels"),
        *("generation", "serving", *OWNERSHIP_FIELDS),
    }
    assert {f.name for f in dataclasses.fields(ServiceView)} == covered | unread
    assert set(SHARED_FIELDS) == covered - {"namespace", "name"}


def test_entry_expires_when_a_not_ready_grace_period_runs_out(computed: list[ServiceView]) -> None:
    settings = SelectionSettings(exclude_not_ready_nodes=True, not_ready_grace_seconds=60)
    nodes = NodeIndex(
        [
            node("a", internal=["10.0.0.1"], ready="False", ready_since=NOW - 30),
            node("b", internal=["10.0.0.2"]),
        ]
    )
    decider, svc = Decider(settings), service()
    within = decider.outcome(svc, snap(nodes))
    decider.outcome(svc, snap(nodes, now=NOW + 29))
    assert len(computed) == 1
    beyond = decider.outcome(svc, snap(nodes, now=NOW + 31))
    assert len(computed) == 2
    assert len(within.ips) == 2 and beyond.ingress == ({"ip": "10.0.0.2", "ipMode": "VIP"},)
    assert beyond == direct(svc, nodes, settings=settings, now=NOW + 31)
    decider.outcome(svc, snap(nodes, now=NOW - 1))  # before it was computed: not reused
    assert len(computed) == 3


def test_the_memo_starts_over_beyond_its_bound(computed: list[ServiceView]) -> None:
    decider, state = Decider(SETTINGS, max_entries=2), snap(pool_nodes())
    a, b, c = (service(selector=f"pool in (edge, {name})") for name in ("a", "b", "c"))
    for svc in (a, b, a):
        decider.outcome(svc, state)
    assert len(computed) == 2 and len(decider) == 2
    decider.outcome(c, state)
    assert len(decider) == 1
    decider.outcome(a, state)
    assert len(computed) == 4


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        Decider(SETTINGS, max_entries=0)


def test_memo_only_lookup_answers_hits_and_refuses_misses(computed: list[ServiceView]) -> None:
    """The webhook route answers on the event loop only what needs no select()."""
    decider, state, svc = Decider(SETTINGS), snap(pool_nodes()), service(selector="pool=edge")
    with pytest.raises(NotMemoised):
        decider.outcome(svc, state, compute=False)
    assert not computed and len(decider) == 0
    done = decider.outcome(svc, state)
    assert done == decider.outcome(svc, state, compute=False)
    assert len(computed) == 1


def test_a_long_node_selector_is_computed_but_never_kept(computed: list[ServiceView]) -> None:
    """Each key holds the annotation; 4,096 keys of 256 KiB would pin 1 GiB."""
    decider, nodes = Decider(SETTINGS), pool_nodes()
    long = ",".join(["pool=edge"] * (MAX_SELECTOR_CHARS // 9 + 1))
    svc = service(selector=long)
    assert decider.outcome(svc, snap(nodes)) == direct(svc, nodes)
    assert decider.outcome(svc, snap(nodes)) == direct(svc, nodes)
    assert len(computed) == 2 and len(decider) == 0
    with pytest.raises(NotMemoised):
        decider.outcome(svc, snap(nodes), compute=False)


def test_services_sharing_selection_inputs_share_one_select_with_the_same_outcome(
    computed: list[ServiceView],
) -> None:
    """Random Services over random Nodes: the shared Outcome equals the Outcome of each
    Service's own ``select``, while the Decider computed once per distinct key."""
    rng = random.Random(36)
    nodes = NodeIndex(
        [
            node(
                f"n{i}",
                internal=[f"10.0.{i // 250}.{i % 250 + 1}"],
                external=[f"198.51.100.{i + 1}"] if rng.random() < 0.2 else [],
                labels={"pool": rng.choice(["edge", "core", "gpu"])},
                ready=rng.choice(["True", "True", "False"]),
            )
            for i in range(60)
        ]
    )
    selectors = [None, "pool=edge", "pool in (edge, gpu)", "pool!=core", "pool=none"]
    services = [
        service(
            f"svc-{k}",
            selector=rng.choice(selectors),
            etp=rng.choice(["Cluster", "Cluster", "Local"]),
        )
        for k in range(200)
    ]
    slices = {
        s.name: (endpoint_slice(s.name, [endpoint(f"n{rng.randrange(60)}")]),) for s in services
    }
    state = Snapshot(nodes=nodes, now=NOW, endpoint_slices_of=lambda ns, name: slices[name])
    decider = Decider(SETTINGS)
    for svc in services:
        mine = slices[svc.name] if svc.external_traffic_policy == "Local" else ()
        assert decider.outcome(svc, state) == direct(svc, nodes, slices=mine), svc.name
    # An eTP=Local Service without a candidate is keyed without its name (has_candidates):
    # here, one whose only endpoint is on a Node its selector or the predicates leave out.
    keys = {
        selection_key(s)[:-2]
        if s.external_traffic_policy == "Local"
        and not direct(s, nodes, slices=slices[s.name]).selected
        else selection_key(s)
        for s in services
    }
    assert len(computed) == len(keys) < len(services)


def test_local_services_without_a_candidate_share_one_select_per_pool(
    computed: list[ServiceView],
) -> None:
    """Local Services whose endpoints are all outside their NodeAddressPool (or who have
    none) share one outcome, the one ``select`` gives each of them (bench/README.md §13:
    122 of 128 full ``select`` runs of a 20-pool cold start were such Services); one
    with an endpoint inside is its own."""
    edge = pool_from_object(
        {"metadata": {"name": "edge"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "edge"}}}}
    )
    nodes = pool_nodes()
    pools = PoolSet([edge])
    where = {"s1": "b", "s2": "b", "s3": None, "s4": "a"}
    slices = {
        name: (endpoint_slice(name, [endpoint(on)]),) if on else () for name, on in where.items()
    }
    state = Snapshot(
        nodes=nodes, now=NOW, endpoint_slices_of=lambda ns, name: slices[name], pools=pools
    )
    decider = Decider(SETTINGS, memo_local=False)  # as the reconciler's
    for name in where:
        svc = service(name, etp="Local")
        got = decider.decide(svc, state)
        own = Outcome.of(
            select(
                service=svc, nodes=nodes, endpoint_slices=slices[name], settings=SETTINGS,
                now=NOW, pool=edge,
            )
        )  # fmt: skip
        assert got == own, name
    assert [s.name for s in computed] == ["s1", "s4"]
    assert decider.decide(service("s4", etp="Local"), state).candidates == ("10.0.0.1",)


def test_the_one_decision_module_is_where_select_meets_port_ownership() -> None:
    """``app.core.ports.decide`` is imported in app/ by app/core/decision.py only (issue 36:
    the reconciler, admission and both previews decide through :class:`Decider`)."""
    import ast
    import pathlib

    app = pathlib.Path(decision.__file__).parents[1]
    users = []
    for path in sorted(app.rglob("*.py")):
        for found in ast.walk(ast.parse(path.read_text())):
            imported = isinstance(found, ast.ImportFrom) and found.module == "app.core.ports"
            if imported and any(alias.name == "decide" for alias in found.names):
                users.append(str(path.relative_to(app)))
            attribute = isinstance(found, ast.Attribute) and found.attr == "decide"
            if attribute and isinstance(found.value, ast.Name) and found.value.id == "ports":
                users.append(str(path.relative_to(app)))
    assert users == ["core/decision.py"], users


def test_a_service_that_loses_every_address_gets_no_external_ip_preference_note() -> None:
    """ExternalIPPreferred says which eligible nodes are hidden behind others' ExternalIPs;
    a Service port ownership leaves without any address publishes none of them, so the
    note would send its author after the wrong cause (issue 37)."""
    from app.core.ports import Conflict, Holder, Ownership

    nodes = NodeIndex(
        [
            node("a", internal=["10.0.0.1"], external=["198.51.100.1"]),
            node("b", internal=["10.0.0.2"]),
        ]
    )
    outcome = Decider(SETTINGS).outcome(service(), snap(nodes))
    assert outcome.hidden == 1 and outcome.hidden_note is not None
    holder = Holder("Service", "team-a", "alpha")
    taken = Ownership(
        frozenset({"198.51.100.1"}), (Conflict("TCP", 80, holder, ("198.51.100.1",)),), "PortInUse"
    )
    after = outcome.after_ports(taken, nodes.node_of)
    assert after.ingress == () and after.code == "PortInUse"
    assert after.hidden == 0 and after.hidden_note is None


# -- bounds and staleness found by review ------------------------------------------------


def test_the_memo_is_bounded_by_the_addresses_its_outcomes_hold(
    computed: list[ServiceView], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A selector matching every Node makes an Outcome of every Node's address: the entry
    count alone would let a tenant's dry runs pin hundreds of MB at 5,000 Nodes."""
    monkeypatch.setattr(decision, "MAX_ADDRESSES", 5)
    decider, state = Decider(SETTINGS), snap(pool_nodes())
    services = [service(selector=f"pool in (edge, core, x{i})") for i in range(3)]
    for svc in services:  # two addresses each: the third would make 6 > 5
        decider.outcome(svc, state)
    assert len(decider) == 1 and len(computed) == 3
    decider.outcome(services[2], state)
    assert len(computed) == 3  # the newest is kept


def test_the_reconcilers_decider_keeps_no_local_outcomes(computed: list[ServiceView]) -> None:
    """Each Local Service is an entry of its own: thousands would evict the shared ones."""
    decider = Decider(SETTINGS, memo_local=False)
    state = snap(pool_nodes(), slices=(endpoint_slice("web", [endpoint("a")]),))
    local = service(etp="Local")
    first = decider.outcome(local, state)
    assert decider.outcome(local, state) == first and len(computed) == 2 and len(decider) == 0
    with pytest.raises(NotMemoised):
        decider.outcome(local, state, compute=False)


def test_a_rivals_claim_ends_when_its_not_ready_grace_period_runs_out() -> None:
    """Rival a (older) claims n1 while n1's NotReady grace runs; once it has run out, a
    no longer selects n1, so b, which only n1 matches, gets it: a kept claim must not
    outlive the rival's recheck_at."""
    from app.core.nodeipam import is_managed
    from app.core.ports import PortIndex
    from tests.core.ports_support import svc

    settings = SelectionSettings(exclude_not_ready_nodes=True, not_ready_grace_seconds=60)
    nodes = NodeIndex(
        [
            node(
                "n1", internal=["10.0.0.1"], labels={"role": "n1"}, ready="False", ready_since=NOW
            ),
            node("n3", internal=["10.0.0.3"], labels={"role": "n3"}),
        ]
    )
    a = svc("a", 80, created=NOW - 7200, selector="role in (n1, n3)")
    b = svc("b", 80, created=NOW - 3600, selector="role=n1")
    ports = PortIndex(lambda view: is_managed(view, settings)[0])
    for one in (a, b):
        ports.put_service(f"{one.namespace}/{one.name}", None, one)
    decider = Decider(settings)

    def at(now: float) -> Snapshot:
        return Snapshot(nodes=nodes, now=now, ports=ports, port_version=0)

    assert decider.decide(b, at(NOW + 10)).ingress == ()
    late = decider.decide(b, at(NOW + 120)).ingress
    assert [e["ip"] for e in late or ()] == ["10.0.0.1"]
    assert late == Decider(settings).decide(b, at(NOW + 120)).ingress


def test_advice_fits_the_holder() -> None:
    """A reserved port or one held on every address: no node selector avoids it."""
    from app.core.ports import Conflict, Holder, Ownership

    reserved = Ownership(
        frozenset({"10.0.0.1"}), (Conflict("TCP", 22, Holder("Reserved")),), "PortInUse"
    )
    node_port = Ownership(
        frozenset({"10.0.0.1"}), (Conflict("TCP", 80, Holder("NodePort", "a", "b")),), "PortInUse"
    )
    taken = Ownership(
        frozenset({"10.0.0.1"}),
        (Conflict("TCP", 80, Holder("Service", "a", "b"), ("10.0.0.1",)),),
        "PortInUse",
    )
    assert reserved.empty_reason().endswith(
        "ask an administrator to grant it (setting reserved-port-exceptions)"
    )
    assert node_port.empty_reason().endswith("use another port (it is held on every node address)")
    assert taken.empty_reason().endswith("a node selector that avoids the holders' nodes")


def test_all_nodes_unhealthy_names_only_the_nodes_still_advertised() -> None:
    from app.core.ports import Conflict, Holder, Ownership

    nodes = NodeIndex([node("n1", internal=["10.0.0.1"]), node("n2", internal=["10.0.0.2"])])
    failing = {"n1": "HTTP 503", "n2": "HTTP 503"}
    outcome = Decider(SETTINGS).outcome(service(), snap(nodes, unhealthy=failing))
    assert outcome.unhealthy_advertised == ("n1", "n2")
    holder = Holder("Service", "team-a", "alpha")
    lost = Ownership(
        frozenset({"10.0.0.1"}), (Conflict("TCP", 80, holder, ("10.0.0.1",)),), "PortInUse"
    )
    after = outcome.after_ports(lost, nodes.node_of)
    assert after.unhealthy_advertised == ("n2",)
    assert after.all_unhealthy_note is not None and "n1" not in after.all_unhealthy_note


def test_selectors_that_leave_the_same_nodes_share_one_outcome_object() -> None:
    """Two selection keys, one set of candidates: one Outcome kept for both (20 pools at
    5,000 Nodes made 2,720 keys over ~1,000 candidate sets, bench/README.md §13), equal
    to each Service's own ``select``; a new Node snapshot starts over."""
    nodes, decider = pool_nodes(), Decider(SETTINGS)
    one, other = service("one", selector="pool=edge"), service("other", selector="pool in (edge)")
    first = decider.outcome(one, snap(nodes))
    assert first is decider.outcome(other, snap(nodes))
    assert first == direct(one, nodes) == direct(other, nodes)
    moved = pool_nodes()
    again = decider.outcome(other, snap(moved))
    assert again == first and again is not first


def test_a_lookup_that_must_not_compute_matches_no_selector() -> None:
    """``compute=False`` (admission on its event loop) never walks the Nodes: a Local
    Service's candidate check would match its selector, so it is not made then."""
    nodes, decider = pool_nodes(), Decider(SETTINGS)
    local = service("web", selector="pool=gpu", etp="Local")
    with pytest.raises(NotMemoised):
        decider.outcome(local, snap(nodes), compute=False)
    assert nodes.memoised() == 0
    computed = decider.outcome(local, snap(nodes))
    assert computed == direct(local, nodes) and nodes.memoised() == 1
