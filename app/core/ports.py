"""Port ownership on node addresses: one owner per published (address, protocol, port) (pure).

docs/design.md §4.9. kube-proxy captures ``address:port`` for every ``ipMode: VIP`` entry of
a load-balancer ingress, on every node and from every client, Pods and the node itself
included (kube-proxy v1.35.4 ``pkg/proxy/iptables/proxier.go``, ``nftables/proxier.go``;
docs/reference/node-addresses-in-the-datapath.md). A node address we publish for a
Service therefore takes that port of the node from everyone else. This module decides,
from API state alone, which of a Service's candidate addresses (what
:func:`app.core.nodeipam.select` gives) it may keep. Two tiers:

1. **Blocks that need no competition** (:func:`blocks`), per Service: its namespace is not
   in ``allowed_namespaces`` (every address); a port in ``reserved_node_ports`` not granted
   to it by ``reserved_port_exceptions`` (every address); a port equal to another Service's
   allocated ``nodePort`` or ``healthCheckNodePort`` (open on every node address; every
   address); an address held for that protocol and port by a Service that is not ours
   (its stored ingress, ``ipMode`` VIP or unset) or named in any other Service's
   ``spec.externalIPs``; an address of a node where a Pod holds that port (a
   ``hostNetwork: true`` Pod's ``containerPort``, another Pod's ``hostPort``), unless the
   Pod is the Service's own backend serving that very port (:func:`_backend_serves`).
2. **Competition between our Services** (:func:`decide`): per address, the claimants (the
   managed Services that have it among their candidates after tier 1) are taken in rank
   order, lowest :func:`rank` ``(not incumbent, creationTimestamp, namespace, name)``
   first, and each publishes the address unless a claimant taken before it that publishes
   it shares one of its ports. Incumbent is per port: the stored ingress records the
   address with every current port of the Service (``ports``, core/v1 ``PortStatus``,
   which we write: :func:`with_port_status`), so an older Service that adds a younger
   one's port does not take it. A Service keeps an address only when it owns it for every
   one of its ports.
3. A claimant that loses an address claims nothing there (a Service that publishes
   nowhere holds no port). The rank order reads API state only, so the outcome cannot
   depend on the order in which Services are reconciled.

Conflicts are by protocol and port number, as kube-proxy matches them (``TCP/53`` and
``UDP/53`` never conflict); Cilium's own datapath conflicts on the number alone
(docs/design.md §4.9).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.codes import NAMESPACE_NOT_ALLOWED, PORT_IN_USE
from app.core.status import with_ports
from app.core.views import EndpointSliceView, HostPort, PodView, ServiceView

PROTOCOLS = ("TCP", "UDP", "SCTP")
"""The protocols of ``spec.ports[].protocol`` (core/v1 ``Protocol``); absent means TCP."""

OWNERSHIP_FIELDS = ("ports", "node_ports", "health_check_node_port", "external_ips", "created")
"""The :class:`~app.core.views.ServiceView` fields only port ownership reads, never
:func:`app.core.nodeipam.select` (so they never key a shared selection)."""

PortKey = tuple[str, int]
"""``(protocol, port)``."""

DEFAULT_RESERVED_NODE_PORTS = (
    "22,179/TCP,2379-2380,4789/UDP,5001/TCP,6081/UDP,6443,8472/UDP,10250,10256-10257,10259,"
    "51820-51821/UDP,51871/UDP"
)
"""What a kubeadm or k3s node serves on its own addresses (Kubernetes "Ports and
Protocols", kubernetes.io/docs/reference/networking/ports-and-protocols/; k3s "Inbound
Rules for K3s Nodes"): 22 SSH (OpenSSH's default port), 2379-2380 etcd client and peer,
6443 kube-apiserver (kubeadm's and k3s' ``--secure-port``), 10250 the kubelet API, 10256
kube-proxy's ``/healthz`` (``--healthz-bind-address`` 0.0.0.0:10256), 10257
kube-controller-manager, 10259 kube-scheduler (any protocol); and what the common CNIs
serve from the kernel, which no Pod declares (so no other rule protects it): 8472/UDP
VXLAN (flannel, k3s' default backend, Cilium), 4789/UDP VXLAN (Calico, Antrea,
OVN-Kubernetes), 6081/UDP Geneve, 51820-51821/UDP WireGuard (flannel/k3s, Calico),
51871/UDP Cilium's WireGuard, 179/TCP BGP (Calico's BIRD, kube-router, MetalLB's FRR),
5001/TCP k3s' embedded registry. Publishing one of them would hand every node's overlay
or routing traffic to a tenant's Pods."""

_RANGE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5}))?(?:/([A-Za-z]+))?", re.ASCII)
_EXCEPTION = re.compile(r"([^/:\s]+)/([^/:\s]+):(.+)")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", re.ASCII)


@dataclass(frozen=True, slots=True)
class PortRange:
    """Ports ``first``..``last`` (inclusive) of ``protocol`` (``None``: any protocol)."""

    first: int
    last: int
    protocol: str | None = None

    def covers(self, protocol: str, port: int) -> bool:
        """Whether ``protocol``/``port`` is in the range."""
        return self.first <= port <= self.last and self.protocol in (None, protocol)

    def __str__(self) -> str:
        text = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{text}/{self.protocol}" if self.protocol else text


def parse_port_ranges(text: str, *, flag: str) -> tuple[PortRange, ...]:
    """Parse a comma-separated list of ``PORT``, ``FIRST-LAST``, each optionally
    ``/TCP``, ``/UDP`` or ``/SCTP`` (any protocol without). Empty text: no port.

    Raises:
        ValueError: naming ``flag``, the entry and why (not a number, out of 1-65535, a
            range that ends before it starts, an unknown protocol).
    """
    out: list[PortRange] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _RANGE.fullmatch(entry)
        if match is None:
            raise ValueError(
                f"{flag}: Invalid value: {entry!r}: must be PORT or FIRST-LAST, optionally"
                " followed by /TCP, /UDP or /SCTP"
            )
        first = int(match.group(1))
        last = int(match.group(2) or first)
        protocol = match.group(3).upper() if match.group(3) else None
        if not (1 <= first <= 65535 and 1 <= last <= 65535):
            raise ValueError(f"{flag}: Invalid value: {entry!r}: ports are 1-65535")
        if last < first:
            raise ValueError(f"{flag}: Invalid value: {entry!r}: the range ends before it starts")
        if protocol is not None and protocol not in PROTOCOLS:
            raise ValueError(f"{flag}: Invalid value: {entry!r}: protocol must be TCP, UDP or SCTP")
        out.append(PortRange(first, last, protocol))
    return tuple(out)


def parse_port_exceptions(text: str, *, flag: str) -> tuple[tuple[str, str, PortRange], ...]:
    """Parse ``NAMESPACE/NAME:PORTS`` entries separated by ``;`` (``PORTS`` as in
    :func:`parse_port_ranges`, with ``+`` between several, e.g.
    ``kube-system/bastion:22;infra/dns:53/UDP+53/TCP``). Empty text: none.

    Raises:
        ValueError: naming ``flag``, the entry and why.
    """
    out: list[tuple[str, str, PortRange]] = []
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        match = _EXCEPTION.fullmatch(entry)
        if match is None:
            raise ValueError(
                f"{flag}: Invalid value: {entry!r}: must be NAMESPACE/NAME:PORTS"
                " (e.g. kube-system/bastion:22)"
            )
        namespace, name, ports = match.groups()
        if not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
            raise ValueError(
                f"{flag}: Invalid value: {entry!r}: NAMESPACE must be a namespace name and"
                " NAME a Service name (lower case DNS-1123, no wildcard)"
            )
        for port_range in parse_port_ranges(ports.replace("+", ","), flag=flag):
            out.append((namespace, name, port_range))
    return tuple(out)


def parse_namespaces(text: str, *, flag: str) -> frozenset[str] | None:
    """A comma-separated list of namespace names; empty text: ``None`` (every namespace).

    Raises:
        ValueError: an entry is not a DNS-1123 label (what a namespace name must be).
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name, re.ASCII):
            raise ValueError(
                f"{flag}: Invalid value: {name!r}: a namespace name must be a DNS-1123 label"
            )
    return frozenset(names) if names else None


@dataclass(frozen=True, slots=True)
class PortPolicy:
    """The administrator's port rules (settings ``reserved_node_ports``,
    ``reserved_port_exceptions``, ``allowed_namespaces``; docs/design.md §4.9, §10)."""

    reserved: tuple[PortRange, ...] = ()
    exceptions: tuple[tuple[str, str, PortRange], ...] = ()
    namespaces: frozenset[str] | None = None

    def reserved_range(self, service: ServiceView, protocol: str, port: int) -> PortRange | None:
        """The reserved range ``protocol``/``port`` falls in, unless an exception grants
        it to ``service``; ``None`` when the port is free to publish."""
        for port_range in self.reserved:
            if port_range.covers(protocol, port):
                for namespace, name, allowed in self.exceptions:
                    if (
                        namespace == service.namespace
                        and name == service.name
                        and allowed.covers(protocol, port)
                    ):
                        return None
                return port_range
        return None


@dataclass(frozen=True, slots=True)
class Holder:
    """What holds a port: ``kind`` is ``Service`` (another managed Service's ingress),
    ``LoadBalancer`` (a Service of another class's stored ingress), ``ExternalIP``,
    ``NodePort``, ``HealthCheckNodePort``, ``Pod`` (a host-network Pod), ``HostPortPod``
    (a Pod's ``hostPort``), ``Reserved`` (setting ``reserved_node_ports``) or ``Namespace``
    (setting ``allowed_namespaces``). ``detail``: what else the reason says (a backend
    Pod of the Service itself that serves another port)."""

    kind: str
    namespace: str = ""
    name: str = ""
    detail: str = ""

    def __str__(self) -> str:
        if self.kind == "Reserved":
            return "reserved for the node itself (setting reserved-node-ports)"
        if self.kind == "Namespace":
            return (
                f"namespace {self.namespace} is not in the setting allowed-namespaces"
                f" ({self.detail})"
            )
        if self.kind == "Limit":
            return (
                f"the status would record more than {MAX_PORT_RECORDS} ports (its ports x"
                " its addresses): fewer ports, or a node selector that picks fewer nodes"
            )
        what = {
            "Service": "owned by Service",
            "LoadBalancer": "the load-balancer ingress of Service",
            "ExternalIP": "spec.externalIPs of Service",
            "NodePort": "a nodePort of Service",
            "HealthCheckNodePort": "the healthCheckNodePort of Service",
            "Pod": "hostNetwork Pod",
            "HostPortPod": "hostPort Pod",
        }[self.kind]
        text = f"{what} {self.namespace}/{self.name}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True, slots=True)
class Conflict:
    """``protocol``/``port`` of the Service cannot be published on ``addresses`` (``()``:
    on every address) because ``holder`` holds it."""

    protocol: str
    port: int
    holder: Holder
    addresses: tuple[str, ...] = ()

    def sentence(self, shown: int = 3) -> str:
        """E.g. ``TCP/80 on 10.0.0.1, 10.0.0.2: owned by Service team-a/alpha`` (at most
        ``shown`` addresses, then "and N more")."""
        if self.holder.kind == "Namespace":
            return str(self.holder)
        if self.holder.kind == "Limit":
            count = len(self.addresses)
            return f"{count} address(es) not published: {self.holder}"
        where = "every address"
        if self.addresses:
            more = len(self.addresses) - shown
            where = ", ".join(self.addresses[:shown]) + (f" and {more} more" if more > 0 else "")
        return f"{self.protocol}/{self.port} on {where}: {self.holder}"


@dataclass(frozen=True, slots=True)
class Ownership:
    """What :func:`decide` gives for one Service: ``lost`` the candidate addresses it may
    not publish (empty: keeps all) and ``conflicts`` why, one per (protocol, port, holder),
    in port order. ``code`` is ``PortInUse`` or ``NamespaceNotAllowed`` when at least one
    address is lost (the latter when the namespace is why), else ``None``."""

    lost: frozenset[str] = frozenset()
    conflicts: tuple[Conflict, ...] = ()
    code: str | None = None

    def empty_reason(self) -> str:
        """The reason of a Service that keeps no address, naming what decided it and one
        thing its author can do: ``every address is taken: <note>; use another port, or a
        node selector that avoids the holders' nodes``, or the namespace rule with the
        allowed namespaces."""
        if self.code == NAMESPACE_NOT_ALLOWED:
            return f"{self.note()}: an administrator adds the namespace there to publish it"
        if any(c.holder.kind == "Limit" for c in self.conflicts):
            return f"no address published: {self.note()}"
        if any(c.holder.kind == "Reserved" for c in self.conflicts):
            advice = (
                "use another port, or ask an administrator to grant it"
                " (setting reserved-port-exceptions)"
            )
        elif any(not c.addresses for c in self.conflicts):
            advice = "use another port (it is held on every node address)"
        else:
            advice = "use another port, or a node selector that avoids the holders' nodes"
        return f"every address is taken: {self.note()}; {advice}"

    def note(self, limit: int = 5) -> str:
        """One sentence per conflict (at most ``limit``, then "and N more"), joined by
        ``; ``: what an Event note and a preview reason say."""
        parts = [c.sentence() for c in self.conflicts[:limit]]
        more = len(self.conflicts) - limit
        if more > 0:
            parts.append(f"and {more} more conflict(s)")
        return "; ".join(parts)


NO_CONFLICT = Ownership()


class PortLookup(Protocol):
    """Read access to a :class:`PortIndex` (``ClusterCache`` gives the same, under its
    lock). Each method returns a new list the caller may keep."""

    def claimants(self, key: PortKey) -> list[ServiceView]:
        """The managed Services with port ``key``."""
        ...

    def fixed(self, key: PortKey) -> list[tuple[ServiceView, tuple[str, ...]]]:
        """Services holding ``key`` on fixed addresses (another class's ingress,
        ``spec.externalIPs``), with those addresses."""
        ...

    def node_port_holders(self, key: PortKey) -> list[tuple[ServiceView, str]]:
        """Services with ``key`` as an allocated node port, with the kind (``NodePort``
        or ``HealthCheckNodePort``)."""
        ...

    def pods(self, key: PortKey) -> list[PodView]:
        """Pods holding ``key`` on their node (host-network ``containerPort``, ``hostPort``)."""
        ...

    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]:
        """The EndpointSlices of Service ``namespace/service_name`` (its backends)."""
        ...


def stored_vip_ips(service: ServiceView) -> tuple[str, ...]:
    """The addresses of ``service``'s stored ingress that kube-proxy captures, in
    canonical text (:func:`app.core.views.canonical_ip`, as candidates are), each once:
    entries with an ``ip`` and ``ipMode`` VIP or unset (``Proxy`` entries are skipped by
    every proxy mode, kube-proxy ``serviceport.go``); text that is no IP is left out."""
    from app.core.views import canonical_ip  # views imports options, which imports us

    out: list[str] = []
    for entry in service.ingress or ():
        ip = entry.get("ip")
        if isinstance(ip, str) and ip and entry.get("ipMode") in (None, "", "VIP"):
            # kube-proxy reads it sloppily (ParseIPSloppy): FD00::A, ::ffff:10.0.0.1 and
            # 010.000.000.001 capture the node address they spell, so compare canonically.
            parsed = canonical_ip(ip)
            if parsed is not None:
                out.append(parsed[0])
    return tuple(dict.fromkeys(out))


def published_ports(service: ServiceView) -> dict[str, frozenset[PortKey] | None]:
    """The ``(protocol, port)`` pairs ``service``'s stored ingress records per address it
    publishes (``status.loadBalancer.ingress[].ports``, core/v1 ``PortStatus``: "the
    service port of which status is recorded here"), by canonical address, for the
    entries kube-proxy captures (as :func:`stored_vip_ips`). ``None`` for an entry that
    records no ports (written by Cilium's Node IPAM or by us before ports were recorded):
    it counts as published for every port of the Service (docs/design.md §4.9)."""
    from app.core.views import canonical_ip  # views imports options, which imports us

    out: dict[str, frozenset[PortKey] | None] = {}
    for entry in service.ingress or ():
        ip = entry.get("ip")
        # Any ipMode: with ip-mode Proxy our own entries are Proxy, and incumbency must
        # hold there too (and survive a switch of the setting).
        if not (isinstance(ip, str) and ip and entry.get("ipMode") in (None, "", "VIP", "Proxy")):
            continue
        parsed = canonical_ip(ip)
        if parsed is None:
            continue
        raw = entry.get("ports")
        if raw is None and service.ingress_ports:
            raw = [
                {"port": port, "protocol": protocol} for port, protocol, _ in service.ingress_ports
            ]
        recorded: frozenset[PortKey] | None = None
        if isinstance(raw, (list, tuple)) and raw:
            recorded = frozenset(
                (str(p.get("protocol") or "TCP"), int(p["port"]))
                for p in raw
                if isinstance(p, Mapping) and isinstance(p.get("port"), int)
            )
        previous = out.get(parsed[0], frozenset())
        if previous is None or recorded is None:
            out[parsed[0]] = None
        else:
            out[parsed[0]] = previous | recorded
    return out


def incumbent(service: ServiceView, address: str) -> bool:
    """Whether ``service``'s stored ingress publishes ``address`` for every one of its
    current ports (an entry recording no ports counts for all: :func:`published_ports`).
    A Service that added a port since it was published is no incumbent there: rule 2 of
    docs/design.md §4.9 (per-port incumbency)."""
    return _incumbent_in(published_ports(service) if service.ingress else {}, service, address)


def _incumbent_in(
    recorded: Mapping[str, frozenset[PortKey] | None], service: ServiceView, address: str
) -> bool:
    """:func:`incumbent` on ``recorded``, ``service``'s :func:`published_ports`."""
    if address not in recorded:
        return False
    held = recorded[address]
    return held is None or all(key in held for key in service.ports)


def rank(service: ServiceView, address: str) -> tuple[bool, float, str, str]:
    """The order in which claimants of ``address`` are served (lowest first):
    ``(not incumbent, creationTimestamp, namespace, name)`` (docs/design.md §4.9)."""
    return (not incumbent(service, address), *_rank_base(service))


def port_status(service: ServiceView) -> tuple[dict[str, Any], ...]:
    """``ports`` of the ingress entries we write for ``service``: one core/v1
    ``PortStatus`` (``port``, ``protocol``) per ``spec.ports`` pair, in order: the record
    that makes per-port incumbency readable from API state (docs/design.md §4.9).
    kube-apiserver v1.35 does not validate them (``ValidateLoadBalancerStatus`` reads
    ``ip``, ``ipMode`` and ``hostname`` only); kube-proxy and Cilium ignore them."""
    return tuple({"port": port, "protocol": protocol} for protocol, port in service.ports)


def port_key(service: ServiceView) -> tuple[tuple[int, str, None], ...]:
    """:func:`port_status` as ``(port, protocol, error)`` triples
    (:func:`app.core.status.port_record`), what the reconciler compares and records."""
    return tuple((port, protocol, None) for protocol, port in service.ports)


def ports_covered(service: ServiceView) -> bool:
    """Whether every address of ``service``'s stored ingress (the entries kube-proxy
    captures) was published for every port the Service has now: each entry records them
    in ``ports``, or records none (Cilium's or an older write of ours: taken as covering
    all). ``False`` means the spec gained a port since the status was written, so the
    stored addresses capture a port no decision of ours ever granted."""
    return all(
        recorded is None or all(key in recorded for key in service.ports)
        for recorded in published_ports(service).values()
    )


def pinned_ports(service: ServiceView) -> tuple[dict[str, Any], ...] | None:
    """The stored ingress of ``service`` with each entry's ``ports`` brought to what the
    Service may still claim with it, as new dicts: an entry that records none (no
    ``ports``, or ``ports: []``) gets :func:`port_status` (the Service's current ports);
    an entry that records ports the Service no longer has keeps only those it still has
    (never one it did not record). ``None`` when nothing changes: no stored ingress, no
    port, or every entry records exactly ports the Service has.

    For a Service whose selector does not parse (docs/design.md §4.1, §4.9): its stored
    ingress is kept and never decided again, so its recorded ports are what port
    ownership reads. An entry without ``ports`` counts as published for *every* port of
    the Service (:func:`published_ports`), and one that still records a port the Service
    dropped would count for it again when the port is added back; either way a port added
    later would be incumbent at once, taking it from the Service that published it in
    between. The reconciler writes this once per change of the ports (the first at first
    sight: a migration from Cilium's Node IPAM, whose entries record no ports); a port
    added after that is not covered (:func:`ports_covered`) and the ingress is withdrawn
    (:func:`stale_ingress`). The result may hold more than :data:`MAX_PORT_RECORDS`
    records: the caller withdraws such an ingress instead (:func:`record_count`)."""
    entries = service.ingress or ()
    if not entries or not service.ports:
        return None
    current = port_key(service)
    wanted = set(service.ports)
    # Every entry records these when the view found one list in all (it strips them).
    shared = service.ingress_ports
    common = (
        None if shared is None else [(port, protocol or "TCP", e) for port, protocol, e in shared]
    )
    out: list[dict[str, Any]] = []
    changed = False
    for entry in entries:
        raw = entry.get("ports")
        if common is not None:
            records = common
        elif isinstance(raw, list) and raw:
            records = [
                (p.get("port"), p.get("protocol") or "TCP", p.get("error"))
                if isinstance(p, Mapping)
                else (None, None, None)
                for p in raw
            ]
        else:
            out.append(with_ports([entry], current)[0])
            changed = True
            continue
        kept = tuple(r for r in records if (r[1], r[0]) in wanted)
        if len(kept) != len(records):
            changed = True
        if kept:  # none kept: the entry covers no port the Service has, so it goes
            out.append(with_ports([entry], kept)[0])
    return tuple(out) if changed else None


def record_count(ingress: Sequence[Mapping[str, Any]]) -> int:
    """The ``PortStatus`` records of ``ingress`` (each entry's ``ports``), to compare with
    :data:`MAX_PORT_RECORDS`."""
    return sum(len(e.get("ports") or ()) for e in ingress)


def stale_ingress(service: ServiceView, *, ours: bool) -> str | None:
    """Why the stored ingress of a Service that the controller does not decide must be
    withdrawn all the same (docs/design.md §3, §4.9), or ``None``.

    Args:
        service: a Service that is not managed (type, class or deletion) or whose node
            selector does not parse.
        ours: the Service has our class (or is class-less under ``nodeipam``) whatever
            its type and deletion.

    kube-proxy captures the ingress of a Service whatever its type or deletion
    (``pkg/proxy/serviceport.go``), so an address written for a Service's old ports
    captures any port its author adds later. Withdrawn: the ingress of a Service whose
    ``spec.type`` is no longer ``LoadBalancer`` (any class: the API server refuses to
    store such an ingress, ``ValidateLoadBalancerStatus``, and the class is dropped with
    the type, so no controller can own it); the ingress of a Service of ours being deleted
    (the cloud-provider service controller clears ``status.loadBalancer`` as soon as a
    Service needs cleanup, ``syncLoadBalancerIfNeeded``; kept, it would let any finalizer
    hold node addresses and their ports for as long as its author likes, against pools,
    host-network Pods and later Services alike); and the ingress of a Service of ours
    with a selector that does not parse whose ports are not all covered
    (:func:`ports_covered`)."""
    if not service.ingress:
        return None
    if service.type != "LoadBalancer":
        shown = "unset (ClusterIP)" if service.type is None else service.type
        return (
            f"spec.type is {shown}: no load balancer owns this ingress any more, and"
            " kube-proxy still captures its addresses on every port of the Service"
        )
    if ours and service.deleting:
        return (
            "the Service is being deleted (metadata.deletionTimestamp is set): its node"
            " addresses go when its deletion starts, as a cloud load balancer does, so no"
            " finalizer keeps them"
        )
    if ours and not ports_covered(service):
        return (
            "the Service has ports its node addresses were never published for (see"
            " status.loadBalancer.ingress[].ports), and it is no longer decided (its node"
            " selector does not parse)"
        )
    return None


NAMESPACES_SHOWN = 5
"""Allowed namespaces a ``NamespaceNotAllowed`` reason lists before "and N more"."""
MAX_PORT_RECORDS = 8192
"""Most ``PortStatus`` records a Service's ingress may hold (its ports x its addresses,
~35 bytes each in the status: at most ~290 KB, well inside etcd's 1.5 MiB request limit).
:func:`decide` keeps the first addresses (in candidate order, after the blocks) up to it
and names the limit for the rest (docs/design.md §4.9), so a Service with thousands of
ports on many nodes cannot make a status the API server refuses, nor cost us memory by
the product; :func:`claims` cuts the same, so what it cannot publish blocks no rival."""


def with_port_status(
    ingress: Sequence[Mapping[str, Any]], service: ServiceView
) -> tuple[dict[str, Any], ...]:
    """``ingress`` (entries with ``ip``/``ipMode``, as ``select`` gives them) with each
    entry's ``ports`` set to :func:`port_status` of ``service`` (new dicts,
    :func:`app.core.status.with_ports`): what preview shows and the reconciler's patch
    body carries (docs/design.md §4.9)."""
    return with_ports(ingress, port_key(service))


class PortIndex:
    """Services and host-network Pods by the ports they hold (module docstring), updated
    per changed object (:meth:`put_service`, :meth:`put_pod`), never rebuilt. Not
    thread-safe: ``ClusterCache`` calls it under its lock. ``managed`` decides which
    Services compete (docs/design.md §3, :func:`app.core.nodeipam.is_managed` with the
    process settings)."""

    def __init__(self, managed: Callable[[ServiceView], bool]) -> None:
        self._managed = managed
        self._claimants: dict[PortKey, dict[str, ServiceView]] = {}
        self._fixed: dict[PortKey, dict[str, tuple[ServiceView, tuple[str, ...]]]] = {}
        self._node_ports: dict[PortKey, dict[str, tuple[ServiceView, str]]] = {}
        self._pods: dict[PortKey, dict[str, PodView]] = {}
        self._slices: dict[str, dict[str, EndpointSliceView]] = {}
        self.version = 0
        """Bumped whenever what any Service or Pod *blocks* changes (its node ports,
        fixed addresses, managed-ness, ports, or a Pod's ports or node): a caller that
        memoises :func:`claims` keys them by it. A managed Service's status echo does not
        bump it (its rank changes, which the caller keys by the view itself)."""

    @staticmethod
    def _add(
        table: dict[PortKey, dict[str, object]], key: PortKey, item: str, value: object
    ) -> None:
        table.setdefault(key, {})[item] = value

    @staticmethod
    def _drop(table: dict[PortKey, dict[str, object]], key: PortKey, item: str) -> None:
        group = table.get(key)
        if group is not None:
            group.pop(item, None)
            if not group:
                del table[key]

    def put_service(self, key: str, old: ServiceView | None, new: ServiceView | None) -> None:
        """Replace what Service ``key`` (``namespace/name``) holds: ``old`` as indexed
        before (``None``: new), ``new`` now (``None``: deleted)."""
        tables: tuple[dict[PortKey, dict[str, object]], ...] = (
            self._claimants, self._fixed, self._node_ports,  # type: ignore[assignment]
        )  # fmt: skip
        if self._blocking(old) != self._blocking(new):
            self.version += 1
        if old is not None:
            for port in old.ports:
                for table in tables[:2]:
                    self._drop(table, port, key)
            for port in held_ports(old)[len(old.ports) :]:
                self._drop(tables[2], port, key)
        if new is None:
            return
        managed = self._managed(new)
        fixed = tuple(dict.fromkeys((*new.external_ips, *(() if managed else stored_vip_ips(new)))))
        for port in new.ports:
            if managed:
                self._add(tables[0], port, key, new)
            if fixed:
                self._add(tables[1], port, key, (new, fixed))
        for port in new.node_ports:
            self._add(tables[2], port, key, (new, "NodePort"))
        if (
            new.health_check_node_port is not None
            and ("TCP", new.health_check_node_port) not in new.node_ports
        ):
            self._add(
                tables[2], ("TCP", new.health_check_node_port), key, (new, "HealthCheckNodePort")
            )

    def _blocking(self, view: ServiceView | None) -> tuple[object, ...] | None:
        """What of ``view`` can block another Service's address (see :attr:`version`)."""
        if view is None:
            return None
        managed = self._managed(view)
        fixed = view.external_ips if managed else (*view.external_ips, *stored_vip_ips(view))
        return (managed, view.ports, view.node_ports, view.health_check_node_port, fixed)

    def put_pod(self, key: str, old: PodView | None, new: PodView | None) -> None:
        """Replace what Pod ``key`` holds on its node (``None``: absent)."""
        if (old and (old.node_name, old.host_ports)) != (new and (new.node_name, new.host_ports)):
            self.version += 1
        if old is not None:
            for port in old.ports:
                self._drop(self._pods, port, key)  # type: ignore[arg-type]
        if new is not None:
            for port in new.ports:
                self._add(self._pods, port, key, new)  # type: ignore[arg-type]

    def put_slice(
        self, key: str, old: EndpointSliceView | None, new: EndpointSliceView | None
    ) -> None:
        """Replace EndpointSlice ``key`` (``namespace/name``; ``None``: absent), filed
        under its Service (label ``kubernetes.io/service-name``). The controller's cache
        keeps its own index of slices (``ClusterCache.endpoint_slices``); previews use this."""
        for view, adding in ((old, False), (new, True)):
            if view is None or view.service_name is None:
                continue
            owner = f"{view.namespace}/{view.service_name}"
            if adding:
                self._slices.setdefault(owner, {})[key] = view
            else:
                group = self._slices.get(owner)
                if group is not None:
                    group.pop(key, None)
                    if not group:
                        del self._slices[owner]

    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]:
        """See :class:`PortLookup`."""
        return list(self._slices.get(f"{namespace}/{service_name}", {}).values())

    def claimants(self, key: PortKey) -> list[ServiceView]:
        """See :class:`PortLookup`."""
        return list(self._claimants.get(key, {}).values())

    def fixed(self, key: PortKey) -> list[tuple[ServiceView, tuple[str, ...]]]:
        """See :class:`PortLookup`."""
        return list(self._fixed.get(key, {}).values())

    def node_port_holders(self, key: PortKey) -> list[tuple[ServiceView, str]]:
        """See :class:`PortLookup`."""
        return list(self._node_ports.get(key, {}).values())

    def pods(self, key: PortKey) -> list[PodView]:
        """See :class:`PortLookup`."""
        return list(self._pods.get(key, {}).values())

    def related(self, ports: Iterable[PortKey]) -> set[str]:
        """Keys of the managed Services with one of ``ports``: those whose ownership a
        change of something holding one of them can alter (the controller requeues them)."""
        out: set[str] = set()
        for port in ports:
            group = self._claimants.get(port)
            if group:
                out.update(group)
        return out


def held_ports(service: ServiceView) -> tuple[PortKey, ...]:
    """Every port ``service`` holds or claims: its ports, then its node ports and
    ``("TCP", healthCheckNodePort)`` (for :meth:`PortIndex.related`)."""
    health = service.health_check_node_port
    extra = (("TCP", health),) if health is not None else ()
    return (*service.ports, *service.node_ports, *extra)


def pod_ports(pod: PodView) -> tuple[PortKey, ...]:
    """The ports a Pod holds on its node (for :meth:`PortIndex.related`)."""
    return pod.ports


def _rank_base(service: ServiceView) -> tuple[float, str, str]:
    created = service.created if service.created is not None else math.inf
    return created, service.namespace, service.name


def _backend_serves(
    service: ServiceView, pod: PodView, host_port: HostPort, ports: PortLookup
) -> bool | None:
    """Whether ``pod`` is a backend of ``service`` that serves ``host_port`` for it:
    ``True`` when one of the Service's EndpointSlices names the Pod as a ready or serving
    endpoint (same namespace only, :func:`app.core.views.endpoint_slice_view`) and lists
    the Pod's ``container_port`` among its target ports (kube-proxy then sends
    ``nodeIP:port`` to the very listener the node port reaches: no conflict); ``False``
    when the Pod is such a backend but the Service targets another of its ports (the
    published address would take the Pod's node port away from it); ``None`` when the Pod
    is not a backend of the Service."""
    if pod.namespace != service.namespace:
        return None
    found: bool | None = None
    for view in ports.endpoint_slices(service.namespace, service.name):
        if pod.name in view.backends:
            if (host_port.protocol, host_port.container_port) in view.target_ports:
                return True
            found = False
    return found


def _pod_conflicts(
    service: ServiceView,
    protocol: str,
    port: int,
    pods: Sequence[PodView],
    by_node: Mapping[str, Sequence[str]],
    ports: PortLookup,
) -> list[Conflict]:
    """The conflicts of ``service``'s ``protocol``/``port`` with the Pods holding it on
    the nodes of its candidates (``by_node``: node name → its candidate addresses); a Pod
    that is the Service's own backend for that port is no rival (docs/design.md §4.9)."""
    out: list[Conflict] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        on_node = by_node.get(pod.node_name or "", ())
        if not on_node:
            continue
        for host_port in pod.host_ports:
            if (host_port.protocol, host_port.port) != (protocol, port):
                continue
            taken = tuple(a for a in on_node if host_port.host_ip in (None, a))
            if not taken:
                continue
            serves = _backend_serves(service, pod, host_port, ports)
            if serves:
                continue
            detail = (
                ""
                if serves is None
                else f"a backend of this Service, which sends {protocol}/{port} to another"
                f" port of it, not {host_port.container_port}"
            )
            kind = "Pod" if pod.host_network else "HostPortPod"
            out.append(
                Conflict(protocol, port, Holder(kind, pod.namespace, pod.name, detail), taken)
            )
            break
    return out


def blocks(
    service: ServiceView,
    candidates: Iterable[str],
    *,
    ports: PortLookup,
    node_of: Callable[[str], str | None],
    policy: PortPolicy,
) -> tuple[frozenset[str], list[Conflict]]:
    """Tier 1 (module docstring): the candidate addresses of ``service`` that something
    other than a managed Service's claim takes, and the conflicts.

    Args:
        service: a managed Service.
        candidates: its candidate addresses (canonical text, what ``select`` gives).
        ports: the port index.
        node_of: the Node name of an address (``None``: no Node has it).
        policy: the administrator's rules.

    Returns ``(lost, conflicts)``; ``lost`` is every candidate when a conflict holds on
    every address. Never raises on content.
    """
    addresses = tuple(candidates)
    if not addresses:
        return frozenset(), []
    me = (service.namespace, service.name)
    conflicts: list[Conflict] = []
    if policy.namespaces is not None and service.namespace not in policy.namespaces:
        allowed = ", ".join(sorted(policy.namespaces)[:NAMESPACES_SHOWN])
        if len(policy.namespaces) > NAMESPACES_SHOWN:
            allowed += f" and {len(policy.namespaces) - NAMESPACES_SHOWN} more"
        holder = Holder("Namespace", service.namespace, detail=allowed or "empty")
        return frozenset(addresses), [Conflict("", 0, holder)]
    everywhere = False
    lost: set[str] = set()
    wanted = set(addresses)
    by_node: dict[str, list[str]] | None = None
    for protocol, port in service.ports:
        if policy.reserved_range(service, protocol, port) is not None:
            conflicts.append(Conflict(protocol, port, Holder("Reserved")))
            everywhere = True
            continue
        holders = [
            (other, kind)
            for other, kind in ports.node_port_holders((protocol, port))
            if (other.namespace, other.name) != me
        ]
        if holders:
            other, kind = min(holders, key=lambda h: (h[0].namespace, h[0].name))
            conflicts.append(Conflict(protocol, port, Holder(kind, other.namespace, other.name)))
            everywhere = True
            continue
        for other, fixed in sorted(
            ports.fixed((protocol, port)), key=lambda h: (h[0].namespace, h[0].name)
        ):
            if (other.namespace, other.name) == me:
                continue
            taken = tuple(a for a in fixed if a in wanted)
            if taken:
                kind = "LoadBalancer" if not set(taken) <= set(other.external_ips) else "ExternalIP"
                conflicts.append(
                    Conflict(protocol, port, Holder(kind, other.namespace, other.name), taken)
                )
                lost.update(taken)
        pods = ports.pods((protocol, port))
        if pods:
            if by_node is None:
                by_node = {}
                for address in addresses:
                    node = node_of(address)
                    if node is not None:
                        by_node.setdefault(node, []).append(address)
            for conflict in _pod_conflicts(service, protocol, port, pods, by_node, ports):
                conflicts.append(conflict)
                lost.update(conflict.addresses)
    if everywhere:
        return frozenset(addresses), conflicts
    return frozenset(lost), conflicts


def claims(
    service: ServiceView,
    candidates: Iterable[str],
    *,
    ports: PortLookup,
    node_of: Callable[[str], str | None],
    policy: PortPolicy,
) -> frozenset[str]:
    """What a managed Service claims in the competition of :func:`decide`: its candidate
    addresses (in order) minus those its own blocks (:func:`blocks`) take, the first
    :func:`record_room` of them: what :func:`decide` lets it publish at most, so an
    address the status could not record blocks no rival. Pure."""
    ordered = tuple(candidates)
    addresses = frozenset(ordered)
    lost, _ = blocks(service, addresses, ports=ports, node_of=node_of, policy=policy)
    room = record_room(service)
    if not lost and len(ordered) <= room:
        return addresses
    return frozenset([a for a in ordered if a not in lost][:room])


def record_room(service: ServiceView) -> int:
    """How many addresses ``service``'s status can record (:data:`MAX_PORT_RECORDS` over
    its ports; without ports no record is written, so no limit: ``sys.maxsize``)."""
    return MAX_PORT_RECORDS // len(service.ports) if service.ports else sys.maxsize


class _Contest:
    """The competition between managed Services on one decision's addresses (rules 2 and
    3 of the module docstring), for the Service ``decided``: per address, one greedy pass
    over the claimants in rank order, each publishing the address unless a claimant taken
    before it that publishes it shares one of its ports. Only the claimants ranked before
    ``decided`` and linked to it through shared ports can matter, so the pass walks those
    (a breadth-first search over ports from ``decided``'s own): linear in them, no
    recursion, no depth limit. ``addresses``: the addresses at stake (``decided``'s after
    its blocks); memoised for one decision: the claimants of a port per address (one pass
    over each claimant's claims) and each Service's recorded ports."""

    def __init__(
        self,
        ports: PortLookup,
        claims_of: Callable[[ServiceView], AbstractSet[str]],
        addresses: AbstractSet[str],
        decided: ServiceView,
    ) -> None:
        self._decided = decided
        self._me = (decided.namespace, decided.name)
        self._ports = ports
        self._claims_of = claims_of
        self._addresses = addresses
        self._by_port: dict[PortKey, dict[str, list[ServiceView]]] = {}
        self._recorded: dict[tuple[str, str], dict[str, frozenset[PortKey] | None]] = {}
        self.work = 0
        """Claimants looked at so far (what the admission budget counts)."""

    def rank(self, service: ServiceView, address: str) -> tuple[bool, float, str, str]:
        """:func:`rank`, with ``service``'s recorded ports read once per decision."""
        key = (service.namespace, service.name)
        recorded = self._recorded.get(key)
        if recorded is None:
            recorded = self._recorded[key] = published_ports(service) if service.ingress else {}
        return (not _incumbent_in(recorded, service, address), *_rank_base(service))

    def _claimants(self, key: PortKey, address: str) -> list[ServiceView]:
        """The other managed Services with port ``key`` that claim ``address``."""
        by_address = self._by_port.get(key)
        if by_address is None:
            by_address = self._by_port[key] = {}
            for other in self._ports.claimants(key):
                if (other.namespace, other.name) == self._me:
                    continue  # never its own rival; it claims every address at stake
                self.work += 1
                for shared in self._addresses & self._claims_of(other):
                    by_address.setdefault(shared, []).append(other)
        return by_address.get(address, [])

    def holders(self, address: str) -> dict[PortKey, ServiceView]:
        """The ports of ``decided`` that a Service ranked before it publishes on
        ``address``, with that Service (empty: ``decided`` publishes the address)."""
        mine = self.rank(self._decided, address)
        earlier: dict[tuple[str, str], tuple[tuple[bool, float, str, str], ServiceView]] = {}
        pending = list(self._decided.ports)
        seen_ports: set[PortKey] = set()
        while pending:
            key = pending.pop()
            if key in seen_ports:
                continue
            seen_ports.add(key)
            for other in self._claimants(key, address):
                name = (other.namespace, other.name)
                if name in earlier:
                    continue
                theirs = self.rank(other, address)
                if theirs < mine:
                    earlier[name] = (theirs, other)
                    pending.extend(other.ports)
        taken: dict[PortKey, ServiceView] = {}
        for _, other in sorted(earlier.values(), key=lambda item: item[0]):
            if not any(key in taken for key in other.ports):
                for key in other.ports:
                    taken[key] = other
        return {key: taken[key] for key in self._decided.ports if key in taken}


def decide(
    service: ServiceView,
    candidates: Sequence[str],
    *,
    ports: PortLookup,
    claims_of: Callable[[ServiceView], AbstractSet[str]],
    node_of: Callable[[str], str | None],
    policy: PortPolicy,
) -> Ownership:
    """Which of ``service``'s candidate addresses it may publish (docs/design.md §4.9).

    Args:
        service: a managed Service (§3).
        candidates: its candidate addresses, canonical text (``select``'s ingress IPs).
        ports: the port index of the cluster (:class:`PortIndex` or ``ClusterCache``).
        claims_of: another managed Service's claims: :func:`claims` of its candidate
            addresses (``select``'s ingress IPs on the same Node snapshot; for a Service
            whose selector does not parse, its stored addresses, which stay published).
            :class:`app.core.decision.Decider` gives them from its memo.
        node_of: the Node name of an address (``None``: no Node has it).
        policy: the administrator's rules.

    Returns the :class:`Ownership`: tier 1 (:func:`blocks`) for ``service``, then, per
    remaining address, the competition in rank order (:func:`rank`): the Service loses
    the address when a claimant ranked before it that itself publishes the address shares
    one of its ports there. A claimant that loses an address claims nothing there, so a
    Service that publishes nowhere holds no port. The result reads only cluster state
    (specs, stored ingress), never another decision's outcome or the order of events,
    so every replica, every restart and every order gives the same answer for the same
    state. Never raises on content.
    """
    if not candidates or not service.ports:
        if (
            candidates
            and policy.namespaces is not None
            and service.namespace not in policy.namespaces
        ):
            lost, conflicts = blocks(
                service, candidates, ports=ports, node_of=node_of, policy=policy
            )
            return Ownership(lost, tuple(conflicts), NAMESPACE_NOT_ALLOWED)
        return NO_CONFLICT
    lost, conflicts = blocks(service, candidates, ports=ports, node_of=node_of, policy=policy)
    if conflicts and conflicts[0].holder.kind == "Namespace":
        return Ownership(lost, tuple(conflicts), NAMESPACE_NOT_ALLOWED)
    remaining = [a for a in candidates if a not in lost]
    # The record limit before the contest, as claims() takes it: a rival reads this
    # Service's claims to know what it may publish, so both must cut the same addresses.
    room = record_room(service)
    if len(remaining) > room:
        over = tuple(remaining[room:])
        conflicts.append(Conflict("", 0, Holder("Limit"), over))
        lost = lost | frozenset(over)
        remaining = remaining[:room]
    me = (service.namespace, service.name)
    contested = [
        key
        for key in service.ports
        if any((o.namespace, o.name) != me for o in ports.claimants(key))
    ]
    if remaining and contested:
        contest = _Contest(ports, claims_of, frozenset(remaining), service)
        taken: dict[tuple[PortKey, str, str], list[str]] = {}
        for address in remaining:
            for key, winner in contest.holders(address).items():
                taken.setdefault((key, winner.namespace, winner.name), []).append(address)
        for ((protocol, port), namespace, name), addresses in sorted(taken.items()):
            conflicts.append(
                Conflict(protocol, port, Holder("Service", namespace, name), tuple(addresses))
            )
            lost = lost | frozenset(addresses)
    if not lost:
        return Ownership(frozenset(), tuple(conflicts), None) if conflicts else NO_CONFLICT
    return Ownership(frozenset(lost), tuple(conflicts), PORT_IN_USE)
