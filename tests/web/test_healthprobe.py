"""The health-probe listener (``--health-probe-bind-address``, app/web/healthprobe.py):
the same answers as the main port's ``/healthz`` and ``/readyz``, on a thread of its own,
bounded in connections and time (docs/design.md §7.1)."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from app.config import InvalidSettings, Settings, from_flags
from app.web.app import create_app
from app.web.healthprobe import (
    CHECKS,
    MAX_PROBE_CONNECTIONS,
    HealthProbeServer,
    start_health_probes,
)
from app.web.routes.deps import AppState
from tests.web.conftest import AppClient, FakeController, cluster


def listening() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as serve binds it
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


@pytest.fixture
def controller() -> FakeController:
    return FakeController(cache=cluster())


@pytest.fixture
def state(controller: FakeController) -> AppState:
    app = create_app(Settings(auth="none"), controller=controller)
    app_state: AppState = app.state.node_ipam
    return app_state


@pytest.fixture
def probes(state: AppState) -> Iterator[HealthProbeServer]:
    server = start_health_probes(listening(), state=state, deadline=0.5)
    yield server
    server.stop()


def get(server: HealthProbeServer, path: str, timeout: float = 5) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{server.port}{path}", timeout=timeout)


def raw(server: HealthProbeServer, data: bytes) -> tuple[bytes, float]:
    """What the server sends back to ``data`` until it closes, and after how many seconds."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(data)
        started, answer = time.monotonic(), b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                answer += chunk
        return answer, time.monotonic() - started


def reset(conn: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a client that aborts does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def test_the_answers_are_the_main_ports_checks(
    probes: HealthProbeServer, controller: FakeController
) -> None:
    app = create_app(Settings(auth="none"), controller=controller)
    with AppClient(app) as main:
        for health, ready in (((True, ""), True), ((False, "watch stuck"), False)):
            controller.health, controller.is_ready = health, ready
            for path in ("/healthz", "/readyz"):
                here, there = get(probes, path), main.get(path)
                assert (here.status_code, here.text) == (there.status_code, there.text), path
                assert here.headers["content-type"].startswith("text/plain")
    assert get(probes, "/healthz").text == "unhealthy: watch stuck\n"
    assert get(probes, "/readyz").status_code == 503
    assert get(probes, "/metrics").status_code == 404, "probes only, nothing else"
    assert httpx.head(f"http://127.0.0.1:{probes.port}/readyz", timeout=5).status_code == 503


def test_a_silent_connection_is_shut_at_the_deadline(probes: HealthProbeServer) -> None:
    with socket.create_connection(("127.0.0.1", probes.port)) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the final CRLF
        slow.settimeout(10)
        opened = time.monotonic()
        assert slow.recv(64) == b""
        assert time.monotonic() - opened < 5
    assert get(probes, "/healthz").status_code == 200


def test_idle_connections_at_the_cap_give_way_to_a_probe(state: AppState) -> None:
    """16 idle connections (renewed as fast as they are shut) must not starve the kubelet:
    each new connection evicts the oldest one still waiting for its request."""
    server = start_health_probes(listening(), state=state, deadline=30)  # no deadline help
    idle: list[socket.socket] = []
    try:
        for _ in range(2 * MAX_PROBE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", server.port)))
            time.sleep(0.01)
        for _ in range(3):
            assert get(server, "/healthz", timeout=1).status_code == 200
            assert server.connections <= MAX_PROBE_CONNECTIONS
        for old in idle[:MAX_PROBE_CONNECTIONS]:  # the oldest were shut, long before 30 s
            old.settimeout(2)
            with contextlib.suppress(ConnectionResetError):
                assert old.recv(64) == b""
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_a_connection_mid_answer_is_never_evicted(
    probes: HealthProbeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the cap with every connection mid-answer, the new connection is the one closed."""
    release = threading.Event()

    def slow(state: AppState) -> tuple[int, str]:
        release.wait(5)
        return 200, "ok\n"

    monkeypatch.setitem(CHECKS, "/slow", slow)
    busy = [
        socket.create_connection(("127.0.0.1", probes.port), timeout=5)
        for _ in range(MAX_PROBE_CONNECTIONS)
    ]
    try:
        for conn in busy:
            conn.sendall(b"GET /slow HTTP/1.1\r\n\r\n")
        time.sleep(0.2)  # every handler is in slow()
        answer, _ = raw(probes, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert answer == b"", "closed at once: no connection could make room"
        release.set()
        for conn in busy:
            assert conn.recv(256).startswith(b"HTTP/1.0 200 OK\r\n")
    finally:
        release.set()
        for conn in busy:
            conn.close()


def test_a_reset_connection_is_a_debug_line_not_a_traceback(
    probes: HealthProbeServer,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="node_ipam_lb.healthprobe")
    for _ in range(3):  # reset while the server reads the request head
        conn = socket.create_connection(("127.0.0.1", probes.port))
        conn.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(0.05)
        reset(conn)
    for _ in range(20):  # reset right after the request: the answer meets the reset
        conn = socket.create_connection(("127.0.0.1", probes.port))
        conn.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        reset(conn)
    time.sleep(0.3)
    assert get(probes, "/healthz").status_code == 200, "still answering"
    assert "Traceback" not in capsys.readouterr().err
    errors = [r for r in caplog.records if "ConnectionResetError" in r.getMessage()]
    assert errors, "the resets during the request head are logged"
    ours = [r for r in caplog.records if r.name == "node_ipam_lb.healthprobe"]
    assert all(r.levelno == logging.DEBUG for r in ours)  # (httpx logs its own INFO lines)


def test_a_handler_failure_is_one_warning_line(
    probes: HealthProbeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(state: AppState) -> tuple[int, str]:
        raise RuntimeError("flag store gone")

    monkeypatch.setitem(CHECKS, "/healthz", broken)
    answer, _ = raw(probes, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert answer == b""
    time.sleep(0.1)
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "node_ipam_lb.healthprobe"
    ]
    assert [r.getMessage() for r in warnings] == [
        "health probe: RuntimeError from 127.0.0.1: flag store gone"
    ]
    assert not any(r.exc_info for r in warnings)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /healthz HTTP/2.0\r\n\r\n", b"505"),
        (b"GET /healthz HTTP/x\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", b"400"),  # TLS
        (b"GET /healthz\r\n", b"400"),  # HTTP/0.9: answered at once, not at the deadline
        (b"POST /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"501"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
    ],
)
def test_errors_are_one_plain_text_line_without_versions(
    probes: HealthProbeServer, request_bytes: bytes, status: bytes
) -> None:
    answer, took = raw(probes, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.0 " + status + b" "), answer[:200]
    assert b"Content-Type: text/plain; charset=utf-8" in lines
    assert b"Server: node-ipam-lb" in lines
    assert b"Python" not in answer and b"BaseHTTP" not in answer
    assert body.startswith(status + b" ") and body.endswith(b"\n") and body.count(b"\n") == 1
    assert took < 0.4, "answered, not left to the 0.5 s deadline"


def test_stop_releases_the_port(state: AppState) -> None:
    server = start_health_probes(listening(), state=state, deadline=1)
    port = server.port
    assert get(server, "/healthz").status_code == 200
    server.stop()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        again.bind(("127.0.0.1", port))  # fails while anything still listens there
        again.listen()


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("0", None),
        (":8081", ("", 8081)),
        ("127.0.0.1:9", ("127.0.0.1", 9)),
        ("[::1]:8081", ("::1", 8081)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_the_flag_takes_what_go_net_listen_takes(
    value: str, address: tuple[str, int] | None
) -> None:
    assert Settings(health_probe_bind_address=value).health_probe_address() == address


def test_the_default_is_controller_runtimes() -> None:
    assert Settings.model_fields["health_probe_bind_address"].default == ":8081"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("8081", "missing port in address"),
        ("bogus", "missing port in address"),
        ("[::1]", "missing port in address ([::1]:8081)"),
        ("::1:8081", "too many colons in address: an IPv6 host must be in brackets"),
        ("[::1", "missing ']' in address"),
        ("[::1]8081", "unexpected text after the bracketed host"),
        ("a]:1", "unexpected '[' or ']' in address"),
        ("host:65536", "invalid port '65536' (0-65535)"),
        ("host:x", "invalid port 'x'"),
        ("host:", "invalid port ''"),
        (":\u0668\u0660\u0668\u0661", "invalid port"),  # Arabic-Indic 8081: ASCII only
        (":\u00b2", "invalid port '\u00b2'"),  # superscript two: isdigit() but not int()
        ("", "missing port in address"),
    ],
)
def test_a_bad_address_is_a_start_up_error_naming_the_flag(value: str, reason: str) -> None:
    with pytest.raises(InvalidSettings) as raised:
        from_flags(Settings, {"health_probe_bind_address": value})
    message = str(raised.value)
    assert message.startswith(
        "invalid setting: --health-probe-bind-address (NODE_IPAM_HEALTH_PROBE_BIND_ADDRESS): "
    )
    assert reason in message
    assert message.count(repr(value)) == 1, "the value once, not twice"
    assert "Value error" not in message
