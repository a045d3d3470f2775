"""One decision path: what a Service gets, for every caller (docs/design.md §4, §4.9, §4.11).

The reconciler, the admission webhook's warnings, the REST preview and the CLI previews
(offline and live) all decide through :class:`Decider`:

1. **select** (:func:`app.core.nodeipam.select`, or its fast path
   :func:`~app.core.nodeipam.summarise`): the Nodes and addresses a Service's selector,
   traffic policy, address rules and node health allow, kept as an :class:`Outcome`;
2. **port ownership** (:func:`app.core.ports.decide`, called from :meth:`Decider.ownership`
   only): which of those addresses no other holder of one of the Service's ports keeps,
   the rivals' claims coming from step 1 on the same :class:`Snapshot`.

Step 1 is memoised once per process by what it reads (:data:`SHARED_FIELDS`, the one
definition of a shared selection's key): per Node snapshot and health view, both by
identity (the cache builds a new :class:`~app.core.nodeindex.NodeIndex` on every Node
change and never mutates one; the health view is a new mapping only when the set of
failing Nodes changed). An :class:`Outcome` is used only inside the window in which
``select`` would give it again (``recheck_at``: the first NotReady grace period that runs
out). Only the compact :class:`Outcome` is kept, never a Selection's per-Node verdicts,
so thousands of entries cost kilobytes each at most. Pure apart from the memo, which is
thread-safe (``select`` runs outside its lock).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.codes import EXTERNAL_IP_PREFERRED, PORT_IN_USE, UNHEALTHY
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import (
    MEMO_ENTRIES,
    Selection,
    Summary,
    SummaryMemo,
    apply_ownership,
    has_candidates,
    is_managed,
    select,
    summarise,
)
from app.core.options import SelectionSettings
from app.core.pools import NO_POOL_SET, NO_POOLS, Choice, NamespaceLabels, Pool, PoolSet
from app.core.ports import (
    NO_CONFLICT,
    OWNERSHIP_FIELDS,
    Ownership,
    PortLookup,
    claims,
    decide,
    stored_vip_ips,
    with_port_status,
)
from app.core.verdicts import ASSIGNED
from app.core.views import EndpointSliceView, ServiceView

NAMES_SHOWN = 3
"""Node names a note lists before "and N more"."""
MAX_ENTRIES = 4096
"""Outcomes a :class:`Decider` keeps per Node snapshot and health view (then it starts over)."""
MAX_ADDRESSES = 262_144
"""Ingress addresses the kept Outcomes of a :class:`Decider` hold at most, all entries
together (then it starts over): a selector that matches 5,000 Nodes makes an Outcome of
5,000 addresses, so the entry count alone would not bound memory (~0.2 KB per address)."""
MAX_CLAIMS = 65_536
"""Rivals' port-ownership claims a :class:`Decider` keeps at most (then it starts over)."""
NO_CANDIDATE = "no candidate"
"""Ends the memo key of an ``externalTrafficPolicy: Local`` Service without a candidate
(:func:`~app.core.nodeipam.has_candidates`), in place of its namespace and name."""
MAX_SELECTOR_CHARS = 4096
"""A Service whose node selector annotation is longer is never memoised (each entry's key
holds the annotation: 4,096 entries of 256 KiB annotations would pin 1 GiB); such Services
are rare, and their selection is computed every time."""


def name_list(names: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """``"a, b, c and 7 more"``: the first ``shown`` names, then how many were left out."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def no_eligible_nodes_note(selection: Selection) -> str:
    """Explain an empty ingress from the Selection's own reason and verdicts.

    E.g. ``"every matching Node is excluded (...); ExcludedByLabel: kind-control-plane
    (has label node.kubernetes.io/exclude-from-external-load-balancers ...)"``: the
    reason, then per verdict code (in first-seen order) up to three node names and the
    verdict's sentence. Nothing about selection is recomputed here.
    """
    dropped = [v for v in selection.nodes if not v.selected]
    counts = Counter(v.code for v in dropped)
    parts = []
    for code in counts:
        names = [v.name for v in dropped if v.code == code]
        sentence = next(v.reason for v in dropped if v.code == code)
        parts.append(f"{code}: {name_list(names)} ({sentence})")
    return "; ".join([selection.reason, *parts])


def external_ip_preferred_note(hidden: Sequence[str]) -> str | None:
    """The ``ExternalIPPreferred`` Event's note, or ``None`` when the global ExternalIP
    preference (docs/design.md §4.4, Cilium's behaviour without
    ``per-node-address-fallback``) hides no eligible node.

    ``hidden`` holds the names of the Nodes whose verdict is ``ExternalIPPreferred``, in
    verdict order. E.g. ``"2 eligible node(s) are not advertised because other selected
    nodes have an ExternalIP (ExternalIPPreferred): worker-3, worker-4; setting
    per-node-address-fallback advertises their InternalIP"``: the names cut to
    :data:`NAMES_SHOWN`.
    """
    if not hidden:
        return None
    return (
        f"{len(hidden)} eligible node(s) are not advertised because other selected nodes"
        f" have an ExternalIP (ExternalIPPreferred): {name_list(hidden)};"
        " setting per-node-address-fallback advertises their InternalIP"
    )


def unhealthy_note(names: Sequence[str]) -> str | None:
    """The ``NodesUnhealthy`` Event's note, or ``None`` when health checks (docs/design.md
    §4.11) keep no candidate out. ``names``: the Nodes whose verdict is ``Unhealthy``, in
    verdict order, cut to :data:`NAMES_SHOWN`."""
    if not names:
        return None
    return (
        f"{len(names)} node(s) are not advertised because they fail their kube-proxy health"
        f" checks (Unhealthy): {name_list(names)}; each comes back after"
        " node-health-check-success-threshold good checks in a row (preview says why)"
    )


def all_unhealthy_note(names: Sequence[str]) -> str | None:
    """The ``AllNodesUnhealthy`` Warning's note, or ``None``: every candidate with an
    address fails its health checks, so they are advertised anyway (docs/design.md §4.11:
    health never empties a list by itself). ``names``: those nodes."""
    if not names:
        return None
    return (
        f"every candidate node fails its kube-proxy health checks: {name_list(names)}; they"
        " are advertised anyway (health checks never empty the list); check kube-proxy on"
        " those nodes, or the network between them and the Lease holder"
    )


def hidden_nodes(selection: Selection) -> list[str]:
    """Names of the Nodes ``selection`` hides by the global ExternalIP preference."""
    return [v.name for v in selection.nodes if v.code == EXTERNAL_IP_PREFERRED]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a Service gets from a :class:`~app.core.nodeipam.Selection`, without its
    per-Node verdicts (so it can be kept for many selectors at little memory):
    ``ingress`` (``None`` with ``error``), ``reason``, ``recheck_at`` (epoch seconds or
    ``None``), the notes of the ``NoEligibleNodes`` Warning and the ``ExternalIPPreferred``
    Normal Event (``None`` when they do not apply), and for the state metrics the Selection's
    ``code`` and how many Nodes are ``selected`` and ``hidden`` (ExternalIPPreferred).
    :attr:`ips` gives the ingress addresses as a set (the candidates port ownership competes with);
    ``port_note`` says which were not published and why (docs/design.md §4.9);
    ``unhealthy`` counts the candidates health checks keep out and ``unhealthy_note``
    names them (§4.11), ``unhealthy_advertised`` the nodes advertised although every
    candidate fails its health checks (the ``AllNodesUnhealthy`` Warning); ``dropped``
    holds the verdict codes of the Nodes of an outcome that selects none (what admission's
    cluster-state warnings read), else it is empty."""

    ingress: tuple[dict[str, Any], ...] | None
    error: str | None
    reason: str
    recheck_at: float | None
    empty_note: str | None
    hidden_note: str | None
    code: str
    selected: int
    hidden: int
    port_note: str | None = None
    unhealthy: int = 0
    unhealthy_note: str | None = None
    dropped: frozenset[str] = frozenset()
    unhealthy_advertised: tuple[str, ...] = ()

    @property
    def all_unhealthy_note(self) -> str | None:
        """The ``AllNodesUnhealthy`` Warning's note (:func:`all_unhealthy_note` of the
        nodes advertised although every candidate fails its health checks)."""
        return all_unhealthy_note(self.unhealthy_advertised)

    @property
    def ips(self) -> frozenset[str]:
        """The ingress addresses as a set (computed on each call: thousands of kept
        Outcomes would each hold one, bench/README.md §13)."""
        return frozenset(entry["ip"] for entry in self.ingress or ())

    @property
    def candidates(self) -> tuple[str, ...]:
        """The ingress addresses in order (empty for ``None``)."""
        return tuple(entry["ip"] for entry in self.ingress or ())

    def after_ports(self, ownership: Ownership, node_of: Callable[[str], str | None]) -> Outcome:
        """This outcome after port ownership took ``ownership.lost`` (docs/design.md §4.9):
        the ingress without them, the Nodes still advertised counted again, and the
        ``PortInUse`` note; an emptied ingress gets the ownership's code and its note as
        the reason (what :func:`app.core.nodeipam.apply_ownership` gives a Selection)."""
        if self.ingress is None or not ownership.lost:
            return self
        kept = tuple(e for e in self.ingress if e["ip"] not in ownership.lost)
        note = ownership.note()
        if kept:
            nodes = {node_of(e["ip"]) for e in kept}
            reason = f"{self.reason}; {len(self.ingress) - len(kept)} not advertised: {note}"
            code = self.code
        else:
            nodes = set()
            code = ownership.code or PORT_IN_USE
            reason = ownership.empty_reason()
        return dataclasses.replace(
            self,
            ingress=kept,
            reason=reason,
            empty_note=None if kept else reason,
            # A Service with no address hides no node by the ExternalIP preference.
            hidden_note=self.hidden_note if kept else None,
            hidden=self.hidden if kept else 0,
            unhealthy_advertised=tuple(n for n in self.unhealthy_advertised if n in nodes),
            code=code,
            selected=len(nodes - {None}),
            port_note=note,
        )

    @classmethod
    def of(cls, selection: Selection) -> Outcome:
        """The outcome of ``selection`` (the notes are derived here, once)."""
        empty = selection.ingress is not None and not selection.ingress
        hidden = hidden_nodes(selection) if selection.ingress else []
        failing = [v.name for v in selection.nodes if v.code == UNHEALTHY]
        selected = sum(v.selected for v in selection.nodes) if selection.ingress else 0
        none = not any(v.selected for v in selection.nodes)
        return cls(
            ingress=selection.ingress,
            error=selection.error,
            reason=selection.reason,
            recheck_at=selection.recheck_at,
            empty_note=no_eligible_nodes_note(selection) if empty else None,
            hidden_note=external_ip_preferred_note(hidden),
            code=selection.code,
            selected=selected,
            hidden=len(hidden),
            unhealthy=len(failing),
            unhealthy_note=unhealthy_note(failing),
            dropped=frozenset(v.code for v in selection.nodes) if none else frozenset(),
        )

    @classmethod
    def refused(cls, choice: Choice) -> Outcome:
        """The outcome of a Service its NodeAddressPools refuse (docs/design.md §4.13): no
        address, ``choice``'s code and reason (also the ``NoEligibleNodes``-style note)."""
        return cls(
            ingress=(),
            error=None,
            reason=choice.reason,
            recheck_at=None,
            empty_note=choice.reason,
            hidden_note=None,
            code=choice.code or "",
            selected=0,
            hidden=0,
        )

    @classmethod
    def of_summary(cls, summary: Summary) -> Outcome:
        """The outcome of a non-empty :func:`~app.core.nodeipam.summarise` result (equal to
        :meth:`of` on the Selection ``select`` gives for the same inputs)."""
        return cls(
            ingress=summary.ingress,
            error=None,
            reason=summary.reason,
            recheck_at=summary.recheck_at,
            empty_note=None,
            hidden_note=external_ip_preferred_note(summary.hidden),
            code=ASSIGNED,
            selected=summary.advertised,
            hidden=len(summary.hidden),
            unhealthy=len(summary.unhealthy),
            unhealthy_note=unhealthy_note(summary.unhealthy),
            unhealthy_advertised=summary.advertised_unhealthy,
        )


SELECTION_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(ServiceView)
    if f.compare and f.name not in ("ingress", "ingress_ports", "resource_version", "labels")
)
"""The ServiceView fields a decision can depend on through ``select`` and port ownership:
all but the status, the version, the labels (they choose a NodeAddressPool only, which
keys a shared selection by itself, :meth:`Decider.choice`) and the fields left out of
equality (``uid``: our Events' ``regarding`` only)."""
SHARED_FIELDS = tuple(
    name for name in SELECTION_FIELDS if name not in ("namespace", "name", *OWNERSHIP_FIELDS)
)
"""What ``select`` reads of a Service: the key of a shared selection, the one definition.
``select`` reads the namespace and the name only to pick the EndpointSlices of an
``externalTrafficPolicy: Local`` Service, so such a Service is keyed by its own name and
slices too; the ownership fields are read by port ownership only. A per-Service field here
would key every shared Outcome apart (each Service its own ``select`` and its own ingress
list: seconds of CPU and tens of MB more at a 10,000-Service cold start, bench/README.md)."""


def selection_key(service: ServiceView) -> tuple[Any, ...]:
    """The key of ``service``'s shared selection (:data:`SHARED_FIELDS`; an
    ``externalTrafficPolicy: Local`` Service adds its namespace and name, since its
    EndpointSlices are its own). Equal keys, on the same Node snapshot, health view and
    EndpointSlices, give equal :class:`Outcome` s."""
    key = tuple([getattr(service, name) for name in SHARED_FIELDS])
    if service.external_traffic_policy == "Local":
        return (*key, service.namespace, service.name)
    return key


def _no_slices(namespace: str, name: str) -> Sequence[EndpointSliceView]:
    return ()


def _no_labels(namespace: str) -> Mapping[str, str] | None:
    return None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster state one decision reads.

    ``nodes``: the cache's Node snapshot (compared by identity: never mutate one);
    ``now``: epoch seconds (the NotReady grace period of §4 is measured against it);
    ``ports``: the port index (``ClusterCache`` or :class:`~app.core.ports.PortIndex`;
    ``None``: no port ownership); ``endpoint_slices_of``: a Service's EndpointSlices by
    namespace and name; ``unhealthy``: the health view, node name -> why (§4.11; compared by
    identity); ``port_version``: the port index's version (``ClusterCache.port_version``),
    which lets rivals' claims be kept across decisions (``None``: kept for one decision)."""

    nodes: NodeIndex
    now: float
    ports: PortLookup | None = None
    endpoint_slices_of: Callable[[str, str], Sequence[EndpointSliceView]] = _no_slices
    unhealthy: Mapping[str, str] = field(default_factory=lambda: NO_UNHEALTHY)
    port_version: int | None = None
    pools: PoolSet = NO_POOL_SET
    """Every NodeAddressPool (§4.13; compared by identity: the cache builds a new set on
    each change of a pool, or of a namespace's labels while pools exist)."""
    namespace_labels: NamespaceLabels = _no_labels
    """A namespace's labels by name (what pools' ``namespaceSelectors`` match)."""


class NotMemoised(LookupError):
    """A ``compute=False`` call found no valid memoised Outcome: ``select`` would have to
    run (the admission route then moves the review off its event loop)."""


_ClaimEntry = tuple[
    ServiceView,
    NodeIndex,
    int,
    tuple[EndpointSliceView, ...],
    Mapping[str, str],
    frozenset[str],
    float,
    PoolSet,
]


class Decider:
    """The one decision path (module docstring): memoised ``select`` and port ownership
    for one :class:`~app.core.options.SelectionSettings`. Thread-safe; one per process is
    enough (the reconciler, the webhook and the REST preview share the server's).

    Args:
        settings: the selection settings every decision uses.
        max_entries: Outcomes kept per Node snapshot and health view (then cleared); they
            hold at most :data:`MAX_ADDRESSES` ingress addresses together.
        memo_local: keep the Outcomes of ``externalTrafficPolicy: Local`` Services too
            (each its own entry: the webhook's repeated reviews hit them); the reconciler's
            Decider does not, so thousands of Local Services cannot evict the shared ones.

    Raises:
        ValueError: ``max_entries`` below 1.
    """

    def __init__(
        self,
        settings: SelectionSettings,
        *,
        max_entries: int = MAX_ENTRIES,
        memo_local: bool = True,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: Invalid value: {max_entries}: must be at least 1")
        self.settings = settings
        self._max = max_entries
        self._memo_local = memo_local
        self._addresses = 0
        self._lock = threading.Lock()
        self._nodes: object | None = None
        self._unhealthy: object | None = None
        self._pools: object | None = None
        # key -> (Outcome, valid from, EndpointSlices it was computed with, the pool whose
        # name an empty Outcome's note holds)
        self._outcomes: dict[tuple[Any, ...], tuple[Outcome, float, tuple[Any, ...], str]] = {}
        self._claims: dict[tuple[str, str], _ClaimEntry] = {}
        # summarise's results by candidates (shared by Services whose selectors, pools or
        # endpoints leave the same Nodes), and the Outcome of each, by the result's id.
        self._summaries = SummaryMemo()
        self._of_summary: dict[int, tuple[Summary, Outcome]] = {}
        self.hits = 0
        """Outcomes answered from the memo (for tests and ``/metrics``-free diagnostics)."""
        self.misses = 0
        """Outcomes computed."""

    def __len__(self) -> int:
        """How many Outcomes are kept now."""
        return len(self._outcomes)

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept of Service ``namespace/name``'s claims (it was deleted)."""
        with self._lock:
            self._claims.pop((namespace, name), None)

    def choice(self, service: ServiceView, snap: Snapshot) -> Choice:
        """The NodeAddressPool ``service`` uses on ``snap``, or why it gets none
        (:meth:`app.core.pools.PoolSet.choose`, docs/design.md §4.13); no pools, or a
        Service that is not managed (§3): :data:`~app.core.pools.NO_POOLS`."""
        if not snap.pools or not is_managed(service, self.settings)[0]:
            return NO_POOLS
        return snap.pools.choose(service, snap.namespace_labels)

    def outcome(self, service: ServiceView, snap: Snapshot, *, compute: bool = True) -> Outcome:
        """What ``select`` gives ``service`` on ``snap`` (docs/design.md §4, §4.11), as an
        :class:`Outcome`, memoised by :func:`selection_key` and the NodeAddressPool it
        uses (§4.13; a Service its pools refuse gets :meth:`Outcome.refused`).

        Raises:
            NotMemoised: ``compute`` is false and no valid memoised Outcome exists.
        """
        choice = self.choice(service, snap)
        if choice.refused:
            return Outcome.refused(choice)
        pool = choice.pool
        local = service.external_traffic_policy == "Local"
        slices = tuple(snap.endpoint_slices_of(service.namespace, service.name)) if local else ()
        long = len(service.match_node_labels or "") > MAX_SELECTOR_CHARS
        if (
            local
            and compute  # has_candidates may match a new selector: not on the event loop
            and not long
            and has_candidates(
                service=service, nodes=snap.nodes, endpoint_slices=slices,
                settings=self.settings, pool=pool,
            ) is False
        ):  # fmt: skip
            # No candidate at all (every ready endpoint is outside the selector, the pool
            # or the predicates): the outcome without EndpointSlices, which every such
            # Service of the same selection fields shares (has_candidates).
            key, slices = (*selection_key(service)[:-2], NO_CANDIDATE), ()
        elif long or (local and not self._memo_local):
            if not compute:
                raise NotMemoised("node selector too long to memoise")
            return self._select(service, snap, slices, pool)
        else:
            key = selection_key(service)
        name = ""
        if pool is not None and (
            pool.node_selector is not None
            or pool.address_types is not None
            or pool.ignore_exclude_label is not None
        ):
            # What the pool changes of select (its nodes and settings), not its name:
            # Services of pools that narrow alike share an outcome, and those of a pool
            # that narrows nothing share the one without pools. Only an empty outcome's
            # note names the pool (NotInPool): it is used for that pool alone.
            key = (*key, pool.node_selector, pool.address_types, pool.ignore_exclude_label)
            name = pool.name
        now = snap.now
        with self._lock:
            self._follow(snap)
            found = self._outcomes.get(key)
            if found is not None:
                outcome, since, seen, named = found
                recheck = outcome.recheck_at
                if (
                    (named == name or outcome.ingress)
                    and since <= now
                    and (recheck is None or now < recheck)
                    and len(seen) == len(slices)
                    and all(a is b or a == b for a, b in zip(seen, slices, strict=True))
                ):
                    self.hits += 1
                    return outcome
            if not compute:
                raise NotMemoised("no memoised selection for these inputs")
            self.misses += 1
        outcome = self._select(service, snap, slices, pool)
        # select reads ``now`` only for the NotReady grace period.
        since = now if self.settings.exclude_not_ready_nodes else -math.inf
        with self._lock:
            if (
                self._nodes is snap.nodes
                and self._unhealthy is snap.unhealthy
                and self._pools is snap.pools
            ):
                size = len(outcome.ingress or ())
                old = self._outcomes.pop(key, None)
                if old is not None:
                    self._addresses -= len(old[0].ingress or ())
                if len(self._outcomes) >= self._max or self._addresses + size > MAX_ADDRESSES:
                    self._outcomes, self._addresses = {}, 0
                self._outcomes[key] = (outcome, since, slices, name)
                self._addresses += size
        return outcome

    def _follow(self, snap: Snapshot) -> None:
        """Start the memos over when ``snap``'s Node snapshot, health view or pools are
        not those they were kept for. Call with the lock held."""
        if (
            self._nodes is not snap.nodes
            or self._unhealthy is not snap.unhealthy
            or self._pools is not snap.pools
        ):
            self._nodes, self._unhealthy = snap.nodes, snap.unhealthy
            self._pools = snap.pools
            self._outcomes, self._addresses = {}, 0
            self._summaries, self._of_summary = SummaryMemo(), {}

    def _select(
        self,
        service: ServiceView,
        snap: Snapshot,
        slices: Sequence[EndpointSliceView],
        pool: Pool | None,
    ) -> Outcome:
        inputs: dict[str, Any] = {
            "service": service,
            "nodes": snap.nodes,
            "endpoint_slices": slices,
            "settings": self.settings,
            "now": snap.now,
            "unhealthy": snap.unhealthy,
            "pool": pool,
        }
        # summarise walks only the candidates (for eTP=Local: the endpoints' Nodes); it
        # answers None when the outcome needs select's verdicts (empty ingress, errors).
        with self._lock:
            self._follow(snap)
            memo, shared = self._summaries, self._of_summary
        summary = summarise(**inputs, memo=memo)
        if summary is None:
            return Outcome.of(select(**inputs))
        found = shared.get(id(summary))
        if found is not None and found[0] is summary:
            return found[1]
        outcome = Outcome.of_summary(summary)
        if len(shared) >= MEMO_ENTRIES:
            shared.clear()
        shared[id(summary)] = (summary, outcome)
        return outcome

    def candidates(
        self, service: ServiceView, snap: Snapshot, *, compute: bool = True
    ) -> tuple[str, ...]:
        """The addresses ``service`` competes for in port ownership (docs/design.md §4.9):
        its ingress before ownership, in order; for a Service whose selector does not
        parse (its status is left as it is, §4.1), its stored ``VIP`` addresses, which
        stay published.

        Raises:
            NotMemoised: ``compute`` is false and the selection is not memoised.
        """
        outcome = self.outcome(service, snap, compute=compute)
        if outcome.ingress is None:
            outside = self.outside_pool(service, snap)
            return tuple(ip for ip in stored_vip_ips(service) if ip not in outside)
        return outcome.candidates

    def outside_pool(self, service: ServiceView, snap: Snapshot) -> frozenset[str]:
        """The stored addresses (:func:`~app.core.ports.stored_vip_ips`) of ``service`` on
        Nodes outside the NodeAddressPool it uses (docs/design.md §4.13; an address no Node
        has counts as outside). A Service whose selector does not parse keeps its stored
        ingress (§4.1), but under pools only inside its pool: these go, and claim no port.
        No pools, or a pool of every node: empty. (A refused Service's ingress goes
        anyway: :meth:`outcome` gives it none.)"""
        choice = self.choice(service, snap)
        pool = choice.pool
        if pool is None or pool.node_selector is None:
            return frozenset()
        nodes = snap.nodes.nodes
        names = {nodes[i].name for i in snap.nodes.matching(pool.node_selector)}
        return frozenset(
            ip for ip in stored_vip_ips(service) if snap.nodes.node_of(ip) not in names
        )

    def _claims_of(
        self, snap: Snapshot, *, compute: bool
    ) -> Callable[[ServiceView], frozenset[str]]:
        """Another managed Service's claims (:func:`app.core.ports.claims` of its
        :meth:`candidates`) on ``snap``: kept while its view, the Node snapshot, the
        port index's version, the health view and its own EndpointSlices are the same
        objects (every rival's own slices key its claims: they pick a Local Service's
        candidates and any Service's own backends, which never block it, §4.9) and until
        its selection's ``recheck_at`` (a NotReady grace period that runs out changes its
        candidates), so a decision costs one lookup per rival; with no ``port_version``,
        for one decision."""
        ports = snap.ports
        assert ports is not None
        policy = self.settings.ports
        node_of = snap.nodes.node_of
        version = snap.port_version
        local: dict[tuple[str, str], frozenset[str]] = {}

        def claims_of(other: ServiceView) -> frozenset[str]:
            key = (other.namespace, other.name)
            if version is None:
                found = local.get(key)
                if found is None:
                    found = local[key] = claims(
                        other,
                        self.candidates(other, snap, compute=compute),
                        ports=ports,
                        node_of=node_of,
                        policy=policy,
                    )
                return found
            slices = tuple(snap.endpoint_slices_of(other.namespace, other.name))
            with self._lock:
                entry = self._claims.get(key)
            if (
                entry is not None
                and entry[0] is other
                and entry[1] is snap.nodes
                and entry[2] == version
                and entry[4] is snap.unhealthy
                and entry[7] is snap.pools
                and len(entry[3]) == len(slices)
                and all(a is b for a, b in zip(entry[3], slices, strict=True))
                and snap.now < entry[6]
            ):
                return entry[5]
            outcome = self.outcome(other, snap, compute=compute)
            theirs = (
                self.candidates(other, snap, compute=compute)
                if outcome.ingress is None
                else outcome.candidates
            )
            claimed = claims(other, theirs, ports=ports, node_of=node_of, policy=policy)
            until = math.inf if outcome.recheck_at is None else outcome.recheck_at
            with self._lock:
                if len(self._claims) >= MAX_CLAIMS:
                    self._claims.clear()
                self._claims[key] = (
                    other, snap.nodes, version, slices, snap.unhealthy, claimed, until,
                    snap.pools,
                )  # fmt: skip
            return claimed

        return claims_of

    def ownership(
        self,
        service: ServiceView,
        candidates: Sequence[str],
        snap: Snapshot,
        *,
        compute: bool = True,
    ) -> Ownership:
        """Which of ``candidates`` (``service``'s, canonical text, in order) it may publish:
        :func:`app.core.ports.decide` against ``snap``'s port index, every rival's claims
        from the same decision path on the same snapshot (docs/design.md §4.9). The one
        call of ``ports.decide`` in the product. No port index, no candidates, or a Service
        with no port that every namespace may publish: no conflict.

        Raises:
            NotMemoised: ``compute`` is false and a rival's selection is not memoised.
        """
        policy = self.settings.ports
        if (
            snap.ports is None
            or not candidates
            or not (service.ports or policy.namespaces is not None)
        ):
            return NO_CONFLICT
        return decide(
            service,
            candidates,
            ports=snap.ports,
            claims_of=self._claims_of(snap, compute=compute),
            node_of=snap.nodes.node_of,
            policy=policy,
        )

    def decide(self, service: ServiceView, snap: Snapshot) -> Outcome:
        """What the reconciler writes for managed ``service``: :meth:`outcome`, then
        :meth:`ownership` of its candidates (an outcome with no ingress, a malformed
        selector's, comes back as it is)."""
        outcome = self.outcome(service, snap)
        if not outcome.ingress:
            return outcome
        return outcome.after_ports(
            self.ownership(service, outcome.candidates, snap), snap.nodes.node_of
        )

    def preview(self, service: ServiceView, snap: Snapshot) -> Selection:
        """What preview shows for ``service``: the full Selection (every Node's verdict)
        after the same port ownership as :meth:`decide` (:func:`apply_ownership`), its
        ingress entries carrying the Service's ports (``ports``, core/v1 ``PortStatus``)
        as the reconciler writes them."""
        choice = self.choice(service, snap)
        if choice.refused:
            return Selection(
                service.namespace, service.name, True, choice.reason, (), None, (), (),
                None, choice.code or "",
            )  # fmt: skip
        local = service.external_traffic_policy == "Local"
        selection = select(
            service=service,
            nodes=snap.nodes,
            endpoint_slices=(
                snap.endpoint_slices_of(service.namespace, service.name) if local else ()
            ),
            settings=self.settings,
            now=snap.now,
            unhealthy=snap.unhealthy,
            pool=choice.pool,
        )
        if not selection.ingress:
            return selection
        candidates = [e["ip"] for e in selection.ingress]
        decided = apply_ownership(
            selection, self.ownership(service, candidates, snap), snap.nodes.node_of
        )
        if not decided.ingress:
            return decided
        return dataclasses.replace(decided, ingress=with_port_status(decided.ingress, service))
