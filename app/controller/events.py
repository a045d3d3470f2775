"""Events on Services, emitted only when what we would say changes (docs/design.md §5).

The Python client has no event recorder (no client-go ``EventBroadcaster``, no
aggregation), so this keeps the last Event emitted per Service in memory and creates a
new one only when the ``(type, reason, note)`` differs: a Service flapping between two
states produces one Event per flap, a steady Service none. That memory is dropped when the
cache reports the Service deleted and when a leadership term starts. Events are
``events.k8s.io/v1`` (``reportingController``/``reportingInstance``); if that API is not
served (a 404 not about a named object, :func:`resource_not_served`) it falls back to core
``v1`` Events once and stays there. A failure to create an Event is logged, never raised.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.kube.client import ApiError, KubeAPI
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.events")

REPORTING_CONTROLLER = "node-ipam-lb.io/controller"

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    """What to say about one Service: ``type`` Normal/Warning, ``reason``
    (UpperCamelCase, e.g. ``IPsAssigned``), ``action`` (machine-readable verb) and
    ``note`` (human sentence, at most 1 kB once sent)."""

    type: str
    reason: str
    action: str
    note: str


NOTE_LIMIT_BYTES = 1024


def truncate_note(note: str, limit: int = NOTE_LIMIT_BYTES) -> str:
    """``note`` cut to at most ``limit`` bytes of UTF-8, at a character boundary.

    events.k8s.io/v1 validation (``NoteLengthLimit`` = 1024 in
    ``k8s.io/kubernetes/pkg/apis/core/validation/events.go``) measures Go's ``len``: bytes,
    not characters, so 2,000 ``ü`` (2 bytes each) must be cut to 512 characters. A lone
    surrogate (not encodable) is sent as ``?`` rather than raising.
    """
    return note.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")


# errors.NewNotFound's message: `<resource>[.<group>] "<name>" not found`, e.g.
# `namespaces "team-a" not found` (the NamespaceLifecycle admission plugin).
_OBJECT_NOT_FOUND = re.compile(r'^[a-z0-9.-]+ ".*" not found$', re.DOTALL)


def resource_not_served(err: ApiError) -> bool:
    """True when a create's ``err`` says the Event resource itself is not served.

    The rule: a 404 that is *not* about a named object. kube-apiserver answers a POST to a
    group/version it does not serve with ``404`` and "the server could not find the
    requested resource" (or "404 page not found"); a 404 about an object (``errors.NewNotFound``:
    ``namespaces "x" not found`` when the namespace was deleted during a reconcile) names
    the object and says nothing about the API, so it is an ordinary failure.
    """
    return err.status == 404 and _OBJECT_NOT_FOUND.match(err.reason) is None


def micro_time(epoch: float) -> str:
    """Kubernetes ``MicroTime`` text (RFC 3339, microseconds, ``Z``) for epoch seconds."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Creates Events on Services, deduplicated per Service; thread-safe."""

    def __init__(
        self,
        *,
        api: KubeAPI,
        identity: str,
        reporting_controller: str = REPORTING_CONTROLLER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._identity = identity[:128]
        self._controller = reporting_controller
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, ServiceEvent] = {}
        self._core_v1 = False
        self._sequence = itertools.count()

    def emit(
        self, *, namespace: str, name: str, event: ServiceEvent, record_only: bool = False
    ) -> bool:
        """Create ``event`` on Service ``namespace/name`` unless it is the last one emitted
        for that Service. ``record_only`` remembers it as the Service's state without
        sending (so the next real change is compared against it). Returns True when an
        Event was created."""
        key = f"{namespace}/{name}"
        with self._lock:
            if self._last.get(key) == event:
                return False
            self._last[key] = event
        if record_only:
            return False
        try:
            self._create(namespace=namespace, name=name, event=event)
        except ApiError as err:
            with self._lock:
                if self._last.get(key) == event:
                    del self._last[key]  # not sent: a later reconcile may try again
            metrics.EVENTS_EMITTED.labels(event.reason, "error").inc()
            log_event(
                LOG,
                "creating event failed",
                level=logging.WARNING,
                service=key,
                reason=event.reason,
                error=str(err),
            )
            return False
        metrics.EVENTS_EMITTED.labels(event.reason, "success").inc()
        return True

    def forget(self, namespace: str, name: str) -> None:
        """Drop the memory of Service ``namespace/name`` (it was deleted)."""
        with self._lock:
            self._last.pop(f"{namespace}/{name}", None)

    def reset(self) -> None:
        """Drop the memory of every Service (a new leadership term: what this replica
        said in an earlier term may no longer be the last Event on the Service)."""
        with self._lock:
            self._last.clear()

    def _create(self, *, namespace: str, name: str, event: ServiceEvent) -> None:
        if not self._core_v1:
            try:
                self._api.create_event(
                    namespace=namespace, body=self._events_v1(namespace, name, event)
                )
                return
            except ApiError as err:
                if not resource_not_served(err):
                    raise
                self._core_v1 = True
                log_event(LOG, "events.k8s.io/v1 not served, using core v1 Events")
        self._api.create_event(namespace=namespace, body=self._core(namespace, name, event))

    def _metadata(self, namespace: str, name: str) -> dict[str, str]:
        # client-go names Events "<object>.<UnixNano in hex>"; the counter keeps two Events
        # of one instant apart.
        unique = time.time_ns() + next(self._sequence)
        return {"name": f"{name}.{unique:x}", "namespace": namespace}

    def _events_v1(self, namespace: str, name: str, event: ServiceEvent) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": self._metadata(namespace, name),
            "eventTime": micro_time(self._clock()),
            "reportingController": self._controller,
            "reportingInstance": self._identity,
            "action": event.action,
            "reason": event.reason,
            "note": truncate_note(event.note),
            "type": event.type,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Service",
                "namespace": namespace,
                "name": name,
            },
        }

    def _core(self, namespace: str, name: str, event: ServiceEvent) -> dict[str, Any]:
        now = self._clock()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": self._metadata(namespace, name),
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Service",
                "namespace": namespace,
                "name": name,
            },
            "reason": event.reason,
            "message": truncate_note(event.note),
            "type": event.type,
            "action": event.action,
            "source": {"component": self._controller},
            "reportingComponent": self._controller,
            "reportingInstance": self._identity,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": micro_time(now),
            "count": 1,
        }
