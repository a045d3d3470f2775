"""The node health prober (app/controller/nodeprober.py) against real local servers.

Every server here is an asyncio server on its own thread (ephemeral ports on 127.0.0.1,
127.0.0.2 and ::1), answering as its test says; each is closed, its connections with it,
and every prober is stopped, before the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import orjson
import pytest

from app.controller.nodeprober import MAX_RESPONSE_BYTES, NodeHealthProber, probe
from app.core.nodehealth import HealthPolicy, HealthTable
from app.telemetry import metrics
from tests.controller.support import wait_until
from tests.support.ports import free_port

Handler = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

KUBE_PROXY_503 = orjson.dumps(
    {
        "lastUpdated": "2026-12-04T10:00:00Z",
        "currentTime": "2026-12-04T10:00:05Z",
        "nodeEligible": False,
        "healthy": True,
        "status": {"IPv4": {"lastUpdated": "2026-12-04T10:00:00Z", "healthy": True}},
    }
)


class Server:
    """A TCP server on its own thread and event loop: ``handler`` serves each connection.

    ``hosts``: addresses to listen on, all on one port. Counts connections per local
    address (``accepted``), when each came (``times``), and requests being answered at
    once (``in_flight``, ``peak``: from accept until the handler calls :meth:`answering`).
    """

    def __init__(self, handler: Handler, hosts: Sequence[str] = ("127.0.0.1",)) -> None:
        self.handler = handler
        self.accepted: dict[str, int] = {}
        self.times: list[float] = []
        self.requests: list[bytes] = []
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-healthz")
        self._thread.start()
        try:
            self.port = self._call(self._listen(hosts))
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self, hosts: Sequence[str]) -> int:
        for _ in range(20):  # another process may hold the first port on a later host
            port = 0
            try:
                for host in hosts:
                    server = await asyncio.start_server(self._serve, host, port)
                    self._servers.append(server)
                    port = server.sockets[0].getsockname()[1]
                return port
            except OSError as err:
                if err.errno != errno.EADDRINUSE:
                    raise
                await self._close_servers()
        raise RuntimeError("no port free on every host")

    async def _close_servers(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()
        self._servers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            # None when the prober reset the connection before asyncio made its transport.
            local = (writer.get_extra_info("sockname") or ("?",))[0]
            with self._lock:
                self.accepted[local] = self.accepted.get(local, 0) + 1
                self.times.append(time.monotonic())
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            await self.handler(self, reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass  # the prober closed first (abort: reset)
        finally:
            writer.close()
            self._writers.discard(writer)

    def answering(self) -> None:
        """The handler is about to answer: the request no longer counts as in flight."""
        with self._lock:
            self.in_flight -= 1

    def connections(self, host: str = "127.0.0.1") -> int:
        """Connections accepted on ``host``."""
        with self._lock:
            return self.accepted.get(host, 0)

    async def _shutdown(self) -> None:
        # Close the listeners only once no connection is half accepted: an accept task
        # that runs after its Server closed fails an assertion and leaks its socket
        # (Python 3.11's _accept_connection2 -> Server._attach). No await between the
        # check and the close, so no accept can start in between.
        while accepting := [
            t for t in asyncio.all_tasks() if t.get_coro().__name__ == "_accept_connection2"
        ]:
            await asyncio.wait(accepting)
        for server in self._servers:
            server.close()
        await self._close_servers()
        me = asyncio.current_task()
        deadline = time.monotonic() + 5
        while (others := asyncio.all_tasks() - {me}) and time.monotonic() < deadline:
            for writer in list(self._writers):
                writer.transport.abort()  # a handler waiting to read sees its end at once
            await asyncio.wait(others, timeout=0.05)
        await asyncio.sleep(0)  # the aborted sockets close on the next turn

    def close(self) -> None:
        """Close every listener and connection, stop the thread, close the loop."""
        if self._loop.is_running():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        # What the loop had not run yet (a connection accepted as the listener closed):
        # ended here, as asyncio.run() ends its loop.
        try:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending))
            self._loop.run_until_complete(asyncio.sleep(0))  # closes what abort() scheduled
        finally:
            self._loop.close()


@contextlib.contextmanager
def serving(handler: Handler, hosts: Sequence[str] = ("127.0.0.1",)) -> Iterator[Server]:
    server = Server(handler, hosts)
    try:
        yield server
    finally:
        server.close()


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def answer(status: int, body: bytes = b"", *, delay: float = 0.0) -> Handler:
    """A handler that reads the request head, waits ``delay`` s, answers like Go's net/http
    (``status``, JSON ``body``, ``Connection: close``) and closes."""

    async def handle(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        server.requests.append(await read_head(reader))
        if delay:
            await asyncio.sleep(delay)
        server.answering()
        reason = {200: "OK", 503: "Service Unavailable"}.get(status, "Whatever")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    return handle


def by_host(handlers: dict[str, Handler]) -> Handler:
    """Each local address (the node's IP) its own handler."""

    async def handle(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        await handlers[writer.get_extra_info("sockname")[0]](server, reader, writer)

    return handle


async def hang(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
    await reader.read()  # accepts, never answers: until the prober (or close()) hangs up


def run(coro: Awaitable[tuple[bool, str]]) -> tuple[bool, str]:
    return asyncio.run(coro)  # type: ignore[arg-type]


# -- probe() ----------------------------------------------------------------------------


def test_http_200_is_ok_and_the_request_is_a_plain_http11_get() -> None:
    with serving(answer(200, b'{"healthy":true}')) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=2))
    assert (ok, detail) == (True, f"GET http://127.0.0.1:{server.port}/healthz: HTTP 200")
    head = server.requests[0].decode().split("\r\n")
    assert head[0] == "GET /healthz HTTP/1.1"
    assert {h.lower() for h in head[1:] if h} == {
        f"host: 127.0.0.1:{server.port}",
        "user-agent: node-ipam-lb",
        "connection: close",
    }


@pytest.mark.parametrize(
    ("body", "hint"),
    [
        (
            KUBE_PROXY_503,
            " (node not eligible: being deleted or tainted ToBeDeletedByClusterAutoscaler)",
        ),
        (
            orjson.dumps({"nodeEligible": True, "healthy": False}),
            " (proxy rules not synced within kube-proxy's healthz timeout)",
        ),
        (b"not json", ""),
    ],
    ids=["not-eligible", "not-synced", "no-json"],
)
def test_503_is_a_failure_naming_the_status_and_what_kube_proxy_said(
    body: bytes, hint: str
) -> None:
    with serving(answer(503, body)) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=2))
    assert not ok
    assert detail == f"GET http://127.0.0.1:{server.port}/healthz: HTTP 503{hint}"


def test_a_refused_connection_is_a_failure_at_once() -> None:
    port = free_port()
    started = time.monotonic()
    ok, detail = run(probe("127.0.0.1", port, timeout=2))
    assert (ok, detail) == (False, f"GET http://127.0.0.1:{port}/healthz: connection refused")
    assert time.monotonic() - started < 1.5


def test_a_server_that_never_answers_fails_within_the_timeout() -> None:
    with serving(hang) as server:
        started = time.monotonic()
        ok, detail = run(probe("127.0.0.1", server.port, timeout=0.3))
        elapsed = time.monotonic() - started
    assert (ok, detail) == (
        False,
        f"GET http://127.0.0.1:{server.port}/healthz: no answer within 0.3s",
    )
    assert 0.3 <= elapsed < 1.5  # not the 2 s of a default, nor forever
    assert server.connections() == 1


def test_the_timeout_bounds_the_whole_exchange_not_each_read() -> None:
    async def trickle(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for byte in b"X-Slow: " + b"x" * 100:
            writer.write(bytes([byte]))
            await writer.drain()  # raises once the prober has hung up
            await asyncio.sleep(0.02)

    with serving(trickle) as server:
        started = time.monotonic()
        ok, detail = run(probe("127.0.0.1", server.port, timeout=0.3))
        elapsed = time.monotonic() - started
    assert not ok
    assert detail.startswith(
        f"GET http://127.0.0.1:{server.port}/healthz: no complete answer within 0.3s"
        " (it began b'HTTP/1.1 200 OK\\r\\n"
    )
    assert elapsed < 1.5


def test_an_answer_that_is_not_http_is_a_failure_quoting_it() -> None:
    async def ssh(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await reader.readline()  # the GET line: "Invalid SSH identification string"
        await writer.drain()

    with serving(ssh) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=2))
    assert (ok, detail) == (
        False,
        f"GET http://127.0.0.1:{server.port}/healthz: not HTTP (peer unexpectedly closed"
        " connection; the answer began b'SSH-2.0-OpenSSH_9.6\\r\\n')",
    )


def test_a_non_http_banner_then_silence_fails_at_the_timeout_quoting_it() -> None:
    async def banner(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        writer.write(b"220 smtp ready\r\n")
        await reader.read()

    with serving(banner) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=0.2))
    assert (ok, detail) == (
        False,
        f"GET http://127.0.0.1:{server.port}/healthz: no complete answer within 0.2s"
        " (it began b'220 smtp ready\\r\\n')",
    )


def test_a_connection_closed_without_an_answer_is_a_failure() -> None:
    async def close(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        await read_head(reader)

    with serving(close) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=2))
    assert (ok, detail) == (
        False,
        f"GET http://127.0.0.1:{server.port}/healthz: not HTTP"
        " (the connection was closed without an answer)",
    )


def test_an_answer_head_over_4_kib_is_a_failure_without_waiting_for_more() -> None:
    async def oversize(server: Server, reader: asyncio.StreamReader, writer: Any) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (64 * 1024))
        await writer.drain()
        await reader.read()  # hold the connection open: the probe must not wait

    with serving(oversize) as server:
        started = time.monotonic()
        ok, detail = run(probe("127.0.0.1", server.port, timeout=5))
        elapsed = time.monotonic() - started
    assert not ok
    assert f"not HTTP (no complete answer head in {MAX_RESPONSE_BYTES} bytes" in detail
    assert elapsed < 2.5  # gave up at 4 KiB, not at the timeout


def test_a_200_with_a_large_body_is_ok_without_reading_it() -> None:
    with serving(answer(200, b"x" * (1024 * 1024))) as server:
        ok, detail = run(probe("127.0.0.1", server.port, timeout=2))
    assert ok, detail


def test_ipv6_targets_are_bracketed_in_the_host_header_and_the_detail() -> None:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with serving(answer(503), hosts=("::1",)) as server:
        ok, detail = run(probe("::1", server.port, timeout=2))
    assert (ok, detail) == (False, f"GET http://[::1]:{server.port}/healthz: HTTP 503")
    assert f"Host: [::1]:{server.port}\r\n".encode() in server.requests[0]


def test_a_name_is_never_resolved() -> None:
    ok, detail = run(probe("localhost", 10256, timeout=2))
    assert (ok, detail) == (
        False,
        "GET http://localhost:10256/healthz: 'localhost' is not an IP address",
    )


# -- NodeHealthProber -------------------------------------------------------------------


class Changes:
    """``on_change``: records each call; ``event`` is set at each."""

    def __init__(self, also: Callable[[frozenset[str]], None] | None = None) -> None:
        self.calls: list[frozenset[str]] = []
        self.event = threading.Event()
        self.also = also

    def __call__(self, names: frozenset[str]) -> None:
        self.calls.append(names)
        if self.also is not None:
            self.also(names)
        self.event.set()


@pytest.fixture
def probers() -> Iterator[Callable[..., NodeHealthProber]]:
    """Make and start probers (stopped at teardown; each must have stopped)."""
    started: list[NodeHealthProber] = []

    def make(**kwargs: Any) -> NodeHealthProber:
        kwargs.setdefault("table", HealthTable(HealthPolicy()))
        kwargs.setdefault("is_leader", lambda: True)
        kwargs.setdefault("on_change", Changes())
        kwargs.setdefault("timeout", 1.0)
        prober = NodeHealthProber(**kwargs)
        prober.start()
        started.append(prober)
        return prober

    yield make
    for prober in started:
        prober.stop()
        assert not prober.healthy()[0]
        assert prober._thread is not None and not prober._thread.is_alive()


def test_three_failing_rounds_make_a_node_unhealthy_and_on_change_names_it(
    probers: Callable[..., NodeHealthProber],
) -> None:
    handlers = {"127.0.0.1": answer(200), "127.0.0.2": answer(503, KUBE_PROXY_503)}
    with serving(by_host(handlers), hosts=tuple(handlers)) as server:
        seen: list[int] = []
        changes = Changes(also=lambda names: seen.append(server.connections("127.0.0.2")))
        table = HealthTable(HealthPolicy(failure_threshold=3))
        prober = probers(
            table=table,
            targets=lambda: {"node-a": "127.0.0.2", "node-b": "127.0.0.1", "node-c": "127.0.0.1"},
            port=server.port,
            period=0.02,
            on_change=changes,
        )
        assert changes.event.wait(10)
        assert prober.healthy() == (True, "")
        prober.stop()
    assert changes.calls[0] == frozenset({"node-a"})
    assert seen[0] == 3  # exactly the third failure, not before
    reason = table.view.unhealthy["node-a"]
    assert "failed 3 kube-proxy health checks in a row" in reason
    assert f"GET http://127.0.0.2:{server.port}/healthz: HTTP 503 (node not eligible" in reason
    assert set(table.view.unhealthy) == {"node-a"}
    assert metrics.REGISTRY.get_sample_value("node_ipam_lb_unhealthy_nodes") == 1
    assert prober.last_round is not None and prober.last_round.targets == 3


def test_most_nodes_failing_holds_the_last_set_and_says_so(
    probers: Callable[..., NodeHealthProber], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="node_ipam_lb.nodehealth")
    handlers = {"127.0.0.1": answer(200), "127.0.0.2": answer(503)}
    with serving(by_host(handlers), hosts=tuple(handlers)) as server:
        changes = Changes()
        table = HealthTable(HealthPolicy(failure_threshold=2, max_unhealthy_fraction=0.5))
        prober = probers(
            table=table,
            targets=lambda: {"node-a": "127.0.0.2", "node-b": "127.0.0.2", "node-c": "127.0.0.1"},
            port=server.port,
            period=0.02,
            on_change=changes,
        )
        wait_until(lambda: table.view.holding, what="the most-fail hold")
        assert metrics.REGISTRY.get_sample_value("node_ipam_lb_node_health_check_holding") == 1
        assert table.view.unhealthy == {}  # the set before the hold: nobody
        assert changes.calls == []  # the effective set did not change
        handlers["127.0.0.2"] = answer(200)  # the two recover: the hold ends
        wait_until(lambda: not table.view.holding, what="the end of the hold")
        assert metrics.REGISTRY.get_sample_value("node_ipam_lb_node_health_check_holding") == 0
        prober.stop()
    lines = [(r.levelno, r.getMessage(), r.__dict__["fields"]) for r in caplog.records]
    holds = [line for line in lines if "hold" in line[1] or "too many" in line[1]]
    assert [(level, message) for level, message, _ in holds] == [
        (
            logging.WARNING,
            "too many probed nodes fail their health checks: keeping the set decided"
            " before (this replica's own network is the likelier casualty)",
        ),
        (logging.INFO, "health-check hold ended: node health applies again"),
    ]
    fields = holds[0][2]
    assert {k: fields[k] for k in ("probed", "failing", "allowed_fraction")} == {
        "probed": 3,
        "failing": 2,
        "allowed_fraction": 0.5,
    }
    assert len(fields["examples"]) == 2
    assert all(": HTTP 503" in example for example in fields["examples"]), fields["examples"]
    assert holds[1][2]["held_seconds"] >= 0


def test_a_replica_not_leading_probes_nothing_and_empties_the_table(
    probers: Callable[..., NodeHealthProber],
) -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1))
    table.record("node-a", ok=False, detail="HTTP 503")
    table.record("node-b", ok=True, detail="")
    table.evaluate(0.0)
    assert set(table.view.unhealthy) == {"node-a"}  # from an earlier term as leader
    asked: list[int] = []

    def targets() -> dict[str, str]:
        asked.append(1)
        return {"node-a": "127.0.0.1"}

    with serving(answer(200)) as server:
        changes = Changes()
        prober = probers(
            table=table,
            targets=targets,
            port=server.port,
            period=0.02,
            is_leader=lambda: False,
            on_change=changes,
        )
        assert changes.event.wait(10)
        wait_until(lambda: prober.last_round is not None, what="a round")
        time.sleep(0.1)  # a few more rounds: still nothing probed
        prober.stop()
    assert changes.calls == [frozenset({"node-a"})]
    assert table.view.unhealthy == {} and table.view.probed == 0
    assert server.connections() == 0 and asked == []
    assert prober.last_round is not None and prober.last_round.targets == 0


def test_losing_the_lease_stops_probing_and_forgets(
    probers: Callable[..., NodeHealthProber],
) -> None:
    leader = threading.Event()
    leader.set()
    handlers = {"127.0.0.1": answer(200), "127.0.0.2": answer(503)}
    with serving(by_host(handlers), hosts=tuple(handlers)) as server:
        changes = Changes()
        table = HealthTable(HealthPolicy(failure_threshold=1))
        prober = probers(
            table=table,
            targets=lambda: {"node-a": "127.0.0.2", "node-b": "127.0.0.1", "node-c": "127.0.0.1"},
            port=server.port,
            period=0.02,
            is_leader=leader.is_set,
            on_change=changes,
        )
        assert changes.event.wait(10)
        changes.event.clear()
        leader.clear()
        assert changes.event.wait(10)
        probes = server.connections("127.0.0.1") + server.connections("127.0.0.2")
        time.sleep(0.1)
        assert server.connections("127.0.0.1") + server.connections("127.0.0.2") == probes
        prober.stop()
    assert changes.calls == [frozenset({"node-a"}), frozenset({"node-a"})]
    assert table.view.unhealthy == {}


def test_no_more_than_concurrency_connections_at_once(
    probers: Callable[..., NodeHealthProber],
) -> None:
    targets = {f"node-{i}": "127.0.0.1" for i in range(12)}
    with serving(answer(200, delay=0.15)) as server:
        prober = probers(
            targets=lambda: targets, port=server.port, period=60, concurrency=3, max_rate=1e6
        )
        wait_until(lambda: prober.last_round is not None, what="a round")
        prober.stop()
    assert server.peak == 3  # never above; and it did run three at once
    assert server.connections() == 12
    assert prober.last_round is not None
    assert prober.last_round.seconds >= 4 * 0.15  # 12 probes, 3 at a time, 0.15 s each


def test_max_rate_paces_the_probes_and_stretches_the_period(
    probers: Callable[..., NodeHealthProber],
) -> None:
    targets = {f"node-{i}": "127.0.0.1" for i in range(20)}
    with serving(answer(200)) as server:
        prober = probers(targets=lambda: targets, port=server.port, period=0.05, max_rate=50)
        wait_until(lambda: server.connections() > len(targets), what="a second round")
        prober.stop()
    assert prober.effective_period == pytest.approx(20 / 50)
    times = server.times
    # 20 slots 1/50 s apart (a probe may start up to 50 ms early): not all at once.
    assert times[19] - times[0] >= 19 / 50 - 0.05 - 0.01
    # The next round starts one effective period (0.4 s) after the first, not 0.05 s.
    assert times[20] - times[0] >= 0.4 - 0.01


def test_a_failing_on_change_is_logged_and_the_thread_goes_on(
    probers: Callable[..., NodeHealthProber], caplog: pytest.LogCaptureFixture
) -> None:
    def boom(names: frozenset[str]) -> None:
        raise RuntimeError("boom")

    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=1.0))
    port = free_port()  # refused: node-a fails at once
    prober = probers(
        table=table,
        targets=lambda: {"node-a": "127.0.0.1"},
        port=port,
        period=0.02,
        on_change=Changes(also=boom),
    )
    wait_until(lambda: "node-a" in table.view.unhealthy, what="node-a unhealthy")
    first = prober.last_round
    wait_until(lambda: prober.last_round is not first, what="another round")
    assert prober.healthy() == (True, "")
    assert any("on_change failed" in r.getMessage() for r in caplog.records)
    unhealthy = [r for r in caplog.records if r.getMessage() == "node unhealthy"]
    assert unhealthy[0].__dict__["fields"]["node"] == "node-a"
    assert "connection refused" in unhealthy[0].__dict__["fields"]["reason"]


def test_healthy_fails_when_no_round_finished_for_three_periods_plus_the_timeout(
    probers: Callable[..., NodeHealthProber],
) -> None:
    now = [1000.0]
    prober = probers(
        targets=lambda: {}, port=free_port(), period=60, timeout=2, monotonic=lambda: now[0]
    )
    wait_until(lambda: prober.last_round is not None, what="a round")
    assert prober.healthy() == (True, "")
    now[0] += 100  # then a round finishes: that is progress
    first = prober.last_round
    prober.wake()
    wait_until(lambda: prober.last_round is not first, what="a second round")
    assert prober.last_round is not None and prober.last_round.finished == 1100
    now[0] += 3 * 60 + 2
    assert prober.healthy() == (True, "")
    now[0] += 1
    ok, why = prober.healthy()
    assert not ok and why == "node health checks have made no progress for 183s"
    prober.stop()
    assert prober.healthy() == (False, "the node health prober is not running")


def test_stop_cancels_a_round_in_progress_and_closes_its_connections(
    probers: Callable[..., NodeHealthProber],
) -> None:
    with serving(hang) as server:
        prober = probers(
            targets=lambda: {f"node-{i}": "127.0.0.1" for i in range(5)},
            port=server.port,
            period=60,
            timeout=30,
        )
        wait_until(lambda: server.connections() == 5, what="five probes hanging")
        started = time.monotonic()
        prober.stop()
        assert time.monotonic() - started < 2
        assert prober._thread is not None and not prober._thread.is_alive()
        assert prober.last_round is None


def test_wake_starts_the_next_round_now(probers: Callable[..., NodeHealthProber]) -> None:
    with serving(answer(200)) as server:
        prober = probers(targets=lambda: {"node-a": "127.0.0.1"}, port=server.port, period=60)
        wait_until(lambda: prober.last_round is not None, what="a round")
        prober.wake()
        wait_until(lambda: server.connections() == 2, what="a second round")


@pytest.mark.parametrize(
    "bad", [{"period": 0}, {"timeout": 0}, {"concurrency": 0}, {"max_rate": 0}]
)
def test_settings_out_of_range_are_refused(bad: dict[str, float]) -> None:
    kwargs: dict[str, Any] = {
        "table": HealthTable(HealthPolicy()),
        "targets": dict,
        "port": 10256,
        "period": 10,
        "timeout": 2,
        "is_leader": lambda: True,
        "on_change": lambda names: None,
    }
    with pytest.raises(ValueError, match="must be positive"):
        NodeHealthProber(**{**kwargs, **bad})


# -- across a leader change (docs/design.md §4.11) ---------------------------------------


class MemoryRecord:
    """:class:`app.controller.nodeprober.HealthRecord` in memory; ``down`` makes every
    call fail (``None`` / ``False``), ``saves`` lists what was written."""

    def __init__(self, recorded: dict[str, str] | None = None) -> None:
        self.recorded = dict(recorded or {})
        self.saves: list[dict[str, str]] = []
        self.loads = 0
        self.down = False

    def load(self) -> dict[str, str] | None:
        self.loads += 1
        return None if self.down else dict(self.recorded)

    def save(self, unhealthy: Any) -> bool:
        if self.down:
            return False
        self.recorded = dict(unhealthy)
        self.saves.append(dict(unhealthy))
        return True


def test_a_replica_not_leading_shows_the_lease_holders_record(
    probers: Callable[..., NodeHealthProber],
) -> None:
    """A follower probes nothing, but its view (preview, admission) is the holder's."""
    record = MemoryRecord({"node-a": "failed 3 kube-proxy health checks in a row"})
    with serving(answer(200)) as server:
        changes = Changes()
        prober = probers(
            targets=lambda: {"node-a": "127.0.0.1"},
            port=server.port,
            period=0.02,
            is_leader=lambda: False,
            on_change=changes,
            record=record,
        )
        assert changes.event.wait(10)
        record.recorded = {}  # the holder saw it recover
        wait_until(lambda: prober.table.view.unhealthy == {}, what="the record followed")
        prober.stop()
    assert changes.calls == [frozenset({"node-a"}), frozenset({"node-a"})]
    assert server.connections() == 0 and record.saves == []


def test_a_new_lease_holder_keeps_what_the_last_one_took_out_until_its_own_probes_pass(
    probers: Callable[..., NodeHealthProber],
) -> None:
    """The old holder took node-a out; the new one seeds it unhealthy, so it is not
    published in between, and it comes back only after success_threshold good probes."""
    record = MemoryRecord({"node-a": "failed 3 kube-proxy health checks in a row (old holder)"})
    table = HealthTable(HealthPolicy(failure_threshold=3, success_threshold=2))
    views: list[set[str]] = []
    with serving(answer(200)) as server:
        changes = Changes(also=lambda names: views.append(set(table.view.unhealthy)))
        prober = probers(
            table=table,
            targets=lambda: {"node-a": "127.0.0.1", "node-b": "127.0.0.1"},
            port=server.port,
            period=0.02,
            on_change=changes,
            record=record,
        )
        wait_until(lambda: len(changes.calls) >= 2, what="taken over, then back")
        prober.stop()
    assert views[:2] == [{"node-a"}, set()]
    assert server.connections() >= 2 * 2  # two rounds of two nodes before node-a is back
    assert record.saves[-1] == {} and all(s in ({}, record.saves[0]) for s in record.saves)


def test_the_lease_holder_writes_the_record_only_when_its_decision_changes(
    probers: Callable[..., NodeHealthProber],
) -> None:
    record = MemoryRecord()
    handlers = {"127.0.0.1": answer(200), "127.0.0.2": answer(503)}
    with serving(by_host(handlers), hosts=tuple(handlers)) as server:
        changes = Changes()
        prober = probers(
            table=HealthTable(HealthPolicy(failure_threshold=1)),
            targets=lambda: {"node-a": "127.0.0.2", "node-b": "127.0.0.1", "node-c": "127.0.0.1"},
            port=server.port,
            period=0.02,
            on_change=changes,
            record=record,
        )
        assert changes.event.wait(10)
        rounds = prober.last_round
        wait_until(lambda: prober.last_round is not rounds, what="more rounds")
        time.sleep(0.1)
        record.down = True  # a failed write is tried again next round
        handlers["127.0.0.2"] = answer(200)
        wait_until(lambda: prober.table.view.unhealthy == {}, what="node-a back")
        time.sleep(0.1)
        assert record.saves[-1] != {}
        record.down = False
        wait_until(lambda: record.saves[-1] == {}, what="the write retried")
        prober.stop()
    assert [set(s) for s in record.saves] == [{"node-a"}, set()]
    assert record.loads == 1  # once, when the term started
