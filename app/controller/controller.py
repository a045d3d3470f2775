"""Wiring of the reconciler: informers → cache → event-to-key mapping → work queue → workers,
under leader election (docs/design.md §5).

Every replica runs the informers (admission and preview read the cache). Only the leader
enqueues and reconciles: worker threads exist on every replica but the queue is fed only
while leading, and each status write re-checks leadership. Keys are enqueued once the four
kinds (Nodes, Services, EndpointSlices, Pods that hold node ports) are synced; on that moment
and on every acquisition of the Lease, every Service is enqueued once (the queue
deduplicates).

Which keys an event enqueues is :mod:`app.controller.triggers`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from app.config import Settings, published
from app.controller.cache import Change, ClusterCache, service_key
from app.controller.events import EventRecorder
from app.controller.healthrecord import LeaseHealthRecord
from app.controller.informer import Informer
from app.controller.leader import LeaderElector
from app.controller.nodeprober import NodeHealthProber
from app.controller.poolstatus import PoolStatusWriter
from app.controller.reconciler import Reconciler
from app.controller.settingsrecord import SettingsPublisher
from app.controller.triggers import (
    services_for_endpoint_slice_changes,
    services_for_node_change,
    services_for_node_health,
)
from app.controller.workqueue import WorkQueue
from app.core import ciliumkpr
from app.core.hazards import KUBE_PROXY_IPVS, Hazard, concerning
from app.core.kubeproxy import CONFIG_MAP, ipvs_hazard, proxy_mode
from app.core.nodehealth import NO_HEALTH, HealthPolicy, HealthTable, HealthView, probe_targets
from app.core.nodeipam import is_managed
from app.core.pools import pool_from_object
from app.core.ports import held_ports, pod_ports, stored_vip_ips
from app.core.published import RECORD_SUFFIX, encode_settings
from app.core.views import (
    PodView,
    ServiceView,
    endpoint_slice_view,
    namespace_view,
    node_view,
    pod_view,
    service_view,
)
from app.kube.client import ApiError, Kind, KubeAPI, KubernetesAPI, pod_field_selector
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.controller")

RETRY_AFTER_RETRIES = 10
"""Retries of one reconcile whose write was answered with ``Retry-After`` (client-go
``rest.Request`` ``maxRetries``)."""
RETRY_AFTER_MAX_SECONDS = 60.0
"""Longest single wait on a ``Retry-After`` (API Priority and Fairness sends at most 60)."""
AGENT_PAGE_SIZE = 500
AGENT_PAGES = 20
"""The start-up List of the Pods of kube-system that finds Cilium's agents (docs/design.md
§4.12) reads at most this many pages of :data:`AGENT_PAGE_SIZE` Pods."""


def host_pod_view(obj: Mapping[str, Any], *, host_port_pods: bool = True) -> PodView | None:
    """:func:`app.core.views.pod_view` of a Pod that holds a node port, else ``None`` (the
    informer then keeps nothing of it, or drops what it kept): a Pod not bound, ended, or
    declaring neither a ``containerPort`` on the host network nor a ``hostPort`` blocks no
    address (docs/design.md §4.9), so only the Pods that do cost memory. With
    ``host_port_pods`` (the ``host-port-pods`` setting, docs/design.md §10) the informer
    lists every Pod and this is the only filter; without it the API server sends only
    ``hostNetwork: true`` Pods (``fieldSelector=spec.hostNetwork=true``) and this also
    keeps any other Pod out of the cache should a server send one anyway.

    Raises:
        ViewError: as :func:`~app.core.views.pod_view`.
    """
    view = pod_view(obj)
    if not view.holds_ports or not (host_port_pods or view.host_network):
        return None
    return view


class Controller:
    """The reconciler process part: ``start``/``stop``, ``ready``,
    ``healthy``, ``is_leader``; ``cache`` is read by the web layer.

    ``api`` replaces the client built from ``api_client`` (tests pass an in-memory one).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        api_client: Any,
        identity: str,
        api: KubeAPI | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self._selection = settings.selection()
        self.cache = ClusterCache(self._selection)
        self._own_api: KubernetesAPI | None = None  # closed by stop()
        if api is None:
            api = self._own_api = KubernetesAPI(
                api_client, request_timeout=settings.request_timeout_seconds
            )
        self._api: KubeAPI = api
        # serve --no-reconciler, or enable_node_ipam false (Cilium's enable-node-ipam switch:
        # serve --no-enable-node-ipam or NODE_IPAM_ENABLE_NODE_IPAM=false): watch, never write.
        self._writes = settings.reconciler and settings.enable_node_ipam
        self.queue = WorkQueue()
        self._lock = threading.Lock()
        self._managed: dict[str, ServiceView] = {}
        self._enqueued_after_sync = False
        self._term_enqueued = False
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []
        self._leadership_listeners: list[Callable[[], None]] = []
        self._started = False
        self._hazards: tuple[Hazard, ...] = ()
        self._kube_proxy_thread: threading.Thread | None = None
        # Status writes before Events (docs/design.md §5): the sender holds Events while
        # keys wait in the work queue, each at most events.DEFER_MAX_SECONDS.
        self.recorder = EventRecorder(
            api=self._api, identity=identity, clock=wall_clock, defer=self._keys_waiting
        )
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(
                api=self._api,
                namespace=settings.leader_election_namespace,
                name=settings.leader_election_id,
                identity=identity,
                lease_duration=settings.lease_duration_seconds,
                renew_deadline=settings.renew_deadline_seconds,
                retry_period=settings.retry_period_seconds,
                on_started_leading=self._on_started_leading,
                wall_clock=wall_clock,
            )
        # The record Lease (<leader-election-id>-node-health): the Lease holder's node-health
        # decision (§4.11) and, health checks on or off, its effective settings for the
        # live preview (§8), published once per term when they differ from the stored ones.
        self.record = LeaseHealthRecord(
            api=self._api,
            namespace=settings.leader_election_namespace,
            name=settings.leader_election_id + RECORD_SUFFIX,
            identity=identity,
            wall_clock=wall_clock,
        )
        self.settings_publisher = SettingsPublisher(
            record=self.record,
            text=encode_settings(published(settings)),
            is_leader=self.is_leader,
            retry_period=settings.retry_period_seconds,
            stopping=self._stopping,
        )
        # Health-checked nodes (docs/design.md §4.11): the prober thread runs on every
        # replica but probes only while this one holds the Lease.
        self.health: NodeHealthProber | None = None
        if settings.node_health_check:
            self.health = NodeHealthProber(
                table=HealthTable(
                    HealthPolicy(
                        failure_threshold=settings.node_health_check_failure_threshold,
                        success_threshold=settings.node_health_check_success_threshold,
                        max_unhealthy_fraction=settings.node_health_check_max_unhealthy_fraction,
                    )
                ),
                targets=lambda: probe_targets(
                    self.cache.nodes(), ignore_exclude_lb=self._selection.ignore_exclude_lb
                ),
                port=settings.node_health_check_port,
                period=settings.node_health_check_period_seconds,
                timeout=settings.node_health_check_timeout_seconds,
                is_leader=lambda: self._writes and self.is_leader() and self.cache.synced,
                on_change=self._on_health_change,
                record=self.record,
            )
        self.reconciler = Reconciler(
            cache=self.cache,
            api=self._api,
            recorder=self.recorder,
            settings=self._selection,
            is_leader=self.is_leader,
            wall_clock=wall_clock,
            states=metrics.ServiceStates(lambda: self._writes and self.is_leader()),
            kube_proxy_hazard=self.kube_proxy_hazard,
            health=self.health_view,
        )
        metrics.SERVICE_STATE_COLLECTOR.add(self.reconciler.states)
        # Each NodeAddressPool's Accepted condition (docs/design.md §4.13): the Lease
        # holder's, on a thread of its own fed by the pools' informer.
        self.pool_status = PoolStatusWriter(
            cache=self.cache,
            api=self._api,
            is_leader=lambda: self._writes and self.is_leader(),
            wall_clock=wall_clock,
        )
        annotation = self._selection.match_node_labels_annotation
        views: dict[Kind, Callable[..., Any]] = {
            "nodes": node_view,
            "services": partial(service_view, match_node_labels_annotation=annotation),
            "endpointslices": endpoint_slice_view,
            "pods": partial(host_pod_view, host_port_pods=settings.host_port_pods),
            "namespaces": namespace_view,
            "nodeaddresspools": pool_from_object,
        }
        self.informers = [
            Informer(
                kind=kind,
                api=self._api,
                cache=self.cache,
                to_view=views[kind],
                handler=self._on_changes,
                watch_timeout_seconds=settings.watch_timeout_seconds,
                field_selector=(
                    pod_field_selector(settings.host_port_pods) if kind == "pods" else None
                ),
                touched=self.pool_status.touch if kind == "nodeaddresspools" else None,
            )
            for kind in views
        ]

    def start(self) -> None:
        """Start informers, leader election and workers on daemon threads; returns at once.
        With ``settings.reconciler`` or ``enable_node_ipam`` false there are no workers and
        nothing is enqueued: the cache serves admission and preview, no status is written."""
        if self._started:
            return
        self._started = True
        log_event(
            LOG,
            "controller starting",
            identity=self.identity,
            **{"leader-elect": self.settings.leader_elect},
            workers=self.settings.workers,
        )
        # kube-proxy's mode and Cilium's kube-proxy replacement (docs/design.md §4.10,
        # §4.12): read once on a thread of their own, so a slow or refused request never
        # delays the informers or start().
        self._kube_proxy_thread = threading.Thread(
            target=self._detect_hazards, name="datapath-hazards", daemon=True
        )
        self._kube_proxy_thread.start()
        for informer in self.informers:
            informer.start()
        self.recorder.start()
        if self.health is not None:
            self.health.start()
        for index in range(self.settings.workers if self._writes else 0):
            thread = threading.Thread(target=self._work, name=f"reconcile-{index}", daemon=True)
            thread.start()
            self._workers.append(thread)
        if self._writes:
            self.pool_status.start()
        if self.elector is not None:
            self.elector.start()
        else:
            metrics.LEADER_STATUS.labels(self.settings.leader_election_id).set(1)
            self.settings_publisher.term_started()
            self.pool_status.term_started()

    def stop(self, timeout: float = 10.0, *, release: bool = True) -> None:
        """Stop workers (no write after this returns), informers, and release the Lease
        (``release=False`` leaves it to expire, as a crashed replica would: tests); then
        close the API client's kept-alive write connections."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self.queue.shut_down()
        for informer in self.informers:
            informer.stop()
        for thread in self._workers:
            thread.join(max(deadline - time.monotonic(), 0.0))
        self.pool_status.stop(max(deadline - time.monotonic(), 0.0))
        if self.health is not None:
            self.health.stop(max(min(deadline - time.monotonic(), 2.0), 0.1))
        self.settings_publisher.join(max(min(deadline - time.monotonic(), 2.0), 0.1))
        # Events queued before the workers stopped are sent (bounded), then dropped.
        self.recorder.stop(min(max(deadline - time.monotonic(), 0.1), 2.0))
        if self.elector is not None:
            self.elector.stop(max(deadline - time.monotonic(), 0.1), release=release)
        for informer in self.informers:
            informer.join(max(deadline - time.monotonic(), 0.0))
        if self._kube_proxy_thread is not None:  # a few requests, bounded by their timeout
            self._kube_proxy_thread.join(max(deadline - time.monotonic(), 0.0))
        if self._own_api is not None:  # its kept-alive write connections (idle by now)
            self._own_api.close()
        log_event(LOG, "controller stopped", identity=self.identity)

    def ready(self) -> bool:
        """True once the first full list of Nodes, Services, EndpointSlices and Pods (those
        that hold node ports) is cached."""
        return self.cache.synced

    def healthy(self) -> tuple[bool, str]:
        """Liveness: ``(False, why)`` when a watch has had no event, bookmark or reconnect
        for longer than twice the watch timeout plus the read-timeout slack and maximal
        backoff (a hung connection), or an informer thread, a reconcile worker thread or
        the NodeAddressPool status thread has died (a dead worker reconciles nothing: on
        the leader, Services would silently stop converging), or leader election cannot
        even start because the Lease's namespace does not exist (:meth:`LeaderElector.problem`).

        Why liveness and not readiness for the missing namespace: readiness gates the
        webhook and preview traffic, which every replica serves correctly from its cache
        without the Lease; failing it on every replica would take admission down for a
        problem of the status writer alone. A failing ``/healthz`` is what an operator
        sees (``kubectl describe pod``: the probe failure with this reason and restarts;
        outside a cluster: ``curl /healthz``), like client-go's leader-election healthz
        adaptor, and a restart costs nothing (the process is stateless).
        """
        if self.elector is not None and (problem := self.elector.problem()) is not None:
            return False, problem
        running = self._started and not self._stopping.is_set()
        for worker in self._workers:
            if running and not worker.is_alive():
                return False, f"the reconcile worker thread {worker.name} has stopped"
        if running and not self.pool_status.alive():
            return False, "the NodeAddressPool status thread has stopped"
        if running and self.health is not None:
            ok, why = self.health.healthy()
            if not ok:
                return False, why
        bound = 2 * (self.settings.watch_timeout_seconds + 15) + 30
        for informer in self.informers:
            if running and not informer.alive():
                return False, f"the {informer.kind} informer thread has stopped"
            idle = informer.stuck_for()
            if idle > bound:
                return False, (
                    f"watch on {informer.kind} had no event, bookmark or reconnect"
                    f" for {idle:.0f}s (bound {bound}s)"
                )
        return True, "ok"

    def health_view(self) -> HealthView:
        """The nodes failing their health checks as last decided (docs/design.md §4.11);
        :data:`~app.core.nodehealth.NO_HEALTH` with ``node_health_check`` off."""
        return NO_HEALTH if self.health is None else self.health.table.view

    def _on_health_change(self, names: frozenset[str]) -> None:
        """The prober thread: the effective health of ``names`` changed; enqueue what a
        change of those Nodes would (:func:`~app.controller.triggers.services_for_node_health`)."""
        if not self._enqueued_after_sync:
            return
        with self._lock:
            managed_services = list(self._managed.values())
        self._enqueue(
            services_for_node_health(names=names, managed=managed_services, cache=self.cache)
        )

    def is_leader(self) -> bool:
        """True while this replica holds the Lease (always, with ``leader_elect`` false).
        Other leader-only duties (webhook certificates) use it too, so the Lease is
        campaigned for even with ``reconciler`` false."""
        if self._stopping.is_set():
            return False
        return self.elector is None or self.elector.is_leader()

    def kube_proxy_hazard(self, load_balancer_class: str | None) -> Hazard | None:
        """The datapath hazard a Service of ``load_balancer_class`` (``None``: none set)
        carries, :func:`app.core.hazards.concerning` the ones found: kube-proxy in ``ipvs``
        mode with ``ip_mode`` ``VIP`` (docs/design.md §4.10, every Service), Cilium's
        wildcard entries (§4.12, the classes they concern); ``None`` when none holds, also
        while they are being read and when unknown. The reconciler's Warning Event and
        the preview API's warning read it."""
        return concerning(self._hazards, load_balancer_class)

    def _detect_hazards(self) -> None:
        """The start-up reads of :meth:`_detect_kube_proxy` and :meth:`_detect_cilium`, one
        after the other on the thread ``start`` leaves them. Never raises."""
        self._detect_kube_proxy()
        self._detect_cilium()

    def _hazard_found(self, hazard: Hazard) -> None:
        """Keep ``hazard`` and reconcile every managed Service again, so those reconciled
        before the read came back get its Event (a Service reconciled later reads the
        hazard itself; the first sync enqueues every one)."""
        with self._lock:
            self._hazards = (*self._hazards, hazard)
            keys = list(self._managed) if self._enqueued_after_sync else []
        self._enqueue(keys)

    def _detect_kube_proxy(self) -> None:
        """Read kube-proxy's mode from kubeadm's ConfigMap once (docs/design.md §4.10): one
        INFO line with the mode or why it is unknown (no ConfigMap: not kubeadm; 403: no
        permission; another error); with the ipvs hazard one ERROR line with its text,
        the gauge ``node_ipam_lb_kube_proxy_ipvs_hazard`` at 1 (else 0), and every managed
        Service reconciled again so each gets its Event. Never raises."""
        namespace, name = CONFIG_MAP
        where = f"ConfigMap {namespace}/{name}"
        why: str | None = None
        mode: str | None = None
        try:
            obj = self._api.read_config_map(namespace=namespace, name=name)
        except ApiError as err:
            obj = None
            if err.status == 403:
                why = f"no permission to read {where} (RBAC: {err.reason})"
            else:
                why = f"reading {where} failed: {err}"
        except Exception as err:  # this thread must end quietly whatever happens
            obj = None
            why = f"reading {where} failed: {type(err).__name__}: {err}"
        if why is None and obj is None:
            why = f"no {where}: not a kubeadm cluster (k3s, RKE2 and managed ones use flags)"
        elif why is None:
            mode = proxy_mode(obj)
            if mode is None:
                why = f"{where} holds no KubeProxyConfiguration with a known mode in config.conf"
        if mode is None:
            log_event(LOG, "kube-proxy mode unknown", reason=why)
        else:
            log_event(LOG, "kube-proxy mode", mode=mode, source=where)
        hazard = ipvs_hazard(mode, self.settings.ip_mode)
        metrics.KUBE_PROXY_IPVS_HAZARD.set(0 if hazard is None else 1)
        if hazard is None:
            return
        # A setting under its flag name, as users set it (tests/test_user_messages.py).
        log_event(LOG, hazard, level=logging.ERROR, mode=mode, **{"ip-mode": self.settings.ip_mode})
        self._hazard_found(Hazard(KUBE_PROXY_IPVS, hazard))

    def _detect_cilium(self) -> None:
        """Read Cilium's configuration and release once (docs/design.md §4.12): the ConfigMap
        ``kube-system/cilium-config`` (``get``, the Role that reads kube-proxy's) and, when
        it says the agents load-balance traffic entering the nodes, the agent Pods' images
        (one List of the Pods of ``kube-system``, the cluster-wide Pod grant); then
        :func:`app.core.ciliumkpr.assess`. One INFO line with what was found or why it is
        unknown (no ConfigMap, 403, another error, garbage); with the hazard one ERROR line
        with its text, the gauge ``node_ipam_lb_cilium_wildcard_hazard`` at 1 (else 0),
        and every managed Service reconciled again. Never raises."""
        namespace, name = ciliumkpr.CONFIG_MAP
        where = f"ConfigMap {namespace}/{name}"
        images: list[str] | None = None
        images_error: str | None = None
        try:
            obj = self._api.read_config_map(namespace=namespace, name=name)
            config = ciliumkpr.read_config(obj)
            if not isinstance(config, str) and config.north_south:
                images, images_error = self._cilium_agent_images()
            assessment = ciliumkpr.assess(
                obj,
                images,
                load_balancer_class=self.settings.load_balancer_class,
                default_lb_service_ipam=self.settings.default_lb_service_ipam,
                images_error=images_error,
            )
        except ApiError as err:
            if err.status == 403:
                why = f"no permission to read {where} (RBAC: {err.reason})"
            else:
                why = f"reading {where} failed: {err}"
            assessment = ciliumkpr.Assessment(False, why)
        except Exception as err:  # this thread must end quietly whatever happens
            why = f"reading {where} failed: {type(err).__name__}: {err}"
            assessment = ciliumkpr.Assessment(False, why)
        if assessment.known:
            log_event(LOG, "cilium kube-proxy replacement", found=assessment.facts)
        else:
            log_event(LOG, "cilium kube-proxy replacement unknown", reason=assessment.facts)
        hazard = assessment.hazard
        metrics.CILIUM_WILDCARD_HAZARD.set(0 if hazard is None else 1)
        if hazard is None:
            return
        log_event(LOG, hazard.message, level=logging.ERROR, found=assessment.facts)
        self._hazard_found(hazard)

    def _cilium_agent_images(self) -> tuple[list[str] | None, str | None]:
        """The images of Cilium's agent Pods (:func:`app.core.ciliumkpr.agent_images`) from
        the List of the Pods of ``kube-system`` (at most :data:`AGENT_PAGES` pages of
        :data:`AGENT_PAGE_SIZE`), or ``None`` and why it failed. Never raises."""
        images: set[str] = set()
        token: str | None = None
        try:
            for _ in range(AGENT_PAGES):
                page = self._api.list_page(
                    "pods",
                    limit=AGENT_PAGE_SIZE,
                    continue_token=token,
                    field_selector=ciliumkpr.AGENT_FIELD_SELECTOR,
                )
                items = page.get("items")
                images.update(ciliumkpr.agent_images(items if isinstance(items, list) else []))
                meta = page.get("metadata")
                token = meta.get("continue") if isinstance(meta, Mapping) else None
                if not token:
                    break
        except ApiError as err:
            if err.status == 403:
                return None, f"no permission to list the Pods of kube-system (RBAC: {err.reason})"
            return None, f"listing the Pods of kube-system failed: {err}"
        return sorted(images), None

    def _keys_waiting(self) -> bool:
        """True while keys wait in the work queue (the Event sender's ``defer``)."""
        return len(self.queue) > 0

    def _enqueue(self, keys: Iterable[str]) -> None:
        # Called from the informer threads; the keys are consumed outside our lock
        # (computing them may take other locks).
        if self._writes and self._enqueued_after_sync and self.is_leader():
            for key in keys:
                self.queue.add(key)

    def on_started_leading(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (no arguments, on the leader-election thread, so it must
        return quickly) each time this replica becomes the Lease holder; an exception it
        raises is logged and ignored. Not called with ``leader_elect`` false (the replica
        leads from the start). Other leader-only duties use it to act at once rather than
        at their next tick (:meth:`app.web.certsync.CertSync.wake`)."""
        self._leadership_listeners.append(callback)

    def _on_started_leading(self) -> None:
        with self._lock:
            self._term_enqueued = False
        self.reconciler.reset()
        self._enqueue_all()
        self.settings_publisher.term_started()
        self.pool_status.term_started()
        if self.health is not None:  # probe now, not one period into the term
            self.health.wake()
        for callback in list(self._leadership_listeners):
            try:
                callback()
            except Exception as err:  # a listener must not break leader election
                LOG.exception("leadership listener failed: %s", err)

    def _enqueue_all(self) -> None:
        """Enqueue every Service once per leadership term, as soon as the caches are synced."""
        with self._lock:
            # _enqueued_after_sync, not cache.synced: until the first-sync step has run,
            # _enqueue drops changes, so a term must not count as enqueued before it.
            ready = self._writes and self._enqueued_after_sync and self.is_leader()
            if self._term_enqueued or not ready:
                return
            self._term_enqueued = True
        for service in self.cache.services():
            self.queue.add(service_key(service.namespace, service.name))

    def _on_changes(self, kind: Kind, changes: list[Change]) -> None:
        if kind == "services":
            self._track_managed(changes)
            self._enqueue(self._service_keys(changes))
        elif kind == "endpointslices":
            with self._lock:
                keys = services_for_endpoint_slice_changes(changes=changes, managed=self._managed)
                # A Local Service's candidates changed, or a Service's own backends (which
                # never block it): so may its rivals' ports (§4.9).
                rivals = [held_ports(self._managed[key]) for key in keys]
            self._enqueue([*keys, *(k for ports in rivals for k in self.cache.related(ports))])
        elif kind == "pods":
            self._enqueue(self._pod_keys(changes))
        elif kind in ("nodeaddresspools", "namespaces"):
            self._enqueue(self._pool_keys(kind, changes))
        elif self._enqueued_after_sync:
            with self._lock:
                managed_services = list(self._managed.values())
            for _, old, new in changes:
                self._enqueue(
                    services_for_node_change(
                        old=old, new=new, managed=managed_services, cache=self.cache
                    )
                )
        # Check and set under the lock: the informer threads of the last two kinds to sync
        # may both get here; only one may see the first sync.
        with self._lock:
            first_sync = not self._enqueued_after_sync and self.cache.synced
            if first_sync:
                self._enqueued_after_sync = True
        if first_sync:
            log_event(LOG, "caches synced", services=len(self.cache.services()))
            self._enqueue_all()

    def _pool_keys(self, kind: Kind, changes: list[Change]) -> list[str]:
        """The managed Services a change of NodeAddressPools or of namespaces' labels may
        decide differently (docs/design.md §4.13): every one for a pool change (a pool
        can take a Service from another, or refuse it); a namespace's own while pools
        exist. Invalid pools are logged here, the one place every replica sees them."""
        if kind == "nodeaddresspools":
            for key, _, new in changes:
                if new is not None and new.error is not None:
                    log_event(
                        LOG,
                        "NodeAddressPool is invalid: it applies to no Service",
                        level=logging.WARNING,
                        pool=key,
                        error=new.error,
                    )
            with self._lock:
                return list(self._managed)
        if not self.cache.pools():
            return []
        names = {key for key, old, new in changes if old != new}
        with self._lock:
            return [key for key, view in self._managed.items() if view.namespace in names]

    def _service_keys(self, changes: list[Change]) -> Iterator[str]:
        """The keys a batch of Service changes enqueues: each changed Service (not the echo
        of our own status write), and the managed Services that share a port with its old
        or new version (port ownership, docs/design.md §4.9: its ports, node ports,
        externalIPs or foreign ingress may take or free their addresses). Lazy: consumed
        only while leading and synced."""
        for key, old, new in changes:
            if new is not None and self.reconciler.is_own_write(old, new):
                # Our write took addresses away: the sharers of its ports may now win them
                # (a Service that publishes an address nowhere claims nothing there, §4.9).
                # One hop per write; a write that only adds addresses changes no decision.
                # An old version without ingress (a cold start: every echo) took nothing.
                if (
                    old is not None
                    and old.ingress
                    and old.ingress is not new.ingress
                    and set(stored_vip_ips(old)) - set(stored_vip_ips(new))
                ):
                    yield from self.cache.related(held_ports(new)) - {key}
                continue
            yield key
            ports = {p for view in (old, new) if view is not None for p in held_ports(view)}
            if ports:
                yield from self.cache.related(ports) - {key}

    def _pod_keys(self, changes: list[Change]) -> Iterator[str]:
        """The keys a batch of Pod changes (Pods that hold node ports) enqueues: the managed
        Services that have a port the old or new Pod holds (port ownership, docs/design.md
        §4.9: the Pod takes or frees those ports on its node's addresses). Lazy, like
        :meth:`_service_keys`: the port index is read only while leading and synced."""
        ports = {
            p for _, old, new in changes for view in (old, new) if view for p in pod_ports(view)
        }
        if ports:
            yield from self.cache.related(ports)

    def _track_managed(self, changes: list[Change]) -> None:
        with self._lock:
            states = self.reconciler.states
            for key, _, new in changes:
                if new is not None and is_managed(new, self._selection)[0]:
                    self._managed[key] = new
                    states.set_managed(key, True)
                else:
                    self._managed.pop(key, None)
                    states.set_managed(key, False)
            metrics.MANAGED_SERVICES.set(len(self._managed))
        # On every replica: a Service deleted while another replica leads is never
        # reconciled here, and its per-Service memory would otherwise stay forever.
        for key, _, new in changes:
            if new is None:
                self.reconciler.forget(key)

    def _work(self) -> None:
        while not self._stopping.is_set():
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if self.is_leader():
                    self._process(key)
            finally:
                self.queue.done(key)

    def _reconcile(self, key: str) -> float | None:
        """``reconciler.reconcile(key)``; a failure carrying ``Retry-After`` (a 429 from API
        Priority and Fairness, a 5xx) is retried in this worker after that many seconds
        (at most :data:`RETRY_AFTER_MAX_SECONDS` each), up to :data:`RETRY_AFTER_RETRIES`
        times, as client-go's ``rest.Request`` does (``maxRetries`` 10): the worker waits,
        so a throttled controller slows down instead of moving on to the next key, and
        the key's own backoff does not grow with every rejection."""
        for attempt in range(RETRY_AFTER_RETRIES + 1):
            try:
                return self.reconciler.reconcile(key)
            except ApiError as err:
                if (
                    err.retry_after is None
                    or attempt == RETRY_AFTER_RETRIES
                    or self._stopping.is_set()
                    or not self.is_leader()
                ):
                    raise
                self._stopping.wait(min(err.retry_after, RETRY_AFTER_MAX_SECONDS))
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _process(self, key: str) -> None:
        start = time.perf_counter()
        result = "success"
        try:
            delay = self._reconcile(key)
            self.queue.forget(key)
            if delay is not None:
                result = "requeue_after"
                self.queue.add_after(key, delay)
        except Exception as err:
            result = "error"
            metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
            # A 429 (API Priority and Fairness) or 5xx with Retry-After: not before then.
            wait = err.retry_after if isinstance(err, ApiError) else None
            delay = self.queue.add_rate_limited(key, at_least=wait or 0.0)
            if not isinstance(err, ApiError):
                LOG.exception("reconcile failed", extra={"fields": {"service": key}})
            log_event(
                LOG,
                "reconcile failed, requeued",
                level=logging.DEBUG,
                service=key,
                retry_in_seconds=delay,
                requeues=self.queue.num_requeues(key),
            )
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - start)
            metrics.RECONCILE_RESULTS[result].inc()
