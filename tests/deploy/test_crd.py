"""The NodeAddressPool CRD says what app/core/pools.py reads, no more and no less; the
chart ships it unchanged; the examples are pools the schema accepts and the decision
reads as deploy/README.md "Multi-tenant clusters" says. The API server's own verdict on
the schema and its CEL rules: test_crd_live.py."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from app.core import pools
from app.core.codes import NO_POOL, NOT_IN_POOL, PORT_NOT_IN_POOL
from app.core.decision import Decider, Snapshot
from app.core.nodeindex import NodeIndex
from app.core.options import EXTERNAL_IP, INTERNAL_IP, SelectionSettings
from app.core.views import service_view
from tests.core.builders import NOW, node
from tests.deploy import crd
from tests.deploy.render import find, render

OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist"]
"""metav1.LabelSelectorOperator's values (apimachinery)."""


def test_the_crd_serves_the_resource_the_controller_reads() -> None:
    definition = crd.crd()
    spec = definition["spec"]
    assert definition["metadata"]["name"] == f"{pools.PLURAL}.{pools.GROUP}"
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"]) == (
        pools.GROUP,
        pools.KIND,
        pools.PLURAL,
    )
    assert spec["scope"] == "Cluster"  # an administrator's object, no tenant's namespace
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (pools.VERSION, True, True)
    assert version["subresources"] == {"status": {}}
    assert find(render("deploy"), "CustomResourceDefinition", definition["metadata"]["name"])


def test_the_chart_ships_the_crd_of_deploy_base_byte_for_byte() -> None:
    """Helm installs crds/ as they are (no templating), so one file serves both."""
    assert crd.CHART_CRD_FILE.read_bytes() == crd.CRD_FILE.read_bytes(), (
        f"cp {crd.CRD_FILE.relative_to(crd.ROOT)} {crd.CHART_CRD_FILE.relative_to(crd.ROOT)}"
    )


def selector_schemas() -> dict[str, dict[str, Any]]:
    spec = crd.spec_schema()["properties"]
    allocation = spec["serviceAllocation"]["properties"]
    return {
        "spec.nodeSelector": spec["nodeSelector"],
        "spec.serviceAllocation.namespaceSelectors[]": allocation["namespaceSelectors"]["items"],
        "spec.serviceAllocation.serviceSelectors[]": allocation["serviceSelectors"]["items"],
    }


def test_the_enums_are_the_values_the_decision_reads() -> None:
    spec = crd.spec_schema()["properties"]
    assert tuple(spec["ports"]["items"]["properties"]["protocol"]["enum"]) == pools.PROTOCOLS
    assert spec["addressTypes"]["items"]["enum"] == [EXTERNAL_IP, INTERNAL_IP]
    for where, selector in selector_schemas().items():
        expression = selector["properties"]["matchExpressions"]["items"]
        assert expression["properties"]["operator"]["enum"] == OPERATORS, where
        assert selector["x-kubernetes-map-type"] == "atomic", where  # as upstream's


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_the_schema_admits_parses(operator: str) -> None:
    values = ["a"] if operator in ("In", "NotIn") else []
    selector = {"matchExpressions": [{"key": "k", "operator": operator, "values": values}]}
    assert pools.label_selector(selector, field="spec.nodeSelector") is not None


def test_a_protocol_and_an_address_type_outside_the_enums_make_a_pool_invalid() -> None:
    """What the schema refuses, pool_from_object refuses too (a pool stored before the
    CRD, or by a bare API server, reaches the controller)."""
    for spec in ({"ports": [{"port": 80, "protocol": "HTTP"}]}, {"addressTypes": ["Hostname"]}):
        assert pools.pool_from_object({"metadata": {"name": "x"}, "spec": spec}).error


CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    ".nodeSelector": ({}, {"nodeSelector": {"matchLabels": {"role": "edge"}}}),
    ".ports[].port": ({"ports": [{"port": 80}]}, {"ports": [{"port": 81}]}),
    ".ports[].endPort": ({"ports": [{"port": 80}]}, {"ports": [{"port": 80, "endPort": 90}]}),
    ".ports[].protocol": ({"ports": [{"port": 80}]}, {"ports": [{"port": 80, "protocol": "UDP"}]}),
    ".addressTypes": ({}, {"addressTypes": ["InternalIP"]}),
    ".ignoreExcludeLabel": ({}, {"ignoreExcludeLabel": True}),
    ".serviceAllocation.priority": ({}, {"serviceAllocation": {"priority": 0}}),
    ".serviceAllocation.namespaces": ({}, {"serviceAllocation": {"namespaces": ["team-a"]}}),
    ".serviceAllocation.namespaceSelectors": (
        {},
        {"serviceAllocation": {"namespaceSelectors": [{"matchLabels": {"tenant": "a"}}]}},
    ),
    ".serviceAllocation.serviceSelectors": (
        {},
        {"serviceAllocation": {"serviceSelectors": [{"matchLabels": {"tier": "vip"}}]}},
    ),
}
"""For each field of the schema, two specs that differ in it alone."""


def test_every_field_of_the_schema_is_one_pool_from_object_reads() -> None:
    assert set(CHANGES) == set(crd.leaves(crd.spec_schema()))
    validator = jsonschema.Draft7Validator(crd.json_schema(crd.spec_schema()))
    for path, (before, after) in CHANGES.items():
        parsed = [
            pools.pool_from_object({"metadata": {"name": "p"}, "spec": s}) for s in (before, after)
        ]
        assert [p.error for p in parsed] == [None, None], path
        assert parsed[0] != parsed[1], f"{path}: the schema declares it, the decision ignores it"
        validator.validate(after)


@pytest.mark.parametrize(
    ("path", "obj"),
    [(str(p.relative_to(crd.ROOT)), o) for p, o in crd.example_objects(pools.KIND)],
)
def test_every_example_pool_passes_the_schema_and_parses(path: str, obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == pools.API_VERSION
    jsonschema.Draft7Validator(crd.json_schema(crd.schema())).validate(obj)
    assert pools.pool_from_object(obj).error is None, path


def _sets(value: Any, parts: list[str]) -> bool:
    """Whether ``value`` sets the field at ``parts`` (in any item of a list)."""
    if not parts:
        return value is not None
    if isinstance(value, list):
        return any(_sets(item, parts) for item in value)
    return isinstance(value, dict) and _sets(value.get(parts[0]), parts[1:])


def test_the_reference_example_sets_every_field() -> None:
    (obj,) = [o for p, o in crd.example_objects(pools.KIND) if p.stem == "nodeaddresspool"]
    fields = set(crd.leaves(crd.spec_schema()))
    unset = {f for f in fields if not _sets(obj["spec"], f.strip(".").replace("[]", "").split("."))}
    assert not unset


NODES = NodeIndex(
    [
        node("edge-1", internal=["10.0.0.1"], external=["192.0.2.1"], labels={"role": "edge"}),
        node("edge-2", internal=["10.0.0.2"], external=["192.0.2.2"], labels={"role": "edge"}),
        node("worker-1", internal=["10.0.1.1"], external=["192.0.2.11"]),
    ]
)


def multi_tenant() -> tuple[Snapshot, dict[str, Any]]:
    """examples/multi-tenant on :data:`NODES`: the snapshot, and its Services by name."""
    objects = [o for p, o in crd.example_objects() if p.parent.name == "multi-tenant"]
    labels = {
        o["metadata"]["name"]: o["metadata"].get("labels", {})
        for o in objects
        if o["kind"] == "Namespace"
    }
    snap = Snapshot(
        nodes=NODES,
        now=NOW,
        pools=pools.PoolSet(pools.pool_from_object(o) for o in objects if o["kind"] == pools.KIND),
        namespace_labels=labels.get,
    )
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    return snap, services


def ips(decider: Decider, obj: dict[str, Any], snap: Snapshot) -> list[str]:
    return [e["ip"] for e in decider.decide(service_view(obj), snap).ingress or ()]


def test_the_worked_example_gives_team_a_the_edge_nodes_and_team_b_every_node() -> None:
    snap, services = multi_tenant()
    decider = Decider(SelectionSettings())
    assert ips(decider, services["web"], snap) == ["192.0.2.1", "192.0.2.2"]
    assert ips(decider, services["api"], snap) == ["192.0.2.1", "192.0.2.2", "192.0.2.11"]
    verdicts = {v.name: v.code for v in decider.preview(service_view(services["web"]), snap).nodes}
    assert verdicts["worker-1"] == NOT_IN_POOL


def moved(obj: dict[str, Any], *, namespace: str | None = None, port: int | None = None) -> Any:
    meta = {**obj["metadata"], "namespace": namespace or obj["metadata"]["namespace"]}
    ports = [{"port": port}] if port else obj["spec"]["ports"]
    return {**obj, "metadata": meta, "spec": {**obj["spec"], "ports": ports}}


@pytest.mark.parametrize(
    ("service", "namespace", "port", "code", "named"),
    [
        ("web", None, 8080, PORT_NOT_IN_POOL, "team-a-edge"),  # team-a off its ports
        ("api", None, 443, PORT_NOT_IN_POOL, "team-b-high-ports"),  # team-b on team-a's
        ("web", "team-c", None, NO_POOL, "namespace team-c"),  # a namespace no pool names
    ],
)
def test_the_worked_example_refuses_what_its_pools_do_not_grant(
    service: str, namespace: str | None, port: int | None, code: str, named: str
) -> None:
    snap, services = multi_tenant()
    outcome = Decider(SelectionSettings()).decide(
        service_view(moved(services[service], namespace=namespace, port=port)), snap
    )
    assert (outcome.code, outcome.ingress) == (code, ())
    assert named in outcome.reason
