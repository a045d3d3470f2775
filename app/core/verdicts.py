"""Per-node verdicts and the sentences that explain a selection (pure).

Verdict objects are memoised on each :class:`~app.core.views.NodeView` (``verdict_cache``) by a
key: a code, or a tuple led by the code and what the sentence depends on. A 5,000-node
:func:`app.core.nodeipam.select` call therefore allocates no verdict after the first call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.codes import (
    AUTOSCALER_TAINTED,
    DELETING,
    EXCLUDED_BY_LABEL,
    EXTERNAL_IP_PREFERRED,
    NAMESPACE_NOT_ALLOWED,
    NO_ADDRESS_OF_FAMILY,
    NO_POOL,
    NO_READY_ENDPOINT,
    NOT_IN_POOL,
    NOT_READY,
    PORT_IN_USE,
    PORT_NOT_IN_POOL,
    SELECTED,
    SELECTOR_MISMATCH,
    UNHEALTHY,
)
from app.core.views import AUTOSCALER_TAINT, EXCLUDE_FROM_LB_LABEL, FAMILY_BIT, NodeView

VerdictKey = str | tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """Why one node is or is not in a Service's ingress.

    ``code`` is one of ``Selected``, ``SelectorMismatch``, ``Deleting``,
    ``ExcludedByLabel``, ``AutoscalerTaint``, ``NoReadyEndpoint``, ``NotReady``,
    ``NoAddressOfFamily``, ``ExternalIPPreferred``, ``Unhealthy`` (health checks,
    docs/design.md §4.11), ``PortInUse``, ``NamespaceNotAllowed`` (the last two from port
    ownership, §4.9); ``reason`` is a sentence for humans.
    """

    name: str
    selected: bool
    code: str
    reason: str


_STATIC_REASONS = {
    SELECTOR_MISMATCH: "labels do not match the node selector",
    DELETING: "being deleted (metadata.deletionTimestamp is set)",
    EXCLUDED_BY_LABEL: (
        f"has label {EXCLUDE_FROM_LB_LABEL} (excludes whatever its value;"
        " setting ignore-exclude-lb publishes such nodes too)"
    ),
    AUTOSCALER_TAINTED: f"has taint {AUTOSCALER_TAINT} (the cluster autoscaler is removing it)",
    NO_READY_ENDPOINT: (
        "externalTrafficPolicy is Local and no ready endpoint of the Service is on this node"
    ),
    EXTERNAL_IP_PREFERRED: (
        "has no ExternalIP of a wanted family while other nodes have one: only ExternalIPs"
        " are advertised (setting per-node-address-fallback changes this)"
    ),
}


def family_names(mask: int) -> str:
    """``"IPv4"``, ``"IPv6"`` or ``"IPv4 or IPv6"`` for a family bit mask (IPv4=1, IPv6=2)."""
    return " or ".join(f for f, bit in FAMILY_BIT.items() if mask & bit)


def new_verdict(node: NodeView, key: VerdictKey) -> NodeVerdict:
    """Build and memoise ``node``'s verdict for ``key`` (a code, or a tuple led by one)."""
    code: str
    arg: tuple[Any, ...]
    code, arg = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
    invalid = (
        f"; ignored addresses that are not IPs: {', '.join(node.invalid_addresses)}"
        if node.invalid_addresses
        else ""
    )
    if code == SELECTED:
        kind, mask = arg
        if kind == "ExternalIP":
            entries = node.external_entries
        elif kind == "InternalIP":
            entries = node.internal_entries
        else:  # address-types ExternalIP,InternalIP
            entries = (*node.external_entries, *node.internal_entries)
        ips = [ip for bit, _, ip in entries if bit & mask]
        reason = f"advertised: {kind} {', '.join(ips)}{invalid}"
    elif code == NOT_READY:
        reason = f"Ready condition not True for longer than the {arg[0]:g}s grace period"
    elif code == UNHEALTHY:
        reason = f"{arg[0]}; not advertised while healthy nodes are"
    elif code == NOT_IN_POOL:
        reason = f"not among the nodes of NodeAddressPool {arg[0]} (spec.nodeSelector {arg[1]})"
    elif code == NO_ADDRESS_OF_FAMILY:
        reason = f"no ExternalIP or InternalIP of family {family_names(arg[0])}{invalid}"
    else:
        reason = _STATIC_REASONS[code]
    verdict = NodeVerdict(name=node.name, selected=code == SELECTED, code=code, reason=reason)
    node.verdict_cache[key] = verdict
    return verdict


ASSIGNED = "Assigned"
"""``Selection.code`` of a managed Service with a non-empty ingress."""
INVALID_SELECTOR = "InvalidNodeSelector"
"""``Selection.code`` of a managed Service whose selector annotation does not parse (§4.1;
also the Warning Event's reason)."""
NOT_MANAGED = "NotManaged"
"""``Selection.code`` of a Service that is not ours (§3)."""
PENDING_CODES = (
    "NoNodes",
    SELECTOR_MISMATCH,
    "Excluded",
    NO_READY_ENDPOINT,
    NO_ADDRESS_OF_FAMILY,
    PORT_IN_USE,
    NAMESPACE_NOT_ALLOWED,
    NOT_IN_POOL,
    NO_POOL,
    PORT_NOT_IN_POOL,
)
"""``Selection.code`` of a managed Service with an empty ingress (``<pending>``): the first
step of docs/design.md §4 that emptied the list, in step order: no Node at all, the
selector matches none (§4.1), every match is being deleted, labelled or tainted out
(§4.2), eTP=Local and no eligible Node has a ready endpoint (§4.3), no address of a
wanted family (§4.4), then port ownership (§4.9): every candidate address has a port
another holder owns, or the namespace may not get node addresses. A fixed set: the
``reason`` label of ``node_ipam_lb_services``."""


def selection_reason(
    *,
    ingress: list[dict[str, str]],
    counts: tuple[int, int, int, int, int],
    selector: object,
    wanted: int,
    local: bool,
) -> tuple[str, str]:
    """``(Selection.code, Selection.reason)`` of a managed Service: :data:`ASSIGNED` and
    what was advertised, or the :data:`PENDING_CODES` code and sentence of the first step
    that emptied the list. ``counts`` is ``(nodes, matched the selector, passed the
    predicates, passed eTP=Local, advertised)``."""
    total, matched, eligible, candidates, selected = counts
    if ingress:
        return ASSIGNED, f"{len(ingress)} address(es) from {selected} of {total} node(s)"
    if total == 0:
        return "NoNodes", "no Nodes in the cluster"
    if matched == 0:
        return SELECTOR_MISMATCH, f"no Node matches the node selector {selector}"
    if eligible == 0:
        return "Excluded", (
            "every matching Node is excluded (being deleted, exclusion label or autoscaler taint)"
        )
    if local and candidates == 0:
        return NO_READY_ENDPOINT, (
            "externalTrafficPolicy is Local and no eligible Node has a ready endpoint"
        )
    return NO_ADDRESS_OF_FAMILY, (
        f"no eligible Node has an ExternalIP or InternalIP of family {family_names(wanted)}"
    )
