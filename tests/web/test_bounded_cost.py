"""Bounded cost per request (issue 14, docs/design.md §7.1): each defect of the attack run.

Blocking is deterministic (a Node label map that blocks the select() reading it until
released), never a timing race; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app.config import Settings
from app.web.app import create_app
from app.web.auth import AccessError, KubernetesAuthorizer
from app.web.connections import CappedListener, protocol_class
from app.web.limits import LIGHT_THREADS, BodyBudget, Overloaded, ReviewPools
from app.web.routes import deps
from tests.core.admission.builders import node, review, service
from tests.web.conftest import AppClient, FakeCache, FakeController
from tests.web.support import BlockingLabels, FakeReviews

JSON = {"content-type": "application/json"}


def blocking_app(labels: BlockingLabels, **settings: Any) -> Any:
    cache = FakeCache(node_views=[dataclasses.replace(node("n1"), labels=labels)])
    labels.armed = True
    return create_app(
        Settings(auth="none", **settings), controller=FakeController(cache=cache), clock=lambda: 1e6
    )


def managed_review(i: int) -> bytes:
    svc = service(name=f"s{i}", cls="io.cilium/node", selector=f"role=gpu-{i}")
    return json.dumps(review(svc, uid=f"uid-{i}")).encode()


async def until(predicate: Any, *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_healthz_answers_while_every_review_thread_is_blocked() -> None:
    # Before: /healthz was a sync route, queued in the same thread pool (40 threads) as
    # the reviews' select(): with 50 reviews blocked there it did not answer at all.
    labels = BlockingLabels()
    app = blocking_app(labels)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            reviews = [
                asyncio.ensure_future(
                    client.post("/validate", content=managed_review(i), headers=JSON)
                )
                for i in range(50)
            ]
            try:
                await until(lambda: labels.blocked >= LIGHT_THREADS)
                for path in ("/healthz", "/readyz"):
                    response = await asyncio.wait_for(client.get(path), 5)
                    assert response.status_code == 200, path
            finally:
                labels.release.set()
                await asyncio.wait_for(asyncio.gather(*reviews, return_exceptions=True), 20)
                app.state.node_ipam.limits.pools.shutdown()

    asyncio.run(scenario())


def test_cluster_checks_that_run_out_of_time_are_skipped_with_one_warning() -> None:
    labels = BlockingLabels()
    app = blocking_app(labels, cluster_check_seconds=0.1)

    async def scenario() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            try:
                post = client.post("/validate", content=managed_review(1), headers=JSON)
                response = await asyncio.wait_for(post, 10)
            finally:
                labels.release.set()
                app.state.node_ipam.limits.pools.shutdown()
        assert response.status_code == 200
        answer: dict[str, Any] = response.json()["response"]
        return answer

    answer = asyncio.run(scenario())
    assert answer["allowed"] is True
    (warning,) = answer["warnings"]
    assert warning.startswith("cluster checks skipped") and "100 ms" in warning
    assert len(warning) <= 120


def test_a_review_not_started_by_its_deadline_gets_503() -> None:
    labels = BlockingLabels()
    app = blocking_app(labels, review_deadline_seconds=0.3)

    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            try:
                posts = [
                    client.post("/validate", content=managed_review(i), headers=JSON)
                    for i in range(LIGHT_THREADS + 1)
                ]
                responses = await asyncio.wait_for(asyncio.gather(*posts), 10)
            finally:
                labels.release.set()
                app.state.node_ipam.limits.pools.shutdown()
        return [r.status_code for r in responses]

    statuses = asyncio.run(scenario())
    assert statuses.count(503) >= 1, statuses  # the one queued behind the blocked threads


def call_asgi(
    app: Any, headers: list[tuple[bytes, bytes]], chunks: Iterator[bytes]
) -> tuple[int, int]:
    """POST /validate through the raw ASGI interface; returns (status, chunks read)."""
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "https", "path": "/validate", "raw_path": b"/validate", "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 9443), "state": {}, "app": app,
    }  # fmt: skip
    asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=20))
    start = next(m for m in sent if m.get("type") == "http.response.start")
    return start["status"], read


def endless(chunk: bytes) -> Iterator[bytes]:
    for _ in range(1000):  # 1 GiB at most: the test fails long before if reading goes on
        yield chunk


def test_a_body_over_the_cap_gets_413_without_being_read_to_the_end() -> None:
    app = create_app(Settings(auth="none"))
    mib = 1024 * 1024
    status, read = call_asgi(app, [], endless(b" " * mib))
    assert status == 413
    assert read <= deps.MAX_BODY_BYTES // mib + 2


def test_a_declared_length_over_the_cap_gets_413_before_any_read() -> None:
    app = create_app(Settings(auth="none"))
    declared = [(b"content-length", str(deps.MAX_BODY_BYTES + 1).encode())]
    status, read = call_asgi(app, declared, endless(b" " * 1024))
    assert (status, read) == (413, 0)


def test_the_body_cap_fits_what_the_api_server_can_send() -> None:
    # object and oldObject of at most 3 MiB each (kube-apiserver's request body limit).
    assert 2 * 3 * 1024 * 1024 < deps.MAX_BODY_BYTES <= 7 * 1024 * 1024


@pytest.mark.parametrize(
    ("literal", "named"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "1e999")],
)
def test_non_numbers_in_the_body_get_400_naming_them(literal: str, named: str) -> None:
    # Go's encoding/json rejects them; the API server never sends them.
    text = json.dumps(review(service())).replace('"dryRun": false', f'"dryRun": {literal}')
    assert literal in text
    with AppClient(create_app(Settings(auth="none"))) as client:
        response = client.post("/validate", content=text.encode(), headers=JSON)
    assert response.status_code == 400
    assert named in response.json()["detail"]


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_docs_follow_auth(path: str) -> None:
    app = create_app(
        Settings(auth="kubernetes"),
        controller=FakeController(cache=FakeCache()),
        authorizer=KubernetesAuthorizer(FakeReviews()),
    )
    with AppClient(app) as client:
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"authorization": "Bearer good"}).status_code == 403
    with AppClient(create_app(Settings(auth="none"))) as client:
        assert client.get(path).status_code == 200


def test_a_rejected_token_is_not_reviewed_again_while_cached() -> None:
    reviews = FakeReviews()
    authorizer = KubernetesAuthorizer(reviews)
    for _ in range(3):
        with pytest.raises(AccessError) as err:
            authorizer.check(token="forged", verb="get", path="/metrics")
        assert err.value.status == 401
    assert reviews.calls == ["TokenReview"]
    assert all("forged" not in repr(key) for key in authorizer._rejected._entries)


def test_outstanding_access_reviews_are_limited() -> None:
    # Before: each request with a new token held a thread for the whole TokenReview.
    release = threading.Event()
    entered = threading.Semaphore(0)

    class SlowReviews(FakeReviews):
        def create_token_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
            entered.release()
            release.wait(10)
            return super().create_token_review(body=body)

    authorizer = KubernetesAuthorizer(SlowReviews(), max_in_flight=2)
    errors: list[int] = []

    def check(token: str) -> None:
        try:
            authorizer.check(token=token, verb="get", path="/metrics")
        except AccessError as err:
            errors.append(err.status)

    threads = [threading.Thread(target=check, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert entered.acquire(timeout=5)
    try:
        with pytest.raises(AccessError) as err:
            authorizer.check(token="t-third", verb="get", path="/metrics")
        assert err.value.status == 503
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    assert errors == [401, 401]


def test_body_budget_lets_small_requests_pass_a_waiting_large_one() -> None:
    async def scenario() -> None:
        budget = BodyBudget(10)
        await budget.acquire(6, timeout=1)
        large = asyncio.ensure_future(budget.acquire(8, timeout=5))
        await asyncio.sleep(0)
        await asyncio.wait_for(budget.acquire(4, timeout=1), 1)  # fits beside the first
        assert not large.done()
        with pytest.raises(Overloaded):
            await budget.acquire(1, timeout=0.05)
        budget.release(6)
        budget.release(4)
        await asyncio.wait_for(large, 1)
        assert budget.used == 8
        with pytest.raises(ValueError, match="exceeds"):
            await budget.acquire(11, timeout=1)

    asyncio.run(scenario())


@pytest.fixture
def listener() -> Iterator[CappedListener]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    capped = CappedListener.wrap(sock, limit=2)
    yield capped
    capped.close()


def closed_by_peer(conn: socket.socket, timeout: float = 5.0) -> bool:
    conn.settimeout(timeout)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connections_beyond_the_cap_are_refused_and_counted_until_closed(
    listener: CappedListener,
) -> None:
    async def scenario() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()
            writer.close()

        server = await asyncio.start_server(handle, sock=listener)
        port = listener.getsockname()[1]
        loop = asyncio.get_running_loop()
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            await until(lambda: listener.open + listener.refused == 3)
            assert (listener.open, listener.refused) == (2, 1)
            assert await loop.run_in_executor(None, closed_by_peer, clients[2])
            assert not await loop.run_in_executor(None, closed_by_peer, clients[0], 0.2)
        finally:
            for client in clients:
                client.close()
            await until(lambda: listener.open == 0)  # released as each one closes
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_connection_without_a_complete_request_head_is_closed_at_the_deadline() -> None:
    # Before: uvicorn's keep-alive timer stopped at the first byte; one byte every few
    # seconds held a connection forever.
    config = uvicorn.Config(
        create_app(Settings(auth="none")),
        host="127.0.0.1",
        port=0,
        http=protocol_class(head_timeout=0.5),
        lifespan="off",
        log_config=None,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.settimeout(0.2)
            opened = time.monotonic()
            closed = False
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n":  # never the final CRLF
                try:
                    slow.sendall(bytes([byte]))
                    if slow.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
                    break
            assert closed, "the connection outlived the request-head deadline"
            assert time.monotonic() - opened < 5
        with socket.create_connection(("127.0.0.1", port)) as prompt:
            prompt.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            prompt.settimeout(5)
            assert prompt.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_dead_review_worker_is_a_503_and_replaced() -> None:
    import os

    from app.web.limits import ReviewPools

    pools = ReviewPools()
    try:
        with pytest.raises(Overloaded, match="stopped"):
            pools.apart(os._exit, 3, timeout=60)
        assert pools.apart(int, "42", timeout=60) == 42
    finally:
        pools.shutdown()


def test_the_review_worker_runs_at_a_lower_cpu_priority() -> None:
    from app.web.limits import WORKER_NICENESS, ReviewPools

    pools = ReviewPools()
    try:
        worker = pools.apart(os.nice, 0, timeout=60)
    finally:
        pools.shutdown()
    assert worker == min(os.nice(0) + WORKER_NICENESS, 19)


def stalled_request(
    app: Any, declared: int, first: bytes, release: asyncio.Event, statuses: list[int]
) -> Any:
    """POST /validate declaring ``declared`` bytes, sending ``first`` and then nothing until
    ``release`` is set (the ASGI call; ``statuses`` receives the response status)."""
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        sent += 1
        if sent == 1:
            return {"type": "http.request", "body": first, "more_body": True}
        await release.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "https", "path": "/validate", "raw_path": b"/validate", "query_string": b"",
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(declared).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 9443), "state": {}, "app": app,
    }  # fmt: skip
    return app(scope, receive, send)


def test_stalled_large_bodies_hold_only_what_they_sent_and_never_delay_small_reviews() -> None:
    # Before: two bodies declaring 4 MiB and sending one byte took the whole 8 MiB budget
    # by their Content-Length; every ordinary review then waited 2 s for a 503.
    app = create_app(Settings(auth="none"))
    budget = app.state.node_ipam.limits.budget

    async def scenario() -> None:
        release = asyncio.Event()
        stalled: list[int] = []
        big = budget.capacity // 2
        tasks = [
            asyncio.ensure_future(stalled_request(app, big, b"{", release, stalled))
            for _ in range(2)
        ]
        # A third sends 1 MiB past the free 64 KiB and stalls: it holds exactly that.
        sent = b" " * (1024 * 1024 + 64 * 1024)
        tasks.append(asyncio.ensure_future(stalled_request(app, big, sent, release, stalled)))
        await until(lambda: budget.used == 1024 * 1024)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            began = time.monotonic()
            response = await client.post("/validate", content=managed_review(1), headers=JSON)
            assert response.status_code == 200, response.text
            assert time.monotonic() - began < 1.5  # never waited for the 2 s deadline
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert budget.used == 0  # every share given back

    try:
        asyncio.run(scenario())
    finally:
        app.state.node_ipam.limits.pools.shutdown()


def test_small_reviews_never_wait_on_a_full_byte_budget() -> None:
    app = create_app(Settings(auth="none"))
    budget = app.state.node_ipam.limits.budget
    budget.used = budget.capacity  # large bodies in progress hold it all
    with AppClient(app) as client:
        response = client.post("/validate", content=managed_review(2), headers=JSON)
    assert response.status_code == 200, response.text


def test_ctrl_c_leaves_the_review_worker_quiet_and_alive(capfd: pytest.CaptureFixture[str]) -> None:
    # Before: Ctrl-C (SIGINT to the process group) printed the worker's KeyboardInterrupt
    # traceback amid serve's JSON logs, and broke the pool.
    pools = ReviewPools()
    try:
        worker = pools.apart(os.getpid, timeout=30)
        assert worker != os.getpid()
        status = Path(f"/proc/{worker}/status").read_text()
        ignored = int(status.split("SigIgn:")[1].split()[0], 16)
        assert ignored & (1 << (signal.SIGINT - 1)), "the worker does not ignore SIGINT"
        os.kill(worker, signal.SIGINT)
        time.sleep(0.5)  # a worker that does not ignore SIGINT is dead by now
        assert pools.apart(os.getpid, timeout=30) == worker
    finally:
        pools.shutdown()
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_accepted_connections_have_tcp_nodelay_so_a_response_never_waits_for_an_ack() -> None:
    # uvicorn sends a response's head and body in two writes; without TCP_NODELAY the body
    # waits for the client's delayed ACK (40 ms) on every kept-alive request. asyncio sets
    # it only when the listening socket's proto is IPPROTO_TCP (app.server._bind).
    from app.server import _bind

    listener = CappedListener.wrap(_bind("127.0.0.1", 0, flags="--port"), limit=2)
    seen: list[int] = []

    async def scenario() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    try:
        asyncio.run(scenario())
    finally:
        listener.close()
    assert seen and seen[0] != 0


def test_serve_freezes_its_start_up_objects_before_serving(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A full GC collection during the first Lists walked every import-time object and
    # paused the webhook (app.server: gc.freeze() once everything is built).
    import gc
    import types

    import app.server as server

    seen: list[int] = []
    monkeypatch.setattr(server, "api_client_for", lambda settings: (None, False))
    monkeypatch.setattr(server, "listen_health_probes", lambda settings: None)
    monkeypatch.setattr(server, "listen", lambda settings: server._bind("127.0.0.1", 0, flags="x"))
    monkeypatch.setattr(
        server, "build", lambda settings, **kw: (None, types.SimpleNamespace(), object())
    )
    monkeypatch.setattr(
        server._GracefulServer, "__init__", lambda self, config, **kw: None, raising=False
    )
    monkeypatch.setattr(
        server._GracefulServer, "run", lambda self, sockets: seen.append(gc.get_freeze_count())
    )
    settings = Settings(bind_address="127.0.0.1", health_probe_bind_address="0")
    gc.unfreeze()
    try:
        server.serve(settings)
    finally:
        gc.unfreeze()
    assert seen and seen[0] > 0
