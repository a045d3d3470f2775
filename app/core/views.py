"""Slim, immutable projections of Nodes, Services, EndpointSlices and host-network Pods (pure).

Each ``*_view`` function takes the Kubernetes JSON dict (camelCase, as the API server or
``kubectl get -o json|yaml`` gives it) and keeps only what node selection (docs/design.md §3-§4)
reads. Views are built once per watch event, so everything expensive (IP parsing,
predicate evaluation) happens here and not in :func:`app.core.nodeipam.select`.

Garbage *content* never raises: an address that is not an IP is recorded in
``NodeView.invalid_addresses`` and dropped. :class:`ViewError` is raised only when the
object is structurally unusable (not a mapping, no ``metadata.name``, a field of the
wrong JSON type), and its message names the field.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from app.core.codes import AUTOSCALER_TAINTED, DELETING, EXCLUDED_BY_LABEL

MATCH_NODE_LABELS_ANNOTATION = "io.cilium.nodeipam/match-node-labels"
"""Cilium's node-selector annotation on a Service (``annotation.go``: ``NodeIPAMMatchNodeLabels``);
the default of setting ``match-node-labels-annotation``."""
EXCLUDE_FROM_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
NODES_SERVING = "node-ipam-lb.io/NodesServing"
"""The ``type`` of our condition in a Service's ``status.conditions`` (docs/design.md §5):
which nodes serve it. A qualified name of our own domain, as metav1.Condition asks of
types other controllers may not own."""
ADDRESS_TYPES = ("ExternalIP", "InternalIP")
IPV4 = "IPv4"
IPV6 = "IPv6"
FAMILY_BIT = {IPV4: 1, IPV6: 2}


class ViewError(ValueError):
    """The object cannot be projected; ``str(err)`` names the field and the reason."""


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}", re.ASCII)
"""An IPv4 address in canonical dotted-decimal form, which is its own canonical text."""
_SLOPPY_QUAD = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)", re.ASCII)
"""Four decimal numbers, leading zeros allowed: what k8s.io/utils/net's ``ParseIPSloppy``
(the parser behind Cilium's ``IsIPv4String``/``IsIPv6String``, and the API server's
legacy IP validation) reads as IPv4, each number in decimal (``010`` is 10, not 8)."""


def _sloppy_octets(text: str) -> tuple[int, int, int, int] | None:
    match = _SLOPPY_QUAD.fullmatch(text)
    if match is None:
        return None
    a, b, c, d = (int(group) for group in match.groups())
    return (a, b, c, d) if max(a, b, c, d) <= 255 else None


def canonical_ip(text: str) -> tuple[str, str, int] | None:
    """Parse one address string the way Cilium's Go code accepts it (k8s.io/utils/net's
    ``ParseIPSloppy``, then ``net.IP.To4``).

    Returns ``(canonical text, family, integer value)`` or ``None`` when ``text`` is not an
    IP address. Rules (docs/design.md §4.4-§4.5): IPv6 is written in RFC 5952 form
    (``2001:0000::1`` → ``2001::1``); IPv4-mapped IPv6 (``::ffff:192.0.2.1``) counts as
    IPv4 and is written as plain IPv4, as Go's ``net.IP.To4`` does; IPv4 numbers with
    leading zeros are decimal (``010.000.000.001`` → ``10.0.0.1``), also inside IPv6
    (``::ffff:010.0.0.1``), as ``ParseIPSloppy`` reads them (Go's own ``net.ParseIP`` and
    Python's ``ipaddress`` refuse them); a zone (``fe80::1%eth0``) is rejected because
    Go's parsers reject it.
    """
    if _DOTTED_QUAD.fullmatch(text):  # the usual case, ~5x cheaper than ipaddress
        a, b, c, d = map(int, text.split("."))
        return text, IPV4, (a << 24) | (b << 16) | (c << 8) | d
    octets = _sloppy_octets(text)
    if octets is not None:
        a, b, c, d = octets
        return f"{a}.{b}.{c}.{d}", IPV4, (a << 24) | (b << 16) | (c << 8) | d
    if "%" in text:
        return None
    if "." in text:  # an IPv6 address ending in dotted IPv4: its numbers as decimal too
        head, colon, tail = text.rpartition(":")
        octets = _sloppy_octets(tail)
        if not colon or octets is None:
            return None
        text = f"{head}:{'.'.join(map(str, octets))}"
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        mapped = addr.ipv4_mapped
        if mapped is None:
            return str(addr), IPV6, int(addr)
        addr = mapped
    return str(addr), IPV4, int(addr)


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """One usable node address; ``value`` is the integer form (numeric order), derived from
    ``ip`` unless given (``node_view`` passes the value it parsed, so each address is
    parsed once)."""

    type: str  # "ExternalIP" | "InternalIP"
    ip: str  # canonical text
    family: str  # "IPv4" | "IPv6"
    value: int = field(default=-1, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.value < 0:
            parsed = canonical_ip(self.ip)
            object.__setattr__(self, "value", parsed[2] if parsed else 0)


def _mask(entries: tuple[tuple[int, int, str], ...]) -> int:
    mask = 0
    for bit, _, _ in entries:
        mask |= bit
    return mask


@dataclass(frozen=True, slots=True)
class NodeView:
    """What selection reads from a Node (docs/design.md §4.2, §4.4).

    Derived fields (not init arguments): ``predicate`` is the first KEP-3458 predicate
    that drops the node (``"Deleting"``, ``"ExcludedByLabel"``, ``"AutoscalerTaint"``) or
    ``None``, ``predicate_unlabelled`` the same when the exclusion label is ignored
    (setting ``ignore-exclude-lb``: :meth:`predicate_for`); ``external_families`` /
    ``internal_families`` are bit masks (IPv4=1, IPv6=2)
    of the families the node has ExternalIPs / InternalIPs of, and ``external_entries`` /
    ``internal_entries`` those addresses as ``(family bit, integer value, text)``, in API
    order, each address once (two spellings of one address collapse). ``verdict_cache`` memoises
    the node's :class:`app.core.nodeipam.NodeVerdict` objects, so 5,000-node selections
    allocate nothing per node.
    """

    name: str
    labels: Mapping[str, str]
    deleting: bool
    taint_keys: frozenset[str]
    addresses: tuple[NodeAddress, ...]
    invalid_addresses: tuple[str, ...]
    ready: bool | None
    ready_since: float | None
    predicate: str | None = field(init=False, compare=False, repr=False)
    predicate_unlabelled: str | None = field(init=False, compare=False, repr=False)
    external_families: int = field(init=False, compare=False, repr=False)
    internal_families: int = field(init=False, compare=False, repr=False)
    external_entries: tuple[tuple[int, int, str], ...] = field(
        init=False, compare=False, repr=False
    )
    internal_entries: tuple[tuple[int, int, str], ...] = field(
        init=False, compare=False, repr=False
    )
    verdict_cache: dict[Hashable, Any] = field(
        init=False, compare=False, repr=False, default_factory=dict
    )

    def predicate_for(self, ignore_exclude_lb: bool) -> str | None:
        """The KEP-3458 predicate that drops this node (``None``: none does); with
        ``ignore_exclude_lb`` (setting ``ignore-exclude-lb``) the exclusion label is not
        one."""
        return self.predicate_unlabelled if ignore_exclude_lb else self.predicate

    def __post_init__(self) -> None:
        predicate = None
        if self.deleting:
            predicate = DELETING
        elif EXCLUDE_FROM_LB_LABEL in self.labels:
            predicate = EXCLUDED_BY_LABEL
        elif AUTOSCALER_TAINT in self.taint_keys:
            predicate = AUTOSCALER_TAINTED
        external = _entries(self.addresses, "ExternalIP")
        internal = _entries(self.addresses, "InternalIP")
        object.__setattr__(self, "predicate", predicate)
        unlabelled = predicate
        if predicate == EXCLUDED_BY_LABEL:
            unlabelled = AUTOSCALER_TAINTED if AUTOSCALER_TAINT in self.taint_keys else None
        object.__setattr__(self, "predicate_unlabelled", unlabelled)
        object.__setattr__(self, "external_entries", external)
        object.__setattr__(self, "internal_entries", internal)
        object.__setattr__(self, "external_families", _mask(external))
        object.__setattr__(self, "internal_families", _mask(internal))


class StoredCondition(NamedTuple):
    """Our ``NODES_SERVING`` condition as a Service stores it (metav1.Condition's fields;
    a field that is absent or not of its JSON type is ``None``, so it never reads back
    equal to what we write and is written again)."""

    status: str | None
    reason: str | None
    message: str | None
    observed_generation: int | None
    last_transition_time: str | None


@dataclass(frozen=True, slots=True)
class ServiceView:
    """What selection reads from a Service (docs/design.md §3-§4)."""

    namespace: str
    name: str
    type: str | None
    load_balancer_class: str | None
    deleting: bool
    match_node_labels: str | None
    external_traffic_policy: str | None
    ip_families: tuple[str, ...]
    ingress: tuple[Mapping[str, Any], ...] | None
    resource_version: str | None
    ip_family_policy: str | None = None
    # metadata.uid, for the ``regarding`` of our Events only (kubectl describe selects
    # Events by it); selection never reads it, so it is left out of equality and hashing.
    uid: str = field(default="", compare=False)
    # metadata.generation (None: not set, a manifest not applied): the observedGeneration
    # of our condition; and that condition as stored (status.conditions, type
    # NODES_SERVING; None: absent). Status only: no decision reads them, so they are left
    # out of equality (and of decision.SELECTION_FIELDS); every change of the object
    # changes resource_version, which is compared; the reconciler compares them itself.
    generation: int | None = field(default=None, compare=False)
    serving: StoredCondition | None = field(default=None, compare=False)
    # Port ownership (docs/design.md §4.9, app.core.ports); select() never reads these.
    # ``ports``: (protocol, port) of spec.ports (protocol defaulted to TCP);
    # ``node_ports``: (protocol, nodePort) of spec.ports; ``health_check_node_port``:
    # spec.healthCheckNodePort (TCP); ``external_ips``: spec.externalIPs in canonical
    # text; ``created``: metadata.creationTimestamp in epoch seconds (None: not set, a
    # manifest not applied).
    ports: tuple[tuple[str, int], ...] = ()
    node_ports: tuple[tuple[str, int], ...] = ()
    health_check_node_port: int | None = None
    external_ips: tuple[str, ...] = ()
    created: float | None = None
    # The ``ports`` (core/v1 PortStatus) every stored ingress entry records, when all
    # record the same non-empty list (what we write, docs/design.md §4.9), as
    # ``(port, protocol, error)`` triples (status.port_record); they are then left out of
    # the ``ingress`` entries, so equal address lists stay shared between Services
    # (shared_ingress). ``None``: no entry records ports, or they differ (kept per entry).
    ingress_ports: tuple[tuple[Any, Any, Any], ...] | None = None
    labels: tuple[tuple[str, str], ...] = ()
    """``metadata.labels`` as sorted pairs: what a NodeAddressPool's ``serviceSelectors``
    match (docs/design.md §4.13); ``select`` never reads them."""


@dataclass(frozen=True, slots=True)
class NamespaceView:
    """What NodeAddressPools read from a Namespace (docs/design.md §4.13): its labels,
    as sorted pairs, for ``spec.serviceAllocation.namespaceSelectors``."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()


def namespace_view(obj: Mapping[str, Any]) -> NamespaceView:
    """The :class:`NamespaceView` of a Namespace object.

    Raises:
        ViewError: ``metadata`` or its ``labels`` is not of its JSON type (naming it).
    """
    meta, name, _ = _metadata(obj, namespaced=False)
    return NamespaceView(
        name, tuple(sorted(_string_map(meta.get("labels"), "metadata.labels").items()))
    )


@dataclass(frozen=True, slots=True)
class EndpointSliceView:
    """What eTP=Local selection reads from an EndpointSlice (docs/design.md §4.3)."""

    namespace: str
    name: str
    service_name: str | None
    ready_node_names: frozenset[str]
    backends: frozenset[str] = frozenset()
    """Names of the Pods of the slice's namespace that are ready or serving endpoints
    (``targetRef`` kind Pod, no other namespace): the Service's own backends, which do not
    block it from their node ports (docs/design.md §4.9)."""
    target_ports: frozenset[tuple[str, int]] = frozenset()
    """``(protocol, port)`` of the slice's ``ports`` (the Service's target ports, resolved)."""


def _mapping(obj: Any, where: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise ViewError(f"{where}: Invalid value: must be an object, not {type(obj).__name__}")
    return obj


def _list(obj: Any, where: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise ViewError(f"{where}: Invalid value: must be a list, not {type(obj).__name__}")
    return obj


def _opt_str(obj: Any, where: str) -> str | None:
    if obj is None or isinstance(obj, str):
        return obj
    raise ViewError(f"{where}: Invalid value: {obj!r}: must be a string")


def _string_map(obj: Any, where: str) -> dict[str, str]:
    raw = _mapping(obj, where)
    for key, value in raw.items():
        if not isinstance(value, str):
            raise ViewError(f"{where}[{key}]: Invalid value: {value!r}: must be a string")
    return dict(raw)


def _metadata(obj: Any, *, namespaced: bool) -> tuple[Mapping[str, Any], str, str]:
    if not isinstance(obj, Mapping):
        raise ViewError(f"object: Invalid value: must be an object, not {type(obj).__name__}")
    meta = _mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if name is not None and not isinstance(name, str):
        raise ViewError(f"metadata.name: Invalid value: {name!r}: must be a string")
    if not name:
        raise ViewError("metadata.name: Required value")
    namespace = meta.get("namespace") or ("default" if namespaced else "")
    if not isinstance(namespace, str):
        raise ViewError(f"metadata.namespace: Invalid value: {namespace!r}: must be a string")
    return meta, name, namespace


def _deleting(meta: Mapping[str, Any]) -> bool:
    """Whether ``metadata.deletionTimestamp`` is set: an RFC 3339 string (or the datetime
    an unquoted YAML timestamp becomes); any other type is an error, not "being deleted".

    Raises:
        ViewError: ``metadata.deletionTimestamp`` is neither.
    """
    value = meta.get("deletionTimestamp")
    if value is None or isinstance(value, str | datetime):
        return value is not None
    raise ViewError(
        f"metadata.deletionTimestamp: Invalid value: {value!r}: must be an RFC 3339 timestamp"
        " string"
    )


def _epoch(value: Any) -> float | None:
    """RFC 3339 timestamp (string, or a datetime from an unquoted YAML scalar) → epoch s."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _entries(addresses: tuple[NodeAddress, ...], kind: str) -> tuple[tuple[int, int, str], ...]:
    """``(family bit, integer value, text)`` of the ``kind`` addresses, in API order, each
    address once: ``::ffff:10.0.0.9`` and ``10.0.0.9`` are one address (canonical text)."""
    entries: dict[tuple[int, int], str] = {}
    for a in addresses:
        if a.type == kind:
            entries.setdefault((FAMILY_BIT[a.family], a.value), a.ip)
    return tuple((bit, value, ip) for (bit, value), ip in entries.items())


def _addresses(raw: list[Any]) -> tuple[tuple[NodeAddress, ...], tuple[str, ...]]:
    good: list[NodeAddress] = []
    bad: list[str] = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            bad.append(repr(entry))
            continue
        if entry.get("type") not in ADDRESS_TYPES:
            continue
        text = entry.get("address")
        parsed = canonical_ip(text) if isinstance(text, str) else None
        if parsed is None:
            bad.append(text if isinstance(text, str) else repr(text))
            continue
        good.append(NodeAddress(entry["type"], parsed[0], parsed[1], parsed[2]))
    return tuple(good), tuple(bad)


def _ready(conditions: list[Any]) -> tuple[bool | None, float | None]:
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            status = cond.get("status")
            # An unquoted YAML True/False arrives as a bool; the API always sends a string.
            ready = (
                True if status in ("True", True) else False if status in ("False", False) else None
            )
            return ready, _epoch(cond.get("lastTransitionTime"))
    return None, None


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """Project a ``v1`` Node.

    Keeps ``ExternalIP``/``InternalIP`` addresses that parse (see :func:`canonical_ip`),
    in API order; the raw text of those that do not is kept in ``invalid_addresses``.
    ``ready`` is the ``Ready`` condition (``None`` when absent or ``Unknown``) and
    ``ready_since`` its ``lastTransitionTime`` in epoch seconds.

    Raises:
        ViewError: not a mapping, no ``metadata.name``, or a field of the wrong JSON type
            (e.g. ``status.addresses`` not a list, a label value not a string).
    """
    meta, name, _ = _metadata(obj, namespaced=False)
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    taints = _list(spec.get("taints"), "spec.taints")
    addresses, invalid = _addresses(_list(status.get("addresses"), "status.addresses"))
    ready, ready_since = _ready(_list(status.get("conditions"), "status.conditions"))
    return NodeView(
        name=name,
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        deleting=_deleting(meta),
        taint_keys=frozenset(
            t["key"] for t in taints if isinstance(t, Mapping) and isinstance(t.get("key"), str)
        ),
        addresses=addresses,
        invalid_addresses=invalid,
        ready=ready,
        ready_since=ready_since,
    )


def service_view(
    obj: Mapping[str, Any], *, match_node_labels_annotation: str = MATCH_NODE_LABELS_ANNOTATION
) -> ServiceView:
    """Project a ``v1`` Service (a missing ``metadata.namespace`` means ``default``).

    ``match_node_labels`` is the annotation's value, ``None`` when the key is absent (an
    empty string is a present, match-everything selector). ``ingress`` is
    ``status.loadBalancer.ingress`` as stored (``None`` when absent).

    Raises:
        ViewError: not a mapping, no ``metadata.name``, or a read field of the wrong type.
    """
    meta, name, namespace = _metadata(obj, namespaced=True)
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    where = f"metadata.annotations[{match_node_labels_annotation}]"
    families = _list(spec.get("ipFamilies"), "spec.ipFamilies")
    ingress = _mapping(status.get("loadBalancer"), "status.loadBalancer").get("ingress")
    ingress_list = _list(ingress, "status.loadBalancer.ingress")
    version = meta.get("resourceVersion")
    ports, node_ports = _ports(spec)
    stripped, common = _common_ports(ingress_list)
    return ServiceView(
        namespace=namespace,
        name=name,
        type=_opt_str(spec.get("type"), "spec.type"),
        load_balancer_class=_opt_str(spec.get("loadBalancerClass"), "spec.loadBalancerClass"),
        deleting=_deleting(meta),
        match_node_labels=_opt_str(annotations.get(match_node_labels_annotation), where),
        external_traffic_policy=_opt_str(
            spec.get("externalTrafficPolicy"), "spec.externalTrafficPolicy"
        ),
        ip_families=tuple(
            _opt_str(f, f"spec.ipFamilies[{i}]") or "" for i, f in enumerate(families)
        ),
        ingress=None if ingress is None else shared_ingress(stripped),
        ingress_ports=common,
        resource_version=str(version) if version is not None else None,
        ip_family_policy=_opt_str(spec.get("ipFamilyPolicy"), "spec.ipFamilyPolicy"),
        uid=str(meta.get("uid") or ""),
        generation=generation_of(meta.get("generation")),
        serving=stored_condition(
            _list(status.get("conditions"), "status.conditions"), NODES_SERVING
        ),
        ports=ports,
        node_ports=node_ports,
        health_check_node_port=_port_number(
            spec.get("healthCheckNodePort"), "spec.healthCheckNodePort"
        ),
        external_ips=_external_ips(_list(spec.get("externalIPs"), "spec.externalIPs")),
        created=_epoch(meta.get("creationTimestamp")),
        labels=tuple(sorted(_string_map(meta.get("labels"), "metadata.labels").items())),
    )


def generation_of(value: Any) -> int | None:
    """``metadata.generation`` (or a condition's ``observedGeneration``) as an int
    (``None``: absent, or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stored_condition(conditions: list[Any], condition_type: str) -> StoredCondition | None:
    """The stored condition of ``condition_type`` among ``status.conditions`` (the first
    with that ``type``; the API keeps the list a map keyed by ``type``), or ``None``: our
    :data:`NODES_SERVING` of a Service, a NodeAddressPool's ``Accepted``
    (app.core.pools)."""
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == condition_type:
            message = _text(cond, "message")
            return StoredCondition(
                status=_text(cond, "status"),
                reason=_text(cond, "reason"),
                # Services that share an outcome share its message (one string, not one
                # per Service: up to 4 KiB each, docs/design.md §5).
                message=None if message is None else sys.intern(message),
                observed_generation=generation_of(cond.get("observedGeneration")),
                last_transition_time=_text(cond, "lastTransitionTime"),
            )
    return None


def _text(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def _port_number(value: Any, where: str) -> int | None:
    """A port number field: an int in 1-65535 (or None when absent or 0, as the API
    server leaves an unallocated ``nodePort``); a number of another type or range is
    garbage the API server never stores and is ignored rather than trusted.

    Raises:
        ViewError: ``value`` is not a number at all (a string, a list).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ViewError(f"{where}: Invalid value: {value!r}: must be an integer")
    return value if 1 <= value <= 65535 else None


def _ports(
    spec: Mapping[str, Any],
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """``(ports, node_ports)`` of a Service spec (see :class:`ServiceView`), in spec order,
    each pair once. A protocol other than TCP/UDP/SCTP is kept as written (the API server
    refuses it; it conflicts with nothing)."""
    ports: dict[tuple[str, int], None] = {}
    node_ports: dict[tuple[str, int], None] = {}
    for i, entry in enumerate(_list(spec.get("ports"), "spec.ports")):
        if not isinstance(entry, Mapping):
            continue
        protocol = _opt_str(entry.get("protocol"), f"spec.ports[{i}].protocol") or "TCP"
        port = _port_number(entry.get("port"), f"spec.ports[{i}].port")
        if port is not None:
            ports[protocol, port] = None
        node_port = _port_number(entry.get("nodePort"), f"spec.ports[{i}].nodePort")
        if node_port is not None:
            node_ports[protocol, node_port] = None
    return tuple(ports), tuple(node_ports)


def _external_ips(raw: list[Any]) -> tuple[str, ...]:
    """``spec.externalIPs`` in canonical text (:func:`canonical_ip`), each once; entries
    that are not IP addresses are dropped (kube-proxy ignores them too)."""
    out: dict[str, None] = {}
    for value in raw:
        parsed = canonical_ip(value) if isinstance(value, str) else None
        if parsed is not None:
            out[parsed[0]] = None
    return tuple(out)


MAX_SHARED_INGRESS_ENTRIES = 65_536
"""Entries of the distinct ``status.loadBalancer.ingress`` lists :func:`shared_ingress`
keeps, all lists together (also for lists no view holds any more); then it starts over.
Each distinct entry (address and ``ipMode``) is one object, shared by every list that
holds it, so a list costs ~16 bytes per entry and a distinct entry ~500 bytes once: the
5,000-Node bench cluster's 1,479 distinct lists of 27,020 entries over 9,739 distinct
entries keep ~5 MB (~10 MB with an entry object per list, bench/README.md §13)."""
_SHARED_INGRESS: dict[tuple[tuple[tuple[str, str], ...], ...], tuple[Mapping[str, Any], ...]] = {}
_SHARED_ENTRY: dict[
    tuple[tuple[str, str], ...], tuple[tuple[tuple[str, str], ...], dict[str, str]]
] = {}
"""An entry's items → (those items, the entry): one object of each per distinct entry."""
_shared_entries = [0]  # entries of the lists in _SHARED_INGRESS


def _common_ports(entries: list[Any]) -> tuple[list[Any], tuple[tuple[Any, Any, Any], ...] | None]:
    """``(entries without their ports, the ports)`` when every mapping entry records the
    same non-empty ``ports`` list (triples as :func:`app.core.status.port_record` gives
    them), else ``(entries, None)``: see :attr:`ServiceView.ingress_ports`."""
    common: tuple[tuple[Any, Any, Any], ...] | None = None
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        raw = entry.get("ports")
        if not isinstance(raw, list) or not raw or not all(isinstance(p, Mapping) for p in raw):
            return entries, None
        record = tuple((p.get("port"), p.get("protocol"), p.get("error")) for p in raw)
        if common is None:
            common = record
        elif record != common:
            return entries, None
    if common is None:
        return entries, None
    try:
        hash(common)
    except TypeError:  # garbage values (lists, objects): kept per entry, as stored
        return entries, None
    stripped = [
        {k: v for k, v in e.items() if k != "ports"} if isinstance(e, Mapping) else e
        for e in entries
    ]
    return stripped, common


def shared_ingress(entries: list[Any]) -> tuple[Mapping[str, Any], ...]:
    """The mapping entries of a stored ingress list as a tuple shared by every Service
    whose list is equal, entry by entry, with only string keys and values (the usual
    ``{"ip", "ipMode"}``): 10,000 Services over a few hundred distinct lists of ~30
    entries hold a few hundred tuples instead of 300,000 dicts (~90 MB). Other lists
    (``ports``, non-mapping garbage) are kept as they are, without the non-mappings.
    Equal entries of different lists are one object too. At most
    :data:`MAX_SHARED_INGRESS_ENTRIES` entries are kept. Treat the result as
    read-only."""
    try:
        key = tuple(map(tuple, map(dict.items, entries)))  # TypeError: not all dicts
        found = _SHARED_INGRESS.get(key)  # TypeError: an unhashable value (ports)
    except TypeError:
        return tuple(e for e in entries if isinstance(e, Mapping))
    if found is not None:  # equal to a list of strings only, so of strings only too
        return found
    if not all(type(k) is str and type(v) is str for entry in key for k, v in entry):
        return tuple(entries)
    if len(key) > MAX_SHARED_INGRESS_ENTRIES:
        return tuple(entries)
    if _shared_entries[0] + len(key) > MAX_SHARED_INGRESS_ENTRIES:
        # Distinct entries are never more than the lists' entries: both start over.
        forget_shared_ingress()
    shared = []
    for items in key:
        one = _SHARED_ENTRY.get(items)
        if one is None:
            one = _SHARED_ENTRY[items] = (items, dict(items))
        shared.append(one)
    found = tuple([entry for _, entry in shared])
    _SHARED_INGRESS[tuple([items for items, _ in shared])] = found
    _shared_entries[0] += len(key)
    return found


def forget_shared_ingress() -> None:
    """Start :func:`shared_ingress`'s lists and entries over (views already made keep
    theirs): what a benchmark calls to measure the memory of one cluster's statuses from
    empty."""
    _SHARED_INGRESS.clear()
    _SHARED_ENTRY.clear()
    _shared_entries[0] = 0


def endpoint_slice_view(obj: Mapping[str, Any]) -> EndpointSliceView:
    """Project a ``discovery.k8s.io/v1`` EndpointSlice.

    ``ready_node_names`` holds the ``nodeName`` of every endpoint whose
    ``conditions.ready`` is not ``false`` (absent means ready, KEP-1672) and that has a
    ``nodeName``: the rule of Cilium's eTP=Local filter (docs/design.md §4.3).
    ``backends`` names the Pods (of the slice's namespace) of the endpoints that are
    ready or ``serving`` (KEP-1672), ``target_ports`` the slice's ``(protocol, port)``
    pairs: port ownership's own-backend rule (§4.9).

    Raises:
        ViewError: not a mapping, no ``metadata.name``, or ``endpoints`` not a list.
    """
    meta, name, namespace = _metadata(obj, namespaced=True)
    labels = _mapping(meta.get("labels"), "metadata.labels")
    service_name = labels.get(SERVICE_NAME_LABEL)
    ready: set[str] = set()
    backends: set[str] = set()
    for endpoint in _list(obj.get("endpoints"), "endpoints"):
        if not isinstance(endpoint, Mapping):
            continue
        conditions = endpoint.get("conditions")
        conditions = conditions if isinstance(conditions, Mapping) else {}
        pod = _backend_pod(endpoint.get("targetRef"), namespace)
        if pod is not None and (
            conditions.get("ready") is not False or conditions.get("serving") is True
        ):
            backends.add(pod)
        if conditions.get("ready") is False:
            continue
        node_name = endpoint.get("nodeName")
        if isinstance(node_name, str) and node_name:
            ready.add(node_name)
    targets: set[tuple[str, int]] = set()
    for entry in _list(obj.get("ports"), "ports"):
        if not isinstance(entry, Mapping):
            continue
        number = entry.get("port")
        protocol = entry.get("protocol") or "TCP"
        if isinstance(number, int) and not isinstance(number, bool) and isinstance(protocol, str):
            targets.add((protocol, number))
    return EndpointSliceView(
        namespace=namespace,
        name=name,
        service_name=service_name if isinstance(service_name, str) else None,
        ready_node_names=frozenset(ready),
        backends=frozenset(backends),
        target_ports=frozenset(targets),
    )


def _backend_pod(ref: Any, namespace: str) -> str | None:
    """The Pod name an endpoint's ``targetRef`` names when it is a Pod of ``namespace``
    (the slice's; an absent ``targetRef.namespace`` means it), else ``None``. A reference
    to another namespace's Pod is never a backend: anyone who may write EndpointSlices in
    one namespace could otherwise name another team's Pod (docs/design.md §4.9)."""
    if not isinstance(ref, Mapping) or ref.get("kind") != "Pod":
        return None
    pod, pod_namespace = ref.get("name"), ref.get("namespace") or namespace
    if not isinstance(pod, str) or not pod or pod_namespace != namespace:
        return None
    return pod


@dataclass(frozen=True, slots=True)
class HostPort:
    """One port a Pod holds on its node (docs/design.md §4.9): ``protocol``/``port`` on the
    node's addresses (``host_ip``, canonical text, when the Pod's ``hostIP`` names one
    address; ``None``: every address of the node), served by the Pod's ``container_port``
    (a ``hostNetwork: true`` Pod's ``containerPort`` is the port itself; a ``hostPort``
    maps to its ``containerPort`` through the CNI ``portmap`` plugin)."""

    protocol: str
    port: int
    container_port: int
    host_ip: str | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    """What port ownership reads from a Pod that holds node ports (docs/design.md §4.9):
    the node it runs on and its :class:`HostPort` entries: every ``containerPort`` of a
    ``hostNetwork: true`` Pod (it serves them on every address of its node), every
    ``hostPort`` of another Pod (the CNI ``portmap`` plugin DNATs ``nodeIP:hostPort`` to it).
    ``ports`` holds the distinct ``(protocol, port)`` keys of ``host_ports`` (what the port
    index files it under). A Pod that has ended (``status.phase`` Succeeded or Failed) or
    is not bound holds no port (both empty)."""

    namespace: str
    name: str
    node_name: str | None
    ports: tuple[tuple[str, int], ...]
    host_ports: tuple[HostPort, ...] = ()
    host_network: bool = False

    @property
    def holds_ports(self) -> bool:
        """Whether the Pod holds any node port (a Pod that holds none is not kept)."""
        return bool(self.ports)


def _pod_containers(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(field path, container)`` of the containers whose ports a Pod serves: every entry
    of ``spec.containers`` and the restartable (sidecar, ``restartPolicy: Always``) ones of
    ``spec.initContainers`` (KEP-753: they run for the Pod's life, and a host-network
    sidecar listens on the node). Whether a kubelet gives a sidecar's ``hostPort`` to the
    sandbox's port mappings depends on its version; counting it is the safe side (it can
    only block more)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for kind in ("containers", "initContainers"):
        for c, container in enumerate(_list(spec.get(kind), f"spec.{kind}")):
            if not isinstance(container, Mapping):
                continue
            if kind == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            out.append((f"spec.{kind}[{c}]", container))
    return out


def pod_view(obj: Mapping[str, Any]) -> PodView:
    """Project a ``v1`` Pod for port ownership (docs/design.md §4.9): a ``hostNetwork:
    true`` Pod holds every ``containerPort`` of its containers; any other Pod holds each
    ``hostPort`` it declares (on ``hostIP`` when that is set and not ``0.0.0.0``/``::``),
    with the protocol as declared (absent: TCP). A Pod holding nothing gets empty
    ``ports`` (the informer keeps no such Pod).

    Raises:
        ViewError: not a mapping, no ``metadata.name``, or a read field of the wrong type.
    """
    _, name, namespace = _metadata(obj, namespaced=True)
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    node_name = _opt_str(spec.get("nodeName"), "spec.nodeName") or None
    host_network = spec.get("hostNetwork") is True
    held: dict[HostPort, None] = {}
    ended = status.get("phase") in ("Succeeded", "Failed")
    if node_name is not None and not ended:
        for where_c, container in _pod_containers(spec):
            for p, entry in enumerate(_list(container.get("ports"), f"{where_c}.ports")):
                if not isinstance(entry, Mapping):
                    continue
                where = f"{where_c}.ports[{p}]"
                protocol = _opt_str(entry.get("protocol"), f"{where}.protocol") or "TCP"
                container_port = _port_number(entry.get("containerPort"), f"{where}.containerPort")
                if container_port is None:
                    continue
                if host_network:
                    held[HostPort(protocol, container_port, container_port)] = None
                    continue
                host_port = _port_number(entry.get("hostPort"), f"{where}.hostPort")
                if host_port is None:
                    continue
                raw_ip = _opt_str(entry.get("hostIP"), f"{where}.hostIP") or ""
                parsed = canonical_ip(raw_ip) if raw_ip else None
                # 0.0.0.0 and :: mean every address (the portmap plugin matches no
                # destination then); text that is no IP is taken as every address too
                # (the safe side: it blocks more, never less).
                host_ip = None if parsed is None or parsed[2] == 0 else parsed[0]
                held[HostPort(protocol, host_port, container_port, host_ip)] = None
    host_ports = tuple(held)
    ports = tuple(dict.fromkeys((h.protocol, h.port) for h in host_ports))
    return PodView(
        namespace=namespace,
        name=name,
        node_name=node_name,
        ports=ports,
        host_ports=host_ports,
        host_network=host_network,
    )
