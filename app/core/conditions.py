"""Which nodes serve a Service: our ``node-ipam-lb.io/NodesServing`` condition (pure).

docs/design.md §5. The reconciler writes it into the Service's ``status.conditions``
(core/v1 ``ServiceStatus.conditions``, ``[]metav1.Condition``, ``patchStrategy: merge``,
``patchMergeKey: type``) in the same strategic merge patch as ``status.loadBalancer.ingress``,
and only when :meth:`Serving.differs` from the stored one: ``True`` while an address is
published, its message naming the nodes; ``False`` while the Service is pending, its reason
the Outcome's code (``NoNodes``, ``Excluded``, ``PortInUse``, ``NamespaceNotAllowed``, ...)
and its message the reason sentence.

metav1.Condition's rules (apimachinery ``metav1validation.ValidateCondition``): ``type`` a
qualified name of at most 316 characters, ``status`` ``True``/``False``/``Unknown``,
``reason`` matching ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`` and at most 1,024
characters, ``message`` at most 32,768 bytes, ``lastTransitionTime`` set,
``observedGeneration`` not negative. kube-apiserver checks none of them on a Service
(``ValidateServiceStatusUpdate`` validates ``status.loadBalancer`` only; pinned by
tests/fakeapi_contract/test_service_conditions.py), so they hold here by construction:
the type is :data:`~app.core.views.NODES_SERVING`, the reasons are our codes, the message
is cut to :data:`MESSAGE_LIMIT_BYTES`. ``lastTransitionTime`` changes only when ``status``
does (API conventions, "Typical status properties").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.core.decision import Outcome, name_list
from app.core.nodeindex import NodeIndex
from app.core.text import elide_bytes
from app.core.verdicts import INVALID_SELECTOR
from app.core.views import NODES_SERVING, StoredCondition

TRUE = "True"
FALSE = "False"
ALL_NODES_UNHEALTHY = "AllNodesUnhealthy"
"""Reason of a ``True`` condition whose every node fails its health checks and is
advertised anyway (docs/design.md §4.11); also the Warning Event's reason."""
NODES_SHOWN = 20
"""Node names a ``True`` message lists before "and N more" (20 names of at most 253
characters: about 5 KB before the cut)."""
MESSAGE_LIMIT_BYTES = 4096
"""Most bytes of a message (metav1 allows 32,768): a cut reason sentence still says why."""


def rfc3339(epoch: float) -> str:
    """``epoch`` seconds as metav1.Time writes it (RFC 3339, UTC, whole seconds)."""
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Serving:
    """The condition a Service should carry (without its ``lastTransitionTime``, which
    :meth:`transition_time` derives from the stored one). ``observed_generation`` is the
    Service's ``metadata.generation`` (``None``: unknown, then the field is removed)."""

    status: str
    reason: str
    message: str
    observed_generation: int | None

    def differs(self, stored: StoredCondition | None) -> bool:
        """True when writing this condition would change ``stored`` (``None``: absent):
        any of ``status``, ``reason``, ``message``, ``observedGeneration`` differs, or the
        stored one has no ``lastTransitionTime``."""
        if stored is None or stored.last_transition_time is None:
            return True
        return (
            stored.status != self.status
            or stored.reason != self.reason
            or stored.message != self.message
            or stored.observed_generation != self.observed_generation
        )

    def written(
        self, stored: StoredCondition | None, now: float
    ) -> tuple[dict[str, Any], StoredCondition]:
        """The ``status.conditions`` item of a strategic merge patch that turns ``stored``
        (``None``: absent) into this condition at ``now`` (epoch seconds), and what it
        reads back as (:func:`app.core.views.service_view`). The item is merged into the
        stored one of the same ``type`` field by field: ``lastTransitionTime`` is the
        stored one while ``status`` stays the same, else ``now`` in RFC 3339;
        ``observedGeneration`` is left out while unknown (Services carry no
        ``metadata.generation`` today), ``null`` to remove a stored one."""
        if stored is not None and stored.status == self.status and stored.last_transition_time:
            at = stored.last_transition_time
        else:
            at = rfc3339(now)
        item: dict[str, Any] = {
            "type": NODES_SERVING,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": at,
        }
        if self.observed_generation is not None or (
            stored is not None and stored.observed_generation is not None
        ):
            item["observedGeneration"] = self.observed_generation
        read_back = StoredCondition(
            self.status, self.reason, self.message, self.observed_generation, at
        )
        return item, read_back


DELETE = {"$patch": "delete", "type": NODES_SERVING}
"""The strategic merge patch item that removes our condition and no other (a no-op when
it is absent)."""


def nodes_message(ips: Sequence[str], node_of: Callable[[str], str | None]) -> str:
    """``"3 address(es) published on 2 node(s): node-a, node-b"``: how many addresses,
    how many nodes and their names in ingress order (``node_of``: an address's Node,
    :meth:`~app.core.nodeindex.NodeIndex.node_of`; an address of no Node counts none),
    cut to :data:`NODES_SHOWN` names and "and N more"."""
    names = list(dict.fromkeys(name for name in map(node_of, ips) if name is not None))
    text = (
        f"{len(ips)} address(es) published on {len(names)} node(s): {name_list(names, NODES_SHOWN)}"
    )
    return elide_bytes(text, MESSAGE_LIMIT_BYTES)


class ServingMessages:
    """:func:`nodes_message` of an Outcome's ingress, kept per ingress tuple for the current
    Node snapshot: Services with one shared Outcome (docs/design.md §4) share one message,
    so a reconcile that changes nothing costs a dict lookup, not a walk over thousands of
    addresses. At most ``limit`` messages; a new Node snapshot starts over (entries hold
    their ingress tuple, so an ``id`` is never reused while its entry lives). Thread-safe."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._nodes: NodeIndex | None = None
        self._memo: dict[int, tuple[tuple[dict[str, Any], ...], str]] = {}

    def message(self, ingress: tuple[dict[str, Any], ...], nodes: NodeIndex) -> str:
        """:func:`nodes_message` of ``ingress`` on ``nodes``."""
        with self._lock:
            if nodes is not self._nodes:
                self._nodes, self._memo = nodes, {}
            hit = self._memo.get(id(ingress))
        if hit is not None and hit[0] is ingress:
            return hit[1]
        text = nodes_message([entry["ip"] for entry in ingress], nodes.node_of)
        with self._lock:
            if self._nodes is nodes:
                if len(self._memo) >= self._limit:
                    self._memo = {}
                self._memo[id(ingress)] = (ingress, text)
        return text


def serving(outcome: Outcome, message: str, *, generation: int | None) -> Serving:
    """The condition of a decided Service (``outcome.ingress`` not ``None``): ``True``
    with reason ``outcome.code`` (``Assigned``; :data:`ALL_NODES_UNHEALTHY` when every
    node fails its health checks) and ``message`` (:func:`nodes_message`) when it
    publishes an address; else ``False``, reason ``outcome.code`` (the step that emptied
    the list, :data:`~app.core.verdicts.PENDING_CODES`), message the reason sentence."""
    if outcome.ingress:
        reason = ALL_NODES_UNHEALTHY if outcome.unhealthy_advertised else outcome.code
        return Serving(TRUE, reason, message, generation)
    sentence = outcome.empty_note or outcome.reason
    return Serving(FALSE, outcome.code, elide_bytes(sentence, MESSAGE_LIMIT_BYTES), generation)


def invalid_selector(error: str, *, kept: int, generation: int | None) -> Serving:
    """The condition of a Service whose node selector does not parse (docs/design.md §4.1):
    reason ``InvalidNodeSelector``, message ``error``; ``True`` while ``kept`` addresses
    published before stay (a parse error leaves the stored ingress as it is), else
    ``False``."""
    if kept:
        text = f"{error}; the {kept} address(es) published before stay until it parses"
        return Serving(TRUE, INVALID_SELECTOR, elide_bytes(text, MESSAGE_LIMIT_BYTES), generation)
    return Serving(FALSE, INVALID_SELECTOR, elide_bytes(error, MESSAGE_LIMIT_BYTES), generation)
