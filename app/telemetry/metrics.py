"""The one Prometheus registry of the process and the reconciler's metrics (docs/design.md §5).

Names follow controller-runtime and client-go workqueue metrics so existing dashboards
work (reference: docs/reference/kubernetes-conventions.md §8). The web layer adds its
webhook metrics to :data:`REGISTRY` and serves it on ``/metrics``. Counters and histograms
have no ``*_created`` series; the ``process_*`` family is registered here too.
"""

from __future__ import annotations

import platform
import threading
import weakref
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from app import __version__
from app.core.codes import EXTERNAL_IP_PREFERRED, SELECTED, UNHEALTHY
from app.core.verdicts import PENDING_CODES

# No ``*_created`` sample per counter and histogram: client_golang (controller-runtime's
# metrics) has none in the text format, and each would double the series per family.
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry(auto_describe=True)
"""Registry served on ``/metrics``; register every metric of the process here."""

PROCESS = ProcessCollector(registry=REGISTRY)
"""``process_*`` (CPU seconds, resident and virtual memory, open and max file descriptors,
start time), as client_golang's process collector exposes them (Linux ``/proc``)."""

BUILD_INFO = Gauge(
    "node_ipam_lb_build_info",
    "Always 1; the labels say which build runs: version (app.__version__, also the image tag"
    " and the Helm chart's appVersion) and the Python version.",
    ["version", "python"],
    registry=REGISTRY,
)
"""``<name>_build_info`` set to 1, the convention of client_golang's ``go_build_info`` and
kube-state-metrics: join on it to label any series with the running version."""
BUILD_INFO.labels(version=__version__, python=platform.python_version()).set(1)

CONTROLLER = "service-nodeipam"
"""Value of the ``controller`` label (controller-runtime labels metrics by controller name)."""

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile",
    "Total number of reconciliations per controller and result (success, error, requeue_after).",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors",
    "Total number of reconciliation errors per controller.",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller, in seconds.",
    ["controller"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
RECONCILE_RESULTS = {
    result: RECONCILE_TOTAL.labels(CONTROLLER, result)
    for result in ("success", "error", "requeue_after")
}
"""The children of :data:`RECONCILE_TOTAL`, made once: each series exists at 0 from the
start (as controller-runtime initialises them) and a reconcile does not pay ``labels()``'s
lookup (~2% of a cold start's CPU with 11,000 reconciles)."""
RECONCILE_SECONDS = RECONCILE_TIME.labels(CONTROLLER)
"""The one child of :data:`RECONCILE_TIME`."""
RECONCILE_ERRORS.labels(CONTROLLER)  # at 0 from the start, as controller-runtime does
WORKQUEUE_DEPTH = Gauge(
    "workqueue_depth", "Current depth of the workqueue.", ["name"], registry=REGISTRY
)
WORKQUEUE_ADDS = Counter(
    "workqueue_adds", "Total number of adds handled by the workqueue.", ["name"], registry=REGISTRY
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries",
    "Total number of retries (rate-limited re-adds) handled by the workqueue.",
    ["name"],
    registry=REGISTRY,
)
LEADER_STATUS = Gauge(
    "leader_election_master_status",
    "1 while this replica holds the leader Lease, else 0.",
    ["name"],
    registry=REGISTRY,
)
MANAGED_SERVICES = Gauge(
    "node_ipam_lb_managed_services",
    "Number of Services in the cache this controller manages (docs/design.md §3).",
    registry=REGISTRY,
)
KUBE_PROXY_IPVS_HAZARD = Gauge(
    "node_ipam_lb_kube_proxy_ipvs_hazard",
    "1 when kube-proxy runs in ipvs mode (ConfigMap kube-system/kube-proxy) and ip-mode is"
    " VIP: every node binds the addresses published for the others, so nodes cannot reach"
    " each other on them (docs/design.md §4.10); else 0 (also when the mode is unknown).",
    registry=REGISTRY,
)
CILIUM_WILDCARD_HAZARD = Gauge(
    "node_ipam_lb_cilium_wildcard_hazard",
    "1 when Cilium load-balances traffic entering the nodes (kube-proxy-replacement, ConfigMap"
    " kube-system/cilium-config) on a release that puts wildcard entries on node addresses"
    " (1.19.0 to 1.19.4) and some of our Services get them: the nodes whose addresses are"
    " published drop SSH and their own traffic (docs/design.md §4.12); else 0 (also when"
    " unknown).",
    registry=REGISTRY,
)
NODE_HEALTH_CHECKS = Counter(
    "node_ipam_lb_node_health_checks",
    "kube-proxy /healthz probes of Nodes by the Lease holder, by result (success: HTTP 200;"
    " failure: any other status, refused, timed out, not HTTP).",
    ["result"],
    registry=REGISTRY,
)
NODE_HEALTH_CHECKS_SUCCESS = NODE_HEALTH_CHECKS.labels("success")
NODE_HEALTH_CHECKS_FAILURE = NODE_HEALTH_CHECKS.labels("failure")
"""The two children of :data:`NODE_HEALTH_CHECKS`, made once (each a series at 0 from the
start); the prober adds a round's counts in one call each."""
NODE_HEALTH_CHECK_ROUND_SECONDS = Gauge(
    "node_ipam_lb_node_health_check_round_seconds",
    "Duration of the last round of Node health checks, in seconds (pacing included; 0 on a"
    " replica that does not hold the Lease).",
    registry=REGISTRY,
)
UNHEALTHY_NODES = Gauge(
    "node_ipam_lb_unhealthy_nodes",
    "Nodes that count as unhealthy now (failed their kube-proxy health checks; during a"
    " most-fail hold, the set from before the hold).",
    registry=REGISTRY,
)
NODE_HEALTH_CHECK_HOLDING = Gauge(
    "node_ipam_lb_node_health_check_holding",
    "1 while more than the allowed fraction of probed Nodes fail and the last healthy set is"
    " kept (the most-fail rule), else 0.",
    registry=REGISTRY,
)
STATUS_WRITES = Counter(
    "node_ipam_lb_status_writes",
    "PATCH requests on services/status, by result (success, conflict, error, not_found).",
    ["result"],
    registry=REGISTRY,
)
STATUS_WRITTEN = STATUS_WRITES.labels("success")
"""The ``success`` child of :data:`STATUS_WRITES` (one per status write), made once."""
for _result in ("conflict", "error", "not_found"):
    STATUS_WRITES.labels(_result)  # every result a series at 0 from the start
EVENTS_EMITTED = Counter(
    "node_ipam_lb_events",
    "Events sent about Services, by reason and result (success: created, series: an"
    " existing Event's series updated, error).",
    ["reason", "result"],
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter(
    "node_ipam_lb_events_dropped",
    "Events not sent, by cause (queue_full, spam: the per-Service spam filter, shutdown).",
    ["cause"],
    registry=REGISTRY,
)
for _cause in ("queue_full", "spam", "shutdown"):
    EVENTS_DROPPED.labels(_cause)  # every cause a series at 0 from the start (dashboard, alert)
CERTIFICATE_EXPIRY = Gauge(
    "node_ipam_lb_serving_certificate_expiry_timestamp_seconds",
    "notAfter of the serving certificate this replica serves, in Unix seconds.",
    registry=REGISTRY,
)
CERTIFICATE_WRITES = Counter(
    "node_ipam_lb_certificate_writes",
    "Writes of self-managed certificates, by action (create, renew, reissue, rotate,"
    " replace, cabundle) and result (success, error).",
    ["action", "result"],
    registry=REGISTRY,
)
WEBHOOK_REQUESTS = Counter(
    "controller_runtime_webhook_requests",
    "Admission requests by webhook path and verdict (allowed, patched, denied, invalid).",
    ["webhook", "verdict"],
    registry=REGISTRY,
)
WEBHOOK_LATENCY = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Time to answer an admission request, by webhook path and verdict, in seconds.",
    ["webhook", "verdict"],
    buckets=(
        *(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
        *(1.5, 2.0, 2.5, 3.0, 5.0, 10.0),
    ),
    registry=REGISTRY,
)
"""Buckets up to 10 s (the body deadline, docs/design.md §7.1) with 2.0, 2.5 and 3.0 around
the review deadline and the webhooks' ``timeoutSeconds`` (3 s), so a p99 near the timeout
(the NodeIPAMLBWebhookSlow alert) is measured rather than clipped at the last bucket."""


def observe_webhook(*, path: str, verdict: str, seconds: float) -> None:
    """Count one admission request on ``path`` with ``verdict`` that took ``seconds``."""
    WEBHOOK_REQUESTS.labels(path, verdict).inc()
    WEBHOOK_LATENCY.labels(path, verdict).observe(seconds)


ASSIGNED = "assigned"
PENDING = "pending"
INVALID_SELECTOR = "invalid_selector"
UNRECONCILED = "unreconciled"
SERVICE_STATES = (ASSIGNED, PENDING, INVALID_SELECTOR, UNRECONCILED)
"""Values of the ``state`` label of ``node_ipam_lb_services``."""
NODE_VERDICTS = (SELECTED, EXTERNAL_IP_PREFERRED, UNHEALTHY)
"""Values of the ``verdict`` label of ``node_ipam_lb_service_nodes``: the verdicts every
reconcile knows without a verdict per Node (docs/design.md §5, §4.11)."""


class ServiceStates:
    """The outcome of the last reconcile of each managed Service, counted per state, for
    ``node_ipam_lb_services{state, reason}`` and ``node_ipam_lb_service_nodes{verdict}``
    (docs/design.md §5, "State metrics").

    One per :class:`~app.controller.controller.Controller`. The controller tells it which
    Services are managed (:meth:`set_managed`, from the Service informer's changes) and
    the reconciler what each last came to (:meth:`record`); a managed Service with no
    record is ``unreconciled``. Each call is O(1) (a dict update and a few integer
    additions under one lock: a state change moves one count, never a rescan); the
    series are built at scrape time by :class:`ServiceStateCollector`.

    ``active`` (a callable) says whether the counts mean anything now: while it is false
    (a replica not holding the Lease, or the reconciler off) no sample is exported, as a
    controller-runtime follower exports no metrics of controllers it does not run.
    :meth:`reset` (a leadership term starts) forgets every record, as a controller-runtime
    process starts its new term with fresh metrics.
    """

    def __init__(self, active: Callable[[], bool]) -> None:
        self.active = active
        self._lock = threading.Lock()
        self._managed: set[str] = set()
        self._records: dict[str, tuple[str, str, int, int, int]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._nodes = [0, 0, 0]

    def set_managed(self, key: str, managed: bool) -> None:
        """Service ``key`` (``namespace/name``) is managed (§3) or not (deleted, or no
        longer ours: its record leaves)."""
        with self._lock:
            if managed:
                self._managed.add(key)
            else:
                self._managed.discard(key)
                self._drop(key)

    def record(
        self,
        key: str,
        state: str,
        reason: str = "",
        *,
        selected: int = 0,
        hidden: int = 0,
        unhealthy: int = 0,
    ) -> None:
        """Service ``key`` last came to ``state`` (one of :data:`SERVICE_STATES` but
        ``unreconciled``) with ``reason`` (a pending code of docs/design.md §4, else
        ``""``), with ``selected`` Nodes advertised and ``hidden`` by the global
        ExternalIP preference, and ``unhealthy`` kept out by health checks (§4.11).
        Ignored for a Service not (yet) known as managed: its informer event, still on
        the way, enqueues it again."""
        record = (state, reason, selected, hidden, unhealthy)
        with self._lock:
            if key not in self._managed:
                return
            old = self._records.get(key)
            if old == record:
                return
            if old is not None:
                self._count(old, -1)
            self._records[key] = record
            self._count(record, 1)

    def forget(self, key: str) -> None:
        """Drop the record of Service ``key`` (it is counted ``unreconciled`` while managed)."""
        with self._lock:
            self._drop(key)

    def reset(self) -> None:
        """Drop every record (a new leadership term reconciles every Service again)."""
        with self._lock:
            self._records.clear()
            self._counts.clear()
            self._nodes = [0, 0, 0]

    def snapshot(self) -> tuple[dict[tuple[str, str], int], tuple[int, int, int]]:
        """``({(state, reason): Services}, (Selected, ExternalIPPreferred, Unhealthy) Nodes
        summed over Services)``, ``unreconciled`` included (with reason ``""``)."""
        with self._lock:
            counts = {k: v for k, v in self._counts.items() if v}
            unreconciled = len(self._managed) - len(self._records)
            nodes = (self._nodes[0], self._nodes[1], self._nodes[2])
        counts[(UNRECONCILED, "")] = unreconciled
        return counts, nodes

    def _drop(self, key: str) -> None:
        old = self._records.pop(key, None)
        if old is not None:
            self._count(old, -1)

    def _count(self, record: tuple[str, str, int, int, int], sign: int) -> None:
        state, reason, selected, hidden, unhealthy = record
        self._counts[(state, reason)] = self._counts.get((state, reason), 0) + sign
        self._nodes[0] += sign * selected
        self._nodes[1] += sign * hidden
        self._nodes[2] += sign * unhealthy


class ServiceStateCollector:
    """Exports ``node_ipam_lb_services`` and ``node_ipam_lb_service_nodes`` from every
    active :class:`ServiceStates` of the process (one in ``serve``; tests run several
    controllers in one process), summed. Each ``state`` (and each pending ``reason``) is a
    series from the start, at 0 when no Service is in it, so an alert's expression and a
    dashboard's legend exist before the first Service does."""

    def __init__(self, pending_reasons: tuple[str, ...]) -> None:
        self._pending = pending_reasons
        self._states: weakref.WeakSet[ServiceStates] = weakref.WeakSet()

    def add(self, states: ServiceStates) -> None:
        """Export ``states`` too (kept weakly: a dropped controller leaves by itself)."""
        self._states.add(states)

    def describe(self) -> list[Metric]:
        """The two families without samples (the registry's name-clash check)."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        """The two families with their samples (scrape time)."""
        counts: dict[tuple[str, str], int] = {}
        nodes = [0, 0, 0]
        active = [s for s in list(self._states) if s.active()]
        for states in active:
            theirs, per_verdict = states.snapshot()
            for key, value in theirs.items():
                counts[key] = counts.get(key, 0) + value
            for at, value in enumerate(per_verdict):
                nodes[at] += value
        yield from self._families(counts, nodes) if active else self._families()

    def _families(
        self, counts: dict[tuple[str, str], int] | None = None, nodes: list[int] | None = None
    ) -> Iterator[Metric]:
        services = GaugeMetricFamily(
            "node_ipam_lb_services",
            "Managed Services by the outcome of their last reconcile on this leader: state"
            " assigned (reason Unhealthy: advertised although every candidate fails its"
            " health checks), pending (reason: the step of docs/design.md §4 that emptied the list,"
            " preview's code), invalid_selector, unreconciled (managed, not reconciled yet"
            " in this leadership term). No samples on a replica that does not lead.",
            labels=["state", "reason"],
        )
        per_node = GaugeMetricFamily(
            "node_ipam_lb_service_nodes",
            "Nodes by verdict, summed over the managed Services of their last reconcile:"
            " Selected (advertised), ExternalIPPreferred (hidden by the global ExternalIP"
            " preference, docs/design.md §4.4) and Unhealthy (failing kube-proxy health"
            " checks, §4.11). No samples on a replica that does not lead.",
            labels=["verdict"],
        )
        if counts is not None and nodes is not None:
            for state in (ASSIGNED, INVALID_SELECTOR, UNRECONCILED):
                services.add_metric([state, ""], counts.get((state, ""), 0))
            # Assigned although every candidate fails its health checks (§4.11).
            services.add_metric([ASSIGNED, UNHEALTHY], counts.get((ASSIGNED, UNHEALTHY), 0))
            for reason in self._pending:
                services.add_metric([PENDING, reason], counts.get((PENDING, reason), 0))
            for verdict, value in zip(NODE_VERDICTS, nodes, strict=True):
                per_node.add_metric([verdict], value)
        yield services
        yield per_node


SERVICE_STATE_COLLECTOR = ServiceStateCollector(PENDING_CODES)
"""The collector of ``node_ipam_lb_services`` and ``node_ipam_lb_service_nodes``."""
REGISTRY.register(SERVICE_STATE_COLLECTOR)
