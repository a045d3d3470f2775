"""Node selection: THE one implementation of DESIGN.md §3-§4 (pure).

:func:`is_managed` decides whether a Service is ours (§3); :func:`select` computes its
ordered ``status.loadBalancer.ingress`` plus a verdict per node and Service-level
warnings (§4). The reconciler, the preview API, ``node-ipam-lb preview`` and the
admission warnings all call these two functions and nothing else.

Hot-path notes (target: 5,000 nodes well under 5 ms): addresses are parsed once in
:func:`app.views.node_view`; selectors are parsed once per text (``parse_cached``);
verdict objects are memoised on each :class:`~app.views.NodeView`, so a call allocates
one list slot per node and nothing else per node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.config import SelectionSettings
from app.selector import SelectorError, parse_cached
from app.views import (
    AUTOSCALER_TAINT,
    EXCLUDE_FROM_LB_LABEL,
    FAMILY_BIT,
    IPV4,
    IPV6,
    EndpointSliceView,
    NodeView,
    ServiceView,
)

LOAD_BALANCER = "LoadBalancer"
LOCAL = "Local"


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """Why one node is or is not in a Service's ingress.

    ``code`` is one of ``Selected``, ``SelectorMismatch``, ``Deleting``,
    ``ExcludedByLabel``, ``AutoscalerTaint``, ``NoReadyEndpoint``, ``NotReady``,
    ``NoAddressOfFamily``, ``ExternalIPPreferred``; ``reason`` is a sentence for humans.
    """

    name: str
    selected: bool
    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class Selection:
    """The result of :func:`select` for one Service.

    ``ingress`` is ``None`` when nothing must be written (Service not managed, or its
    selector annotation is malformed, then ``error`` says why); otherwise the complete,
    ordered list of ``{"ip": ..., "ipMode": ...}`` entries, possibly empty (``<pending>``).
    ``recheck_at`` (epoch seconds) is when a NotReady grace period this result depends on
    runs out (only with ``exclude_not_ready_nodes``).
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

    def to_dict(self) -> dict[str, Any]:
        """The preview JSON item: ``namespace``, ``name``, ``managed``, ``reason``,
        ``ingress`` (list or ``None``), ``error``, ``nodes`` (``name``, ``selected``,
        ``code``, ``reason``), ``warnings``, ``recheckAt``."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "managed": self.managed,
            "reason": self.reason,
            "ingress": None if self.ingress is None else [dict(e) for e in self.ingress],
            "error": self.error,
            "nodes": [
                {"name": v.name, "selected": v.selected, "code": v.code, "reason": v.reason}
                for v in self.nodes
            ],
            "warnings": list(self.warnings),
            "recheckAt": self.recheck_at,
        }


def is_managed(service: ServiceView, settings: SelectionSettings) -> tuple[bool, str]:
    """Whether node-ipam-lb owns ``service`` (DESIGN.md §3, Cilium's ``isServiceSupported``).

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


_STATIC_REASONS = {
    "SelectorMismatch": "labels do not match the node selector",
    "Deleting": "being deleted (metadata.deletionTimestamp is set)",
    "ExcludedByLabel": f"has label {EXCLUDE_FROM_LB_LABEL} (excludes whatever its value)",
    "AutoscalerTaint": f"has taint {AUTOSCALER_TAINT} (the cluster autoscaler is removing it)",
    "NoReadyEndpoint": (
        "externalTrafficPolicy is Local and no ready endpoint of the Service is on this node"
    ),
    "ExternalIPPreferred": (
        "has no ExternalIP of a wanted family while other nodes have one: only ExternalIPs"
        " are advertised (option per_node_address_fallback changes this)"
    ),
}


def _family_names(mask: int) -> str:
    return " or ".join(f for f, bit in FAMILY_BIT.items() if mask & bit)


VerdictKey = str | tuple[Any, ...]


def _new_verdict(node: NodeView, key: VerdictKey) -> NodeVerdict:
    """Build and memoise ``node``'s verdict for ``key`` (a code, or a tuple led by one)."""
    code: str
    arg: tuple[Any, ...]
    code, arg = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
    invalid = (
        f"; ignored addresses that are not IPs: {', '.join(node.invalid_addresses)}"
        if node.invalid_addresses
        else ""
    )
    if code == "Selected":
        kind, mask = arg
        ips = [a.ip for a in node.addresses if a.type == kind and FAMILY_BIT[a.family] & mask]
        reason = f"advertised: {kind} {', '.join(ips)}{invalid}"
    elif code == "NotReady":
        reason = f"Ready condition not True for longer than the {arg[0]:g}s grace period"
    elif code == "NoAddressOfFamily":
        reason = f"no ExternalIP or InternalIP of family {_family_names(arg[0])}{invalid}"
    else:
        reason = _STATIC_REASONS[code]
    verdict = NodeVerdict(name=node.name, selected=code == "Selected", code=code, reason=reason)
    node.verdict_cache[key] = verdict
    return verdict


def _families(service: ServiceView, warnings: list[str]) -> tuple[str, ...]:
    """Wanted families in ``spec.ipFamilies`` order; defaulted (with a warning) when empty.

    The API server always fills ``ipFamilies`` on create; it is empty only in manifests
    previewed before ``kubectl apply``. We then assume what a single-stack IPv4 cluster
    would assign (IPv4, or IPv4 then IPv6 for a dual-stack ``ipFamilyPolicy``).
    """
    families = tuple(dict.fromkeys(f for f in service.ip_families if f in FAMILY_BIT))
    if families:
        return families
    dual = service.ip_family_policy in ("PreferDualStack", "RequireDualStack")
    families = (IPV4, IPV6) if dual else (IPV4,)
    warnings.append(
        "spec.ipFamilies is empty (the API server fills it in on create);"
        f" assuming {', '.join(families)}"
    )
    return families


def _ready_node_names(
    service: ServiceView, endpoint_slices: Iterable[EndpointSliceView]
) -> frozenset[str]:
    """Nodes hosting a ready endpoint of ``service`` (DESIGN.md §4.3, Cilium's eTP=Local)."""
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
    return Selection(service.namespace, service.name, False, why, None, None, (), warnings, None)


def _addresses(
    *,
    candidates: list[tuple[int, NodeView]],
    verdicts: list[NodeVerdict | None],
    wanted: int,
    fallback: bool,
) -> tuple[dict[int, str], dict[int, str], int, int]:
    """DESIGN.md §4.4: pick addresses of ``candidates``, fill their verdict slots.

    Returns IPv4 and IPv6 maps ``integer value → canonical text`` (so two spellings of one
    address collapse), the number of nodes hidden by the global ExternalIP preference and
    the number of nodes advertised.
    """
    use_external = not fallback and any(n.external_families & wanted for _, n in candidates)
    v4: dict[int, str] = {}
    v6: dict[int, str] = {}
    hidden = selected = 0
    for idx, node in candidates:
        cache = node.verdict_cache
        if not (node.external_families | node.internal_families) & wanted:
            key: VerdictKey = ("NoAddressOfFamily", wanted)
        elif fallback:
            key = (
                "Selected",
                "ExternalIP" if node.external_families & wanted else "InternalIP",
                wanted,
            )
        elif use_external and not node.external_families & wanted:
            key = "ExternalIPPreferred"
            hidden += 1
        else:
            key = ("Selected", "ExternalIP" if use_external else "InternalIP", wanted)
        if key[0] == "Selected":
            selected += 1
            kind = key[1]
            for a in node.addresses:
                if a.type == kind:
                    if a.family == IPV4:
                        if wanted & 1:
                            v4[a.value] = a.ip
                    elif wanted & 2:
                        v6[a.value] = a.ip
        verdicts[idx] = cache.get(key) or _new_verdict(node, key)
    return v4, v6, hidden, selected


def select(
    *,
    service: ServiceView,
    nodes: Iterable[NodeView],
    endpoint_slices: Iterable[EndpointSliceView],
    settings: SelectionSettings,
    now: float,
) -> Selection:
    """Compute ``service``'s ingress and explain it (DESIGN.md §3-§4).

    Args:
        service: the Service; not managed (§3) gives ``managed=False``, ``ingress=None``.
        nodes: every Node; verdicts come back in this order.
        endpoint_slices: EndpointSlices; only those of the Service's namespace labelled
            ``kubernetes.io/service-name=<name>`` are read, and only for eTP=Local.
        settings: the selection settings.
        now: current time, epoch seconds (only the NotReady grace period reads it).

    Steps: selector annotation (apimachinery ``labels.Parse``; a parse error gives
    ``error`` and ``ingress=None``, an empty value matches all nodes), KEP-3458 node
    predicates, eTP=Local endpoint filter, the optional NotReady filter (never empties
    the list by itself), address choice (global ExternalIP preference, or per node with
    ``per_node_address_fallback``), canonical text, dedup, order by ``spec.ipFamilies``
    then numerically, entries ``{"ip", "ipMode"}``. Never raises on content.
    """
    managed, why = is_managed(service, settings)
    if not managed:
        return _not_managed(service, why, settings)
    warnings: list[str] = []
    node_list = nodes if isinstance(nodes, list | tuple) else list(nodes)
    selector = None
    if service.match_node_labels is not None:
        try:
            selector = parse_cached(service.match_node_labels)
        except SelectorError as err:
            where = f"metadata.annotations[{settings.match_node_labels_annotation}]"
            error = f"{where}: Invalid value: {json.dumps(service.match_node_labels)}: {err}"
            return Selection(
                service.namespace, service.name, True, "invalid node selector annotation",
                None, error, (), (), None,
            )  # fmt: skip
        if selector.empty():
            warnings.append(
                f"annotation {settings.match_node_labels_annotation} is empty: every node matches"
            )
            selector = None
    families = _families(service, warnings)
    wanted = 0
    for f in families:
        wanted |= FAMILY_BIT[f]
    ready_names = (
        _ready_node_names(service, endpoint_slices)
        if service.external_traffic_policy == LOCAL
        else None
    )

    verdicts: list[NodeVerdict | None] = []
    candidates: list[tuple[int, NodeView]] = []
    matched = eligible = 0
    matches = selector.matches if selector is not None else None
    for node in node_list:
        cache = node.verdict_cache
        if matches is not None and not matches(node.labels):
            verdicts.append(cache.get("SelectorMismatch") or _new_verdict(node, "SelectorMismatch"))
            continue
        matched += 1
        predicate = node.predicate
        if predicate is not None:
            verdicts.append(cache.get(predicate) or _new_verdict(node, predicate))
            continue
        eligible += 1
        if ready_names is not None and node.name not in ready_names:
            verdicts.append(cache.get("NoReadyEndpoint") or _new_verdict(node, "NoReadyEndpoint"))
            continue
        candidates.append((len(verdicts), node))
        verdicts.append(None)
        if node.invalid_addresses:
            warnings.append(
                f"Node {node.name}: ignored status.addresses that are not IP addresses:"
                f" {', '.join(node.invalid_addresses)}"
            )

    recheck_at: float | None = None
    not_ready: list[tuple[int, NodeView]] = []
    if settings.exclude_not_ready_nodes and candidates:
        candidates, not_ready, recheck_at = _split_not_ready(candidates, settings, now)
    v4, v6, hidden, selected = _addresses(
        candidates=candidates, verdicts=verdicts, wanted=wanted,
        fallback=settings.per_node_address_fallback,
    )  # fmt: skip
    if not_ready and not (v4 or v6):
        warnings.append(
            f"every eligible node with an address is NotReady beyond the"
            f" {settings.not_ready_grace_seconds:g}s grace period; advertising them anyway"
        )
        v4, v6, hidden, selected = _addresses(
            candidates=sorted(candidates + not_ready), verdicts=verdicts, wanted=wanted,
            fallback=settings.per_node_address_fallback,
        )  # fmt: skip
    else:
        key = ("NotReady", settings.not_ready_grace_seconds)
        for idx, node in not_ready:
            verdicts[idx] = node.verdict_cache.get(key) or _new_verdict(node, key)
    if hidden:
        warnings.append(
            f"{hidden} eligible node(s) without an ExternalIP of family"
            f" {_family_names(wanted)} are not advertised because other nodes have one"
            " (option per_node_address_fallback advertises their InternalIP)"
        )

    mode = settings.ip_mode
    by_family = {IPV4: v4, IPV6: v6}
    ingress = tuple(
        {"ip": table[value], "ipMode": mode}
        for table in (by_family[f] for f in families)
        for value in sorted(table)
    )
    counts = (len(node_list), matched, eligible, len(candidates) + len(not_ready), selected)
    reason = _reason(ingress=ingress, counts=counts, selector=selector, wanted=wanted,
                     local=ready_names is not None)  # fmt: skip
    return Selection(
        service.namespace, service.name, True, reason, ingress, None,
        tuple(verdicts),  # type: ignore[arg-type]  # every slot is filled by now
        tuple(warnings), recheck_at,
    )  # fmt: skip


def _split_not_ready(
    candidates: list[tuple[int, NodeView]], settings: SelectionSettings, now: float
) -> tuple[list[tuple[int, NodeView]], list[tuple[int, NodeView]], float | None]:
    """Option ``exclude_not_ready_nodes``: split off nodes whose ``Ready`` condition has not
    been ``True`` for longer than the grace period (no transition time: treated as long
    ago). Returns ``(ready, not_ready, recheck_at)``, ``recheck_at`` being the earliest
    moment a node still within its grace period would be dropped."""
    grace = settings.not_ready_grace_seconds
    ready: list[tuple[int, NodeView]] = []
    not_ready: list[tuple[int, NodeView]] = []
    recheck_at: float | None = None
    for item in candidates:
        node = item[1]
        if node.ready is True:
            ready.append(item)
            continue
        since = node.ready_since
        if since is None or now - since > grace:
            not_ready.append(item)
            continue
        ready.append(item)
        deadline = since + grace
        recheck_at = deadline if recheck_at is None else min(recheck_at, deadline)
    return ready, not_ready, recheck_at


def _reason(
    *,
    ingress: tuple[dict[str, str], ...],
    counts: tuple[int, int, int, int, int],
    selector: object,
    wanted: int,
    local: bool,
) -> str:
    """A short sentence: what was advertised, or the first step that emptied the list."""
    total, matched, eligible, candidates, selected = counts
    if ingress:
        return f"{len(ingress)} address(es) from {selected} of {total} node(s)"
    if total == 0:
        return "no Nodes in the cluster"
    if matched == 0:
        return f"no Node matches the node selector {selector}"
    if eligible == 0:
        return (
            "every matching Node is excluded (being deleted, exclusion label or autoscaler taint)"
        )
    if local and candidates == 0:
        return "externalTrafficPolicy is Local and no eligible Node has a ready endpoint"
    return f"no eligible Node has an ExternalIP or InternalIP of family {_family_names(wanted)}"
