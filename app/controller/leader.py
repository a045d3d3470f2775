"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

The ``kubernetes`` package's own ``leaderelection`` (37.x has a LeaseLock) was not used: it
takes whole seconds, builds its API object from the global default client, never releases
the Lease on shutdown (no ``ReleaseOnCancel``), does not count ``leaseTransitions``, cannot be
stopped (its loops ``time.sleep`` forever) and writes naive local timestamps. This module is
the small correct subset of client-go ``tools/leaderelection``:

- ``tryAcquireOrRenew``: read the Lease (create it when absent); a Lease held by another
  identity is taken only once its record has not changed for ``leaseDurationSeconds`` of
  *our* clock (no clock-skew trust in ``renewTime``); the update is a PUT carrying the read
  ``resourceVersion`` (optimistic concurrency, 409 = someone else won); ``acquireTime`` and
  ``renewTime`` are MicroTime; ``leaseTransitions`` grows on every change of holder.
- The leader renews every ``retry_period``; when no renew succeeded for ``renew_deadline`` it
  stops leading at once (:meth:`LeaderElector.is_leader` turns false by the clock even if a
  renew call hangs) and becomes a candidate again.
- :meth:`LeaderElector.stop` releases a held Lease like ``ReleaseOnCancel``: empty
  ``holderIdentity``, ``leaseDurationSeconds: 1``, so a standby takes over within a retry.
- The Lease's namespace does not exist (the create answers 404 NotFound, typically ``serve``
  run outside the cluster without creating ``node-ipam-lb``): one clear error naming the
  namespace and the ways out, retries with exponential backoff up to
  :data:`MISSING_NAMESPACE_MAX_BACKOFF` (it may be created later), and
  :meth:`LeaderElector.problem` says so, which the controller's liveness (``/healthz``)
  reports.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from app.controller.events import micro_time
from app.kube.client import ApiError, KubeAPI
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.leader")

MISSING_NAMESPACE_MAX_BACKOFF = 30.0
"""Longest wait (seconds) between Lease attempts while its namespace does not exist."""


class LeaderElector:
    """Campaigns for one Lease on a thread; calls ``on_started_leading``/``on_stopped_leading``
    (on that thread) when leadership is gained or lost. Durations are seconds."""

    def __init__(
        self,
        *,
        api: KubeAPI,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._wall = wall_clock
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._leading = False
        self._last_renew = -math.inf
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = -math.inf
        self._missing_namespace_attempts = 0
        self._release_on_stop = True
        self._held_after_stop = False

    def start(self) -> None:
        """Start campaigning on a daemon thread (returns at once)."""
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """True while we hold the Lease and the last successful renew is younger than the
        renew deadline (so a hung renew call cannot keep a stale leader writing)."""
        with self._lock:
            return self._leading and self._clock() - self._last_renew < self._renew_deadline

    def problem(self) -> str | None:
        """Why this replica cannot campaign at all, or ``None``. Today one cause: the Lease's
        namespace does not exist (its create answered 404 NotFound); cleared by the first
        attempt that gets past it. A sentence naming the namespace and the ways out."""
        with self._lock:
            missing = self._missing_namespace_attempts > 0
        return self._missing_namespace_message() if missing else None

    def retry_wait(self) -> float:
        """Seconds until the next attempt: ``retry_period`` (with client-go's 20% jitter when
        not leading); while the namespace is missing, doubling per failed attempt up to
        :data:`MISSING_NAMESPACE_MAX_BACKOFF`."""
        with self._lock:
            missing = self._missing_namespace_attempts
        wait = self._retry_period
        if missing:
            wait = min(wait * 2.0 ** (missing - 1), max(wait, MISSING_NAMESPACE_MAX_BACKOFF))
        if not self.is_leader():
            wait *= 1.0 + 0.2 * random.random()  # client-go JitterUntil spreads candidates
        return wait

    def run(self) -> None:
        """Thread body: acquire, renew, step down on a missed deadline, until stopped.
        An attempt that was still hanging when :meth:`stop` gave up waiting and that then
        took or renewed the Lease hands it back here (stop() already stepped down)."""
        while not self._stop.is_set():
            self.step()
            if self._stop.is_set():
                break
            self._stop.wait(self.retry_wait())
        with self._lock:
            late, self._held_after_stop = self._held_after_stop, False
        if late and self._release_on_stop:
            self._release()

    def stop(self, timeout: float = 5.0, *, release: bool = True) -> None:
        """Stop campaigning; if leading, step down and (``release``) hand the Lease back.
        ``release=False`` leaves the Lease to expire, as after a crash."""
        self._release_on_stop = release
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            was_leading = self._leading
        if was_leading:
            self._set_leading(False, why="stopping")
            if release:
                self._release()

    def step(self) -> bool:
        """One attempt to acquire or renew, then start or stop leading accordingly.
        Returns :meth:`is_leader` afterwards (tests drive this with fake clocks).

        A successful renew counts from the moment *before* the requests were sent, like
        client-go (which observes the time before ``tryAcquireOrRenew``): the ``renewTime``
        other replicas see is that moment too, so a slow answer must not stretch our own
        validity window past the one they assume.
        """
        started = self._clock()
        self._after_attempt(self.try_acquire_or_renew(), started=started)
        return self.is_leader()

    def try_acquire_or_renew(self) -> bool:
        """One client-go ``tryAcquireOrRenew``: True when we hold the Lease afterwards."""
        now = self._wall()
        try:
            lease = self._api.read_lease(namespace=self._namespace, name=self._name)
            if lease is None:
                record = self._record(acquire_time=micro_time(now), renew=now, transitions=0)
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": record,
                }
                try:
                    self._api.create_lease(namespace=self._namespace, body=body)
                except ApiError as err:
                    if err.status == 404:
                        self._namespace_missing(err)
                        return False
                    raise
                self._namespace_found()
                self._observe(record)
                return True
            self._namespace_found()
            spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
            assert isinstance(spec, dict)
            self._observe(spec)
            holder = spec.get("holderIdentity") or ""
            duration = spec.get("leaseDurationSeconds")
            if not isinstance(duration, int) or duration <= 0:
                duration = math.ceil(self._lease_duration)
            held_by_other = holder and holder != self.identity
            if held_by_other and self._observed_time + duration > self._clock():
                return False
            transitions = spec.get("leaseTransitions")
            transitions = transitions if isinstance(transitions, int) else 0
            if holder == self.identity:
                acquire = spec.get("acquireTime") or micro_time(now)
            else:
                acquire, transitions = micro_time(now), transitions + 1
            lease["spec"] = self._record(acquire_time=acquire, renew=now, transitions=transitions)
            self._api.replace_lease(namespace=self._namespace, name=self._name, body=lease)
            self._observe(lease["spec"])
            return True
        except ApiError as err:
            if err.status != 409:
                log_event(
                    LOG,
                    "lease request failed",
                    level=logging.WARNING,
                    error=str(err),
                    **{"retry-period-seconds": self._retry_period},
                )
            return False

    def _missing_namespace_message(self) -> str:
        return (
            f"cannot create Lease {self._namespace}/{self._name}: namespace"
            f" {self._namespace!r} not found; this replica cannot lead, so it writes no"
            " status, until the namespace exists (retrying with backoff up to"
            f" {MISSING_NAMESPACE_MAX_BACKOFF:g} s). Create the namespace (kubectl create"
            f" namespace {self._namespace}), or choose another with"
            " --leader-election-namespace, or run a single replica with --no-leader-elect"
        )

    def _namespace_missing(self, err: ApiError) -> None:
        with self._lock:
            self._missing_namespace_attempts += 1
            first = self._missing_namespace_attempts == 1
        if first:  # once per episode: the retries would repeat it every few seconds
            log_event(
                LOG,
                self._missing_namespace_message(),
                level=logging.ERROR,
                lease=f"{self._namespace}/{self._name}",
                error=str(err),
            )

    def _namespace_found(self) -> None:
        with self._lock:
            was_missing = self._missing_namespace_attempts > 0
            self._missing_namespace_attempts = 0
        if was_missing:
            log_event(LOG, "lease namespace now exists", lease=f"{self._namespace}/{self._name}")

    def _record(self, *, acquire_time: str, renew: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self._lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(renew),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: dict[str, Any]) -> None:
        if spec != self._observed_spec:
            self._observed_spec = dict(spec)
            self._observed_time = self._clock()

    def _after_attempt(self, succeeded: bool, *, started: float) -> None:
        """Start, keep, end or restart the term after one attempt.

        A term ends once no renew succeeded for ``renew_deadline``: :meth:`is_leader` turned
        false by the clock at that moment, even while a renew call was still hanging. When
        that late call then succeeds (kube-apiserver holds requests while etcd restarts)
        the replica holds the Lease again, but callers were told "not leader" meanwhile and
        dropped what they saw (the controller enqueues nothing while not leading and
        relies on the next term's full resync). So it is a *new* term: stopped, then
        started (at the first renew that leaves us valid by our own clock), and
        ``on_started_leading`` runs again. client-go never resumes a lapsed
        term either: ``renew`` giving up ends ``Run`` (``OnStoppedLeading``)."""
        with self._lock:  # same lock as is_leader(): any "False" it gave is seen here
            if self._stop.is_set():
                # stop() ran while this attempt hung: no term starts after it; run()
                # hands back a Lease the attempt took.
                self._held_after_stop = self._held_after_stop or succeeded
                return
            now = self._clock()
            lapsed = self._leading and now - self._last_renew >= self._renew_deadline
            if succeeded:
                self._last_renew = max(self._last_renew, started)
            # A renew that took longer than the deadline leaves us holding the Lease but
            # not valid by our own clock: lead from the next (prompt) renew on.
            valid = now - self._last_renew < self._renew_deadline
        if lapsed:
            self._set_leading(False)
        if succeeded and valid and not self._leading:
            self._set_leading(True)

    def _set_leading(self, leading: bool, *, why: str = "") -> None:
        with self._lock:
            if self._leading == leading:
                return
            self._leading = leading
        metrics.LEADER_STATUS.labels(self._name).set(1 if leading else 0)
        lost = not leading and why != "stopping"
        log_event(
            LOG,
            "leadership acquired" if leading else f"leadership {'lost' if lost else 'given up'}",
            level=logging.WARNING if lost else logging.INFO,
            lease=f"{self._namespace}/{self._name}",
            identity=self.identity,
        )
        (self._on_started if leading else self._on_stopped)()

    def _release(self) -> None:
        """client-go ``release()``: hand the Lease back if it is still ours."""
        try:
            lease = self._api.read_lease(namespace=self._namespace, name=self._name)
            spec = lease.get("spec") if lease is not None else None
            if not isinstance(spec, dict) or spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(self._wall())
            assert lease is not None
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": spec.get("leaseTransitions", 0),
            }
            self._api.replace_lease(namespace=self._namespace, name=self._name, body=lease)
            log_event(LOG, "lease released", lease=f"{self._namespace}/{self._name}")
        except ApiError as err:
            log_event(LOG, "releasing the lease failed", level=logging.WARNING, error=str(err))
