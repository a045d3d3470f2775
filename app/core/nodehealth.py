"""Health-checked nodes: the hysteresis and the most-fail rule (pure; docs/design.md §4.11).

A cloud load balancer does not wait for a Node object to say a node is gone: it probes
every node and stops sending to one that fails. KEP-3836 made kube-proxy's ``/healthz``
(port 10256) the check for ``externalTrafficPolicy: Cluster``: kube-proxy v1.35.4 answers
200 only when it has synced its rules within its health timeout and the node is eligible
(not being deleted, no ``ToBeDeletedByClusterAutoscaler`` taint), else 503
(``pkg/proxy/healthcheck/proxy_health.go``). With ``node-health-check`` on, the Lease holder
probes it on every Node (:mod:`app.controller.nodeprober`) and records each answer here.

The rule, as cloud load balancers and Kubernetes probes state it (``failureThreshold`` /
``successThreshold``; AWS NLB ``UnhealthyThresholdCount`` / ``HealthyThresholdCount``):

- a node starts healthy (never probed = nothing known against it);
- it becomes **unhealthy** after ``failure_threshold`` failed probes in a row and healthy
  again after ``success_threshold`` good ones in a row;
- **most fail**: when more than ``max_unhealthy_fraction`` of the probed nodes are
  unhealthy, or failed their latest probe, at once, the prober's own vantage point is the
  likelier casualty (its Pod's network, a NetworkPolicy, its node), so no node leaves
  (``holding``) until the fraction falls back: the effective set is the one decided
  before, minus the nodes that have recovered since (a hold stops removals, never a
  return; Envoy's panic threshold answers the same problem by ignoring health). Counting
  the latest probe too matters when the prober's network breaks in the middle of a round:
  the nodes probed after the break reach the failure threshold one round before the
  others, and would leave while still under the fraction;
- health never empties a Service's ingress by itself: that rule is applied per Service
  in :func:`app.core.nodeipam.select`, which advertises the unhealthy candidates when no
  healthy one has an address.

Costs: :meth:`HealthTable.record` is O(1); :meth:`HealthTable.evaluate` is O(nodes) and
builds a new :class:`HealthView` only when the effective set changed, so selections keyed
by the view's identity (the reconciler's shared Outcomes) stay valid across probe rounds
that change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from app.core.published import json_object
from app.core.views import NodeView


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """The thresholds (settings ``node-health-check-*``, docs/design.md §2).

    ``failure_threshold`` / ``success_threshold``: consecutive probes (≥ 1) to go
    unhealthy / healthy again. ``max_unhealthy_fraction``: in ``(0, 1]``; above it the
    most-fail rule holds the last set (1.0 turns the rule off)."""

    failure_threshold: int = 3
    success_threshold: int = 2
    max_unhealthy_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.failure_threshold < 1 or self.success_threshold < 1:
            raise ValueError("health-check thresholds must be at least 1")
        if not 0 < self.max_unhealthy_fraction <= 1:
            raise ValueError("max_unhealthy_fraction must be in (0, 1]")


NO_UNHEALTHY: Mapping[str, str] = MappingProxyType({})
"""No node fails its health checks (the default of :func:`app.core.nodeipam.select`)."""


@dataclass(frozen=True, slots=True)
class HealthView:
    """What selection reads: an immutable snapshot, replaced (never mutated) on a change.

    ``unhealthy`` maps a node name to the sentence saying why (for the ``Unhealthy``
    verdict); ``holding`` is true while the most-fail rule keeps the last set, ``since``
    (seconds, the caller's clock) when it began; ``probed`` / ``failing`` are the counts
    that rule compared (``failing``: unhealthy by the thresholds or failed their latest
    probe, whichever is more; held or not)."""

    unhealthy: Mapping[str, str] = field(default_factory=lambda: NO_UNHEALTHY)
    holding: bool = False
    since: float | None = None
    probed: int = 0
    failing: int = 0


NO_HEALTH = HealthView()
"""Health checks off, or nothing known yet: every node counts as healthy."""


@dataclass(slots=True)
class _Node:
    healthy: bool = True
    streak: int = 0
    """Consecutive results against the current state (failures while healthy, passes
    while unhealthy)."""
    reason: str = ""
    results: int = 0
    last_failed: bool = False
    detail: str = ""
    """What the latest failed probe said (for the hold's log line)."""


class HealthTable:
    """Per-node probe results and the effective :class:`HealthView`.

    Not thread-safe: one prober thread calls :meth:`record`, :meth:`retain` and
    :meth:`evaluate`; readers take :attr:`view` (an atomic reference to an immutable
    object)."""

    def __init__(self, policy: HealthPolicy) -> None:
        self.policy = policy
        self._nodes: dict[str, _Node] = {}
        self.view: HealthView = NO_HEALTH
        self._last_good: Mapping[str, str] = NO_UNHEALTHY

    def record(self, node: str, *, ok: bool, detail: str) -> None:
        """One probe result for ``node``; ``detail`` says what failed (``"HTTP 503"``,
        ``"connect: connection refused"``, ``"no answer within 2s"``), ignored when ok."""
        state = self._nodes.get(node)
        if state is None:
            state = self._nodes[node] = _Node()
        state.results += 1
        state.last_failed = not ok
        if not ok:
            state.detail = detail
        if ok == state.healthy:
            state.streak = 0
            return
        state.streak += 1
        policy = self.policy
        if state.healthy and state.streak >= policy.failure_threshold:
            state.healthy, state.streak = False, 0
            state.reason = (
                f"failed {policy.failure_threshold} kube-proxy health checks in a row"
                f" (the last: {detail})"
            )
        elif not state.healthy and state.streak >= policy.success_threshold:
            state.healthy, state.streak, state.reason = True, 0, ""

    def retain(self, nodes: Collection[str]) -> None:
        """Forget every node not in ``nodes`` (deleted Nodes): bounded memory."""
        for name in [n for n in self._nodes if n not in nodes]:
            del self._nodes[name]

    def evaluate(self, now: float) -> frozenset[str]:
        """Apply the most-fail rule and update :attr:`view`; return the names whose
        effective state changed (empty: :attr:`view` is the same object as before).
        ``now`` (seconds, any monotonic clock) only dates the start of a hold."""
        probed = sum(1 for s in self._nodes.values() if s.results)
        raw = {n: s.reason for n, s in self._nodes.items() if not s.healthy}
        failing = max(len(raw), sum(1 for s in self._nodes.values() if s.last_failed))
        before = self.view
        holding = failing > 0 and failing > self.policy.max_unhealthy_fraction * probed
        # Holding: no new removal; a node that recovered (or was deleted) leaves the held set.
        held = {n: r for n, r in self._last_good.items() if n in raw}
        effective = held if holding else raw
        unchanged = (
            holding == before.holding
            and effective.keys() == before.unhealthy.keys()
            and (probed, failing) == (before.probed, before.failing)
        )
        if unchanged:
            return frozenset()
        same = effective.keys() == before.unhealthy.keys() and all(
            before.unhealthy[n] == r for n, r in effective.items()
        )
        # The same mapping object while the effective set is the same: the reconciler
        # keys its shared selections by its identity (module docstring).
        frozen = before.unhealthy if same else MappingProxyType(effective)
        if not holding:
            self._last_good = frozen
        since = (before.since if before.holding else now) if holding else None
        self.view = HealthView(frozen, holding, since, probed, failing)
        return frozenset(effective.keys() ^ before.unhealthy.keys())

    def seed(self, unhealthy: Mapping[str, str]) -> None:
        """Take over ``unhealthy`` (node name -> why), the previous Lease holder's
        effective decision (docs/design.md §4.11, "Across a leader change"): each such
        node counts as failing until ``success_threshold`` good probes in a row, as if
        this replica had taken it out itself, and the set is the last good one the
        most-fail rule keeps. Nodes this table already holds keep their own state. The
        :attr:`view` becomes ``unhealthy`` at once (the same mapping object when equal)."""
        for name, why in unhealthy.items():
            if name not in self._nodes:
                self._nodes[name] = _Node(healthy=False, reason=why)
        self.mirror(unhealthy)
        self._last_good = self.view.unhealthy

    def mirror(self, unhealthy: Mapping[str, str]) -> frozenset[str]:
        """A follower's view: ``unhealthy`` as the Lease holder last recorded it (nothing
        probed here). Returns the names whose state changed (empty: :attr:`view` is the
        same object as before)."""
        before = self.view
        if dict(before.unhealthy) == dict(unhealthy):
            return frozenset()
        frozen = MappingProxyType(dict(unhealthy)) if unhealthy else NO_UNHEALTHY
        self.view = HealthView(frozen, False, None, 0, len(frozen))
        return frozenset(before.unhealthy.keys() ^ frozen.keys())

    def failing_sample(self, limit: int = 3) -> list[str]:
        """Up to ``limit`` ``"<node>: <what its latest probe said>"`` of the nodes whose
        latest probe failed, by name (the hold's log line names them)."""
        failed = sorted(n for n, s in self._nodes.items() if s.last_failed)
        return [f"{n}: {self._nodes[n].detail}" for n in failed[:limit]]


def probe_targets(nodes: Iterable[NodeView], *, ignore_exclude_lb: bool = False) -> dict[str, str]:
    """Node name -> the address to probe: its first InternalIP, else its first ExternalIP
    (API order; the address the cluster's own traffic reaches, as a cloud load balancer's
    health check uses the instance's private address). Nodes no Service can get (being
    deleted, excluded by label unless ``ignore_exclude_lb``, or autoscaler taint: KEP-3458)
    and Nodes without an address are not probed."""
    targets: dict[str, str] = {}
    for node in nodes:
        if node.predicate_for(ignore_exclude_lb) is not None:
            continue
        entries = node.internal_entries or node.external_entries
        if entries:
            targets[node.name] = entries[0][2]
    return targets


HEALTH_ANNOTATION = "node-ipam-lb.io/unhealthy-nodes"
"""The annotation of the health record (a ``coordination.k8s.io/v1`` Lease of our own)
that holds the Lease holder's effective decision as JSON ``{node name: why}``."""
MAX_RECORD_BYTES = 128 * 1024
"""Largest encoded record (annotations may total 256 KiB per object); beyond, the reasons
are dropped, then the names past it (each replica still probes on taking over)."""
MAX_REASON_CHARS = 256
"""Characters of a reason the record keeps."""


def encode_unhealthy(unhealthy: Mapping[str, str]) -> str:
    """``unhealthy`` as the record's compact JSON, in name order, each reason cut to
    :data:`MAX_REASON_CHARS`; at most :data:`MAX_RECORD_BYTES` (reasons dropped, then
    names left out, when larger)."""
    items = {name: why[:MAX_REASON_CHARS] for name, why in sorted(unhealthy.items())}
    text = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= MAX_RECORD_BYTES:
        return text
    bare: dict[str, str] = {}
    size = 2
    for name in items:
        size += len(json.dumps(name, ensure_ascii=False).encode()) + 4
        if size > MAX_RECORD_BYTES:
            break
        bare[name] = ""
    return json.dumps(bare, separators=(",", ":"), ensure_ascii=False)


def decode_unhealthy(text: str | None) -> dict[str, str]:
    """The record's ``{node name: why}``; ``{}`` for ``None``. Entries that are not a
    string name with a string reason are left out, reasons cut to
    :data:`MAX_REASON_CHARS`; an empty reason reads ``"unhealthy (as recorded by the
    previous Lease holder)"``.

    Raises:
        ValueError: ``text`` is longer than :data:`MAX_RECORD_BYTES` or not a JSON
            object (someone else wrote the annotation).
    """
    if text is None:
        return {}
    found = json_object(text, annotation=HEALTH_ANNOTATION, max_bytes=MAX_RECORD_BYTES)
    return {
        name: (why[:MAX_REASON_CHARS] or "unhealthy (as recorded by the previous Lease holder)")
        for name, why in found.items()
        if isinstance(name, str) and name and isinstance(why, str)
    }
