"""Node health checks, the shell: kube-proxy's ``/healthz`` on every Node (docs/design.md §4.11).

What: :class:`NodeHealthProber` runs one daemon thread (``node-health-prober``) with its own
asyncio event loop. Every ``period`` seconds it asks for the Nodes to probe (name → address),
sends one ``GET /healthz`` to each on kube-proxy's health port (10256), and records each
answer into a :class:`~app.core.nodehealth.HealthTable`, whose pure rule (failure / success
thresholds, the most-fail hold) decides which Nodes count as unhealthy; the names whose
effective state changed go to ``on_change`` (the controller re-selects what depends on
them). Only the Lease holder probes (``is_leader`` is asked at each round's start; a new
holder probes at its next round, or at once after :meth:`NodeHealthProber.wake`): on any
other replica each round just makes sure the table is empty, so a follower neither loads
the nodes nor keeps stale verdicts.

Why: a cloud load balancer stops sending to a node that fails its health check without
waiting for the Node object to say anything. KEP-3836 made kube-proxy's ``/healthz`` the
check for ``externalTrafficPolicy: Cluster``: it answers 200 when kube-proxy has synced its
rules within its health timeout and the node is eligible (not being deleted, no
``ToBeDeletedByClusterAutoscaler`` taint), else 503 with a JSON body (``{"lastUpdated": ...,
"currentTime": ..., "nodeEligible": false, "healthy": true, ...}``;
``pkg/proxy/healthcheck/proxy_health.go``); the body's two flags are quoted in the failure
detail when present.

How: one HTTP/1.1 request per connection (``Connection: close``: each node is another
host, so keep-alive would buy nothing and hold a descriptor per node), framed by ``h11``
(the HTTP/1.1 engine under httpx and uvicorn) over asyncio streams; at most 4 KiB of the
answer is read and the whole exchange is bounded by ``timeout``. A probe never raises: a
refused connection, a timeout, a reset, a non-HTTP answer are failures with a detail.

Costs: threads: 1 (addresses are IP literals: no resolver thread); connections: at most
``concurrency`` at once (one descriptor each); probes started: at most ``max_rate`` per
second, so with many Nodes a round lasts ``len(targets) / max_rate`` seconds and the
period stretches to that; memory: O(Nodes) for the table, O(``concurrency``) in flight
(at most that many probe tasks exist at once); CPU: linear in the Nodes probed, h11 over
asyncio streams rather than an HTTP client library, which costs several times as much per
probe when every Node is another host (``bench/bench_health.py``; figures in
bench/README.md §10). Only the Lease holder pays this.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import h11
import orjson

from app.core.nodehealth import HealthTable, HealthView
from app.telemetry import metrics
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.nodehealth")

KUBE_PROXY_HEALTHZ_PORT = 10256
"""kube-proxy's ``--healthz-bind-address`` port (``healthzBindAddress: 0.0.0.0:10256``)."""
MAX_RESPONSE_BYTES = 4096
"""The most of an answer a probe reads: kube-proxy's is ~250 bytes."""
USER_AGENT = "node-ipam-lb"
PACING_SLACK_SECONDS = 0.05
"""A probe may start this much ahead of its ``1 / max_rate`` slot: the loop wakes ~20 times a
second to start a burst (``max_rate`` x 50 ms: 25 at 500/s) instead of once per probe,
which cost twice the CPU (bench/bench_health.py at 5,000 Nodes: 831 µs per probe, 393 µs
with the bursts)."""
STALE_PERIODS = 3
""":meth:`NodeHealthProber.healthy` fails after this many effective periods (plus the
timeout) without progress."""


async def probe(ip: str, port: int, *, timeout: float, path: str = "/healthz") -> tuple[bool, str]:
    """One HTTP/1.1 ``GET`` of ``http://ip:port/path``: ``(ok, detail)``; ok iff HTTP 200.

    ``ip``: an IPv4 or IPv6 literal (never resolved: a name is a failure); ``port``: TCP
    port; ``timeout``: seconds for connect, request and status line together (a non-200's
    body is read only within what is left of it, for the hint). Sends ``Host`` (IPv6 in
    brackets), ``User-Agent: node-ipam-lb`` and ``Connection: close``; reads at most
    :data:`MAX_RESPONSE_BYTES` of the answer.

    ``detail`` is a short sentence naming the target, e.g. ``"GET
    http://10.0.0.1:10256/healthz: HTTP 503"`` (with kube-proxy's reason when its body
    gives one: ``"HTTP 503 (node not eligible: ...)"``), ``"...: connection refused"``,
    ``"...: no answer within 2s"``, ``"...: not HTTP (...)"``. Never raises (errors become
    failures), except :class:`asyncio.CancelledError` when the caller cancels it.
    """
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False, f"GET http://{ip}:{port}{path}: {ip!r} is not an IP address"
    host = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    target = f"GET http://{host}{path}"
    answer = _Answer()
    try:
        status, hint = await answer.exchange(str(address), port, host, path, timeout)
    except TimeoutError:
        if answer.first:
            return False, (
                f"{target}: no complete answer within {timeout:g}s (it began {answer.first!r})"
            )
        return False, f"{target}: no answer within {timeout:g}s"
    except ConnectionRefusedError:
        return False, f"{target}: connection refused"
    except _NotHTTP as err:
        return False, f"{target}: not HTTP ({err})"
    except h11.ProtocolError as err:  # our side: a path h11 refuses to send
        return False, f"{target}: {err}"
    except OSError as err:
        return False, f"{target}: {_os_error(err)}"
    except Exception as err:  # never raise (docstring); a bug here must not stop a round
        return False, f"{target}: {type(err).__name__}: {err}"
    if status == 200:
        return True, f"{target}: HTTP 200"
    return False, f"{target}: HTTP {status}{hint}"


class _NotHTTP(Exception):
    """The peer answered, but not with an HTTP/1.x status line and head within 4 KiB."""


class _Answer:
    """One exchange's reading state: ``received`` bytes so far (at most
    :data:`MAX_RESPONSE_BYTES`) and the ``first`` 32 (quoted when they are not HTTP)."""

    __slots__ = ("conn", "first", "received")

    def __init__(self) -> None:
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_BYTES)
        self.received = 0
        self.first = b""

    async def exchange(
        self, ip: str, port: int, host: str, path: str, timeout: float
    ) -> tuple[int, str]:
        """Connect, send, read the status: ``(status, hint)``; ``hint`` is what a
        non-200's kube-proxy body says (``" (node not eligible ...)"``) or ``""``.

        Raises:
            TimeoutError: no status line within ``timeout`` seconds.
            _NotHTTP: see :meth:`head`.
            OSError: connecting, sending or reading failed.
        """
        conn = self.conn
        request = conn.send(
            h11.Request(
                method="GET",
                target=path,
                headers=[("Host", host), ("User-Agent", USER_AGENT), ("Connection", "close")],
            )
        )
        request += conn.send(h11.EndOfMessage())
        deadline = asyncio.get_running_loop().time() + timeout
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout_at(deadline):
                reader, writer = await asyncio.open_connection(ip, port, limit=MAX_RESPONSE_BYTES)
                writer.write(request)
                await writer.drain()
                status = await self.head(reader)
            if status == 200:
                return 200, ""
            hint = ""
            # The status is known: a slow or broken body only loses the hint.
            with contextlib.suppress(TimeoutError, OSError, h11.ProtocolError):
                async with asyncio.timeout_at(deadline):
                    hint = await self.hint(reader)
            return status, hint
        finally:
            if writer is not None:
                # abort(): never waits on a peer that does not read; the request is sent.
                writer.transport.abort()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _more(self, reader: asyncio.StreamReader) -> bool:
        """Feed h11 the next bytes (b"": end of file); False once the budget is spent."""
        if self.received >= MAX_RESPONSE_BYTES:
            return False
        chunk = await reader.read(MAX_RESPONSE_BYTES - self.received)
        if len(self.first) < 32:
            self.first += chunk[: 32 - len(self.first)]
        self.received += len(chunk)
        self.conn.receive_data(chunk)
        return True

    async def head(self, reader: asyncio.StreamReader) -> int:
        """Read up to the final response head; its status code.

        Raises:
            _NotHTTP: the answer is not HTTP/1.x, the connection closed before a head, or
                no head in :data:`MAX_RESPONSE_BYTES`.
            OSError: reading failed.
        """
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as err:
                if not self.received:
                    raise _NotHTTP("the connection was closed without an answer") from err
                raise _NotHTTP(f"{err}; the answer began {self.first!r}") from err
            if event is h11.NEED_DATA:
                if not await self._more(reader):
                    raise _NotHTTP(
                        f"no complete answer head in {MAX_RESPONSE_BYTES} bytes;"
                        f" it began {self.first!r}"
                    )
            elif isinstance(event, h11.Response):
                return event.status_code
            # else h11.InformationalResponse (1xx): the final answer follows.

    async def hint(self, reader: asyncio.StreamReader) -> str:
        """The body (within the budget) read as kube-proxy's JSON: what its ``nodeEligible``
        and ``healthy`` flags say, as ``" (...)"``, or ``""``."""
        body = b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                if not await self._more(reader):
                    break
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            else:  # EndOfMessage, ConnectionClosed
                break
        try:
            health = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ""
        if not isinstance(health, dict):
            return ""
        reasons = []
        if health.get("nodeEligible") is False:
            reasons.append(
                "node not eligible: being deleted or tainted ToBeDeletedByClusterAutoscaler"
            )
        if health.get("healthy") is False:
            reasons.append("proxy rules not synced within kube-proxy's healthz timeout")
        return f" ({'; '.join(reasons)})" if reasons else ""


def _os_error(err: OSError) -> str:
    """``connection reset by peer``, ``no route to host``: strerror, lower case."""
    text = err.strerror or str(err) or type(err).__name__
    return text[:1].lower() + text[1:]


@dataclass(frozen=True, slots=True)
class RoundStats:
    """One finished round: ``targets`` Nodes probed (0: not the Lease holder, nothing
    probed), ``seconds`` it took (wall clock, pacing included), ``failures`` probes that
    failed, ``finished`` when it ended (seconds, the prober's ``monotonic`` clock)."""

    targets: int
    seconds: float
    failures: int
    finished: float


class HealthRecord(Protocol):
    """Where the Lease holder's effective health decision is kept across leader changes
    (:class:`app.controller.healthrecord.LeaseHealthRecord`)."""

    def load(self) -> Mapping[str, str] | None:
        """The recorded ``{node name: why}``; ``None`` when it cannot be read now."""
        ...

    def save(self, unhealthy: Mapping[str, str]) -> bool:
        """Record ``unhealthy``; ``False`` when the write failed (tried again next round)."""
        ...


class NodeHealthProber:
    """Probes kube-proxy's ``/healthz`` on every Node from one thread (module docstring).

    Keyword arguments:
        table: where results go; the prober thread is its only writer.
        targets: ``{node name: IP to probe}``, called once per round on the prober
            thread (must not block long: it reads a cache).
        port: kube-proxy's health port (:data:`KUBE_PROXY_HEALTHZ_PORT`).
        period: seconds between the starts of two rounds (> 0).
        timeout: seconds one probe may take, connect to status line (> 0).
        concurrency: connections open at most at once (≥ 1).
        max_rate: probes started per second at most (> 0); a round of ``n`` Nodes
            then lasts at least ``n / max_rate`` seconds and the period stretches to
            :attr:`effective_period`.
        is_leader: whether this replica holds the Lease, asked at each round's start; a
            replica that does not probes nothing and empties the table.
        on_change: called on the prober thread with the non-empty set of Node names whose
            effective health changed (``HealthTable.evaluate``); must return at once. An
            exception from it is logged and the thread goes on.
        monotonic: the clock (seconds) for ``evaluate``, :meth:`healthy` and
            :class:`RoundStats`; pacing and the period use the event loop's clock.
        record: where the Lease holder keeps its effective decision for the next one
            and for the other replicas (docs/design.md §4.11, "Across a leader change"):
            written when it changed, read by a replica that does not lead at each round
            (its view, for preview and admission) and taken over by one that starts to
            lead (:meth:`HealthTable.seed`); ``None``: kept in memory only.

    Raises:
        ValueError: a non-positive ``period``, ``timeout``, ``concurrency`` or ``max_rate``.
    """

    def __init__(
        self,
        *,
        table: HealthTable,
        targets: Callable[[], Mapping[str, str]],
        port: int,
        period: float,
        timeout: float,
        concurrency: int = 64,
        max_rate: float = 500.0,
        is_leader: Callable[[], bool],
        on_change: Callable[[frozenset[str]], None],
        monotonic: Callable[[], float] = time.monotonic,
        record: HealthRecord | None = None,
    ) -> None:
        if period <= 0 or timeout <= 0 or concurrency < 1 or max_rate <= 0:
            raise ValueError("period, timeout, concurrency and max_rate must be positive")
        self.table = table
        self.targets = targets
        self.port = port
        self.period = period
        self.timeout = timeout
        self.concurrency = concurrency
        self.max_rate = max_rate
        self.is_leader = is_leader
        self.on_change = on_change
        self.monotonic = monotonic
        self.record = record
        self._led = False
        self._saved: Mapping[str, str] | None = None
        self.last_round: RoundStats | None = None
        """The last finished round (``None`` before the first): replaced, never mutated."""
        self._target_count = 0
        self._progress = 0.0
        self._problem = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = threading.Event()

    @property
    def effective_period(self) -> float:
        """Seconds between round starts: ``max(period, targets / max_rate)``, with the
        number of targets of the latest round."""
        return max(self.period, self._target_count / self.max_rate)

    def start(self) -> None:
        """Start the thread; the first round begins at once."""
        self._progress = self.monotonic()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="node-health-prober", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Start the next round now instead of at the end of the period (e.g. on becoming
        the Lease holder); returns at once. A round in progress finishes first."""
        self._call_soon(self._set_wake)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel the round in progress (open probes are closed) and join the thread,
        waiting at most ``timeout`` seconds. A stopped prober is not started again."""
        self._stopping.set()
        self._call_soon(self._cancel)
        if self._thread is not None:
            self._thread.join(timeout)

    def healthy(self) -> tuple[bool, str]:
        """``(True, "")``, or ``(False, why)`` when the thread is not running or has made no
        progress (a round finished or a probe answered) for :data:`STALE_PERIODS`
        effective periods plus ``timeout`` seconds. For ``/healthz``: a stuck prober would
        freeze every Node's health.

        Progress rather than whole rounds: a round over many unreachable Nodes lasts up to
        ``ceil(nodes / concurrency) * timeout`` seconds (5,000 blackholed Nodes, 64
        connections, 2 s: 157 s) while the thread is doing exactly its job."""
        if self._thread is None or not self._thread.is_alive():
            return False, "the node health prober is not running"
        age = self.monotonic() - self._progress
        limit = STALE_PERIODS * self.effective_period + self.timeout
        if age > limit:
            why = f"; the last round failed: {self._problem}" if self._problem else ""
            return False, f"node health checks have made no progress for {age:.0f}s{why}"
        return True, ""

    # -- the prober thread ------------------------------------------------------------

    def _call_soon(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to do
                loop.call_soon_threadsafe(callback)

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _cancel(self) -> None:
        if self._main is not None:
            self._main.cancel()

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        try:
            self._main = loop.create_task(self._rounds())
            if self._stopping.is_set():  # stop() came before the task existed
                self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._main)
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _rounds(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while not self._stopping.is_set():
            started = loop.time()
            self._wake.clear()
            try:
                await self._round()
            except Exception as err:  # keep the thread alive: a dead one freezes health
                self._problem = f"{type(err).__name__}: {err}"
                LOG.exception("node health check round failed: %s", err)
            else:
                self._problem = ""
            delay = started + self.effective_period - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)

    async def _round(self) -> None:
        """One round (class docstring): probe and record as the Lease holder, else empty
        the table; then evaluate and tell ``on_change``."""
        started = self.monotonic()
        failures = 0
        leader = self.is_leader()
        before = self.table.view
        if not leader and self.record is not None:
            await self._follow()
        elif leader and not self._led and self.record is not None:
            # A new term: the previous holder's decision until our probes say otherwise
            # (what a follower last read is already the view the first reconciles use).
            recorded = await asyncio.to_thread(self.record.load)
            self.table.seed(before.unhealthy if recorded is None else recorded)
            self._saved = recorded
        self._led = leader
        targets: dict[str, str] = dict(self.targets()) if leader else {}
        self._target_count = count = len(targets)
        if leader or self.record is None:
            self.table.retain(targets)
        if targets:
            failures = await self._probe_all(targets)
        now = self.monotonic()
        if leader or self.record is None:
            self.table.evaluate(now)
        after = self.table.view
        changed = frozenset(before.unhealthy.keys() ^ after.unhealthy.keys())
        dirty = leader and self.record is not None and after.unhealthy != self._saved
        if (
            dirty
            and self.record is not None
            and await asyncio.to_thread(self.record.save, after.unhealthy)
        ):
            self._saved = after.unhealthy
        self._progress = now
        self.last_round = RoundStats(count, now - started, failures, now)
        metrics.NODE_HEALTH_CHECKS_SUCCESS.inc(count - failures)
        metrics.NODE_HEALTH_CHECKS_FAILURE.inc(failures)
        metrics.NODE_HEALTH_CHECK_ROUND_SECONDS.set(now - started)
        metrics.UNHEALTHY_NODES.set(len(after.unhealthy))
        metrics.NODE_HEALTH_CHECK_HOLDING.set(1 if after.holding else 0)
        if after is not before:
            self._log_changes(before, after, changed, now=now, leader=leader, present=targets)
        if changed:
            try:
                self.on_change(changed)
            except Exception as err:  # documented: logged, the thread goes on
                LOG.exception("node health on_change failed: %s", err)

    async def _follow(self) -> None:
        """A replica that does not lead: its view is the Lease holder's record (kept as it
        was when the record cannot be read)."""
        assert self.record is not None
        recorded = await asyncio.to_thread(self.record.load)
        if recorded is not None:
            self.table.mirror(recorded)

    async def _probe_all(self, targets: Mapping[str, str]) -> int:
        """Probe every target, at most ``concurrency`` at once and ``max_rate`` started per
        second (in bursts: :data:`PACING_SLACK_SECONDS`), recording each result as it
        comes; returns how many failed."""
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.concurrency)
        interval = 1.0 / self.max_rate
        begin = loop.time()
        failures = 0

        async def one(name: str, ip: str) -> None:
            nonlocal failures
            try:
                ok, detail = await probe(ip, self.port, timeout=self.timeout)
            finally:
                slots.release()
            self.table.record(name, ok=ok, detail=detail)
            self._progress = self.monotonic()
            failures += not ok

        # At most `concurrency` probe tasks exist at once: O(concurrency) memory in flight.
        async with asyncio.TaskGroup() as group:
            for index, (name, ip) in enumerate(targets.items()):
                await slots.acquire()
                ahead = begin + index * interval - loop.time()
                if ahead > PACING_SLACK_SECONDS:
                    await asyncio.sleep(ahead)
                group.create_task(one(name, ip))
        return failures

    def _log_changes(
        self,
        before: HealthView,
        after: HealthView,
        changed: frozenset[str],
        *,
        now: float,
        leader: bool,
        present: Mapping[str, str],
    ) -> None:
        if after.holding and not before.holding:
            log_event(
                LOG,
                "too many probed nodes fail their health checks: keeping the set decided"
                " before (this replica's own network is the likelier casualty)",
                level=logging.WARNING,
                probed=after.probed,
                failing=after.failing,
                allowed_fraction=self.table.policy.max_unhealthy_fraction,
                examples=self.table.failing_sample(),
            )
        elif before.holding and not after.holding:
            log_event(
                LOG,
                "health-check hold ended: node health applies again",
                probed=after.probed,
                failing=after.failing,
                held_seconds=round(now - before.since, 1) if before.since is not None else None,
            )
        for name in sorted(changed):
            if name in after.unhealthy:
                log_event(
                    LOG,
                    "node unhealthy",
                    level=logging.WARNING,
                    node=name,
                    reason=after.unhealthy[name],
                )
            else:
                if not leader:
                    reason = "not probed: this replica does not hold the Lease"
                elif name not in present:
                    reason = "the Node is gone"
                else:
                    reason = "its kube-proxy health checks pass again"
                log_event(LOG, "node healthy", node=name, reason=reason)
