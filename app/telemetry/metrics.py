"""The one Prometheus registry of the process and the reconciler's metrics (docs/design.md §5).

Names follow controller-runtime and client-go workqueue metrics so existing dashboards
work (reference: docs/reference/kubernetes-conventions.md §8). The web layer adds its
webhook metrics to :data:`REGISTRY` and serves it on ``/metrics``. Counters and histograms
have no ``*_created`` series; the ``process_*`` family is registered here too.
"""

from __future__ import annotations

import platform

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)

from app import __version__

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
STATUS_WRITES = Counter(
    "node_ipam_lb_status_writes",
    "PATCH requests on services/status, by result (success, conflict, error, not_found).",
    ["result"],
    registry=REGISTRY,
)
STATUS_WRITTEN = STATUS_WRITES.labels("success")
"""The ``success`` child of :data:`STATUS_WRITES` (one per status write), made once."""
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
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY,
)


def observe_webhook(*, path: str, verdict: str, seconds: float) -> None:
    """Count one admission request on ``path`` with ``verdict`` that took ``seconds``."""
    WEBHOOK_REQUESTS.labels(path, verdict).inc()
    WEBHOOK_LATENCY.labels(path, verdict).observe(seconds)
