"""Events on Services, sent off the reconcile workers, aggregated into series (docs/design.md §5).

The Python client has no event recorder, so this is one shaped like client-go's
(``k8s.io/client-go/tools/events`` ``EventBroadcaster``/``EventRecorder``, plus the
per-object spam filter of ``tools/record``):

- **Only on change.** :meth:`EventRecorder.emit` keeps the last Event said per Service and
  *slot* (the status outcome, the ExternalIP preference) and queues a new one only when
  ``(type, reason, action, note)`` differs: a steady Service says nothing.
- **Never stalls a reconcile.** ``emit`` only appends to a bounded queue (default
  :data:`QUEUE_SIZE`); one daemon thread sends. A full queue drops the Event and counts it
  (``node_ipam_lb_events_dropped_total{cause="queue_full"}``), never blocks.
- **Statuses first.** With ``defer`` (the controller passes "the work queue holds keys"),
  the sender holds queued Events while it is true, each at most ``defer_max_seconds``
  (:data:`DEFER_MAX_SECONDS`, 30 s) after it was queued, and never while the queue is
  three quarters full (holding must not make it drop Events): on a cold start every status
  PATCH goes out before the ``IPsAssigned`` Events, so the API server's capacity goes to
  what users wait for (addresses) first. :meth:`flush` and :meth:`stop` do not wait.
- **Spam filter.** Per Service a token bucket (client-go ``record`` defaults: burst 25,
  one token per 300 s); an Event without a token is dropped
  (``cause="spam"``).
- **Series.** An Event *isomorphic* to one already sent (same Service, type, reason,
  action and note) is not created again: the existing Event's ``series`` is updated with
  a PATCH (``series.count``, ``series.lastObservedTime``; client-go's ``EventSeries``).
  Unlike client-go, whose cache only knows Events of its own process, the cache is primed
  at the first send of every leadership term from one List of this controller's Warning
  Events (``fieldSelector=reportingController=...,type=Warning``), so an unchanged
  Warning after a restart or failover is never created again. Whether the start writes
  at all (docs/design.md §5): a Warning that is the *first* outcome of its slot in the
  term (it held when the term started) and whose listed Event was last observed less than
  ``series_refresh_seconds`` (30 min) before is the same occurrence still holding, and
  nothing is sent (a restart of a synced cluster writes no Event); an older one gets a
  series update (``count`` + 1, ``lastObservedTime`` now), as client-go's refresh would
  send a series that kept occurring, so the Event shows the condition still holds and does
  not age out (``--event-ttl``). Within a term, every repeat is a new occurrence, and so
  is a listed Warning that comes back after the term started with another outcome in its
  slot (addresses, ``record_only`` or not, or the condition cleared): it did not hold at
  the start, so its series is counted at once.
  Other Normal Events are not listed: ``IPsAssigned`` and ``ExternalIPPreferred`` only
  accompany a status write, which a restart of a synced cluster never makes; the Normal
  ``WaitingForEndpoints`` is not tied to a write, so it is listed with the Warnings (a
  second List, ``type=Normal,reason=WaitingForEndpoints``) and a restart during a new
  Service's grace does not say it again. A series
  whose Event is gone (404, e.g. the 1 h ``--event-ttl``) is created again, as
  client-go does. The note is immutable once created, so it is part of the key.
- Events are ``events.k8s.io/v1`` (``reportingController``/``reportingInstance``); if that
  API is not served (a 404 not about a named object, :func:`resource_not_served`) they
  fall back to core ``v1`` Events once and stay there (series there: ``count`` and
  ``lastTimestamp``, like ``tools/record``). A failed send is logged and counted, never
  raised; notes longer than 1,024 bytes are cut in the middle
  (:func:`app.core.text.elide_bytes`).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.core.text import elide_bytes
from app.kube.client import ApiError, KubeAPI
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.events")

REPORTING_CONTROLLER = "node-ipam-lb.io/controller"

NORMAL = "Normal"
WARNING = "Warning"
WAITING_FOR_ENDPOINTS = "WaitingForEndpoints"
"""The one Normal reason that is listed at the start of a term with the Warnings: it is
not tied to a status write, so a restart during a new Local Service's grace would say it
again otherwise."""

QUEUE_SIZE = 20_000
"""Events waiting to be sent at most (client-go: 1,000; a cold start of 10,000 Services
queues one ``IPsAssigned`` each faster than they are sent, so the default is larger)."""
SPAM_BURST = 25
"""Events one Service may get in a burst (client-go ``record`` ``defaultSpamBurst``)."""
SPAM_REFILL_SECONDS = 300.0
"""Seconds per token after a burst (client-go ``record`` ``defaultSpamQPS`` = 1/300)."""
DEFER_MAX_SECONDS = 30.0
"""Longest an Event waits behind status writes (:class:`EventRecorder` ``defer``): a cold
start's statuses go first, and a controller that never runs out of work still reports."""
DEFER_POLL_SECONDS = 0.05
"""How often a deferring sender asks ``defer()`` again."""
SERIES_REFRESH_SECONDS = 1800.0
"""How often pending series counts are sent (client-go ``refreshTime``, 30 min)."""
STATUS_SLOT = "status"
"""The slot of the status outcome: ``IPsAssigned``, ``WaitingForEndpoints``,
``NoEligibleNodes``, ``InvalidNodeSelector``."""


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
    """``note`` fitted to at most ``limit`` bytes of UTF-8 by cutting its middle.

    events.k8s.io/v1 validation (``NoteLengthLimit`` = 1024 in
    ``k8s.io/kubernetes/pkg/apis/core/validation/events.go``) measures Go's ``len``: bytes,
    not characters. The start (what the note is about) and the end (usually the reason)
    are kept, see :func:`app.core.text.elide_bytes`; a lone surrogate is sent as ``?``.
    """
    return elide_bytes(note, limit)


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


def _epoch(text: Any) -> float:
    """Epoch seconds of an RFC 3339 ``Time``/``MicroTime``; 0.0 when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


SeriesKey = tuple[str, str, str, str, str, str]
"""``(namespace, name, type, reason, action, note as sent)``: isomorphic Events."""


@dataclass(slots=True)
class _Series:
    """One Event as the API server holds it and what is still to be said about it."""

    name: str
    api_version: str
    count: int
    sent_count: int
    last_observed: float
    first_observed: float
    patched: bool  # a series update was sent in this process (later ones wait for refresh)
    listed: bool = False  # primed from the List and not yet observed in this term
    uid: str = ""  # the Service's metadata.uid in the Event's regarding ("" when unknown)


@dataclass(frozen=True, slots=True)
class _Queued:
    namespace: str
    name: str
    event: ServiceEvent
    observed: float
    term: int
    uid: str = ""
    queued_at: float = 0.0  # monotonic; how long it has waited behind ``defer``
    first: bool = False  # the first outcome of its slot in the term: held at its start


class EventRecorder:
    """Records Events on Services (module docstring); ``emit`` is thread-safe and never
    blocks on the API server.

    Without :meth:`start` nothing is sent until :meth:`flush` is called, which then sends
    in the caller's thread (unit tests); with it, a daemon thread sends. ``defer``
    (no arguments, called on the sending thread every :data:`DEFER_POLL_SECONDS` while it
    holds an Event, so it must be cheap and must not call back into the recorder) says
    "hold Events now"; each Event waits at most ``defer_max_seconds`` (module docstring).
    """

    def __init__(
        self,
        *,
        api: KubeAPI,
        identity: str,
        reporting_controller: str = REPORTING_CONTROLLER,
        clock: Callable[[], float] = time.time,
        queue_size: int = QUEUE_SIZE,
        spam_burst: int = SPAM_BURST,
        spam_refill_seconds: float = SPAM_REFILL_SECONDS,
        series_refresh_seconds: float = SERIES_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        defer: Callable[[], bool] | None = None,
        defer_max_seconds: float = DEFER_MAX_SECONDS,
    ) -> None:
        self._api = api
        self._identity = identity[:128]
        self._controller = reporting_controller
        self._clock = clock
        self._monotonic = monotonic
        self._queue_size = queue_size
        self._burst = spam_burst
        self._refill = spam_refill_seconds
        self._refresh = series_refresh_seconds
        self._defer = defer
        self._defer_max = defer_max_seconds
        self._flushing = 0  # flush() calls in progress: send without deferring
        self._cond = threading.Condition()
        self._queue: deque[_Queued] = deque()
        self._busy = False
        # Per Service (``namespace/name``): the last Event said per slot.
        self._last: dict[str, dict[str, ServiceEvent]] = {}
        self._tokens: dict[str, tuple[float, float]] = {}
        # Sender-side state (only the sending thread, or flush(), touches it).
        self._series: dict[SeriesKey, _Series] = {}
        # (namespace, name) of every Service with a series (a superset: kept on failures),
        # so forgetting a Service without one scans nothing.
        self._series_services: set[tuple[str, str]] = set()
        self._term = 0
        self._primed_term = -1
        self._core_v1 = False
        self._sequence = itertools.count()
        self._next_refresh = monotonic() + series_refresh_seconds
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- producer side (reconcile workers) -------------------------------------------------
    def emit(
        self,
        *,
        namespace: str,
        name: str,
        event: ServiceEvent,
        record_only: bool = False,
        slot: str = STATUS_SLOT,
        uid: str = "",
    ) -> bool:
        """Queue ``event`` on Service ``namespace/name`` unless it is the last one said in
        ``slot`` for that Service. ``record_only`` remembers it as the slot's state without
        sending (so the next real change is compared against it). Returns True when the
        Event was queued; False when nothing changed, ``record_only``, or it was dropped
        (spam filter, full queue: counted in ``node_ipam_lb_events_dropped_total``). ``uid`` is
        the Service's ``metadata.uid``, sent as ``regarding.uid`` (``involvedObject.uid``):
        ``kubectl describe`` selects a Service's Events by it."""
        service = f"{namespace}/{name}"
        with self._cond:
            said = self._last.get(service)
            if said is None:
                said = self._last[service] = {}
            elif said.get(slot) == event:
                return False
            first = slot not in said
            said[slot] = event
            if record_only:
                return False
            cause = self._admit(service)
            if cause is None:
                self._queue.append(
                    _Queued(
                        namespace,
                        name,
                        event,
                        self._clock(),
                        self._term,
                        uid,
                        self._monotonic(),
                        first,
                    )
                )
                self._cond.notify()
                return True
            if cause == "queue_full":
                # Not said: a later reconcile of this Service may say it again (the slot
                # stays observed: that later one is not what held at the term's start).
                said[slot] = _UNSAID
        metrics.EVENTS_DROPPED.labels(cause).inc()
        return False

    def _admit(self, service: str) -> str | None:
        """Under the lock: ``None`` when the Event may be queued, else why it is dropped."""
        if len(self._queue) >= self._queue_size:
            return "queue_full"
        now = self._monotonic()
        tokens, since = self._tokens.get(service, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - since) / self._refill)
        if tokens < 1.0:
            self._tokens[service] = (tokens, now)
            return "spam"
        self._tokens[service] = (tokens - 1.0, now)
        return None

    def clear(self, namespace: str, name: str, slot: str, *, observed: bool = True) -> None:
        """Forget what was last said in ``slot`` of Service ``namespace/name``: the
        condition does not hold (when it comes back it is said again, and counted as a
        new occurrence even when an earlier term's Event of it is listed: it did not hold
        all along since the term started). ``observed`` false: nothing is known about it
        yet (the slot is as if never seen in this term, so the condition's first report
        may still be the one that held at the term's start)."""
        with self._cond:
            said = self._last.get(f"{namespace}/{name}")
            if said is None:
                said = self._last[f"{namespace}/{name}"] = {}
            if observed:
                said[slot] = _UNSAID
            else:
                said.pop(slot, None)

    def last_said(self, namespace: str, name: str, slot: str) -> ServiceEvent | None:
        """What was last said (or recorded) in ``slot`` of Service ``namespace/name`` in
        this term; ``None`` when nothing was, or the slot was cleared."""
        with self._cond:
            event = (self._last.get(f"{namespace}/{name}") or {}).get(slot)
        return None if event is _UNSAID else event

    def forget(self, namespace: str, name: str) -> None:
        """Drop the memory of Service ``namespace/name`` (it was deleted): what was said,
        its spam bucket and its series (a re-created Service gets new Events)."""
        service = f"{namespace}/{name}"
        with self._cond:
            self._last.pop(service, None)
            self._tokens.pop(service, None)
            self._queue.append(_Queued(namespace, name, _FORGET, 0.0, self._term))
            self._cond.notify()

    def reset(self) -> None:
        """A new leadership term: drop what was said (an earlier term's replica may have
        said something else since) and re-prime the series cache from the API server
        before the next send."""
        with self._cond:
            self._last.clear()
            self._term += 1

    # -- sender side -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sending daemon thread (once)."""
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="event-sender", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Send what is queued for at most ``timeout`` seconds, then stop the thread; what
        is still queued is dropped (``cause="shutdown"``)."""
        with self._cond:
            thread = self._thread
        if thread is not None:
            self.flush(timeout)
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            thread.join(timeout)
        with self._cond:
            dropped = sum(1 for item in self._queue if item.event is not _FORGET)
            self._queue.clear()
            self._thread = None
        if dropped:
            metrics.EVENTS_DROPPED.labels("shutdown").inc(dropped)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event has been sent (or failed); without a started
        thread, send them in this thread. Returns False when ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            threaded = self._thread is not None
        if not threaded:
            while (item := self._pop()) is not None:
                self._send(item)
            return True
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._queue or self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, 0.05))
            finally:
                self._flushing -= 1
        return True

    def pending(self) -> int:
        """Events queued and not yet sent."""
        with self._cond:
            return len(self._queue)

    def _pop(self) -> _Queued | None:
        with self._cond:
            if not self._queue:
                return None
            return self._queue.popleft()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    if self._queue:
                        hold = self._hold_locked()
                        if hold <= 0:
                            break
                        self._cond.wait(min(hold, DEFER_POLL_SECONDS))
                        continue
                    wait = self._next_refresh - self._monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(min(wait, 1.0))
                if self._stopping:
                    return
                item = self._queue.popleft() if self._queue else None
                self._busy = True
            try:
                if item is not None:
                    self._send(item)
                if self._monotonic() >= self._next_refresh:
                    self._refresh_series()
            except Exception:  # a bug must not kill the sender: log and go on
                LOG.exception("event sender failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _hold_locked(self) -> float:
        """Under the lock, the queue not empty: seconds the next Event still waits behind
        ``defer`` (0: send it now). A forget costs no request and is never held."""
        if self._defer is None or self._flushing or len(self._queue) * 4 >= self._queue_size * 3:
            # Three quarters full: holding more could drop Events the sender would send.
            return 0.0
        head = self._queue[0]
        if head.event is _FORGET:
            return 0.0
        left = self._defer_max - (self._monotonic() - head.queued_at)
        if left <= 0:
            return 0.0
        try:
            holding = self._defer()
        except Exception:  # a broken callback must not stop Events
            LOG.exception("event defer check failed")
            return 0.0
        return left if holding else 0.0

    def _send(self, item: _Queued) -> None:
        if item.event is _FORGET:
            if (item.namespace, item.name) not in self._series_services:
                return
            self._series_services.discard((item.namespace, item.name))
            gone = [k for k in self._series if k[0] == item.namespace and k[1] == item.name]
            for old in gone:
                del self._series[old]
            return
        if item.term > self._primed_term:
            self._prime()
            self._primed_term = item.term
        event = item.event
        note = truncate_note(event.note)
        key: SeriesKey = (item.namespace, item.name, event.type, event.reason, event.action, note)
        series = self._series.get(key)
        if series is None or (item.uid and series.uid and series.uid != item.uid):
            self._create(item, note, key)  # a re-created Service gets an Event of its own
            return
        if series.listed:
            series.listed = False
            if item.first and item.observed - series.last_observed < self._refresh:
                # The condition the Event records held at this term's start (the slot's
                # first outcome in the term) and the Event is recent: the same
                # occurrence, not a new one. Nothing to say. After another outcome in
                # the slot it is a new occurrence: counted below.
                return
        series.count += 1
        series.last_observed = item.observed
        if not series.patched:
            self._send_series(key, series, event.reason)

    def _create(self, item: _Queued, note: str, key: SeriesKey) -> None:
        try:
            name, api_version = self._post(
                item.namespace, item.name, item.event, note, None, item.uid
            )
        except ApiError as err:
            self._failed(item.namespace, item.name, item.event.reason, "creating", err)
            return
        metrics.EVENTS_EMITTED.labels(item.event.reason, "success").inc()
        self._series_services.add((item.namespace, item.name))
        self._series[key] = _Series(
            name=name,
            api_version=api_version,
            count=1,
            sent_count=1,
            last_observed=item.observed,
            first_observed=item.observed,
            patched=False,
            uid=item.uid,
        )

    def _send_series(self, key: SeriesKey, series: _Series, reason: str) -> None:
        """PATCH the series of ``series``' Event; re-create it when it is gone (404)."""
        namespace, name = key[0], key[1]
        series.patched = True
        try:
            self._api.patch_event(
                namespace=namespace,
                name=series.name,
                api_version=series.api_version,
                patch=self._series_patch(series),
            )
        except ApiError as err:
            if err.status != 404:
                self._failed(namespace, name, reason, "updating the series of", err)
                return
            event = ServiceEvent(key[2], reason, key[4], key[5])
            try:
                series.name, series.api_version = self._post(
                    namespace, name, event, key[5], series, series.uid
                )
            except ApiError as err2:
                self._failed(namespace, name, reason, "re-creating", err2)
                del self._series[key]
                return
        series.sent_count = series.count
        metrics.EVENTS_EMITTED.labels(reason, "series").inc()

    def _refresh_series(self) -> None:
        """Send the counts that grew since their last PATCH (client-go
        ``refreshExistingEventSeries``), every ``series_refresh_seconds``."""
        self._next_refresh = self._monotonic() + self._refresh
        for key, series in list(self._series.items()):
            if series.count > series.sent_count:
                self._send_series(key, series, key[3])

    def _series_patch(self, series: _Series) -> dict[str, Any]:
        if series.api_version == "v1":
            stamp = datetime.fromtimestamp(series.last_observed, UTC)
            return {"count": series.count, "lastTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return {
            "series": {
                "count": series.count,
                "lastObservedTime": micro_time(series.last_observed),
            }
        }

    def _failed(self, namespace: str, name: str, reason: str, doing: str, err: ApiError) -> None:
        metrics.EVENTS_EMITTED.labels(reason, "error").inc()
        log_event(
            LOG,
            f"{doing} event failed",
            level=logging.WARNING,
            service=f"{namespace}/{name}",
            reason=reason,
            error=str(err),
        )

    def _prime(self) -> None:
        """Fill the series cache with this controller's Warning Events on Services, and its
        Normal ``WaitingForEndpoints`` ones (two paged Lists). A failure leaves it empty:
        Events are then created, not lost."""
        self._series.clear()
        found: dict[SeriesKey, tuple[float, _Series]] = {}
        try:
            # Field selectors cannot OR: one paged List per kind of Event kept across terms.
            for wanted in (f"type={WARNING}", f"type={NORMAL},reason={WAITING_FOR_ENDPOINTS}"):
                token: str | None = None
                while True:
                    version = "v1" if self._core_v1 else "events.k8s.io/v1"
                    field = "reportingComponent" if self._core_v1 else "reportingController"
                    page = self._api.list_events(
                        api_version=version,
                        field_selector=f"{field}={self._controller},{wanted}",
                        limit=500,
                        continue_token=token,
                    )
                    for obj in page.get("items") or []:
                        parsed = self._parse_listed(obj, version)
                        if parsed is not None and parsed[1][0] >= found.get(parsed[0], (0.0,))[0]:
                            found[parsed[0]] = parsed[1]
                    token = (page.get("metadata") or {}).get("continue") or None
                    if token is None:
                        break
        except ApiError as err:
            if not self._core_v1 and resource_not_served(err):
                self._core_v1 = True
                log_event(LOG, "events.k8s.io/v1 not served, using core v1 Events")
                self._prime()
                return
            log_event(LOG, "listing earlier events failed", level=logging.WARNING, error=str(err))
        self._series = {key: series for key, (_, series) in found.items()}
        self._series_services = {(key[0], key[1]) for key in self._series}
        log_event(LOG, "event series primed", events=len(self._series))

    @staticmethod
    def _parse_listed(obj: Any, version: str) -> tuple[SeriesKey, tuple[float, _Series]] | None:
        if not isinstance(obj, dict):
            return None
        core = version == "v1"
        regarding = obj.get("involvedObject" if core else "regarding")
        meta = obj.get("metadata")
        if not isinstance(regarding, dict) or not isinstance(meta, dict):
            return None
        if regarding.get("kind") != "Service" or not isinstance(meta.get("name"), str):
            return None
        fields = [
            regarding.get("namespace") or meta.get("namespace"),
            regarding.get("name"),
            obj.get("type"),
            obj.get("reason"),
            obj.get("action"),
            obj.get("message" if core else "note") or "",
        ]
        if not all(isinstance(f, str) for f in fields):
            return None
        listed = obj.get("series")
        series: dict[str, Any] = listed if isinstance(listed, dict) else {}
        raw = obj.get("count") if core else series.get("count")
        count = raw if isinstance(raw, int) else 1
        if core:
            last = _epoch(obj.get("lastTimestamp")) or _epoch(obj.get("eventTime"))
            first = _epoch(obj.get("firstTimestamp")) or last
        else:
            first = _epoch(obj.get("eventTime"))
            last = _epoch(series.get("lastObservedTime")) or first
        series_key: SeriesKey = tuple(fields)  # type: ignore[assignment]
        uid = regarding.get("uid")
        entry = _Series(
            name=meta["name"],
            api_version=version,
            count=max(count, 1),
            sent_count=max(count, 1),
            last_observed=last,
            first_observed=first,
            patched=False,
            listed=True,
            uid=uid if isinstance(uid, str) else "",
        )
        return series_key, (last, entry)

    def _post(
        self,
        namespace: str,
        name: str,
        event: ServiceEvent,
        note: str,
        series: _Series | None,
        uid: str = "",
    ) -> tuple[str, str]:
        """Create the Event about Service ``namespace/name`` (``uid``: its ``metadata.uid``,
        set in ``regarding``/``involvedObject`` when known); returns
        ``(metadata.name, apiVersion)``."""
        if not self._core_v1:
            body = self._events_v1(namespace, name, event, note, series)
            if uid:
                body["regarding"]["uid"] = uid
            try:
                self._api.create_event(namespace=namespace, body=body)
                return body["metadata"]["name"], "events.k8s.io/v1"
            except ApiError as err:
                if not resource_not_served(err):
                    raise
                self._core_v1 = True
                log_event(LOG, "events.k8s.io/v1 not served, using core v1 Events")
        body = self._core(namespace, name, event, note, series)
        if uid:
            body["involvedObject"]["uid"] = uid
        self._api.create_event(namespace=namespace, body=body)
        return body["metadata"]["name"], "v1"

    def _metadata(self, namespace: str, name: str) -> dict[str, str]:
        # client-go names Events "<object>.<UnixNano in hex>"; the counter keeps two Events
        # of one instant apart.
        unique = time.time_ns() + next(self._sequence)
        return {"name": f"{name}.{unique:x}", "namespace": namespace}

    def _events_v1(
        self, namespace: str, name: str, event: ServiceEvent, note: str, series: _Series | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": self._metadata(namespace, name),
            "eventTime": micro_time(series.first_observed if series else self._clock()),
            "reportingController": self._controller,
            "reportingInstance": self._identity,
            "action": event.action,
            "reason": event.reason,
            "note": note,
            "type": event.type,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Service",
                "namespace": namespace,
                "name": name,
            },
        }
        if series is not None and series.count >= 2:
            body["series"] = self._series_patch(series)["series"]
        return body

    def _core(
        self, namespace: str, name: str, event: ServiceEvent, note: str, series: _Series | None
    ) -> dict[str, Any]:
        now = self._clock()
        first = datetime.fromtimestamp(series.first_observed if series else now, UTC)
        last = datetime.fromtimestamp(series.last_observed if series else now, UTC)
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
            "message": note,
            "type": event.type,
            "action": event.action,
            "source": {"component": self._controller},
            "reportingComponent": self._controller,
            "reportingInstance": self._identity,
            "firstTimestamp": first.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": last.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "eventTime": micro_time(now),
            "count": series.count if series else 1,
        }


_FORGET = ServiceEvent("", "", "", "")
"""Queue marker: drop the series of a deleted Service (in queue order)."""
_UNSAID = ServiceEvent("", "", "", "not said")
"""Slot marker: the slot was observed in this term with nothing standing said in it (the
condition cleared, or its Event dropped because the queue was full)."""
