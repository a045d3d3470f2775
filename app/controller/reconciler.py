"""Reconcile one Service key: the thin shell around :func:`app.core.nodeipam.select`.

The reconciler's guarantees are docs/design.md §5.

For ``namespace/name``: read the :class:`~app.core.views.ServiceView` from the cache (gone:
done); not managed (§3): never write; otherwise compute the :class:`~app.core.nodeipam.Selection`
from the cached Nodes and EndpointSlices and, only when :func:`app.core.status.ingress_differs`
or our condition (:mod:`app.core.conditions`) differs from the stored one, PATCH
``services/{name}/status`` with a strategic merge patch holding nothing but
``status.loadBalancer.ingress`` and our ``status.conditions`` item.

**Stale cache and the missing resourceVersion precondition (a deliberate choice).** The
merge patch carries no ``metadata.resourceVersion``. The ingress we write is a function of
the Nodes and EndpointSlices only, never of the stored status, and no one else writes the
status of a Service we manage; the stored value is read solely to skip no-op writes. A stale
cache therefore costs at most one redundant, identical write, or a write computed from
slightly old Nodes that the watch event still on its way corrects at once (it re-enqueues the
Service). A precondition would turn every such case into a 409 + retry without making the
result more correct. To avoid rewriting our own value while the watch has not yet delivered
it, :class:`Reconciler` remembers its last write per Service (:class:`_Written`: the ingress
and the resourceVersions known to be older than it: the one written over, and those
answered to earlier writes of ours whose echoes had not come) and, while the cache shows
one of those, compares against what it wrote instead. A watch event counts as the echo of
that write (no reconcile) only when it follows one of those versions directly.

Errors: :class:`~app.kube.client.ApiError` from the PATCH propagates (the worker re-queues the key
with backoff: 409 conflicts, 5xx, connection failures); 404 means the Service is gone: done.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.controller.cache import ClusterCache, service_key
from app.controller.events import (
    NORMAL,
    NOTE_LIMIT_BYTES,
    STATUS_SLOT,
    WAITING_FOR_ENDPOINTS,
    WARNING,
    EventRecorder,
    ServiceEvent,
)
from app.core.codes import (
    EXTERNAL_IP_PREFERRED,
    NO_READY_ENDPOINT,
    POOL_CODES,
    PORT_IN_USE,
    UNHEALTHY,
)
from app.core.conditions import (
    ALL_NODES_UNHEALTHY,
    DELETE,
    ServingMessages,
    invalid_selector,
    serving,
)
from app.core.decision import (
    SELECTION_FIELDS,
    Decider,
    Outcome,
    Snapshot,
    name_list,
)
from app.core.hazards import Hazard
from app.core.nodehealth import NO_HEALTH, HealthView
from app.core.nodeipam import has_our_class, is_managed
from app.core.options import SelectionSettings
from app.core.ports import (
    MAX_PORT_RECORDS,
    pinned_ports,
    port_key,
    record_count,
    stale_ingress,
)
from app.core.status import PortRecord, status_differs, with_ports
from app.core.text import elide, elide_bytes
from app.core.views import ServiceView, StoredCondition
from app.kube.client import ApiError, KubeAPI
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.reconciler")


def status_patch(
    ingress: Sequence[Mapping[str, Any]] | None,
    ports: PortRecord | None = None,
    condition: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The strategic merge patch body that sets ``status.loadBalancer.ingress`` (``None``:
    left as it is), each entry recording ``ports`` (docs/design.md §4.9; built for the
    body only: the Outcome's entries stay shared by every Service with that Outcome), and
    ``condition``, our ``status.conditions`` item (:meth:`~app.core.conditions.Serving.written` or
    :data:`~app.core.conditions.DELETE`), merged by ``type`` beside other controllers'."""
    status: dict[str, Any] = {}
    if ingress is not None:
        entries = list(with_ports(ingress, ports)) if ports else list(ingress)
        status["loadBalancer"] = {"ingress": entries}
    if condition is not None:
        status["conditions"] = [dict(condition)]
    return {"status": status}


_OVER_LIMIT = (
    "with the Service's ports recorded in each entry, its status would hold more than"
    f" {MAX_PORT_RECORDS} PortStatus records (its ports x its entries), and its node selector"
    " does not parse, so it is not decided again"
)
"""Why the kept ingress of a Service whose selector does not parse is withdrawn when its
ports cannot be recorded within the limit (``app.core.ports.MAX_PORT_RECORDS``)."""
SELECTOR_SHOWN = 200
"""Characters of a malformed selector an Event note quotes (cut in the middle)."""
EXTERNAL_IP_SLOT = "external-ip"
"""Recorder slot of the ``ExternalIPPreferred`` Normal Event (apart from the status outcome)."""
PORT_SLOT = "port-in-use"
"""Recorder slot of the ``PortInUse`` Warning of a Service that keeps some addresses
(docs/design.md §4.9); one that keeps none says it in the status outcome's slot."""
HEALTH_SLOT = "unhealthy-nodes"
"""Recorder slot of the ``NodesUnhealthy`` Normal Event: candidates not advertised because
they fail their health checks (docs/design.md §4.11), or the ``AllNodesUnhealthy`` Warning:
every candidate fails them, so they are advertised anyway."""
KUBE_PROXY_SLOT = "kube-proxy-ipvs"
"""Recorder slot of the datapath hazard's Warning of a Service that gets addresses:
``KubeProxyIPVS`` while kube-proxy runs in ipvs mode and ``ip-mode`` is VIP (docs/design.md
§4.10), ``CiliumWildcardEntries`` while Cilium's wildcard entries concern it (§4.12)."""
ENDPOINT_GRACE_SECONDS = 600.0
"""How long after its ``creationTimestamp`` a new ``externalTrafficPolicy: Local`` Service
that was never published may wait for its first ready endpoint with a Normal
``WaitingForEndpoints`` Event before that is the ``NoEligibleNodes`` Warning
(docs/design.md §5): the Deployment controller's default ``progressDeadlineSeconds``, the
time Kubernetes itself gives new Pods before it calls a rollout failed, and less than the
15 min of the ``NodeIPAMLBServicesPending`` alert, so the Warning exists when it fires."""


def _warning(reason: str, note: str | None) -> ServiceEvent | None:
    """The ``SelectNodes`` Warning ``reason`` saying ``note``; ``None`` without a note."""
    return None if note is None else ServiceEvent(WARNING, reason, "SelectNodes", note)


def _normal(reason: str, note: str | None) -> ServiceEvent | None:
    """The ``SelectNodes`` Normal Event ``reason`` saying ``note``; ``None`` without a note."""
    return None if note is None else ServiceEvent(NORMAL, reason, "SelectNodes", note)


def invalid_selector_note(error: str, value: str | None) -> str:
    """The ``InvalidNodeSelector`` note: ``error`` (``select``'s text, ``<field>: Invalid
    value: <JSON of the annotation>: <reason>``) with the quoted annotation cut in the
    middle to :data:`SELECTOR_SHOWN` characters, so the reason stays whole within the
    Event note's 1,024 bytes (a longer reason is itself cut in the middle)."""
    quoted = json.dumps(elide(value or ""), ensure_ascii=False)  # as select() quotes it
    head, found, reason = error.partition(f": Invalid value: {quoted}: ")
    if not found:
        return elide_bytes(error, NOTE_LIMIT_BYTES)
    prefix = f"{head}: Invalid value: {elide(quoted, SELECTOR_SHOWN)}: "
    room = max(NOTE_LIMIT_BYTES - len(prefix.encode()), 1)
    return prefix + elide_bytes(reason, room)


OLDER_VERSIONS_KEPT = 16
"""At most this many resourceVersions in :attr:`_Written.older` (a chain of writes whose
echoes have not arrived is a few long even after an outage; beyond, a spare write)."""


def _no_hazard(load_balancer_class: str | None) -> Hazard | None:
    return None


@dataclass
class _Written:
    """Our last status write of one Service, for :meth:`Reconciler._stored`.

    ``older``: the resourceVersions the cache may show while the API server holds this
    write or a newer one: the version the write went over and, while the chain of our
    writes goes on without an echo in between, the versions answered to our earlier
    writes (``answered``: the resourceVersion in this write's answer, ``None`` until the
    answer came). resourceVersions are compared for equality only (API conventions:
    opaque)."""

    older: tuple[str | None, ...]
    ingress: tuple[dict[str, Any], ...]
    ports: PortRecord = ()
    answered: str | None = None
    condition: StoredCondition | None = None

    @classmethod
    def after(
        cls,
        previous: _Written | None,
        *,
        over: str | None,
        ingress: tuple[dict[str, Any], ...],
        ports: PortRecord = (),
        condition: StoredCondition | None = None,
    ) -> _Written:
        """The record of a write over version ``over`` following ``previous``: the chain
        goes on when ``over`` is still older than ``previous`` (its echo not seen)."""
        older: tuple[str | None, ...] = (over,)
        if previous is not None and over in previous.older:
            chain = (*previous.older, previous.answered)
            older = (*(v for v in chain if v is not None and v != over), over)
        return cls(
            older=older[-OLDER_VERSIONS_KEPT:], ingress=ingress, ports=ports, condition=condition
        )


class Reconciler:
    """Reconciles Service keys; safe to call from several worker threads (one key is never
    processed by two workers at once: the work queue guarantees it)."""

    def __init__(
        self,
        *,
        cache: ClusterCache,
        api: KubeAPI,
        recorder: EventRecorder,
        settings: SelectionSettings,
        is_leader: Callable[[], bool],
        wall_clock: Callable[[], float] = time.time,
        states: metrics.ServiceStates | None = None,
        kube_proxy_hazard: Callable[[str | None], Hazard | None] = _no_hazard,
        health: Callable[[], HealthView] = lambda: NO_HEALTH,
        decider: Decider | None = None,
    ) -> None:
        # health: the current health view (docs/design.md §4.11; NO_HEALTH with health
        # checks off), read once per reconcile.
        # kube_proxy_hazard: the datapath hazard concerning a Service of that class while
        # it holds (docs/design.md §4.10, §4.12), else None; a Service that gets addresses
        # carries it as a Warning Event of its reason (KubeProxyIPVS, CiliumWildcardEntries).
        self._cache = cache
        self._api = api
        self._recorder = recorder
        self._settings = settings
        self._is_leader = is_leader
        self._kube_proxy_hazard = kube_proxy_hazard
        self._health = health
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._written: dict[str, _Written] = {}
        self._errors: dict[str, str] = {}
        self._messages = ServingMessages()
        self.decider = decider if decider is not None else Decider(settings, memo_local=False)
        """The decision path (:class:`~app.core.decision.Decider`; the server shares one
        with the webhook and preview)."""
        self.states = states if states is not None else metrics.ServiceStates(is_leader)
        """What each managed Service last came to (``node_ipam_lb_services``)."""

    def is_own_write(self, old: ServiceView | None, new: ServiceView) -> bool:
        """True when ``new`` differs from ``old`` only by the status this reconciler last
        wrote (plus ``resourceVersion``): the watch echo of our own PATCH, which needs no
        reconcile (nothing an input of the Selection holds has changed)."""
        if old is None:
            return False
        with self._lock:
            written = self._written.get(service_key(new.namespace, new.name))
        if (
            written is None
            or status_differs(written.ingress, written.ports, new.ingress, new.ingress_ports)
            or written.condition != new.serving
        ):
            return False
        # Only right after a version known to be older than that write: when a version
        # we do not know came in between (a write the server applied while we saw an
        # error, someone else's write), the server may hold something else since, and
        # this Service is reconciled again.
        if old.resource_version not in written.older:
            return False
        if old.generation != new.generation:
            return False  # a spec change: our condition's observedGeneration is behind
        return all(getattr(old, name) == getattr(new, name) for name in SELECTION_FIELDS)

    def reconcile(self, key: str) -> float | None:
        """Bring Service ``key`` (``namespace/name``) to its desired status.

        Returns the delay in seconds after which the key must be reconciled again (a
        NotReady grace period runs out), or ``None``. Raises :class:`ApiError` when the
        status write failed and should be retried with backoff.
        """
        namespace, _, name = key.partition("/")
        service = self._cache.service(namespace, name)
        if service is None or not is_managed(service, self._settings)[0]:
            if service is not None:
                ours = has_our_class(service, self._settings)
                why = stale_ingress(service, ours=ours)
                # Ours no more (another class, another type): our condition goes. Ours and
                # being deleted: it goes with the ingress (withdrawn at once, stale_ingress).
                released = not (ours and service.type == "LoadBalancer")
                gone = why is not None or (released and service.serving is not None)
                self._withdraw(key, service, why, DELETE if gone else None)
            self._forget(key, namespace, name)
            return None
        now = self._wall()
        snap = Snapshot(
            nodes=self._cache.node_index(),
            now=now,
            ports=self._cache,
            endpoint_slices_of=self._cache.endpoint_slices,
            unhealthy=self._health().unhealthy,
            port_version=self._cache.port_version(),
            pools=self._cache.pools(),
            namespace_labels=self._cache.namespace_labels,
        )
        outcome = self.decider.decide(service, snap)
        if outcome.error is not None or outcome.ingress is None:
            self._invalid_selector(key, namespace, name, outcome, service)
            why = (
                stale_ingress(service, ours=True)
                or self._outside_pool(service, snap)
                or self._taken(service, snap)
            )
            # Its entries' ports, brought to what it still has (§4.9: never widened).
            pinned = None if why is not None else pinned_ports(service)
            if pinned is not None and record_count(pinned) > MAX_PORT_RECORDS:
                why, pinned = _OVER_LIMIT, None
            kept = 0 if why is not None else len(pinned or service.ingress or ())
            condition = invalid_selector(
                outcome.error or outcome.reason, kept=kept, generation=service.generation
            )
            changed = why is not None or condition.differs(service.serving)
            entry, _ = condition.written(service.serving, now)
            if pinned is not None:
                self._pin_ports(key, service, pinned, entry)
                return None
            self._withdraw(key, service, why, entry if changed else None)
            return None
        desired = outcome.ingress
        assert desired is not None
        # Each entry records the ports it is published for (per-port incumbency, §4.9).
        ports = port_key(service) if desired else ()
        with self._lock:
            self._errors.pop(key, None)
        wrote = False
        stored, stored_ports, stored_condition = self._stored(key, service)
        message = self._messages.message(desired, snap.nodes) if desired else ""
        condition = serving(outcome, message, generation=service.generation)
        ingress_changed = status_differs(desired, ports, stored, stored_ports)
        if ingress_changed or condition.differs(stored_condition):
            if not self._write(
                key,
                namespace,
                name,
                service.resource_version,
                outcome,
                ports=ports,
                condition=condition.written(stored_condition, now),
                with_ingress=ingress_changed,
            ):
                return None
            # Events accompany a change of the ingress only: a condition written alone
            # (our first term after an upgrade, a new generation) says nothing new.
            wrote = ingress_changed
        waiting = self._waiting_until(service, outcome, published=bool(stored), now=now)
        self._report(
            namespace,
            name,
            outcome,
            wrote=wrote,
            uid=service.uid,
            waiting=waiting,
            load_balancer_class=service.load_balancer_class,
        )
        self.states.record(
            key,
            metrics.ASSIGNED if outcome.ingress else metrics.PENDING,
            (UNHEALTHY if outcome.all_unhealthy_note else "") if outcome.ingress else outcome.code,
            selected=outcome.selected,
            hidden=outcome.hidden,
            unhealthy=outcome.unhealthy,
        )
        rechecks = [at for at in (outcome.recheck_at, waiting) if at is not None]
        if not rechecks:
            return None
        return max(min(rechecks) - now, 0.0)

    def _waiting_until(
        self, service: ServiceView, outcome: Outcome, *, published: bool, now: float
    ) -> float | None:
        """The end (epoch seconds) of the grace a new ``externalTrafficPolicy: Local``
        Service gets for its first ready endpoint (:data:`ENDPOINT_GRACE_SECONDS` after
        its ``creationTimestamp``), while it applies; else ``None``.

        It applies while the outcome is empty for ``NoReadyEndpoint`` alone, nothing is
        published (``published``: the stored ingress holds an address) and this term
        said nothing else about the Service's status: a Service that had addresses and
        lost its endpoints (scaled to 0) gets the ``NoEligibleNodes`` Warning at once,
        and a Warning is never followed by a step back to Normal."""
        if outcome.ingress or outcome.code != NO_READY_ENDPOINT or published:
            return None
        if service.created is None or now >= service.created + ENDPOINT_GRACE_SECONDS:
            return None
        said = self._recorder.last_said(service.namespace, service.name, STATUS_SLOT)
        if said is not None and said.reason != WAITING_FOR_ENDPOINTS:
            return None
        return service.created + ENDPOINT_GRACE_SECONDS

    def _stored(
        self, key: str, service: ServiceView
    ) -> tuple[tuple[Mapping[str, Any], ...] | None, PortRecord | None, StoredCondition | None]:
        """The ingress the API server holds as far as we know: what we last wrote while the
        cache still shows a version older than that write (the version we wrote over, or
        the echo of one of our earlier writes: :class:`_Written`), else the cached value.
        Comparing with the cache alone would lose an update when a later change wants the
        old value back before the echo arrives, and would write again when the echo of
        an earlier write of ours arrives after a later write (a watch that reconnects
        after an API server restart delivers them late). Returns the entries, the ports
        they share (:attr:`~app.core.views.ServiceView.ingress_ports`) and our condition."""
        with self._lock:
            written = self._written.get(key)
        if written is not None and service.resource_version in written.older:
            return written.ingress, written.ports, written.condition
        return service.ingress, service.ingress_ports, service.serving

    def _write(
        self,
        key: str,
        namespace: str,
        name: str,
        version: str | None,
        selection: Outcome,
        *,
        ports: PortRecord = (),
        condition: tuple[dict[str, Any], StoredCondition] | None = None,
        with_ingress: bool = True,
    ) -> bool:
        """PATCH the ingress of ``selection`` recording ``ports`` (unless ``with_ingress``
        is false: it is stored already) and, with ``condition`` (our ``status.conditions``
        item and what it reads back as, :meth:`~app.core.conditions.Serving.written`), our
        condition. False: not written (no longer the leader, or the Service is gone)."""
        assert selection.ingress is not None
        if not self._is_leader():
            return False  # lost the Lease since the key was taken: no write, ever
        entry, stored = condition if condition is not None else (None, None)
        # Recorded before the request: the watch echo can be handled before the response.
        with self._lock:
            previous = self._written.get(key)
            record = _Written.after(
                previous, over=version, ingress=selection.ingress, ports=ports, condition=stored
            )
            self._written[key] = record
        try:
            answered = self._api.patch_service_status(
                namespace=namespace,
                name=name,
                patch=status_patch(selection.ingress if with_ingress else None, ports, entry),
            )
        except ApiError as err:
            with self._lock:
                if previous is None:
                    self._written.pop(key, None)
                else:
                    self._written[key] = previous
            self._write_failed(key, err)
            if err.status == 404:
                return False
            raise
        if answered is not None:
            with self._lock:
                if self._written.get(key) is record:
                    record.answered = answered
        metrics.STATUS_WRITTEN.inc()
        log_event(
            LOG,
            "status.loadBalancer.ingress written",
            service=key,
            ingress=[entry["ip"] for entry in selection.ingress],
            reason=selection.reason,
            condition=None if entry is None else f"{entry['status']}/{entry['reason']}",
        )
        return True

    def _report(
        self,
        namespace: str,
        name: str,
        outcome: Outcome,
        *,
        wrote: bool,
        uid: str,
        waiting: float | None,
        load_balancer_class: str | None = None,
    ) -> None:
        """Say the outcome (docs/design.md §5). Normal Events are informational and
        accompany a status write only (so a restart of a synced cluster says nothing):
        ``IPsAssigned``, and beside it ``ExternalIPPreferred``, Cilium's documented
        preference at work. Warnings need an operator: ``NoEligibleNodes`` says why a
        Service stays pending even when nothing is written, except while a new Local
        Service waits for its first ready endpoint (``waiting``: the end of that grace),
        which is the Normal ``WaitingForEndpoints``."""
        assert outcome.ingress is not None
        if outcome.ingress:
            ips = ", ".join(entry["ip"] for entry in outcome.ingress)
            event = ServiceEvent(NORMAL, "IPsAssigned", "UpdateStatus", f"Assigned IPs: {ips}")
        elif outcome.port_note is not None or outcome.code in POOL_CODES:
            # Every address lost to port ownership (§4.9), or refused by the
            # NodeAddressPools (§4.13): the Warning's reason is that code.
            note = outcome.empty_note or outcome.reason
            event = ServiceEvent(WARNING, outcome.code, "SelectNodes", note)
        elif waiting is not None:
            note = outcome.empty_note or outcome.reason
            event = ServiceEvent(
                NORMAL,
                WAITING_FOR_ENDPOINTS,
                "SelectNodes",
                f"Waiting for a ready endpoint of this new Service (NoEligibleNodes Warning if"
                f" none is ready {ENDPOINT_GRACE_SECONDS:.0f} s after its creation): {note}",
            )
        else:
            note = outcome.empty_note or outcome.reason
            event = ServiceEvent(WARNING, "NoEligibleNodes", "SelectNodes", note)
        self._recorder.emit(
            namespace=namespace,
            name=name,
            event=event,
            record_only=not wrote and event.reason == "IPsAssigned",
            uid=uid,
        )
        port_note = (
            f"{len(outcome.ingress)} address(es) published; not published: {outcome.port_note}"
            if outcome.port_note is not None and outcome.ingress
            else None
        )
        self._say(namespace, name, slot=PORT_SLOT, event=_warning(PORT_IN_USE, port_note), uid=uid)
        self._say(
            namespace,
            name,
            slot=EXTERNAL_IP_SLOT,
            event=_normal(EXTERNAL_IP_PREFERRED, outcome.hidden_note),
            uid=uid,
            record_only=not wrote,
        )
        self._say(
            namespace,
            name,
            slot=HEALTH_SLOT,
            event=(
                _warning(ALL_NODES_UNHEALTHY, outcome.all_unhealthy_note)
                if outcome.all_unhealthy_note
                else _normal("NodesUnhealthy", outcome.unhealthy_note)
            ),
            uid=uid,
            record_only=not wrote,
        )
        hazard = self._kube_proxy_hazard(load_balancer_class) if outcome.ingress else None
        if outcome.ingress and hazard is None:
            # The mode is one for the whole process and read once, on its own thread: not
            # known yet, or no hazard. Nothing about this Service ended, so the slot is
            # not observed (a restart's first reconciles may run before the read).
            self._recorder.clear(namespace, name, KUBE_PROXY_SLOT, observed=False)
            return
        self._say(
            namespace,
            name,
            slot=KUBE_PROXY_SLOT,
            event=None if hazard is None else _warning(hazard.reason, hazard.message),
            uid=uid,
        )

    def _say(
        self,
        namespace: str,
        name: str,
        *,
        slot: str,
        event: ServiceEvent | None,
        uid: str,
        record_only: bool = False,
    ) -> None:
        """``event`` in the recorder ``slot`` of the Service (``record_only``: remembered
        as said, not sent), or, with ``event`` ``None``, the slot cleared (the condition
        no longer holds)."""
        if event is None:
            self._recorder.clear(namespace, name, slot)
            return
        self._recorder.emit(
            namespace=namespace,
            name=name,
            event=event,
            slot=slot,
            uid=uid,
            record_only=record_only,
        )

    def _invalid_selector(
        self, key: str, namespace: str, name: str, outcome: Outcome, service: ServiceView
    ) -> None:
        error = outcome.error or outcome.reason
        self.states.record(key, metrics.INVALID_SELECTOR)
        with self._lock:
            new = self._errors.get(key) != error
            self._errors[key] = error
        if new:
            log_event(LOG, "invalid node selector", level=logging.WARNING, service=key, error=error)
        self._recorder.clear(namespace, name, EXTERNAL_IP_SLOT)
        self._recorder.clear(namespace, name, PORT_SLOT)
        self._recorder.clear(namespace, name, KUBE_PROXY_SLOT)
        self._recorder.emit(
            namespace=namespace,
            name=name,
            event=ServiceEvent(
                WARNING,
                "InvalidNodeSelector",
                "SelectNodes",
                invalid_selector_note(error, service.match_node_labels),
            ),
            uid=service.uid,
        )

    def _outside_pool(self, service: ServiceView, snap: Snapshot) -> str | None:
        """Why the stored ingress of a Service whose selector does not parse goes under
        NodeAddressPools (docs/design.md §4.13): some of it is on nodes outside its pool."""
        outside = self.decider.outside_pool(service, snap)
        if not outside:
            return None
        pool = self.decider.choice(service, snap).pool
        return (
            f"{name_list(sorted(outside))} are on nodes outside NodeAddressPool"
            f" {pool.name if pool else ''}, and its node selector does not parse"
        )

    def _taken(self, service: ServiceView, snap: Snapshot) -> str | None:
        """Why the stored ingress of a Service whose selector does not parse goes: port
        ownership (docs/design.md §4.9) gives some of its stored addresses to another
        holder of one of its ports (a host-network or hostPort Pod, a node port, a
        reserved port, another Service's ``externalIPs``...). §4.1 keeps such a Service's
        stored status as Cilium does, but only while it still owns what it publishes:
        a frozen status must not take a port its author could not take by publishing."""
        stored = self.decider.candidates(service, snap)
        if not stored:
            return None
        owned = self.decider.ownership(service, stored, snap)
        if not owned.lost:
            return None
        return f"{owned.note()}; its node selector does not parse, so it is not decided again"

    def _withdraw(
        self,
        key: str,
        service: ServiceView,
        why: str | None,
        condition: Mapping[str, Any] | None = None,
    ) -> None:
        """Clear the stored ingress of a Service that is not decided (not managed, or a
        selector that does not parse) when ``why`` says it must go (:func:`
        app.core.ports.stale_ingress`, docs/design.md §3, §4.9): one status write, a log
        line and a Warning Event ``StaleIngressWithdrawn``. ``condition``: our
        ``status.conditions`` item to write in that write (or alone, without ``why``):
        :data:`~app.core.conditions.DELETE` for a Service that is ours no more, the
        ``InvalidNodeSelector`` condition for one whose selector does not parse. Errors
        propagate as a write's do (the worker retries with backoff)."""
        if (why is None and condition is None) or not self._is_leader():
            return
        namespace, name = service.namespace, service.name
        ingress = () if why is not None else None
        patch = status_patch(ingress, condition=condition)
        self._api.patch_service_status(namespace=namespace, name=name, patch=patch)
        if why is None:
            reason = (condition or {}).get("reason", "removed")
            log_event(LOG, "NodesServing condition written", service=key, reason=reason)
            return
        log_event(LOG, "stale ingress withdrawn", level=logging.WARNING, service=key, why=why)
        self._recorder.emit(
            namespace=namespace,
            name=name,
            event=ServiceEvent(
                WARNING,
                "StaleIngressWithdrawn",
                "SelectNodes",
                elide_bytes(f"node addresses withdrawn: {why}", NOTE_LIMIT_BYTES),
            ),
            uid=service.uid,
        )

    def _pin_ports(
        self,
        key: str,
        service: ServiceView,
        ingress: Sequence[Mapping[str, Any]],
        condition: Mapping[str, Any],
    ) -> None:
        """Write ``ingress`` (:func:`app.core.ports.pinned_ports`: the stored entries,
        each recording the Service's ports it may still claim there) and our
        ``condition`` for a Service whose selector does not parse, with the Service's
        ``metadata.resourceVersion`` as a precondition: the entries come from the cache,
        so a status changed since is never written over (409 Conflict; the worker retries
        with backoff, by which time the newer version is cached). Errors propagate as a
        write's do, counted and logged as one; a 404 (deleted meanwhile) is dropped."""
        if not self._is_leader():
            return
        patch = status_patch(ingress, condition=condition)
        if service.resource_version:
            patch["metadata"] = {"resourceVersion": service.resource_version}
        try:
            self._api.patch_service_status(
                namespace=service.namespace, name=service.name, patch=patch
            )
        except ApiError as err:
            self._write_failed(key, err)
            if err.status == 404:  # deleted meanwhile: its deletion comes by the watch
                return
            raise
        metrics.STATUS_WRITTEN.inc()
        log_event(
            LOG,
            "ports recorded in a kept ingress",
            service=key,
            ports=[f"{port}/{protocol}" for port, protocol, _ in port_key(service)],
            why="its node selector does not parse: an entry recording no ports, or a port"
            " the Service dropped, would count for a port added later",
        )

    @staticmethod
    def _write_failed(key: str, err: ApiError) -> None:
        """Count a failed status write of Service ``key`` (``not_found`` for a 404, the
        Service gone; ``conflict`` for a 409; else ``error``) and log the ones the worker
        retries."""
        if err.status == 404:
            metrics.STATUS_WRITES.labels("not_found").inc()
            return
        metrics.STATUS_WRITES.labels("conflict" if err.status == 409 else "error").inc()
        log_event(
            LOG,
            "status write failed, will retry",
            level=logging.WARNING,
            service=key,
            status=err.status,
            error=err.reason,
        )

    def forget(self, key: str) -> None:
        """Drop what is remembered about Service ``key`` (``namespace/name``): the last
        write, the last selector error and the last Event. Called when the Service is
        reconciled after its deletion and when the cache reports its deletion (on every
        replica, leading or not: nothing else would ever drop it)."""
        namespace, _, name = key.partition("/")
        self._forget(key, namespace, name)

    def reset(self) -> None:
        """Drop what is remembered about every Service; called when a leadership term
        starts, so state from an earlier term (another replica wrote and emitted in
        between) neither skips a write check nor suppresses an Event."""
        with self._lock:
            self._written.clear()
            self._errors.clear()
        self.states.reset()
        self._recorder.reset()

    def _forget(self, key: str, namespace: str, name: str) -> None:
        with self._lock:
            self._written.pop(key, None)
            self._errors.pop(key, None)
        self.decider.forget(namespace, name)
        self.states.forget(key)
        self._recorder.forget(namespace, name)
