"""Random small clusters for the differential tests: seeded, reproducible, and covering
every input docs/design.md §3-§4 reads.

:func:`generate` (``seed`` → :class:`Cluster`) draws 3-7 Nodes and 22-32 Services in one
namespace, with EndpointSlices. The checklist (issue 20) and where it is drawn:

- Nodes (:func:`_node`): labels from a small vocabulary (plain, prefixed
  ``example.com/tier``, numeric ``rank`` for ``>``/``<``, the control-plane role); the
  exclusion label with ``""``, ``true``, ``false``; the autoscaler taint and look-alikes
  (other case, prefix, suffix, the autoscaler's soft taint); Nodes being deleted (a
  finalizer of ours holds them, :attr:`Cluster.deleting`); addresses: InternalIP and
  ExternalIP, IPv4 and IPv6, non-canonical IPv6 spellings (upper case, zeros written out),
  IPv4-mapped IPv6, one IP under both types, IPs shared between Nodes (small pools),
  Hostname and InternalDNS entries, strings that are not IPs (the real server does not
  check Node addresses); a Ready condition ``True``/``False``/``Unknown`` or none.
- Services (:func:`_service`): type LoadBalancer/ClusterIP/NodePort; class unset,
  ``io.cilium/node`` or another; both ``externalTrafficPolicy`` values; every
  ``ipFamilyPolicy`` with every ``ipFamilies`` order it allows (unset too); the selector
  annotation absent, valid (:data:`SELECTORS`), empty, blank or malformed
  (:data:`MALFORMED`).
- EndpointSlices (:func:`_slices`): ``ready`` unset/true/false, ``nodeName`` unset, a Node
  or a name of no Node, several slices per Service, slices labelled for another Service,
  IPv4 and IPv6 slices.
- Port conflicts (:func:`_port_conflicts`, port ownership, docs/design.md §4.9): twins of
  Services on the same port, created later (same or other selector, UDP, a second port),
  and Services on a reserved node port.

Objects are what a client would create (no server-set fields). Names are unique per seed
(the namespace ``diff-<seed>``, Node names ``d<seed>-n<i>``), so clusters of different seeds
never collide on one API server.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import random
from typing import Any

CLASS = "io.cilium/node"
OTHER_CLASS = "example.com/other"
ANNOTATION = "io.cilium.nodeipam/match-node-labels"
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"
AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"
LOOKALIKE_TAINTS = (
    "toBeDeletedByClusterAutoscaler",
    "ToBeDeletedByClusterAutoscaler2",
    "example.com/ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
)
HOLD = "example.com/hold"  # the finalizer that keeps a deleted Node in "being deleted"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"

SELECTORS = (
    "zone=a",
    "zone==b",
    "zone in (a,b)",
    "zone notin (c)",
    "zone!=a",
    "pool",
    "!pool",
    "pool=edge,zone=a",
    "rank>5",
    "rank<3",
    "rank>2,rank<9",
    "example.com/tier=1",
    "example.com/tier in (1,10)",
    "!example.com/tier",
    CONTROL_PLANE,
    f"!{CONTROL_PLANE}",
    f"{EXCLUDE}",
    "  zone = a ,  pool  ",
    "kubernetes.io/hostname={node}",
    "nothing=matches",
)
MALFORMED = (
    "zone in (a",
    "=a",
    "rank>abc",
    "zone a",
    "example.com/=x",
    "zone=a,",
    "-bad=x",
    "rank>1.5",
    "zone in ()",
)


@dataclasses.dataclass
class Cluster:
    """One generated cluster: ``nodes``, ``slices`` and ``services`` (JSON-ready dicts, in
    the order to create them), all Services and slices in ``namespace``; ``deleting`` the
    Node names to delete after creation (their finalizer holds them)."""

    seed: int
    namespace: str
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    services: list[dict[str, Any]]
    deleting: list[str]
    later: list[str] = dataclasses.field(default_factory=list)

    def copy(self) -> Cluster:
        """A deep copy (the shrinker edits copies)."""
        return copy.deepcopy(self)

    def service_keys(self) -> list[str]:
        """``namespace/name`` of every Service."""
        return [f"{self.namespace}/{s['metadata']['name']}" for s in self.services]


def _ipv6_spelling(rng: random.Random, address: str) -> str:
    """``address`` (canonical IPv6) as it is, upper case, or with zeros written out."""
    choice = rng.random()
    if choice < 0.6:
        return address
    if choice < 0.8:
        return address.upper()
    return ipaddress.IPv6Address(address).exploded


def _addresses(rng: random.Random, name: str) -> list[dict[str, str]]:
    out: list[tuple[str, str]] = []
    internal4 = f"10.0.0.{rng.randint(1, 12)}"  # small pools: Nodes share IPs now and then
    if rng.random() < 0.85:
        out.append(("InternalIP", internal4))
    if rng.random() < 0.4:
        out.append(("InternalIP", _ipv6_spelling(rng, f"fd00::{rng.randint(1, 12):x}")))
    if rng.random() < 0.3:
        out.append(("ExternalIP", f"203.0.113.{rng.randint(1, 8)}"))
    if rng.random() < 0.2:
        out.append(("ExternalIP", _ipv6_spelling(rng, f"2001:db8::{rng.randint(1, 8):x}")))
    if rng.random() < 0.1:
        kind = rng.choice(("InternalIP", "ExternalIP"))
        out.append((kind, f"::ffff:10.0.0.{rng.randint(1, 12)}"))
    if rng.random() < 0.1 and out:
        kind, ip = rng.choice(out)  # the same IP under the other type
        out.append(("ExternalIP" if kind == "InternalIP" else "InternalIP", ip))
    if rng.random() < 0.1:
        bad = rng.choice(
            ("not-an-ip", "10.0.0.300", "010.000.000.001", "fd00::1::2", "", "fe80::1%eth0")
        )
        out.append((rng.choice(("InternalIP", "ExternalIP")), bad))
    if rng.random() < 0.7:
        out.append(("Hostname", name))
    if rng.random() < 0.2:
        out.append(("InternalDNS", f"{name}.example.internal"))
    rng.shuffle(out)
    seen: set[tuple[str, str]] = set()
    # No exact repeats: a Node update (the kubelet's status writes) refuses them.
    unique = [a for a in out if not (a in seen or seen.add(a))]
    return [{"type": kind, "address": ip} for kind, ip in unique]


def _node(rng: random.Random, name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if rng.random() < 0.7:
        labels["zone"] = rng.choice("abc")
    if rng.random() < 0.5:
        labels["pool"] = rng.choice(("edge", "core"))
    if rng.random() < 0.5:
        labels["rank"] = str(rng.randint(0, 12))
    if rng.random() < 0.4:
        labels["example.com/tier"] = rng.choice(("1", "2", "10"))
    if rng.random() < 0.2:
        labels[CONTROL_PLANE] = ""
    if rng.random() < 0.15:
        labels[EXCLUDE] = rng.choice(("", "true", "false"))
    taints = []
    if rng.random() < 0.15:
        taints.append(
            {
                "key": AUTOSCALER_TAINT,
                "value": str(rng.randint(1_700_000_000, 1_800_000_000)),
                "effect": rng.choice(("NoSchedule", "PreferNoSchedule")),
            }
        )
    if rng.random() < 0.15:
        taints.append({"key": rng.choice(LOOKALIKE_TAINTS), "effect": "NoSchedule"})
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints} if taints else {},
        "status": {"addresses": _addresses(rng, name)},
    }
    ready = rng.choice(("True", "True", "False", "Unknown", None))
    if ready is not None:
        node["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": ready,
                "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    return node


_FAMILIES = {
    # ipFamilyPolicy -> the ipFamilies the API server accepts with it (unset = server picks)
    "SingleStack": ([], ["IPv4"], ["IPv6"]),
    "PreferDualStack": ([], ["IPv4"], ["IPv6"], ["IPv4", "IPv6"], ["IPv6", "IPv4"]),
    "RequireDualStack": ([], ["IPv4", "IPv6"], ["IPv6", "IPv4"]),
    None: ([], ["IPv4"], ["IPv6"]),
}


def _service(
    rng: random.Random, name: str, namespace: str, node_names: list[str], port: int
) -> dict[str, Any]:
    kind = rng.choices(("LoadBalancer", "ClusterIP", "NodePort"), (8, 1, 1))[0]
    spec: dict[str, Any] = {"type": kind, "ports": [{"port": port, "protocol": "TCP"}]}
    if kind == "LoadBalancer":
        klass = rng.choices((None, CLASS, OTHER_CLASS), (35, 50, 15))[0]
        if klass is not None:
            spec["loadBalancerClass"] = klass
    if kind != "ClusterIP":
        spec["externalTrafficPolicy"] = rng.choice(("Cluster", "Local"))
    policy = rng.choice(list(_FAMILIES))
    families = rng.choice(_FAMILIES[policy])
    if policy is not None:
        spec["ipFamilyPolicy"] = policy
    if families:
        spec["ipFamilies"] = list(families)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    draw = rng.random()
    if draw < 0.45:
        selector = rng.choice(SELECTORS).format(node=rng.choice(node_names))
        metadata["annotations"] = {ANNOTATION: selector}
    elif draw < 0.5:
        metadata["annotations"] = {ANNOTATION: rng.choice(("", "  "))}
    elif draw < 0.6:
        metadata["annotations"] = {ANNOTATION: rng.choice(MALFORMED)}
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def _slices(
    rng: random.Random, service: str, others: list[str], namespace: str, node_names: list[str]
) -> list[dict[str, Any]]:
    slices = []
    for index in range(rng.choice((0, 1, 1, 2, 3))):
        family = rng.choice(("IPv4", "IPv4", "IPv6"))
        labelled = service if rng.random() < 0.85 or not others else rng.choice(others)
        endpoints = []
        for e in range(rng.randint(1, 4)):
            address = (  # canonical: the server refuses other spellings in slices
                f"10.244.{index}.{e + 1}"
                if family == "IPv4"
                else str(ipaddress.IPv6Address(f"fd00:244::{index:x}:{e + 1:x}"))
            )
            endpoint: dict[str, Any] = {"addresses": [address]}
            node = rng.choices(("unset", "node", "ghost"), (1, 6, 1))[0]
            if node == "node":
                endpoint["nodeName"] = rng.choice(node_names)
            elif node == "ghost":
                endpoint["nodeName"] = "no-such-node"
            ready = rng.choice(("unset", True, True, False))
            if ready != "unset":
                endpoint["conditions"] = {"ready": ready}
            endpoints.append(endpoint)
        slices.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-{index}",
                    "namespace": namespace,
                    "labels": {"kubernetes.io/service-name": labelled},
                },
                "addressType": family,
                "endpoints": endpoints,
                "ports": [{"port": 8080, "protocol": "TCP"}],
            }
        )
    return slices


def generate(
    seed: int, *, nodes: tuple[int, int] = (3, 7), services: tuple[int, int] = (22, 32)
) -> Cluster:
    """The cluster of ``seed`` (the same seed gives the same objects); ``nodes`` and
    ``services`` are inclusive ranges of their counts."""
    rng = random.Random(seed)
    namespace = f"diff-{seed}"
    node_names = [f"d{seed}-n{i}" for i in range(rng.randint(*nodes))]
    node_objects = [_node(rng, name) for name in node_names]
    deleting = [name for name in node_names if rng.random() < 0.1]
    for node in node_objects:
        if node["metadata"]["name"] in deleting:
            node["metadata"]["finalizers"] = [HOLD]
    names = [f"s{i}" for i in range(rng.randint(*services))]
    # One port per Service (20000 + its index: below the NodePort range, no reserved port);
    # the conflicts are added on purpose below.
    service_objects = [
        _service(rng, name, namespace, node_names, 20000 + i) for i, name in enumerate(names)
    ]
    slices = []
    for name in names:
        others = [n for n in names if n != name]
        slices += _slices(rng, name, others, namespace, node_names)
    conflicts, later = _port_conflicts(random.Random(f"{seed}/ports"), service_objects)
    return Cluster(
        seed, namespace, node_objects, slices, service_objects + conflicts, deleting, later
    )


RESERVED_PORTS = (22, 6443, 10250)
"""Ports of docs/design.md §4.9's default ``reserved-node-ports`` the generator draws."""


def _port_conflicts(
    rng: random.Random, services: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Services that Cilium publishes and port ownership (docs/design.md §4.9) does not,
    or not everywhere: ``(services, names to create later)``. From their own ``rng`` (a
    seed's other objects stay what they were). Each drawn with its odds:

    - a twin ``t<i>`` of ``s<i>`` (15%), created later: the same Service with, now and then,
      another selector (50%), its port as UDP (20%: no conflict, kube-proxy matches the
      protocol), or a second port of its own (30%: it keeps no address it shares with
      ``s<i>``, and frees none for others);
    - a copy ``r<i>`` of one Service on a reserved node port (40% per cluster)."""
    extra: list[dict[str, Any]] = []
    later: list[str] = []
    for i, original in enumerate(services):
        if rng.random() >= 0.15:
            continue
        twin = copy.deepcopy(original)
        twin["metadata"]["name"] = f"t{i}"
        if rng.random() < 0.5:
            twin["metadata"]["annotations"] = {ANNOTATION: rng.choice(SELECTORS[:14])}
        port = twin["spec"]["ports"][0]
        if rng.random() < 0.2:
            port["protocol"] = "UDP"
        elif rng.random() < 0.3:
            port["name"] = "shared"
            twin["spec"]["ports"].append({"name": "own", "port": 21000 + i, "protocol": "TCP"})
        extra.append(twin)
        later.append(f"t{i}")
    if services and rng.random() < 0.4:
        i = rng.randrange(len(services))
        reserved = copy.deepcopy(services[i])
        reserved["metadata"]["name"] = f"r{i}"
        reserved["spec"]["ports"][0]["port"] = rng.choice(RESERVED_PORTS)
        extra.append(reserved)
    return extra, later
