"""NodeAddressPools for the synthetic cluster (``bench_peer --pools N``, docs/design.md §4.12).

:func:`make_address_pools` partitions :mod:`bench.cluster`'s cluster as an administrator of
a multi-tenant cluster would: the 20 namespaces carry a ``tenant`` (5 tenants, 4
namespaces each) and an ``env`` label (:func:`namespace_labels`), and pool ``i`` of the
first ``N - 1`` is, by ``i % 4``:

0. a tenant's pool: ``namespaceSelectors`` on its ``tenant`` label, the Nodes of six of the
   ten zones (``matchExpressions ... In``), ports 40000-45999/TCP;
1. a pool for two namespaces by name (``namespaces``), Nodes of every ``node-pool`` but
   three (``NotIn``), ports 46000-51999 of any protocol;
2. a pool for ``env: dev`` namespaces publishing both address types (``addressTypes``, a
   NAT'd edge), a slice of 52000-57999/TCP;
3. a pool for two tenants (``In``) and the Services labelled ``part-of: bench``
   (``serviceSelectors``), on Nodes with a ``node-pool`` label (``Exists``), ports
   58000-63999, with ``ignoreExcludeLabel``;

each with ``priority: i``; the last pool is the catch-all (no ``priority``, no
``serviceAllocation``, every Node and port), so every managed Service still uses a pool.
The managed Services' ports (``40000 + 2 * (k % 12000)`` and the next,
:func:`bench.cluster.service_ports`) spread them over all four kinds.

:func:`chosen_pool` is the bench's own reading of the rule of app/core/pools.py (written
apart from it, over the plain objects of this module only), which the oracle
(:func:`bench.cluster.expected_ingress`) holds the product's decision to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
TENANTS = 5
ZONES = 10
CRD_FILE = Path(__file__).resolve().parent.parent / "deploy/base/crd-nodeaddresspools.yaml"
API_VERSION = "node-ipam-lb.io/v1alpha1"
COLLECTION = "/apis/node-ipam-lb.io/v1alpha1/nodeaddresspools"
"""Where the pools are listed, created and deleted (cluster-scoped)."""
PART_OF = "app.kubernetes.io/part-of"


def namespace_labels(index: int) -> dict[str, str]:
    """Labels of namespace ``bench-<index>``: ``tenant`` (``t0``..``t4``) and ``env``
    (``dev`` for odd indexes, else ``prod``)."""
    return {"tenant": f"t{index % TENANTS}", "env": "dev" if index % 2 else "prod"}


def crd_object(path: Path = CRD_FILE) -> Obj:
    """The NodeAddressPool CustomResourceDefinition as the product ships it (a JSON-ready
    dict of ``path``).

    Raises:
        OSError: ``path`` cannot be read. ValueError: it is not one CRD object.
    """
    obj = yaml.safe_load(path.read_text())
    if not isinstance(obj, dict) or obj.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: expected one CustomResourceDefinition")
    return obj


def _pool(name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeAddressPool",
        "metadata": {"name": name},
        "spec": spec,
    }


def _spec(i: int, node_pools: int, namespaces: int) -> Obj:
    kind, round_ = i % 4, i // 4
    if kind == 0:
        tenant = round_ % TENANTS
        zones = [f"zone-{(tenant + z) % ZONES}" for z in range(6)]
        return {
            "nodeSelector": {
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}
                ]
            },
            "ports": [{"port": 40000, "endPort": 45999, "protocol": "TCP"}],
            "serviceAllocation": {
                "priority": i,
                "namespaceSelectors": [{"matchLabels": {"tenant": f"t{tenant}"}}],
            },
        }
    if kind == 1:
        listed = sorted({f"bench-{i % namespaces}", f"bench-{(i + 7) % namespaces}"})
        left_out = [f"pool-{(round_ + j) % node_pools}" for j in (1, 2, 3)]
        return {
            "nodeSelector": {
                "matchExpressions": [{"key": "node-pool", "operator": "NotIn", "values": left_out}]
            },
            "ports": [{"port": 46000, "endPort": 51999}],
            "serviceAllocation": {"priority": i, "namespaces": listed},
        }
    if kind == 2:
        first = 52000 + 1200 * (round_ % 5)
        return {
            "addressTypes": ["ExternalIP", "InternalIP"],
            "ports": [{"port": first, "endPort": first + 1199, "protocol": "TCP"}],
            "serviceAllocation": {
                "priority": i,
                "namespaceSelectors": [
                    {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}
                ],
            },
        }
    tenants = [f"t{round_ % TENANTS}", f"t{(round_ + 1) % TENANTS}"]
    return {
        "nodeSelector": {"matchExpressions": [{"key": "node-pool", "operator": "Exists"}]},
        "ports": [{"port": 58000, "endPort": 63999}],
        "ignoreExcludeLabel": True,
        "serviceAllocation": {
            "priority": i,
            "namespaceSelectors": [
                {"matchExpressions": [{"key": "tenant", "operator": "In", "values": tenants}]}
            ],
            "serviceSelectors": [{"matchLabels": {PART_OF: "bench"}}],
        },
    }


def make_address_pools(count: int, *, node_pools: int, namespaces: int) -> list[Obj]:
    """``count`` NodeAddressPool objects (module docstring): ``pool-00``... of the four
    kinds, then the catch-all ``zz-catch-all``; none for ``count`` 0. ``node_pools`` is
    the number of ``node-pool`` label values, ``namespaces`` of ``bench-<n>`` namespaces.

    Raises:
        ValueError: ``count`` is negative.
    """
    if count < 0:
        raise ValueError(f"--pools: Invalid value: {count}: must be 0 or more")
    if count == 0:
        return []
    pools = [_pool(f"pool-{i:02d}", _spec(i, node_pools, namespaces)) for i in range(count - 1)]
    return [*pools, _pool("zz-catch-all", {})]


# -- the bench's own reading of the rule (module docstring) -----------------------------------


def _requirement(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {op!r}: not one this module writes")


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a metav1 ``LabelSelector`` matches ``labels`` (``None`` or ``{}``: every
    set, apimachinery's ``LabelSelectorAsSelector``).

    Raises:
        ValueError: an operator other than ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``.
    """
    if not selector:
        return True
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in wanted.items()):
        return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions") or [])


def _applies(
    spec: Mapping[str, Any], service: Mapping[str, Any], ns_labels: Mapping[str, str]
) -> bool:
    allocation = spec.get("serviceAllocation") or {}
    names, selectors = (
        allocation.get("namespaces") or [],
        allocation.get("namespaceSelectors") or [],
    )
    meta = service["metadata"]
    if (names or selectors) and not (
        meta["namespace"] in names or any(selector_matches(s, ns_labels) for s in selectors)
    ):
        return False
    chosen = allocation.get("serviceSelectors") or []
    return not chosen or any(selector_matches(s, meta.get("labels") or {}) for s in chosen)


def _grants(spec: Mapping[str, Any], service: Mapping[str, Any]) -> bool:
    ranges = spec.get("ports")
    if ranges is None:
        return True
    return all(
        any(
            r["port"] <= p["port"] <= r.get("endPort", r["port"])
            and r.get("protocol") in (None, p.get("protocol", "TCP"))
            for r in ranges
        )
        for p in service["spec"].get("ports") or []
    )


def chosen_pool(
    pools: Sequence[Mapping[str, Any]], service: Mapping[str, Any], ns_labels: Mapping[str, str]
) -> str | None:
    """The name of the pool the managed Service object ``service`` uses among ``pools``
    (objects of :func:`make_address_pools`), MetalLB's order: by ``priority`` (none: last)
    then name, the first that applies to it (``namespaces`` / ``namespaceSelectors`` of
    its namespace, whose labels are ``ns_labels``; ``serviceSelectors``) and grants every
    port of ``spec.ports``; ``None``: none does."""

    def order(pool: Mapping[str, Any]) -> tuple[bool, int, str]:
        priority = (pool["spec"].get("serviceAllocation") or {}).get("priority")
        return (priority is None, priority or 0, pool["metadata"]["name"])

    for pool in sorted(pools, key=order):
        if _applies(pool["spec"], service, ns_labels) and _grants(pool["spec"], service):
            return str(pool["metadata"]["name"])
    return None


def pool_node_ips(pool: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every address (of any type) of the Node objects ``spec.nodeSelector`` of ``pool``
    selects: what a Service using it may be published on, at most."""
    selector = pool["spec"].get("nodeSelector")
    return frozenset(
        a["address"]
        for node in nodes
        if selector_matches(selector, node["metadata"].get("labels") or {})
        for a in node["status"]["addresses"]
    )
