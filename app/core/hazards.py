"""Datapath hazards: what the cluster's Service proxy does with a node address we publish
that breaks the node, said on the Services that get addresses (pure).

Two are detected, each once at start where the cluster says it: kube-proxy in ``ipvs`` mode
with ``ip-mode`` VIP (docs/design.md §4.10, :mod:`app.core.kubeproxy`) concerns every
Service; Cilium's kube-proxy replacement with wildcard service entries on an affected
release (docs/design.md §4.12, :mod:`app.core.ciliumkpr`) concerns only the Services whose
``spec.loadBalancerClass`` Cilium gives wildcard entries to. A Service carries at most one
Warning Event for them (one recorder slot), so :func:`concerning` folds those that concern it
into one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

KUBE_PROXY_IPVS = "KubeProxyIPVS"
"""Event reason of the ipvs hazard (docs/design.md §4.10)."""
CILIUM_WILDCARD_ENTRIES = "CiliumWildcardEntries"
"""Event reason of Cilium's wildcard-entry hazard (docs/design.md §4.12)."""


@dataclass(frozen=True, slots=True)
class Hazard:
    """One hazard that holds: ``reason`` is the Warning Event's reason, ``message`` what
    breaks and what to do (the ERROR log line, the Event note, the preview warning).
    ``classes`` are the ``spec.loadBalancerClass`` values of the Services it concerns
    (``None`` in the set: Services without one); ``None`` means every Service."""

    reason: str
    message: str
    classes: frozenset[str | None] | None = None

    def concerns(self, load_balancer_class: str | None) -> bool:
        """True when a Service of ``load_balancer_class`` (``None``: none set) is concerned."""
        return self.classes is None or load_balancer_class in self.classes


def concerning(hazards: Iterable[Hazard], load_balancer_class: str | None) -> Hazard | None:
    """The hazard a Service of ``load_balancer_class`` carries: ``None`` when none of
    ``hazards`` concerns it, the one that does, or for several one hazard with the first
    one's reason and every message, in the order given (one Event per Service)."""
    found = [h for h in hazards if h.concerns(load_balancer_class)]
    if len(found) <= 1:
        return found[0] if found else None
    return Hazard(found[0].reason, "; also: ".join(h.message for h in found))
