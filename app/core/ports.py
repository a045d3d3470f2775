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
   ``spec.externalIPs``; an address of a node where a ``hostNetwork: true`` Pod declares
   that ``containerPort``.
2. **Competition between our Services** (:func:`decide`): for each (address, protocol,
   port) the claimants are the managed Services that have the port and the address among
   their candidates after tier 1. The owner is the claimant of lowest rank
   ``(address not in its stored ingress, creationTimestamp, namespace, name)``: a Service
   whose stored ingress already holds the address keeps it against newcomers, then the
   older one, then by name. A Service keeps an address only when it owns it for every one
   of its ports.

Claims are by candidates: a Service that loses an address to another of ours for one port
still claims it for its other ports (it does not publish it, so that port stays unused),
so every decision reads only the claimants' candidates, never their decisions, and the
outcome cannot depend on the order in which Services are reconciled. Conflicts are by
protocol and port number, as kube-proxy matches them (``TCP/53`` and ``UDP/53`` never
conflict); Cilium's own datapath conflicts on the number alone (docs/design.md §4.9).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # views imports options, which imports this module
    from app.core.views import PodView, ServiceView

PROTOCOLS = ("TCP", "UDP", "SCTP")
"""The protocols of ``spec.ports[].protocol`` (core/v1 ``Protocol``); absent means TCP."""

OWNERSHIP_FIELDS = ("ports", "node_ports", "health_check_node_port", "external_ips", "created")
"""The :class:`~app.core.views.ServiceView` fields only port ownership reads, never
:func:`app.core.nodeipam.select` (so they never key a shared selection)."""

PortKey = tuple[str, int]
"""``(protocol, port)``."""

DEFAULT_RESERVED_NODE_PORTS = "22,2379-2380,6443,10250,10256-10257,10259"
"""What a kubeadm or k3s node serves on its own addresses (Kubernetes "Ports and
Protocols", kubernetes.io/docs/reference/networking/ports-and-protocols/; k3s "Inbound
Rules for K3s Nodes"): 22 SSH (OpenSSH's default port), 2379-2380 etcd client and peer,
6443 kube-apiserver (kubeadm's and k3s' ``--secure-port``), 10250 the kubelet API, 10256
kube-proxy's ``/healthz`` (``--healthz-bind-address`` 0.0.0.0:10256), 10257
kube-controller-manager, 10259 kube-scheduler. Any protocol."""

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
    ``NodePort``, ``HealthCheckNodePort``, ``Pod`` (a host-network Pod), ``Reserved``
    (setting ``reserved_node_ports``) or ``Namespace`` (setting ``allowed_namespaces``)."""

    kind: str
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        if self.kind == "Reserved":
            return "reserved for the node itself (setting reserved-node-ports)"
        if self.kind == "Namespace":
            return "the namespace is not in the setting allowed-namespaces"
        what = {
            "Service": "owned by Service",
            "LoadBalancer": "the load-balancer ingress of Service",
            "ExternalIP": "spec.externalIPs of Service",
            "NodePort": "a nodePort of Service",
            "HealthCheckNodePort": "the healthCheckNodePort of Service",
            "Pod": "hostNetwork Pod",
        }[self.kind]
        return f"{what} {self.namespace}/{self.name}"


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
        """The reason of a Service that keeps no address: ``every address is taken:
        <note>``, or the namespace rule."""
        if self.code == "NamespaceNotAllowed":
            return "the namespace may not get node addresses (setting allowed-namespaces)"
        return f"every address is taken: {self.note()}"

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
        """host-network Pods declaring ``key`` as a containerPort."""
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
        """Replace what host-network Pod ``key`` holds (``None``: absent)."""
        if (old and (old.node_name, old.ports)) != (new and (new.node_name, new.ports)):
            self.version += 1
        if old is not None:
            for port in old.ports:
                self._drop(self._pods, port, key)  # type: ignore[arg-type]
        if new is not None:
            for port in new.ports:
                self._add(self._pods, port, key, new)  # type: ignore[arg-type]

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
    """The ports a host-network Pod holds (for :meth:`PortIndex.related`)."""
    return pod.ports


def _rank_base(service: ServiceView) -> tuple[float, str, str]:
    created = service.created if service.created is not None else math.inf
    return created, service.namespace, service.name


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
        return frozenset(addresses), [Conflict("", 0, Holder("Namespace"))]
    everywhere = False
    lost: set[str] = set()
    wanted = set(addresses)
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
            by_node: dict[str, list[str]] = {}
            for address in addresses:
                node = node_of(address)
                if node is not None:
                    by_node.setdefault(node, []).append(address)
            for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
                taken = tuple(by_node.get(pod.node_name or "", ()))
                if taken:
                    conflicts.append(
                        Conflict(protocol, port, Holder("Pod", pod.namespace, pod.name), taken)
                    )
                    lost.update(taken)
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
    addresses minus those its own blocks (:func:`blocks`) take. Pure."""
    addresses = frozenset(candidates)
    lost, _ = blocks(service, addresses, ports=ports, node_of=node_of, policy=policy)
    return addresses - lost if lost else addresses


def decide(
    service: ServiceView,
    candidates: Sequence[str],
    *,
    ports: PortLookup,
    candidates_of: Callable[[ServiceView], Iterable[str]],
    node_of: Callable[[str], str | None],
    policy: PortPolicy,
    claims_of: Callable[[ServiceView], AbstractSet[str]] | None = None,
) -> Ownership:
    """Which of ``service``'s candidate addresses it may publish (docs/design.md §4.9).

    Args:
        service: a managed Service (§3).
        candidates: its candidate addresses, canonical text (``select``'s ingress IPs).
        ports: the port index of the cluster (:class:`PortIndex` or ``ClusterCache``).
        candidates_of: another managed Service's candidate addresses (``select``'s
            ingress IPs on the same Node snapshot; for a Service whose selector does not
            parse, its stored addresses, which stay published).
        node_of: the Node name of an address (``None``: no Node has it).
        policy: the administrator's rules.
        claims_of: optional, another managed Service's claims: :func:`claims` of its
            candidates (a caller that memoises them passes this; ``candidates_of`` is
            then not called).

    Returns the :class:`Ownership`: tier 1 (:func:`blocks`) for ``service``, then the
    competition with every other claimant of each of its ports, whose claims are their
    candidates after their own tier 1. The result reads only cluster state, never
    another decision, so every replica, every restart and every order of events gives the
    same answer for the same state. Never raises on content.
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
            return Ownership(lost, tuple(conflicts), "NamespaceNotAllowed")
        return NO_CONFLICT
    lost, conflicts = blocks(service, candidates, ports=ports, node_of=node_of, policy=policy)
    if conflicts and conflicts[0].holder.kind == "Namespace":
        return Ownership(lost, tuple(conflicts), "NamespaceNotAllowed")
    remaining = [a for a in candidates if a not in lost]
    if remaining:
        me = (service.namespace, service.name)
        mine = set(remaining)
        stored: set[str] | None = None  # on the first claimed address: most have no rival
        base = _rank_base(service)
        for protocol, port in service.ports:
            rivals = [
                other
                for other in ports.claimants((protocol, port))
                if (other.namespace, other.name) != me
            ]
            if not rivals:
                continue
            winners: dict[str, tuple[tuple[bool, float, str, str], ServiceView]] = {}
            for other in rivals:
                if claims_of is not None:
                    claimed = mine.intersection(claims_of(other))
                else:
                    shared = mine.intersection(candidates_of(other))
                    if not shared:
                        continue
                    other_lost, _ = blocks(
                        other, shared, ports=ports, node_of=node_of, policy=policy
                    )
                    claimed = shared - other_lost
                if not claimed:
                    continue
                if stored is None:
                    stored = set(stored_vip_ips(service))
                other_stored = set(stored_vip_ips(other))
                other_base = _rank_base(other)
                for address in claimed:
                    theirs = (address not in other_stored, *other_base)
                    best = winners.get(address)
                    if theirs < (address not in stored, *base) and (
                        best is None or theirs < best[0]
                    ):
                        winners[address] = (theirs, other)
            by_holder: dict[tuple[str, str], list[str]] = {}
            for address in remaining:
                found = winners.get(address)
                if found is not None:
                    winner = found[1]
                    by_holder.setdefault((winner.namespace, winner.name), []).append(address)
            for (namespace, name), taken in sorted(by_holder.items()):
                conflicts.append(
                    Conflict(protocol, port, Holder("Service", namespace, name), tuple(taken))
                )
                lost = lost | frozenset(taken)
    if not lost:
        return Ownership(frozenset(), tuple(conflicts), None) if conflicts else NO_CONFLICT
    return Ownership(frozenset(lost), tuple(conflicts), "PortInUse")
