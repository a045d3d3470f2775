"""NodeAddressPools (app/core/pools.py, docs/design.md §4.13): which pool a Service uses,
what a pool narrows, and that a tenant gets nothing a pool does not grant.

Each case builds pool objects as an administrator writes them (the CRD's JSON) and
checks the decision through the one path every caller shares (:class:`Decider`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from app.core import admission
from app.core.codes import NO_POOL, NOT_IN_POOL, PORT_NOT_IN_POOL, SELECTED
from app.core.decision import Decider, Snapshot
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed, select
from app.core.options import SelectionSettings
from app.core.pools import PoolSet, label_selector, pool_from_object
from app.core.ports import PortIndex
from app.core.views import EXCLUDE_FROM_LB_LABEL, ServiceView
from tests.core.admission.builders import review
from tests.core.admission_support import svc as admission_svc
from tests.core.builders import NOW, node, service
from tests.support.objects import node_address_pool as pool

SETTINGS = SelectionSettings()
NODES = NodeIndex(
    [
        node("edge-1", internal=["10.0.0.1"], external=["192.0.2.1"], labels={"role": "edge"}),
        node("edge-2", internal=["10.0.0.2"], external=["192.0.2.2"], labels={"role": "edge"}),
        node("work-1", internal=["10.0.1.1"], labels={"role": "worker"}),
        node(
            "cp-1",
            internal=["10.0.2.1"],
            labels={"role": "control-plane", EXCLUDE_FROM_LB_LABEL: ""},
        ),
    ]
)
NAMESPACES = {"team-a": {"tenant": "a"}, "team-b": {"tenant": "b"}, "other": {}}


TENANTS = [
    pool(
        "team-a-edge",
        nodeSelector={"matchLabels": {"role": "edge"}},
        ports=[{"port": 80}, {"port": 443, "protocol": "TCP"}],
        serviceAllocation={"namespaces": ["team-a"]},
    ),
    pool(
        "team-b-high",
        ports=[{"port": 8000, "endPort": 8999}],
        serviceAllocation={"namespaceSelectors": [{"matchLabels": {"tenant": "b"}}]},
    ),
]


def svc(namespace: str, *ports: int, selector: str | None = None, **labels: str) -> ServiceView:
    view = service("web", namespace=namespace, selector=selector)
    return dataclasses.replace(
        view,
        ports=tuple(("TCP", p) for p in ports),
        labels=tuple(sorted(labels.items())),
    )


def snap(objects: list[dict[str, Any]]) -> Snapshot:
    return Snapshot(
        nodes=NODES,
        now=NOW,
        pools=PoolSet(pool_from_object(o) for o in objects),
        namespace_labels=NAMESPACES.get,
    )


def ingress(decider: Decider, view: ServiceView, state: Snapshot) -> list[str]:
    return list(decider.decide(view, state).candidates)


def test_no_pool_objects_change_nothing() -> None:
    """Cilium compatibility: with no pool the decision is today's, for every namespace."""
    decider = Decider(SETTINGS)
    for namespace in NAMESPACES:
        view = svc(namespace, 80)
        plain = select(service=view, nodes=NODES, endpoint_slices=(), settings=SETTINGS, now=NOW)
        assert ingress(decider, view, snap([])) == [e["ip"] for e in plain.ingress or ()]
        assert plain.pool is None


def test_two_tenants_get_their_pools_nodes_and_ports() -> None:
    decider, state = Decider(SETTINGS), snap(TENANTS)
    # team-a: edge nodes only (their ExternalIPs), 80 and 443.
    assert ingress(decider, svc("team-a", 80, 443), state) == ["192.0.2.1", "192.0.2.2"]
    # team-b: every eligible node (cp-1 keeps its exclusion label), 8000-8999.
    assert ingress(decider, svc("team-b", 8080), state) == ["192.0.2.1", "192.0.2.2"]
    preview = decider.preview(svc("team-a", 80), state)
    assert preview.pool == "team-a-edge"
    verdicts = {v.name: v for v in preview.nodes}
    assert verdicts["work-1"].code == NOT_IN_POOL
    assert "team-a-edge" in verdicts["work-1"].reason
    assert verdicts["edge-1"].code == SELECTED


@pytest.mark.parametrize(
    ("namespace", "port", "code", "named"),
    [
        ("team-a", 8080, PORT_NOT_IN_POOL, "team-a-edge"),
        ("team-b", 443, PORT_NOT_IN_POOL, "team-b-high"),
        ("other", 80, NO_POOL, "namespace other"),
    ],
)
def test_a_tenant_gets_nothing_no_pool_grants(
    namespace: str, port: int, code: str, named: str
) -> None:
    """Fail closed: a port outside the pool, or a namespace no pool allows, gets no address
    (the reconciler's decision, whether the webhook was in the path or not)."""
    decider, state = Decider(SETTINGS), snap(TENANTS)
    outcome = decider.decide(svc(namespace, port), state)
    assert outcome.ingress == ()
    assert outcome.code == code
    assert named in outcome.reason
    assert "administrator" in outcome.reason
    assert decider.preview(svc(namespace, port), state).code == code


def test_a_service_label_alone_cannot_reach_another_tenants_pool() -> None:
    """serviceSelectors narrow within the namespaces; they never widen past them."""
    objects = [
        pool(
            "vip",
            nodeSelector={"matchLabels": {"role": "edge"}},
            serviceAllocation={
                "namespaces": ["team-a"],
                "serviceSelectors": [{"matchLabels": {"tier": "vip"}}],
            },
        )
    ]
    decider, state = Decider(SETTINGS), snap(objects)
    assert ingress(decider, svc("team-a", 80, tier="vip"), state) == ["192.0.2.1", "192.0.2.2"]
    assert decider.decide(svc("team-a", 80), state).code == NO_POOL
    assert decider.decide(svc("team-b", 80, tier="vip"), state).code == NO_POOL


def test_priority_orders_pools_then_name() -> None:
    objects = [
        pool("z-default", serviceAllocation={}),
        pool(
            "b-edge",
            nodeSelector={"matchLabels": {"role": "edge"}},
            serviceAllocation={"priority": 10, "namespaces": ["team-a"]},
        ),
        pool(
            "a-workers",
            nodeSelector={"matchLabels": {"role": "worker"}},
            addressTypes=["InternalIP"],
            serviceAllocation={"priority": 20, "namespaces": ["team-a"]},
        ),
    ]
    decider, state = Decider(SETTINGS), snap(objects)
    assert decider.choice(svc("team-a", 80), state).pool.name == "b-edge"  # type: ignore[union-attr]
    # A pool without a priority comes after every pool with one, whatever its name.
    assert decider.choice(svc("team-b", 80), state).pool.name == "z-default"  # type: ignore[union-attr]
    # The first pool that grants every port wins: b-edge has no ports limit, so it does.
    limited = [
        dict(objects[1], spec={**objects[1]["spec"], "ports": [{"port": 443}]}),
        *objects[::2],
    ]
    state = snap(limited)
    chosen = decider.choice(svc("team-a", 80), state).pool
    assert chosen is not None and chosen.name == "a-workers"
    # ... and its addressTypes replace the setting: InternalIPs.
    assert ingress(decider, svc("team-a", 80), state) == ["10.0.1.1"]


def test_pool_settings_override_the_exclusion_label_and_address_types() -> None:
    objects = [
        pool("cp", nodeSelector={"matchLabels": {"role": "control-plane"}}, ignoreExcludeLabel=True)
    ]
    decider = Decider(SETTINGS)
    assert ingress(decider, svc("other", 80), snap(objects)) == ["10.0.2.1"]
    objects = [
        pool(
            "edge",
            nodeSelector={"matchLabels": {"role": "edge"}},
            addressTypes=["InternalIP", "ExternalIP"],
        )
    ]
    assert ingress(decider, svc("other", 80), snap(objects)) == [
        "10.0.0.1", "10.0.0.2", "192.0.2.1", "192.0.2.2",
    ]  # fmt: skip


def test_the_annotation_selects_within_the_pool() -> None:
    decider, state = Decider(SETTINGS), snap(TENANTS)
    assert ingress(decider, svc("team-a", 80, selector="kubernetes.io/hostname=edge-1"), state) == [
        "192.0.2.1"
    ]
    only = svc("team-a", 80, selector="role=worker")
    outcome = decider.decide(only, state)
    assert outcome.code == NOT_IN_POOL
    assert "team-a-edge" in outcome.reason


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}},
            "spec.nodeSelector.matchExpressions[0].operator",
        ),
        ({"nodeSelector": {"matchLabels": {"bad key!": "x"}}}, "spec.nodeSelector"),
        ({"ports": [{"port": 90, "endPort": 80}]}, "spec.ports[0].endPort"),
        ({"ports": [{"port": 0}]}, "spec.ports[0].port"),
        ({"addressTypes": ["Hostname"]}, "spec.addressTypes"),
        (
            {
                "serviceAllocation": {
                    "namespaceSelectors": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]
                }
            },
            "spec.serviceAllocation.namespaceSelectors[0].matchExpressions[0].values",
        ),
    ],
)
def test_an_invalid_pool_names_the_field_and_applies_to_nobody(
    spec: dict[str, Any], field: str
) -> None:
    parsed = pool_from_object(pool("broken", **spec))
    assert parsed.error is not None and parsed.error.startswith(field), parsed.error
    decider, state = Decider(SETTINGS), snap([pool("broken", **spec)])
    outcome = decider.decide(svc("team-a", 80), state)
    assert outcome.code == NO_POOL
    assert "apply to nobody: broken" in outcome.reason


def test_label_selector_means_what_apimachinery_means() -> None:
    assert label_selector({}, field="f") is None  # empty: matches everything
    sel = label_selector(
        {
            "matchLabels": {"a": "1"},
            "matchExpressions": [
                {"key": "b", "operator": "NotIn", "values": ["x"]},
                {"key": "c", "operator": "DoesNotExist"},
            ],
        },
        field="f",
    )
    assert sel is not None
    assert sel.matches({"a": "1"})
    assert not sel.matches({"a": "1", "b": "x"})
    assert not sel.matches({"a": "1", "c": ""})
    assert not sel.matches({})


@pytest.mark.parametrize(
    ("selector", "field", "shown"),
    [
        # A comma inside a value would be a second value, not a wider pool by mistake.
        (
            {"matchExpressions": [{"key": "role", "operator": "In", "values": ["edge,worker"]}]},
            "f.matchExpressions[0].values[0]",
            '"edge,worker"',
        ),
        (
            {
                "matchExpressions": [
                    {"key": "role", "operator": "NotIn", "values": ["a", "edge),role notin (x"]}
                ]
            },
            "f.matchExpressions[0].values[1]",
            '"edge),role notin (x"',
        ),
        # An operator inside a key would be another requirement.
        (
            {"matchExpressions": [{"key": "tenant notin (team-a)", "operator": "Exists"}]},
            "f.matchExpressions[0].key",
            '"tenant notin (team-a)"',
        ),
        ({"matchLabels": {"role!": "edge"}}, "f.matchLabels", '"role!"'),
        ({"matchLabels": {"role": "edge "}}, "f.matchLabels[role]", '"edge "'),
        # A YAML dump's unquoted number as a key (the API server only has strings).
        ({"matchLabels": {1: "edge", "b": "c"}}, "f.matchLabels", "1"),
    ],
)
def test_label_selector_refuses_keys_and_values_apimachinery_refuses(
    selector: dict[str, Any], field: str, shown: str
) -> None:
    """Each key and value is checked before the selector text is built, so selector
    syntax inside one is an error naming it, never a different selector."""
    with pytest.raises(ValueError) as err:
        label_selector(selector, field="f")
    assert str(err.value).startswith(f"{field}: Invalid value: {shown}: ")


def test_memo_keys_by_pool_and_starts_over_when_pools_change() -> None:
    """Two Services with one selection key but different pools get different answers from
    one Decider; a changed pool set is a new decision."""
    objects = [
        pool(
            "edge",
            nodeSelector={"matchLabels": {"role": "edge"}},
            serviceAllocation={"namespaces": ["team-a"]},
        ),
        pool(
            "work",
            nodeSelector={"matchLabels": {"role": "worker"}},
            serviceAllocation={"namespaces": ["team-b"]},
        ),
    ]
    decider, state = Decider(SETTINGS), snap(objects)
    a, b = svc("team-a", 80), svc("team-b", 80)
    assert ingress(decider, a, state) == ["192.0.2.1", "192.0.2.2"]
    assert ingress(decider, b, state) == ["10.0.1.1"]
    assert ingress(decider, a, state) == ["192.0.2.1", "192.0.2.2"]  # a memo hit, still a's
    swapped = [
        dict(o, spec={**o["spec"], "serviceAllocation": {"namespaces": [ns]}})
        for o, ns in zip(objects, ("team-b", "team-a"), strict=True)
    ]
    assert ingress(decider, a, snap(swapped)) == ["10.0.1.1"]


def review_with_pools(
    obj: dict[str, Any], objects: list[dict[str, Any]], old: dict[str, Any] | None = None
) -> admission.Decision:
    """/validate of ``obj`` (a CREATE, an UPDATE with ``old``) with ``objects`` as the pools."""
    body = review(obj, operation="UPDATE" if old is not None else "CREATE", old=old)
    body["request"]["namespace"] = obj["metadata"]["namespace"]
    snapshot = admission.ClusterSnapshot(
        nodes=NODES,
        endpoint_slices=(),
        now=NOW,
        ports=PortIndex(lambda view: is_managed(view, SETTINGS)[0]),
        pools=PoolSet(pool_from_object(o) for o in objects),
        namespace_labels=NAMESPACES.get,
    )
    return admission.validate(admission.parse_review(body), settings=SETTINGS, snapshot=snapshot)


def test_admission_denies_a_port_outside_the_pool_naming_it() -> None:
    denied = review_with_pools(admission_svc(namespace="team-a", ports=((8080, "TCP"),)), TENANTS)
    assert not denied.allowed
    assert (denied.message or "").startswith(
        "spec.ports[0].port: Forbidden: port 8080/TCP is outside NodeAddressPool team-a-edge"
        " (spec.ports: 80, 443/TCP)"
    )
    allowed = review_with_pools(admission_svc(namespace="team-a", ports=((443, "TCP"),)), TENANTS)
    assert allowed.allowed
    # No pool objects: the same Service is allowed (today's behaviour).
    assert review_with_pools(admission_svc(namespace="team-a", ports=((8080, "TCP"),)), []).allowed


def test_admission_ratchets_a_port_already_there_and_warns_a_namespace_without_a_pool() -> None:
    obj = admission_svc(namespace="team-a", ports=((8080, "TCP"),))
    kept = review_with_pools(obj, TENANTS, old=copy.deepcopy(obj))
    assert kept.allowed
    assert any("outside NodeAddressPool team-a-edge" in w for w in kept.warnings)
    other = review_with_pools(admission_svc(namespace="other"), TENANTS)
    assert other.allowed
    assert any("gets no node address" in w and "NodeAddressPool" in w for w in other.warnings)


def test_refusals_say_what_decided_them() -> None:
    """Ports split over two pools (a Service uses one), and a pool of the namespace whose
    serviceSelectors leave the Service out, each get the sentence that names it."""
    objects = [
        pool("a-web", ports=[{"port": 80}], serviceAllocation={"namespaces": ["team-a"]}),
        pool("a-alt", ports=[{"port": 8080}], serviceAllocation={"namespaces": ["team-a"]}),
        pool(
            "b-public",
            serviceAllocation={
                "namespaces": ["team-b"],
                "serviceSelectors": [{"matchLabels": {"exposure": "public"}}],
            },
        ),
    ]
    decider, state = Decider(SETTINGS), snap(objects)
    split = decider.decide(svc("team-a", 80, 8080), state)
    assert split.code == PORT_NOT_IN_POOL
    assert split.reason.startswith("no one NodeAddressPool grants every port of the Service")
    assert "a-web (spec.ports: 80)" in split.reason and "a-alt (spec.ports: 8080)" in split.reason
    outside = decider.decide(svc("team-a", 9090), state)
    assert outside.reason.startswith(
        "port 9090/TCP is outside every NodeAddressPool that applies to this Service:"
    )
    unlabelled = decider.decide(svc("team-b", 80), state)
    assert unlabelled.code == NO_POOL
    assert unlabelled.reason.startswith("NodeAddressPool b-public applies to namespace team-b")
    assert "serviceSelectors" in unlabelled.reason
    assert ingress(decider, svc("team-b", 80, exposure="public"), state) != []


def test_admission_ratchets_only_the_ports_oldobject_had() -> None:
    old = admission_svc(namespace="team-a", ports=((9999, "TCP"),))
    new = admission_svc(namespace="team-a", ports=((9999, "TCP"), (8080, "TCP")))
    denied = review_with_pools(new, TENANTS, old=old)
    assert not denied.allowed
    assert (denied.message or "").startswith("spec.ports[1].port: Forbidden: port 8080/TCP")
    grown = admission_svc(namespace="team-a", ports=((9999, "TCP"), (443, "TCP")))
    kept = review_with_pools(grown, TENANTS, old=old)
    assert kept.allowed, "443 is in the pool; 9999 was there before"
    assert any("(unchanged): the Service gets no node address" in w for w in kept.warnings)


def test_empty_ports_is_an_error_not_no_port() -> None:
    broken = pool_from_object(pool("p", ports=[]))
    assert broken.error is not None and broken.error.startswith("spec.ports: Invalid value")


def test_admission_warns_a_selector_that_picks_only_nodes_outside_the_pool() -> None:
    outside = admission_svc(namespace="team-a", ports=((443, "TCP"),))
    outside["metadata"]["annotations"] = {SETTINGS.match_node_labels_annotation: "role=worker"}
    decision = review_with_pools(outside, TENANTS)
    assert decision.allowed
    assert any("matches no node of its NodeAddressPool" in w for w in decision.warnings)
    inside = copy.deepcopy(outside)
    inside["metadata"]["annotations"] = {SETTINGS.match_node_labels_annotation: "role=edge"}
    assert not any("NodeAddressPool" in w for w in review_with_pools(inside, TENANTS).warnings)


def test_pools_that_narrow_alike_share_outcomes_but_name_their_own_refusals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memo keys a pooled Service by what its pool changes of select: two pools with
    one nodeSelector share a computed outcome; an empty one (its note names the pool) is
    computed again for the other pool, so each Service's Event names its own pool."""
    edge = {"matchLabels": {"role": "edge"}}
    objects = [
        pool("a", nodeSelector=edge, serviceAllocation={"namespaces": ["team-a"]}),
        pool("b", nodeSelector=edge, serviceAllocation={"namespaces": ["team-b"]}),
    ]
    decider, state = Decider(SETTINGS), snap(objects)
    assert ingress(decider, svc("team-a", 80), state) == ingress(decider, svc("team-b", 80), state)
    assert (decider.misses, decider.hits) == (1, 1)
    empty_a = decider.decide(svc("team-a", 80, selector="role=worker"), state)
    empty_b = decider.decide(svc("team-b", 80, selector="role=worker"), state)
    assert "NodeAddressPool a " in empty_a.reason and "NodeAddressPool b " in empty_b.reason


def test_outcomes_share_their_ingress_entries() -> None:
    """Memory at scale (bench/README.md §13): two outcomes over the same node address hold
    one entry object, never a copy each."""
    decider, state = Decider(SETTINGS), snap(TENANTS)
    a = decider.decide(svc("team-a", 80, 443), state)
    b = decider.decide(svc("team-b", 8080), state)
    assert a.ingress and b.ingress
    assert a.ingress[0] == b.ingress[0] and a.ingress[0] is b.ingress[0]
