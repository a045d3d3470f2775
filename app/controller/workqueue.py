"""A deduplicating, rate-limited work queue of Service keys (client-go ``workqueue`` semantics).

- A key is queued at most once. A key added while a worker processes it is processed again
  after :meth:`WorkQueue.done`, never concurrently (client-go ``Type``'s dirty/processing sets).
- :meth:`WorkQueue.add_rate_limited` re-adds after a per-key exponential backoff
  (``ItemExponentialFailureRateLimiter`` defaults: 5 ms doubling up to 1000 s);
  :meth:`WorkQueue.forget` resets it after a success.
- :meth:`WorkQueue.add_after` re-adds after a delay (``DelayingInterface``); when a key is
  waiting twice, the earlier time wins.

Time comes from an injectable monotonic ``clock`` so tests drive it by hand.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from app.telemetry import metrics

Clock = Callable[[], float]


class WorkQueue:
    """Thread-safe queue of string keys; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        name: str = "service",
        clock: Clock = time.monotonic,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
    ) -> None:
        self._name = name
        self._clock = clock
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._cond = threading.Condition()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._waiting: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._shutting_down = False
        self._depth = metrics.WORKQUEUE_DEPTH.labels(name)
        self._adds = metrics.WORKQUEUE_ADDS.labels(name)
        self._retries = metrics.WORKQUEUE_RETRIES.labels(name)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def add(self, key: str) -> None:
        """Queue ``key`` now unless it is already queued (dedup) or the queue is shut down."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` once ``delay`` seconds have passed on the clock (``<= 0``: now)."""
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add_locked(key)
                return
            due = self._clock() + delay
            if key in self._waiting and self._waiting[key] <= due:
                return
            self._waiting[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: str, *, at_least: float = 0.0) -> float:
        """Re-queue ``key`` after its backoff (5 ms · 2^failures), or after ``at_least``
        seconds if longer (the API server's ``Retry-After``), capped at ``max_delay``;
        return the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(max(self._base_delay * 2.0**failures, at_least), self._max_delay)
        self._retries.inc()
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset ``key``'s failure count (call after a successful reconcile)."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        """How many rate-limited re-adds ``key`` has had since its last :meth:`forget`
        (client-go's ``RateLimitingInterface.NumRequeues``): the controller logs it with
        each failed reconcile."""
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> str | None:
        """Take the next key, waiting up to ``timeout`` seconds (``None``: until shutdown).

        Returns ``None`` on timeout or once the queue is shut down and drained of nothing
        more to hand out. The caller must call :meth:`done` with the key afterwards.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due_locked()
                if self._queue and not self._shutting_down:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    self._depth.set(len(self._queue))
                    return key
                if self._shutting_down:
                    return None
                now = self._clock()
                wait: float | None = None if deadline is None else deadline - now
                if wait is not None and wait <= 0:
                    return None
                if self._heap:
                    until_due = max(self._heap[0][0] - now, 0.0)
                    wait = until_due if wait is None else min(wait, until_due)
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        """Mark ``key`` processed; if it was added meanwhile, queue it again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._depth.set(len(self._queue))
                self._cond.notify()

    def shut_down(self) -> None:
        """Stop handing out keys; blocked :meth:`get` calls return ``None``."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def _add_locked(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._adds.inc()
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._depth.set(len(self._queue))
        self._cond.notify()

    def _promote_due_locked(self) -> None:
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) == due:
                del self._waiting[key]
                self._add_locked(key)
