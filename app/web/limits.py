"""Bounds on what requests may hold at once (docs/design.md §7.1): body bytes and review threads.

- :class:`BodyBudget`: a byte-weighted semaphore on the event loop. An admission request
  takes the bytes of its body beyond the first 64 KiB as they arrive (not what
  ``Content-Length`` declares: a stalled sender holds only what it sent) and gives them
  back once answered, so the large bodies being read, decoded and decided add up to at
  most ``capacity`` bytes whatever the mix, and ordinary reviews never wait behind them;
  a request that cannot grow its share within its deadline is answered 503 (the rest of
  its body stays unread in the socket).
- :class:`ReviewPools`: where admission decisions run, apart from the event loop and from
  the thread pool other routes use: ``light`` threads for ordinary reviews; for large
  bodies or long node selectors (at most :data:`HEAVY_QUEUE` queued or running) one
  ``heavy`` thread that hands decoding and the verdict to a worker *process*, so that a
  flood of those never queues an ordinary review, and C code that holds the GIL for a
  long time (``json.loads`` of a 6 MB body: ~0.3 s) never stalls ``/healthz``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")

LIGHT_THREADS = 2
"""Threads deciding ordinary reviews (2 cores per replica: more would only contend)."""
HEAVY_QUEUE = 4
"""Large reviews queued or running at most; more wait for a place with their body unread
(in the socket) and get 503 when their deadline passes first, instead of waiting longer
than the API server would (webhook ``timeoutSeconds``)."""
WORKER_TASKS = 64
"""The worker process is replaced after this many large reviews: a process that decoded a
6 MB body keeps most of that memory (allocator fragmentation), a new one starts small."""


class Overloaded(Exception):
    """No room for the request now; ``str(err)`` is the reason (HTTP 503)."""


class BodyBudget:
    """A byte-weighted semaphore for one event loop (not thread-safe; use it on the loop).

    ``acquire(n)`` succeeds as soon as ``n`` more bytes fit under ``capacity``; smaller
    requests may pass a larger one that waits (ordinary reviews are never queued behind
    a large one), and every wait is bounded by its timeout.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: Invalid value: {capacity}: must be at least 1")
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, weight: int, *, timeout: float) -> None:
        """Take ``weight`` bytes (at most ``capacity``), waiting up to ``timeout`` seconds.

        Raises:
            ValueError: ``weight`` exceeds ``capacity`` (it could never fit).
            Overloaded: not available within ``timeout``.
        """
        if weight > self.capacity:
            raise ValueError(f"weight: Invalid value: {weight}: exceeds {self.capacity}")
        if self.used + weight <= self.capacity:
            self.used += weight
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (weight, future)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except BaseException as err:
            if future.done() and not future.cancelled():
                self.release(weight)  # granted just as the wait ended: give it back
            else:
                future.cancel()
            if entry in self._waiters:
                self._waiters.remove(entry)
            if isinstance(err, TimeoutError):
                raise Overloaded(
                    f"admission bodies in progress hold {self.used} of {self.capacity} bytes"
                ) from err
            raise

    def release(self, weight: int) -> None:
        """Give back ``weight`` bytes and wake every waiter that fits now."""
        self.used -= weight
        for entry in list(self._waiters):
            needed, future = entry
            if future.done():
                self._waiters.remove(entry)
            elif self.used + needed <= self.capacity:
                self._waiters.remove(entry)
                self.used += needed
                future.set_result(None)


WORKER_NICENESS = 10
"""How much lower the review worker process's CPU priority is than the server's
(``nice``): large reviews are best effort, so when the cores are busy the kernel runs the
event loop (``/healthz``, ordinary reviews) first."""


def init_worker() -> None:
    """Initializer of the review worker process: ignore SIGINT, lower the CPU priority.

    Ctrl-C on ``serve`` sends SIGINT to the whole foreground process group; the worker
    would die with a ``KeyboardInterrupt`` traceback on stderr, amid the JSON logs. It is
    the server's to stop: :meth:`ReviewPools.shutdown` ends it, quietly. The priority is
    lowered by :data:`WORKER_NICENESS` (raising niceness needs no privilege).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(WORKER_NICENESS)


class Wakeup:
    """Coroutines waiting for something another coroutine frees (a review slot), woken all
    at once by :meth:`notify_all`; every call on the event loop's thread. Each wait makes
    its own future on the running loop, so one instance serves any loop."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    def __len__(self) -> int:
        return len(self._waiters)

    async def wait(self, timeout: float) -> None:
        """Return at the next :meth:`notify_all`.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
        """
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        finally:
            self._waiters.discard(waiter)

    def notify_all(self) -> None:
        """Wake every coroutine waiting now."""
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class ReviewPools:
    """The admission decision threads and worker process: created on first use, shut down
    with the app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._light: ThreadPoolExecutor | None = None
        self._heavy: ThreadPoolExecutor | None = None
        self._process: ProcessPoolExecutor | None = None

    def light(self) -> Executor:
        """The pool for ordinary reviews."""
        with self._lock:
            if self._light is None:
                self._light = ThreadPoolExecutor(LIGHT_THREADS, thread_name_prefix="review")
            return self._light

    def heavy(self) -> Executor:
        """The one-thread pool for large reviews (it waits on :meth:`apart`)."""
        with self._lock:
            if self._heavy is None:
                self._heavy = ThreadPoolExecutor(1, thread_name_prefix="review-heavy")
            return self._heavy

    def start_worker(self) -> None:
        """Start the worker process now (in the background), so that the first large
        review does not wait for it to start (~1 s)."""
        self._worker().submit(int)

    def _worker(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._process is None:
                self._process = ProcessPoolExecutor(
                    1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=init_worker,
                    max_tasks_per_child=WORKER_TASKS,
                )
            return self._process

    def apart(self, func: Callable[..., T], *args: Any, timeout: float) -> T:
        """``func(*args)`` in the worker process (``spawn``: the server has threads, so no
        ``fork``), waiting at most ``timeout`` seconds. ``func`` and ``args`` must pickle.

        Raises:
            Overloaded: the worker did not answer in time or died (a new one is started
                for the next call).
            Exception: whatever ``func`` raised.
        """
        process = self._worker()
        try:
            future = process.submit(func, *args)
        except BrokenProcessPool as err:
            self._replace(process)
            raise Overloaded("the review worker process stopped; starting a new one") from err
        try:
            return future.result(timeout)
        except TimeoutError as err:
            future.cancel()  # not started yet: never start it (a started one runs on)
            raise Overloaded(f"the review worker did not answer within {timeout:.1f} s") from err
        except BrokenProcessPool as err:
            self._replace(process)
            raise Overloaded("the review worker process stopped; starting a new one") from err

    def _replace(self, process: ProcessPoolExecutor) -> None:
        """Drop a broken worker pool; the next call starts a new one."""
        with self._lock:
            if self._process is process:
                self._process = None
        process.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Stop the pools and the worker (queued work is dropped; running work finishes)."""
        with self._lock:
            pools = (self._light, self._heavy, self._process)
            self._light, self._heavy, self._process = None, None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
