"""Synthetic cluster for the benchmarks: Nodes, Services and EndpointSlices as API JSON.

The shape (``Scale`` picks the sizes; the defaults are issue 7's):

- Nodes ``node-00000``...: labels ``kubernetes.io/hostname``, ``topology.kubernetes.io/zone``
  (10 zones) and ``node-pool`` (20 Nodes per pool); every 50th Node carries the exclusion
  label (control-plane-like), every 211th the cluster-autoscaler taint. Every Node has a
  dual-stack InternalIP pair; Nodes of the first tenth of the pools ("edge" pools) also have
  a dual-stack ExternalIP pair. Five conditions with heartbeat times, capacity and nodeInfo,
  so a Node is about as large as a real one without its image list.
- Managed Services ``bench-<n>/svc-<k>`` (class ``io.cilium/node``): every 10th has
  ``externalTrafficPolicy: Local``, no selector and one EndpointSlice with three endpoints
  (one of them not ready) on scattered Nodes; the others select one pool
  (``node-pool=pool-7``) or, every 4th, two pools with ``in``. A third are dual-stack.
- Namespaces ``bench-0``..``bench-19`` labelled ``tenant`` and ``env``
  (:func:`bench.address_pools.namespace_labels`); NodeAddressPools only on request
  (:func:`with_address_pools`).
- Unmanaged Services ``bench-<n>/other-<k>``: ClusterIP, LoadBalancer of another class, and
  class-less LoadBalancer (not ours with ``default-lb-service-ipam=lbipam``).

:func:`expected_ingress` is the oracle the benchmarks check the written status against; it
calls the product's own :func:`app.core.nodeipam.select` (one implementation of selection).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.decision import Decider, Snapshot
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import LOAD_BALANCER_CLASS, MATCH_NODE_LABELS_ANNOTATION, SelectionSettings
from app.core.pools import Pool, PoolSet, pool_from_object
from app.core.ports import PortIndex, with_port_status
from app.core.views import (
    EXCLUDE_FROM_LB_LABEL,
    EndpointSliceView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    service_view,
)
from bench.address_pools import (
    chosen_pool,
    make_address_pools,
    namespace_labels,
    pool_node_ips,
)

Obj = dict[str, Any]
NODES_PER_POOL = 20
NAMESPACES = 20
HEARTBEAT = "2026-01-01T00:00:00Z"
AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"


@dataclass(frozen=True)
class Scale:
    """Sizes of the synthetic cluster (defaults: issue 7, scenario 2)."""

    nodes: int = 5000
    managed: int = 10000
    unmanaged: int = 1000
    conflicting: int = 0
    """Extra managed Services ``svc-<k>-dup`` (the first non-Local k) with the ports, selector
    and policy of ``svc-<k>``: each loses every address to ``svc-<k>`` (port ownership,
    docs/design.md §4.9: equal or later creationTimestamp, then the name) and stays
    pending with code PortInUse."""

    @property
    def pools(self) -> int:
        """How many ``node-pool`` values there are (20 Nodes each, at least 1)."""
        return max(1, self.nodes // NODES_PER_POOL)


def pool_of(index: int, scale: Scale) -> int:
    """The pool number of Node ``index``."""
    return index % scale.pools


def is_edge_pool(pool: int, scale: Scale) -> bool:
    """Edge pools (the first tenth) have ExternalIPs."""
    return pool < max(1, scale.pools // 10)


def node_name(index: int) -> str:
    """Name of Node ``index`` (``node-00042``)."""
    return f"node-{index:05d}"


def internal_ipv4(index: int) -> str:
    """IPv4 InternalIP of Node ``index`` (10.0.0.0/8, never a .0 network address)."""
    n = index + 1
    return f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"


def make_node(index: int, scale: Scale) -> Obj:
    """Node ``index`` as the API serves it (see the module docstring)."""
    pool = pool_of(index, scale)
    n = index + 1
    labels = {
        "kubernetes.io/hostname": node_name(index),
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": f"zone-{index % 10}",
        "node-pool": f"pool-{pool}",
    }
    if index % 50 == 0:
        labels[EXCLUDE_FROM_LB_LABEL] = ""
    addresses = [
        {"type": "InternalIP", "address": internal_ipv4(index)},
        {"type": "InternalIP", "address": f"fd00:10::{n:x}"},
        {"type": "Hostname", "address": node_name(index)},
    ]
    if is_edge_pool(pool, scale):
        addresses[2:2] = [
            {"type": "ExternalIP", "address": f"198.18.{n // 256 % 256}.{n % 256}"},
            {"type": "ExternalIP", "address": f"2001:db8::{n:x}"},
        ]
    spec: Obj = {"podCIDR": f"10.244.{index % 256}.0/24", "providerID": f"bench://{index}"}
    if index % 211 == 5:
        spec["taints"] = [{"key": AUTOSCALER_TAINT, "value": "1700000000", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name(index), "labels": labels},
        "spec": spec,
        "status": {
            "addresses": addresses,
            "conditions": node_conditions(HEARTBEAT),
            "capacity": {"cpu": "8", "memory": "32774860Ki", "pods": "110"},
            "allocatable": {"cpu": "7800m", "memory": "31000000Ki", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-26-amd64",
                "kubeProxyVersion": "v1.31.1",
                "kubeletVersion": "v1.31.1",
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
            },
        },
    }


def node_conditions(heartbeat: str) -> list[Obj]:
    """The kubelet's five conditions with ``lastHeartbeatTime`` ``heartbeat`` (Ready True)."""
    since = "2025-12-01T00:00:00Z"
    kinds = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
        ("NetworkUnavailable", "False", "RouteCreated"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": f"kubelet: {reason}",
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        }
        for kind, status, reason in kinds
    ]


def service_ports(k: int) -> list[Obj]:
    """The two ports of managed Service ``k``: ``40000 + 2 * (k % 12000)`` and the next
    one (above the NodePort range, no reserved port; distinct for 12,000 Services), so
    Services do not share a port unless the benchmark says so (:attr:`Scale.conflicting`)."""
    base = 40000 + 2 * (k % 12000)
    return [
        {"name": "http", "port": base, "protocol": "TCP", "targetPort": 8080},
        {"name": "https", "port": base + 1, "protocol": "TCP", "targetPort": 8443},
    ]


def _service(
    *, namespace: str, name: str, spec: Obj, annotations: Mapping[str, str] | None = None
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "bench"},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    base: Obj = {
        "selector": {"app.kubernetes.io/name": name},
        "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443},
        ],
        "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster",
    }
    base.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": base,
        "status": {"loadBalancer": {}},
    }


def _cluster_ips(k: int, dual: bool) -> Obj:
    v4 = f"10.96.{k // 256 % 256}.{k % 256 + 1 if k % 256 < 254 else 254}"
    ips = [v4, f"fd00:96::{k + 1:x}"] if dual else [v4]
    return {
        "clusterIP": ips[0],
        "clusterIPs": ips,
        "ipFamilies": ["IPv4", "IPv6"] if dual else ["IPv4"],
        "ipFamilyPolicy": "RequireDualStack" if dual else "SingleStack",
    }


def namespace_of(k: int) -> str:
    """Namespace of Service ``k`` (``bench-0`` ... ``bench-19``)."""
    return f"bench-{k % NAMESPACES}"


def local_endpoint_nodes(k: int, scale: Scale) -> list[int]:
    """Indexes of the Nodes hosting the three endpoints of Local Service ``k``."""
    return [(k * 7 + j * 1237) % scale.nodes for j in range(3)]


def make_managed_service(k: int, scale: Scale) -> Obj:
    """Managed Service ``k`` (module docstring)."""
    dual = k % 3 == 0
    spec: Obj = {
        "type": "LoadBalancer",
        "loadBalancerClass": LOAD_BALANCER_CLASS,
        "ports": service_ports(k),
    }
    spec.update(_cluster_ips(k, dual))
    annotations: dict[str, str] = {}
    if k % 10 == 0:
        spec["externalTrafficPolicy"] = "Local"
        spec["healthCheckNodePort"] = 30000 + k % 2000
    else:
        spec["externalTrafficPolicy"] = "Cluster"
        pool = k % scale.pools
        if k % 4 == 1 and scale.pools > 1:
            other = (pool + scale.pools // 2) % scale.pools
            selector = f"node-pool in (pool-{pool},pool-{other})"
        else:
            selector = f"node-pool=pool-{pool}"
        annotations[MATCH_NODE_LABELS_ANNOTATION] = selector
    return _service(
        namespace=namespace_of(k), name=f"svc-{k:05d}", spec=spec, annotations=annotations
    )


def make_conflicting_service(k: int, scale: Scale) -> Obj:
    """``svc-<k>-dup``: managed Service ``k``'s twin (same namespace, ports, selector and
    policy), which port ownership leaves without an address (:attr:`Scale.conflicting`)."""
    obj = make_managed_service(k, scale)
    obj["metadata"]["name"] = f"svc-{k:05d}-dup"
    obj["metadata"]["labels"]["app.kubernetes.io/name"] = f"svc-{k:05d}-dup"
    return obj


def make_unmanaged_service(k: int) -> Obj:
    """Unmanaged Service ``k``: ClusterIP, another class, or class-less LoadBalancer."""
    spec: Obj = _cluster_ips(50000 + k, False)
    if k % 2 == 0:
        spec["type"] = "ClusterIP"
    else:
        spec["type"] = "LoadBalancer"
        spec["externalTrafficPolicy"] = "Cluster"
        if k % 4 == 1:
            spec["loadBalancerClass"] = "example.com/other-lb"
    return _service(namespace=namespace_of(k), name=f"other-{k:05d}", spec=spec)


def make_endpoint_slice(k: int, scale: Scale) -> Obj:
    """The one EndpointSlice of Local Service ``k`` (endpoint 2 not ready)."""
    name = f"svc-{k:05d}"
    endpoints = [
        {
            "addresses": [f"10.244.{node % 256}.{(k + j) % 250 + 2}"],
            "conditions": {"ready": j != 2, "serving": True, "terminating": False},
            "nodeName": node_name(node),
            "zone": f"zone-{node % 10}",
            "targetRef": {"kind": "Pod", "namespace": namespace_of(k), "name": f"{name}-{j}"},
        }
        for j, node in enumerate(local_endpoint_nodes(k, scale))
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-abcde",
            "namespace": namespace_of(k),
            "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


@dataclass
class Cluster:
    """The generated objects, by kind; ``address_pools``: NodeAddressPool objects
    (:func:`bench.address_pools.make_address_pools`; not in :meth:`objects`, the CRD must
    be served first)."""

    nodes: list[Obj]
    services: list[Obj]
    endpoint_slices: list[Obj]
    address_pools: list[Obj] = field(default_factory=list)

    def objects(self) -> list[Obj]:
        """Namespaces first (labelled: :func:`bench.address_pools.namespace_labels`), then
        every Node, Service and EndpointSlice (a seed for the fake API)."""
        namespaces: list[Obj] = [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": f"bench-{n}", "labels": namespace_labels(n)},
            }
            for n in range(NAMESPACES)
        ]
        return namespaces + self.nodes + self.services + self.endpoint_slices


def make_cluster(scale: Scale) -> Cluster:
    """The whole synthetic cluster at ``scale``."""
    services = [make_managed_service(k, scale) for k in range(scale.managed)]
    twins = [k for k in range(scale.managed) if k % 10][: scale.conflicting]  # not Local
    services += [make_conflicting_service(k, scale) for k in twins]
    services += [make_unmanaged_service(k) for k in range(scale.unmanaged)]
    return Cluster(
        nodes=[make_node(i, scale) for i in range(scale.nodes)],
        services=services,
        endpoint_slices=[make_endpoint_slice(k, scale) for k in range(0, scale.managed, 10)],
    )


def with_address_pools(cluster: Cluster, count: int, scale: Scale) -> Cluster:
    """``cluster`` with ``count`` NodeAddressPools
    (:func:`bench.address_pools.make_address_pools`), sharing its Node, Service and
    EndpointSlice lists (a change applied to one is applied to both).

    Raises:
        ValueError: ``count`` is negative.
    """
    pools = make_address_pools(count, node_pools=scale.pools, namespaces=NAMESPACES)
    return dataclasses.replace(cluster, address_pools=pools)


def service_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a Service object (the work-queue key)."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def expected_ingress(
    cluster: Cluster, *, settings: SelectionSettings | None = None
) -> dict[str, list[dict[str, str]]]:
    """``namespace/name`` → the ingress list the controller must write, for every managed
    Service: the product's decision path (:class:`app.core.decision.Decider`: the
    NodeAddressPool of ``cluster.address_pools`` it uses, ``select``, then port ownership
    over every Service of the cluster, docs/design.md §4.12, §4.9), as the reconciler
    decides. With pools, each Service's pool is held to the bench's own reading of the
    rule (:func:`bench.address_pools.chosen_pool`) and its addresses to that pool's Nodes.

    Raises:
        ValueError: the product's pool or addresses disagree with the bench's reading.
    """
    settings = settings or SelectionSettings()
    snap, views = decision_snapshot(cluster, settings)
    labels = {f"bench-{n}": namespace_labels(n) for n in range(NAMESPACES)}
    decider = Decider(settings)
    raws = {service_key(raw): raw for raw in cluster.services}
    pool_ips = {
        p["metadata"]["name"]: pool_node_ips(p, cluster.nodes) for p in cluster.address_pools
    }
    result = {}
    for key, service in views.items():
        if not is_managed(service, settings)[0]:
            continue
        kept = decider.decide(service, snap).ingress or ()
        if cluster.address_pools:
            _check_pool(
                key, decider.choice(service, snap).pool, kept, cluster, raws, labels, pool_ips
            )
        # Each entry records the ports it is published for, as the controller writes it.
        result[key] = [dict(e) for e in with_port_status(kept, service)] if kept else []
    return result


def decision_snapshot(
    cluster: Cluster, settings: SelectionSettings, *, port_version: int | None = None
) -> tuple[Snapshot, dict[str, ServiceView]]:
    """What the reconciler decides ``cluster`` on: a :class:`~app.core.decision.Snapshot`
    over a new Node index, the port index of every Service and EndpointSlice (version
    ``port_version``: ``None`` keeps rivals' claims for one decision), the EndpointSlices,
    the NodeAddressPools and the bench namespaces' labels; and every Service's view by
    ``namespace/name``."""
    nodes = NodeIndex([node_view(n) for n in cluster.nodes])
    slices: dict[str, list[EndpointSliceView]] = {}
    ports = PortIndex(lambda view: is_managed(view, settings)[0])
    for raw in cluster.endpoint_slices:
        sliced = endpoint_slice_view(raw)
        slices.setdefault(f"{sliced.namespace}/{sliced.service_name}", []).append(sliced)
        ports.put_slice(f"{sliced.namespace}/{sliced.name}", None, sliced)
    views = {service_key(raw): service_view(raw) for raw in cluster.services}
    for key, view in views.items():
        ports.put_service(key, None, view)
    labels = {f"bench-{n}": namespace_labels(n) for n in range(NAMESPACES)}
    snap = Snapshot(
        nodes=nodes,
        now=time.time(),
        ports=ports,
        endpoint_slices_of=lambda namespace, name: slices.get(f"{namespace}/{name}", ()),
        pools=PoolSet(pool_from_object(p) for p in cluster.address_pools),
        namespace_labels=labels.get,
        port_version=port_version,
    )
    return snap, views


def _check_pool(
    key: str,
    pool: Pool | None,
    kept: Iterable[Mapping[str, str]],
    cluster: Cluster,
    raws: Mapping[str, Obj],
    labels: Mapping[str, Mapping[str, str]],
    pool_ips: Mapping[str, frozenset[str]],
) -> None:
    raw = raws[key]
    want = chosen_pool(cluster.address_pools, raw, labels.get(raw["metadata"]["namespace"], {}))
    got = None if pool is None else pool.name
    if got != want:
        raise ValueError(f"Service {key}: the decision uses pool {got}, the rule gives {want}")
    outside = {e["ip"] for e in kept} - pool_ips.get(want or "", frozenset())
    if outside:
        raise ValueError(f"Service {key}: {sorted(outside)} are not on Nodes of pool {want}")


def changed_keys(
    before: Mapping[str, list[dict[str, str]]], after: Mapping[str, list[dict[str, str]]]
) -> set[str]:
    """Keys whose expected ingress differs between two oracles."""
    return {key for key in after if before.get(key) != after[key]}


def pick_node(cluster: Cluster, scale: Scale, *, skip: Iterable[int] = ()) -> int:
    """A Node in a non-edge pool that is eligible (not excluded, not tainted), past the
    first half of the cluster, and not in ``skip``: its change matters to its pool."""
    skipped = set(skip)
    for index in list(range(scale.nodes // 2, scale.nodes)) + list(range(scale.nodes // 2)):
        labels = cluster.nodes[index]["metadata"]["labels"]
        if (
            index not in skipped
            and EXCLUDE_FROM_LB_LABEL not in labels
            and "taints" not in cluster.nodes[index]["spec"]
            and not is_edge_pool(pool_of(index, scale), scale)
        ):
            return index
    raise ValueError("no eligible node to change")
