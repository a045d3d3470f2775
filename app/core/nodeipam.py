"""Node selection: THE one implementation of docs/design.md §3-§4 (pure).

:func:`is_managed` decides whether a Service is ours (§3); :func:`select` computes its
ordered ``status.loadBalancer.ingress`` plus a verdict per node and Service-level
warnings (§4). The preview API, ``node-ipam-lb preview`` and the admission warnings call
these two functions and nothing else. The reconciler first calls :func:`summarise`, the
same rules without the per-node verdicts (it shares every step with :func:`select` but the
walk to the candidates, and equals it wherever it answers: tests/core/test_summarise.py),
and :func:`select` whenever the outcome needs the verdicts.

Hot-path notes (target: 5,000 nodes well under 5 ms): addresses are parsed once in
:func:`app.core.views.node_view`; selectors are parsed once per text (``parse_cached``);
verdict objects are memoised on each :class:`~app.core.views.NodeView`, so a call creates no
per-node object beyond a list slot and, for candidates, an index. The selector is applied
to Nodes in one place, :meth:`app.core.nodeindex.NodeIndex.matching`, memoised per selector and
Node snapshot when the caller passes a :class:`NodeIndex` (the reconciler does).
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.codes import (
    EXTERNAL_IP_PREFERRED,
    NO_ADDRESS_OF_FAMILY,
    NO_READY_ENDPOINT,
    NOT_IN_POOL,
    NOT_READY,
    PORT_IN_USE,
    SELECTED,
    UNHEALTHY,
)
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex, node_index
from app.core.options import BOTH_ADDRESS_TYPES, EXTERNAL_IP, INTERNAL_IP, SelectionSettings
from app.core.pools import Pool
from app.core.ports import (
    Ownership,
)
from app.core.selector import Selector, SelectorError, parse_cached
from app.core.text import elide
from app.core.verdicts import (
    INVALID_SELECTOR,
    NOT_MANAGED,
    NodeVerdict,
    VerdictKey,
    family_names,
    new_verdict,
    selection_reason,
)
from app.core.views import (
    FAMILY_BIT,
    IPV4,
    IPV6,
    EndpointSliceView,
    NodeView,
    ServiceView,
)

LOAD_BALANCER = "LoadBalancer"
LOCAL = "Local"
__all__ = [
    "LOCAL",
    "NodeIndex",
    "NodeVerdict",
    "Selection",
    "Summary",
    "apply_ownership",
    "is_managed",
    "select",
    "summarise",
]


@dataclass(frozen=True, slots=True)
class Selection:
    """The result of :func:`select` for one Service.

    ``ingress`` is ``None`` when nothing must be written (Service not managed, or its
    selector annotation is malformed, then ``error`` says why); otherwise the complete,
    ordered list of ``{"ip": ..., "ipMode": ...}`` entries, possibly empty (``<pending>``).
    ``recheck_at`` (epoch seconds) is when a NotReady grace period this result depends on
    runs out (only with ``exclude_not_ready_nodes``). ``code`` names the outcome in one
    word: ``Assigned``, one of :data:`~app.core.verdicts.PENDING_CODES` (the step that
    emptied the list), ``InvalidNodeSelector`` or ``NotManaged``.
    """

    namespace: str
    name: str
    managed: bool
    reason: str
    ingress: tuple[dict[str, str], ...] | None
    error: str | None
    nodes: tuple[NodeVerdict, ...]
    warnings: tuple[str, ...]
    recheck_at: float | None
    code: str
    pool: str | None = None
    """The NodeAddressPool whose nodes the Service chose among (docs/design.md §4.13;
    ``None``: no pool objects exist, or the Service was refused one)."""

    def to_dict(self) -> dict[str, Any]:
        """The preview JSON item: ``namespace``, ``name``, ``managed``, ``code``, ``reason``,
        ``ingress`` (list or ``None``), ``error``, ``nodes`` (``name``, ``selected``,
        ``code``, ``reason``), ``warnings``, ``recheckAt``."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "managed": self.managed,
            "code": self.code,
            "reason": self.reason,
            "ingress": None if self.ingress is None else [dict(e) for e in self.ingress],
            "error": self.error,
            "nodes": [
                {"name": v.name, "selected": v.selected, "code": v.code, "reason": v.reason}
                for v in self.nodes
            ],
            "warnings": list(self.warnings),
            "recheckAt": self.recheck_at,
            "pool": self.pool,
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """What :func:`summarise` gives: the fields of :func:`select`'s Selection a reconcile
    reads when the ingress is not empty, without the per-Node verdicts.

    ``ingress``, ``reason`` and ``recheck_at`` equal the Selection's (whose ``code`` is
    ``Assigned``); ``hidden`` holds the names of the Nodes whose verdict is
    ``ExternalIPPreferred``, in the order of the Selection's ``nodes``; ``advertised`` is
    how many Nodes are ``Selected``; ``unhealthy`` the names of the Nodes whose verdict is
    ``Unhealthy`` (§4.11), in that order too.
    """

    ingress: tuple[dict[str, str], ...]
    reason: str
    recheck_at: float | None
    hidden: tuple[str, ...]
    advertised: int
    unhealthy: tuple[str, ...] = ()
    advertised_unhealthy: tuple[str, ...] = ()
    """Nodes advertised although they fail their health checks: every candidate with an
    address does, and health never empties a list by itself (§4.11)."""


def is_managed(service: ServiceView, settings: SelectionSettings) -> tuple[bool, str]:
    """Whether node-ipam-lb owns ``service`` (docs/design.md §3, Cilium's ``isServiceSupported``).

    Checked in Cilium's order: no ``deletionTimestamp``; ``spec.type`` exactly
    ``LoadBalancer``; ``spec.loadBalancerClass`` equal to ``settings.load_balancer_class``
    (case-sensitive; an empty string is a class, not "unset"), or unset while
    ``default_lb_service_ipam`` is ``nodeipam``. Returns ``(managed, why)``.
    """
    if service.deleting:
        return False, "metadata.deletionTimestamp is set: the Service is being deleted"
    if service.type != LOAD_BALANCER:
        shown = "unset (ClusterIP)" if service.type is None else service.type
        return False, f"spec.type is {shown}, not LoadBalancer"
    ours = settings.load_balancer_class
    cls = service.load_balancer_class
    default = settings.default_lb_service_ipam
    if cls is None:
        if default == "nodeipam":
            return True, "spec.loadBalancerClass is unset and default-lb-service-ipam is nodeipam"
        owner = "LB-IPAM's" if default == "lbipam" else "nobody's"
        return False, (
            f"spec.loadBalancerClass is unset and default-lb-service-ipam is {default}"
            f" (class-less Services are {owner})"
        )
    if cls != ours:
        return False, f"spec.loadBalancerClass is {json.dumps(cls)}, not {json.dumps(ours)}"
    return True, f"spec.loadBalancerClass is {json.dumps(ours)}"


def has_our_class(service: ServiceView, settings: SelectionSettings) -> bool:
    """Whether ``service``'s class is ours (:func:`is_managed` without the deletion and
    type checks): ``spec.loadBalancerClass`` equal to ours, or unset under
    ``default_lb_service_ipam: nodeipam``."""
    cls = service.load_balancer_class
    if cls is None:
        return settings.default_lb_service_ipam == "nodeipam"
    return cls == settings.load_balancer_class


def _families(service: ServiceView, warnings: list[str]) -> tuple[str, ...]:
    """Wanted families in ``spec.ipFamilies`` order; defaulted (with a warning) when empty.

    The API server always fills ``ipFamilies`` on create; it is empty only in manifests
    previewed before ``kubectl apply``. We then assume what a single-stack IPv4 cluster
    would assign (IPv4, or IPv4 then IPv6 for a dual-stack ``ipFamilyPolicy``). A value
    other than ``IPv4``/``IPv6`` (case-sensitive) gets the API server's validation message
    (``spec.ipFamilies[0]: Unsupported value: "IPv9": supported values: "IPv4", "IPv6"``)
    as a warning and is left out.
    """
    for i, family in enumerate(service.ip_families):
        if family not in FAMILY_BIT:
            warnings.append(
                f"spec.ipFamilies[{i}]: Unsupported value: {json.dumps(family)}: supported"
                ' values: "IPv4", "IPv6" (the API server rejects the Service)'
            )
    families = tuple(dict.fromkeys(f for f in service.ip_families if f in FAMILY_BIT))
    if families:
        return families
    dual = service.ip_family_policy in ("PreferDualStack", "RequireDualStack")
    families = (IPV4, IPV6) if dual else (IPV4,)
    why = (
        "has no supported value"
        if service.ip_families
        else "is empty (the API server fills it in on create)"
    )
    warnings.append(f"spec.ipFamilies {why}; assuming {', '.join(families)}")
    return families


def _ready_node_names(
    service: ServiceView, endpoint_slices: Iterable[EndpointSliceView]
) -> frozenset[str]:
    """Nodes hosting a ready endpoint of ``service`` (docs/design.md §4.3, Cilium's eTP=Local)."""
    names: set[str] = set()
    for s in endpoint_slices:
        if s.namespace == service.namespace and s.service_name == service.name:
            names.update(s.ready_node_names)
    return frozenset(names)


def _not_managed(service: ServiceView, why: str, settings: SelectionSettings) -> Selection:
    warnings: tuple[str, ...] = ()
    if service.match_node_labels is not None:
        warnings = (
            f"annotation {settings.match_node_labels_annotation} has no effect: the Service is"
            f" not managed by {settings.load_balancer_class}",
        )
    return Selection(
        service.namespace, service.name, False, why, None, None, (), warnings, None, NOT_MANAGED
    )


def _filter_nodes(
    *,
    nodes: Sequence[NodeView],
    matched: Sequence[int],
    ready_names: frozenset[str] | None,
    verdicts: list[NodeVerdict | None],
    ignore_label: bool,
) -> tuple[list[int], list[NodeView], int]:
    """docs/design.md §4.2-§4.3: KEP-3458 predicates and eTP=Local endpoints, applied to the
    ``matched`` positions of ``nodes`` (those the selector matches, §4.1, from
    :meth:`NodeIndex.matching`).

    Fills the verdict slot of every dropped node; returns the candidates' indices and
    nodes, and how many matched nodes passed the predicates.
    """
    indices: list[int] = []
    candidates: list[NodeView] = []
    eligible = 0
    for i in matched:
        node = nodes[i]
        predicate = node.predicate_for(ignore_label)
        if predicate is not None:
            verdicts[i] = node.verdict_cache.get(predicate) or new_verdict(node, predicate)
            continue
        eligible += 1
        if ready_names is not None and node.name not in ready_names:
            verdicts[i] = node.verdict_cache.get(NO_READY_ENDPOINT) or new_verdict(
                node, NO_READY_ENDPOINT
            )
            continue
        indices.append(i)
        candidates.append(node)
    return indices, candidates, eligible


def _addresses(
    *,
    indices: list[int],
    candidates: list[NodeView],
    verdicts: list[Any],
    wanted: int,
    fallback: bool,
    types: str = EXTERNAL_IP,
) -> tuple[dict[int, str], dict[int, str], int, int]:
    """docs/design.md §4.4: pick addresses of ``candidates``, fill their verdict slots
    with verdict keys (:func:`select` makes them verdicts, :func:`summarise` reads codes).
    ``types`` is setting ``address-types``: ``ExternalIP`` (Cilium's global preference,
    or per node with ``fallback``), ``InternalIP`` or ``ExternalIP,InternalIP`` (both).

    Returns IPv4 and IPv6 maps ``integer value → canonical text`` (so two spellings of one
    address collapse), the number of nodes hidden by the global ExternalIP preference and
    the number of nodes advertised.
    """
    if types != EXTERNAL_IP:
        return _typed_addresses(indices, candidates, verdicts, wanted, types)
    use_external = not fallback and any(n.external_families & wanted for n in candidates)
    v4: dict[int, str] = {}
    v6: dict[int, str] = {}
    hidden = selected = 0
    for idx, node in zip(indices, candidates, strict=True):
        external = node.external_families & wanted
        if not (external or node.internal_families & wanted):
            key: VerdictKey = (NO_ADDRESS_OF_FAMILY, wanted)
        elif use_external and not external:
            key = EXTERNAL_IP_PREFERRED
            hidden += 1
        else:
            selected += 1
            use = external if fallback else use_external
            key = (SELECTED, "ExternalIP" if use else "InternalIP", wanted)
            _collect(node.external_entries if use else node.internal_entries, wanted, v4, v6)
        verdicts[idx] = key
    return v4, v6, hidden, selected


def _collect(
    entries: Iterable[tuple[int, int, str]], wanted: int, v4: dict[int, str], v6: dict[int, str]
) -> None:
    """Add ``entries`` (family bit, integer value, text) of a wanted family to the IPv4 or
    IPv6 map (keyed by value, so two spellings of one address collapse)."""
    for bit, value, ip in entries:
        if bit & wanted:
            (v4 if bit == 1 else v6)[value] = ip


def _typed_addresses(
    indices: list[int],
    candidates: list[NodeView],
    verdicts: list[Any],
    wanted: int,
    types: str,
) -> tuple[dict[int, str], dict[int, str], int, int]:
    """:func:`_addresses` for ``address-types`` ``InternalIP`` or ``ExternalIP,InternalIP``:
    each candidate's addresses of those types and of a wanted family, no preference, so
    nothing is hidden."""
    both = types == BOTH_ADDRESS_TYPES
    v4: dict[int, str] = {}
    v6: dict[int, str] = {}
    selected = 0
    for idx, node in zip(indices, candidates, strict=True):
        families = node.internal_families | (node.external_families if both else 0)
        if not families & wanted:
            key: VerdictKey = (NO_ADDRESS_OF_FAMILY, wanted)
        else:
            selected += 1
            key = (SELECTED, types if both else INTERNAL_IP, wanted)
            if both:
                _collect(node.external_entries, wanted, v4, v6)
            _collect(node.internal_entries, wanted, v4, v6)
        verdicts[idx] = key
    return v4, v6, 0, selected


def select(
    *,
    service: ServiceView,
    nodes: Iterable[NodeView] | NodeIndex,
    endpoint_slices: Iterable[EndpointSliceView],
    settings: SelectionSettings,
    now: float,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
    pool: Pool | None = None,
) -> Selection:
    """Compute ``service``'s ingress and explain it (docs/design.md §3-§4).

    Args:
        service: the Service; not managed (§3) gives ``managed=False``, ``ingress=None``.
        nodes: every Node, as any iterable of NodeViews or as a :class:`NodeIndex` (which
            memoises the selector match per Node snapshot: the reconciler's form). Both
            forms give equal Selections; verdicts come back in this order.
        endpoint_slices: EndpointSlices; only those of the Service's namespace labelled
            ``kubernetes.io/service-name=<name>`` are read, and only for eTP=Local.
        settings: the selection settings.
        now: current time, epoch seconds (only the NotReady grace period reads it).
        unhealthy: node name -> why, the nodes failing their health checks
            (:attr:`app.core.nodehealth.HealthView.unhealthy`; empty with health checks off).
        pool: the NodeAddressPool the Service uses (:meth:`app.core.pools.PoolSet.choose`;
            ``None``: no pools): the selector chooses among its nodes only (the others get
            ``NotInPool``), and its ``addressTypes``/``ignoreExcludeLabel`` replace the
            settings' (docs/design.md §4.13).

    Steps: selector annotation (apimachinery ``labels.Parse``; a parse error gives
    ``error`` and ``ingress=None``, an empty value matches all nodes), KEP-3458 node
    predicates, eTP=Local endpoint filter, the optional NotReady filter and the health
    filter (§4.11; neither empties the list by itself), address choice (global ExternalIP
    preference, or per node with ``per_node_address_fallback``), canonical text, dedup,
    order by ``spec.ipFamilies`` then numerically, entries ``{"ip", "ipMode"}``. Never
    raises on content.
    """
    managed, why = is_managed(service, settings)
    if not managed:
        return _not_managed(service, why, settings)
    if pool is not None:
        settings = pool.settings(settings)
    warnings: list[str] = []
    try:
        selector = _selector(service, settings, warnings)
    except SelectorError as err:
        where = f"metadata.annotations[{settings.match_node_labels_annotation}]"
        quoted = json.dumps(elide(service.match_node_labels or ""), ensure_ascii=False)
        error = f"{where}: Invalid value: {quoted}: {err}"
        return Selection(
            service.namespace, service.name, True, "invalid node selector annotation",
            None, error, (), (), None, INVALID_SELECTOR,
        )  # fmt: skip
    families = _families(service, warnings)
    wanted = FAMILY_BIT[families[0]] | (FAMILY_BIT[families[1]] if len(families) > 1 else 0)
    local = service.external_traffic_policy == LOCAL
    index = node_index(nodes)
    node_list = index.nodes
    matching = index.matching(selector)
    # Every slot of a matching Node is overwritten below; the others keep SelectorMismatch.
    verdicts: list[NodeVerdict | None] = (
        [None] * len(node_list) if selector is None else list(index.mismatch_verdicts())
    )
    in_selector = len(matching)
    if pool is not None and pool.node_selector is not None:
        inside = index.within(pool.node_selector)
        key = (NOT_IN_POOL, pool.name, pool.describe_nodes())
        for i in matching:
            if not inside[i]:
                node = node_list[i]
                verdicts[i] = node.verdict_cache.get(key) or new_verdict(node, key)
        matching = [i for i in matching if inside[i]]
    matched = len(matching)
    indices, candidates, eligible = _filter_nodes(
        nodes=node_list,
        matched=matching,
        ready_names=_ready_node_names(service, endpoint_slices) if local else None,
        verdicts=verdicts,
        ignore_label=settings.ignore_exclude_lb,
    )
    warnings.extend(
        f"Node {n.name}: ignored status.addresses that are not IP addresses:"
        f" {', '.join(n.invalid_addresses)}"
        for n in candidates
        if n.invalid_addresses
    )
    count = len(candidates)
    ingress, selected, recheck_at = _advertise(
        indices, candidates, verdicts, families=families, wanted=wanted,
        settings=settings, now=now, warnings=warnings, unhealthy=unhealthy,
    )  # fmt: skip
    for i in indices:  # _advertise left verdict keys in the candidates' slots
        node, slot = node_list[i], verdicts[i]
        verdicts[i] = node.verdict_cache.get(slot) or new_verdict(node, slot)  # type: ignore[arg-type]
    code, reason = selection_reason(
        ingress=ingress, counts=(len(node_list), matched, eligible, count, selected),
        selector=selector, wanted=wanted, local=local,
    )  # fmt: skip
    if pool is not None and not ingress and in_selector and not matched:
        code = NOT_IN_POOL
        reason = (
            f"no Node the node selector matches is among the nodes of NodeAddressPool"
            f" {pool.name} (spec.nodeSelector {pool.describe_nodes()}): select among them,"
            " or ask an administrator for a pool with these nodes"
        )
    return Selection(
        service.namespace, service.name, True, reason, tuple(ingress), None,
        tuple(verdicts),  # type: ignore[arg-type]  # every slot is filled by now
        tuple(warnings), recheck_at, code, None if pool is None else pool.name,
    )  # fmt: skip


def _candidates(
    service: ServiceView,
    nodes: NodeIndex,
    endpoint_slices: Iterable[EndpointSliceView],
    settings: SelectionSettings,
    pool: Pool | None,
) -> tuple[SelectionSettings, list[str], tuple[str, ...], list[int]] | None:
    """:func:`summarise`'s walk: the settings (the pool's applied), the warnings so far,
    the families and the candidates' positions, ascending: the Nodes that pass the
    selector, the pool, the KEP-3458 predicates and for eTP=Local the ready-endpoint
    filter. ``None``: not managed, or a malformed selector."""
    if not is_managed(service, settings)[0]:
        return None
    if pool is not None:
        settings = pool.settings(settings)
    ignored: list[str] = []
    try:
        selector = _selector(service, settings, ignored)
    except SelectorError:
        return None
    families = _families(service, ignored)
    ignore_label = settings.ignore_exclude_lb
    node_list = nodes.nodes
    matching = nodes.matching(selector)
    narrowed = pool is not None and pool.node_selector is not None
    if pool is not None and pool.node_selector is not None:
        if service.external_traffic_policy == LOCAL:
            # The endpoints' Nodes are few: check them against the pool's set below.
            inside = nodes.within(pool.node_selector)
            matching = matching if selector is not None else range(len(node_list))
        elif selector is None:
            # The pool's nodes, as an ascending memoised list: no walk over every Node.
            matching = nodes.matching(pool.node_selector)
        else:
            inside = nodes.within(pool.node_selector)
            matching = [i for i in matching if inside[i]]
        if not matching:
            return settings, ignored, families, []
    if service.external_traffic_policy == LOCAL:
        ready = nodes.positions(_ready_node_names(service, endpoint_slices))
        # The pool's nodeSelector narrows the candidates even when the Service has none.
        if selector is not None:
            ready = [i for i in ready if _contains(matching, i)]
        if narrowed:
            ready = [i for i in ready if inside[i]]
        positions = [i for i in ready if node_list[i].predicate_for(ignore_label) is None]
    else:
        positions = [i for i in matching if node_list[i].predicate_for(ignore_label) is None]
    return settings, ignored, families, positions


def has_candidates(
    *,
    service: ServiceView,
    nodes: NodeIndex,
    endpoint_slices: Iterable[EndpointSliceView],
    settings: SelectionSettings,
    pool: Pool | None = None,
) -> bool | None:
    """Whether any Node passes ``service``'s selector, ``pool``, the KEP-3458 predicates
    and (eTP=Local) the ready-endpoint filter (docs/design.md §4.1-§4.3, §4.13); ``None``
    when the Service is not managed or its selector is malformed.

    When it is ``False``, :func:`select` gives an eTP=Local Service the Selection it would
    give with no EndpointSlice at all (every eligible Node's verdict is
    ``NoReadyEndpoint`` either way, a ready Node the selector or pool leaves out keeps its
    ``SelectorMismatch``/``NotInPool``): the decision path keys such an outcome without
    the Service's name. Never raises on content."""
    front = _candidates(service, nodes, endpoint_slices, settings, pool)
    return None if front is None else bool(front[3])


MEMO_ENTRIES = 4096
"""Results a :class:`SummaryMemo` keeps (then it starts over)."""
MEMO_POSITIONS = 262_144
"""Candidate positions its keys hold at most, all together (4 bytes each; then it starts
over): a key of a selector matching 5,000 Nodes holds 5,000 of them."""


class SummaryMemo:
    """What :func:`summarise` keeps for one Node snapshot and health view: its result
    (``None`` included) by candidate positions, families and settings. Bounded by
    :data:`MEMO_ENTRIES` results and :data:`MEMO_POSITIONS` positions; thread-safe for
    concurrent ``get``/``put`` (a race only computes a result twice)."""

    __slots__ = ("_entries", "_positions")

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], tuple[Summary | None]] = {}
        self._positions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[Any, ...]) -> tuple[Summary | None] | None:
        """The kept result of ``key`` in a 1-tuple, or ``None`` when none is kept."""
        return self._entries.get(key)

    def put(self, key: tuple[Any, ...], summary: Summary | None) -> None:
        """Keep ``summary`` for ``key`` (whose first item is the positions' bytes)."""
        size = len(key[0]) // 4
        if len(self._entries) >= MEMO_ENTRIES or self._positions + size > MEMO_POSITIONS:
            self._entries, self._positions = {}, 0
        self._entries[key] = (summary,)
        self._positions += size


def summarise(
    *,
    service: ServiceView,
    nodes: NodeIndex,
    endpoint_slices: Iterable[EndpointSliceView],
    settings: SelectionSettings,
    now: float,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
    pool: Pool | None = None,
    memo: SummaryMemo | None = None,
) -> Summary | None:
    """:func:`select`'s ingress, reason, ``recheck_at`` and ExternalIPPreferred Nodes for a
    managed Service with a non-empty ingress, at the cost of its candidates only.

    ``memo`` (kept by the caller for one Node snapshot and health view, as
    :class:`~app.core.decision.Decider` does) keeps results by what they are computed
    from once the candidates are known: their positions, the families and the settings
    (a pool's applied). Services whose selectors, pools or endpoints differ but leave the
    same candidates share one result, and one object.

    Returns ``None`` whenever the answer needs the full Selection: the Service is not
    managed, its selector annotation is malformed, or its ingress is empty (the
    ``NoEligibleNodes`` note explains it from every Node's verdict); the caller then
    calls :func:`select`. Otherwise the result equals what :func:`select` gives for the
    same arguments (tests/core/test_summarise.py checks it on every rule of
    docs/design.md §4 and on random clusters).

    The difference is the walk: :func:`select` gives every Node a verdict, so an
    ``externalTrafficPolicy: Local`` Service visits all Nodes to mark most of them
    ``NoReadyEndpoint``; here a Local Service starts from the Nodes hosting its ready
    endpoints (:meth:`NodeIndex.positions`, a lookup by name) and keeps those the selector
    matches and no KEP-3458 predicate drops, the same candidates in the same order.
    Never raises on content.
    """
    front = _candidates(service, nodes, endpoint_slices, settings, pool)
    if front is None:
        return None
    settings, ignored, families, positions = front
    if not positions:
        return None
    key = None
    if memo is not None and not settings.exclude_not_ready_nodes:
        # The NotReady grace period reads ``now``: such results are not kept.
        key = (array("I", positions).tobytes(), families, settings)
        found = memo.get(key)
        if found is not None:
            return found[0]
    summary = _summary(nodes, settings, ignored, families, positions, now, unhealthy)
    if memo is not None and key is not None:
        memo.put(key, summary)
    return summary


def _summary(
    nodes: NodeIndex,
    settings: SelectionSettings,
    ignored: list[str],
    families: tuple[str, ...],
    positions: list[int],
    now: float,
    unhealthy: Mapping[str, str],
) -> Summary | None:
    """:func:`summarise` once the candidates' ``positions`` are known."""
    wanted = FAMILY_BIT[families[0]] | (FAMILY_BIT[families[1]] if len(families) > 1 else 0)
    node_list = nodes.nodes
    candidates = [node_list[i] for i in positions]
    verdicts: list[Any] = [None] * len(candidates)
    ingress, selected, recheck_at = _advertise(
        list(range(len(candidates))), candidates, verdicts, families=families, wanted=wanted,
        settings=settings, now=now, warnings=ignored, unhealthy=unhealthy,
    )  # fmt: skip
    if not ingress:
        return None
    # With a non-empty ingress the reason reads only the Node total and the advertised
    # count; the other counts, the selector and the policy matter only for an empty one,
    # which went to select().
    count = len(candidates)
    _, reason = selection_reason(
        ingress=ingress, counts=(len(node_list), count, count, count, selected),
        selector=None, wanted=wanted, local=False,
    )  # fmt: skip
    # The slots hold verdict keys (a code, or a tuple led by one): no verdict is built.
    codes = [key[0] if type(key) is tuple else key for key in verdicts]
    hidden = tuple(
        node.name
        for node, code in zip(candidates, codes, strict=True)
        if code == EXTERNAL_IP_PREFERRED
    )
    failing = (
        tuple(node.name for node, code in zip(candidates, codes, strict=True) if code == UNHEALTHY)
        if unhealthy
        else ()
    )
    anyway = (
        tuple(
            node.name
            for node, code in zip(candidates, codes, strict=True)
            if code == SELECTED and node.name in unhealthy
        )
        if unhealthy and not failing
        else ()
    )
    return Summary(tuple(ingress), reason, recheck_at, hidden, selected, failing, anyway)


def _contains(ascending: Sequence[int], value: int) -> bool:
    """Whether ``value`` is in the ascending sequence ``ascending`` (binary search)."""
    at = bisect_left(ascending, value)
    return at < len(ascending) and ascending[at] == value


def _advertise(
    indices: list[int],
    candidates: list[NodeView],
    verdicts: list[Any],
    *,
    families: tuple[str, ...],
    wanted: int,
    settings: SelectionSettings,
    now: float,
    warnings: list[str],
    unhealthy: Mapping[str, str],
) -> tuple[list[dict[str, str]], int, float | None]:
    """docs/design.md §4.4-§4.5 and §4.11 on the candidates (``indices`` are their verdict
    slots, ascending): the optional NotReady filter, the health filter, the address
    choice, the ordered entries. Fills the candidates' verdict slots with verdict keys
    (:data:`~app.core.verdicts.VerdictKey`: :func:`summarise` reads their codes and
    builds no verdict, :func:`select` makes them verdicts) and appends
    warnings; returns the ingress entries, how many nodes are advertised and
    ``recheck_at``. Shared by :func:`select` and :func:`summarise`, so both pick
    addresses with the same code. Neither filter empties the list by itself: when no
    node they keep has an address, the unhealthy nodes come back first, then (if still
    none) the NotReady ones."""
    recheck_at: float | None = None
    not_ready: list[tuple[int, NodeView]] = []
    if settings.exclude_not_ready_nodes and candidates:
        indices, candidates, not_ready, recheck_at = _split_not_ready(
            indices, candidates, settings=settings, now=now
        )
    failing: list[tuple[int, NodeView]] = []
    if unhealthy and candidates:
        kept = [(i, n) for i, n in zip(indices, candidates, strict=True) if n.name not in unhealthy]
        if len(kept) < len(candidates):
            failing = [
                (i, n) for i, n in zip(indices, candidates, strict=True) if n.name in unhealthy
            ]
            indices, candidates = [i for i, _ in kept], [n for _, n in kept]
    fallback = settings.per_node_address_fallback
    v4, v6, hidden, selected = _addresses(
        indices=indices,
        candidates=candidates,
        verdicts=verdicts,
        wanted=wanted,
        fallback=fallback,
        types=settings.address_types,
    )
    if failing and not (v4 or v6):
        warnings.append(
            "every eligible node with an address fails its health checks; advertising them"
            " anyway (health checks never empty the list by themselves)"
        )
        merged = sorted([*zip(indices, candidates, strict=True), *failing])
        indices, candidates = [i for i, _ in merged], [n for _, n in merged]
        v4, v6, hidden, selected = _addresses(
            indices=indices, candidates=candidates, verdicts=verdicts, wanted=wanted,
            fallback=fallback, types=settings.address_types,
        )  # fmt: skip
    else:
        for idx, node in failing:
            why = (UNHEALTHY, unhealthy[node.name])
            verdicts[idx] = why
    if not_ready and not (v4 or v6):
        warnings.append(
            f"every eligible node with an address is NotReady beyond the"
            f" {settings.not_ready_grace_seconds:g}s grace period; advertising them anyway"
        )
        merged = sorted([*zip(indices, candidates, strict=True), *not_ready])
        v4, v6, hidden, selected = _addresses(
            indices=[i for i, _ in merged], candidates=[n for _, n in merged],
            verdicts=verdicts, wanted=wanted, fallback=fallback, types=settings.address_types,
        )  # fmt: skip
    else:
        key = (NOT_READY, settings.not_ready_grace_seconds)
        for idx, _ in not_ready:
            verdicts[idx] = key
    if hidden:
        warnings.append(
            f"{hidden} eligible node(s) without an ExternalIP of family"
            f" {family_names(wanted)} are not advertised because other nodes have one"
            " (setting per-node-address-fallback advertises their InternalIP)"
        )
    mode = settings.ip_mode
    ingress: list[dict[str, str]] = []
    for family in families:
        table = v4 if family == IPV4 else v6
        ingress += [_entry(table[value], mode) for value in sorted(table)]
    return ingress, selected, recheck_at


_ENTRIES: dict[tuple[str, str], dict[str, str]] = {}
MAX_ENTRIES = 262_144
"""Ingress entries :func:`_entry` keeps (then it starts over): a few per Node."""


def _entry(ip: str, mode: str) -> dict[str, str]:
    """The ingress entry ``{"ip": ip, "ipMode": mode}``, one object per address and mode
    for every Selection (read-only: callers copy before they add ``ports``,
    :func:`app.core.status.with_ports`): the memoised outcomes of thousands of Services
    over the same Nodes then share their entries (bench/README.md §13)."""
    found = _ENTRIES.get((ip, mode))
    if found is None:
        if len(_ENTRIES) >= MAX_ENTRIES:
            _ENTRIES.clear()
        found = _ENTRIES[ip, mode] = {"ip": ip, "ipMode": mode}
    return found


def _selector(
    service: ServiceView, settings: SelectionSettings, warnings: list[str]
) -> Selector | None:
    """The parsed selector annotation; ``None`` when absent or empty (matches all nodes).

    Raises:
        SelectorError: the annotation is not a valid apimachinery label selector.
    """
    if service.match_node_labels is None:
        return None
    selector = parse_cached(service.match_node_labels)
    if not selector.empty():
        return selector
    warnings.append(
        f"annotation {settings.match_node_labels_annotation} is empty: every node matches"
    )
    return None


def _split_not_ready(
    indices: list[int], candidates: list[NodeView], *, settings: SelectionSettings, now: float
) -> tuple[list[int], list[NodeView], list[tuple[int, NodeView]], float | None]:
    """Option ``exclude_not_ready_nodes``: split off nodes whose ``Ready`` condition has not
    been ``True`` for longer than the grace period (no transition time: treated as long
    ago). Returns the kept indices and nodes, the dropped ``(index, node)`` pairs and
    ``recheck_at``, the earliest moment a node still within its grace period would go."""
    grace = settings.not_ready_grace_seconds
    kept_indices: list[int] = []
    kept: list[NodeView] = []
    not_ready: list[tuple[int, NodeView]] = []
    recheck_at: float | None = None
    for idx, node in zip(indices, candidates, strict=True):
        since = node.ready_since
        if node.ready is not True:
            if since is None or now - since > grace:
                not_ready.append((idx, node))
                continue
            deadline = since + grace
            recheck_at = deadline if recheck_at is None else min(recheck_at, deadline)
        kept_indices.append(idx)
        kept.append(node)
    return kept_indices, kept, not_ready, recheck_at


def apply_ownership(
    selection: Selection, ownership: Ownership, node_of: Callable[[str], str | None]
) -> Selection:
    """``selection`` after port ownership (docs/design.md §4.9): the addresses in
    ``ownership.lost`` leave the ingress; a Node all of whose advertised addresses are
    lost gets the verdict ``PortInUse`` (or ``NamespaceNotAllowed``) naming what holds
    them, one that keeps some keeps ``Selected`` with the lost ones named; the
    conflicts become warnings; an emptied ingress gets the ownership's code and a reason
    that names the holders. A Selection without an ingress, or an Ownership without a
    loss, comes back as it is. ``node_of`` maps an address to its Node's name. Pure."""
    if selection.ingress is None or not ownership.lost:
        return selection
    lost = ownership.lost
    kept = tuple(e for e in selection.ingress if e["ip"] not in lost)
    lost_by_node: dict[str, list[str]] = {}
    kept_nodes: set[str] = set()
    for entry in selection.ingress:
        node = node_of(entry["ip"])
        if node is None:
            continue
        if entry["ip"] in lost:
            lost_by_node.setdefault(node, []).append(entry["ip"])
        else:
            kept_nodes.add(node)
    code = ownership.code or PORT_IN_USE
    verdicts = []
    for verdict in selection.nodes:
        addresses = lost_by_node.get(verdict.name)
        if not verdict.selected or not addresses:
            verdicts.append(verdict)
            continue
        why = "; ".join(
            c.sentence()
            for c in ownership.conflicts
            if not c.addresses or set(c.addresses) & set(addresses)
        )
        if verdict.name in kept_nodes:
            reason = f"{verdict.reason}; not advertised: {', '.join(addresses)} ({why})"
            verdicts.append(NodeVerdict(verdict.name, True, verdict.code, reason))
        else:
            reason = f"not advertised: {', '.join(addresses)} ({why})"
            verdicts.append(NodeVerdict(verdict.name, False, code, reason))
    note = ownership.note()
    warnings = (*selection.warnings, f"port ownership: {note}")
    if kept:
        kept_count = sum(v.selected for v in verdicts)
        reason = (
            f"{len(kept)} address(es) from {kept_count} of {len(verdicts)} node(s);"
            f" {len(lost)} not advertised: {note}"
        )
        result_code = selection.code
    else:
        result_code = code
        reason = ownership.empty_reason()
    return Selection(
        selection.namespace, selection.name, True, reason, kept, None, tuple(verdicts),
        warnings, selection.recheck_at, result_code,
    )  # fmt: skip
