"""A NodeAddressPool's ``Accepted`` condition, written by the Lease holder (design §4.13).

``status.conditions`` of a pool holds one ``metav1.Condition`` of type
:data:`~app.core.pools.ACCEPTED`: ``True``, reason :data:`VALID`, while
:func:`app.core.pools.pool_from_object` can use the spec; ``False``, reason
:data:`INVALID_SPEC`, message its error (naming the field), while it cannot (the pool then
applies to no Service: a label value the schema cannot check, a pool written before the
schema). ``observedGeneration`` is the pool's ``metadata.generation``;
``lastTransitionTime`` moves only when ``status`` flips (API conventions, "Typical status
properties"): :class:`app.core.conditions.Serving` builds and compares it, as for a
Service's condition.

Who writes, and when:

- only the Lease holder (``is_leader``), and only with the reconciler on (the
  Controller builds no writer otherwise); a follower writes nothing;
- only when the condition differs from the stored one (the pool view keeps it,
  :attr:`app.core.pools.Pool.accepted`), so a pool that does not change costs no write,
  and a change costs one: a write not yet seen back is remembered, so updates of the pool
  before its echo arrives do not write it again;
- on its own thread, from its own work queue (the informer only adds keys): a failed write
  is retried with the queue's backoff (0.5 s doubling to 5 min, never sooner than the
  answer's ``Retry-After``); a 404 (pool or CRD gone) is dropped;
- each new term enqueues every pool, so a new holder rewrites what differs.

The write is a JSON merge patch of ``status`` (a custom resource takes no strategic merge
patch): it replaces ``status.conditions`` as a whole, with the stored conditions of other
types dropped; the pool's status is this controller's alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from app.controller.cache import ClusterCache
from app.controller.workqueue import WorkQueue
from app.core.conditions import FALSE, MESSAGE_LIMIT_BYTES, TRUE, Serving
from app.core.pools import ACCEPTED, Pool
from app.core.text import elide_bytes
from app.core.views import StoredCondition
from app.kube.client import ApiError, KubeAPI
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.poolstatus")

VALID = "Valid"
"""Reason of a ``True`` :data:`~app.core.pools.ACCEPTED` condition."""
INVALID_SPEC = "InvalidSpec"
"""Reason of a ``False`` one: the spec does not parse; the pool applies to no Service."""
VALID_MESSAGE = (
    "the spec is valid: the pool applies to the Services its spec.serviceAllocation admits"
)
QUEUE_NAME = "nodeaddresspool"
"""The work queue's ``name`` label (``workqueue_depth{name="nodeaddresspool"}``)."""
BASE_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 300.0
"""Backoff of a failed write: :data:`BASE_DELAY_SECONDS` doubling up to this."""


def accepted(pool: Pool) -> Serving:
    """The :data:`~app.core.pools.ACCEPTED` condition ``pool`` should carry (its
    ``observedGeneration`` the pool's ``metadata.generation``): ``True``/:data:`VALID`
    without ``error``, else ``False``/:data:`INVALID_SPEC` with the error, cut to
    :data:`~app.core.conditions.MESSAGE_LIMIT_BYTES`."""
    if pool.error is None:
        return Serving(TRUE, VALID, VALID_MESSAGE, pool.generation)
    message = f"{pool.error}; the pool applies to no Service until it is fixed"
    return Serving(FALSE, INVALID_SPEC, elide_bytes(message, MESSAGE_LIMIT_BYTES), pool.generation)


def status_patch(
    condition: Serving, stored: StoredCondition | None, now: float
) -> tuple[dict[str, Any], StoredCondition]:
    """The JSON merge patch that sets ``status.conditions`` to ``[condition]`` (its
    ``lastTransitionTime`` the stored one while ``status`` stays, else ``now``, epoch
    seconds; :meth:`~app.core.conditions.Serving.written`), and what it reads back as."""
    item, read_back = condition.written(stored, now)
    # Serving writes a Service's type; the list is replaced whole, so no null is sent.
    item = {key: value for key, value in item.items() if value is not None}
    item["type"] = ACCEPTED
    return {"status": {"conditions": [item]}}, read_back


class PoolStatusWriter:
    """Writes :func:`accepted` on every pool of ``cache`` while ``is_leader()`` (module
    docstring). :meth:`touch` (informer thread) and :meth:`term_started` (leader-election
    thread) only add keys; the thread :meth:`start` makes writes. Thread-safe."""

    def __init__(
        self,
        *,
        cache: ClusterCache,
        api: KubeAPI,
        is_leader: Callable[[], bool],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self._api = api
        self._is_leader = is_leader
        self._wall = wall_clock
        self.queue = WorkQueue(
            name=QUEUE_NAME, base_delay=BASE_DELAY_SECONDS, max_delay=MAX_DELAY_SECONDS
        )
        self._lock = threading.Lock()
        self._sent: dict[str, StoredCondition] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the writer thread (returns at once)."""
        self._thread = threading.Thread(target=self._run, name="pool-status", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop taking keys and wait up to ``timeout`` seconds for the thread (a write in
        flight ends within the client's request timeout)."""
        self._stopping.set()
        self.queue.shut_down()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """True while the writer thread runs (or was never started)."""
        return self._thread is None or self._thread.is_alive()

    def touch(self, keys: Iterable[str]) -> None:
        """The informer stored or removed these pools: check them, while leading."""
        if self._is_leader():
            for key in keys:
                self.queue.add(key)

    def term_started(self) -> None:
        """A new term: forget the writes not seen back and check every pool."""
        with self._lock:
            self._sent.clear()
        for pool in self._cache.pool_views():
            self.queue.add(pool.name)

    def _run(self) -> None:
        while not self._stopping.is_set():
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if self._is_leader():
                    self.sync(key)
                self.queue.forget(key)
            except Exception as err:
                wait = err.retry_after if isinstance(err, ApiError) else None
                delay = self.queue.add_rate_limited(key, at_least=wait or 0.0)
                if not isinstance(err, ApiError):
                    LOG.exception("pool status write failed", extra={"fields": {"pool": key}})
                log_event(
                    LOG,
                    "NodeAddressPool status write failed, will retry",
                    level=logging.WARNING,
                    pool=key,
                    error=str(err),
                    retry_in_seconds=delay,
                )
            finally:
                self.queue.done(key)

    def sync(self, key: str) -> bool:
        """Write pool ``key``'s condition if it differs from the stored one and from the
        write last sent and not seen back yet; True when written.

        Raises:
            ApiError: the write failed (other than 404: the pool is gone, nothing to do).
        """
        pool: Pool | None = self._cache.get("nodeaddresspools", key)
        if pool is None:
            with self._lock:
                self._sent.pop(key, None)
            return False
        condition = accepted(pool)
        with self._lock:
            sent = self._sent.get(key)
            if not condition.differs(pool.accepted):
                self._sent.pop(key, None)  # stored already: a write sent is seen back
                return False
            if sent is not None and not condition.differs(sent):
                return False  # the same write is on its way back
        patch, read_back = status_patch(condition, pool.accepted, self._wall())
        with self._lock:  # before the request: the echo may come before the answer
            self._sent[key] = read_back
        try:
            self._api.patch_pool_status(name=key, patch=patch)
        except ApiError as err:
            with self._lock:
                self._sent.pop(key, None)
            if err.status == 404:
                return False
            raise
        log_event(
            LOG,
            "NodeAddressPool condition written",
            pool=key,
            condition=f"{ACCEPTED}={condition.status}/{condition.reason}",
            observedGeneration=condition.observed_generation,
        )
        return True
