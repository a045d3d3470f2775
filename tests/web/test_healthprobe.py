"""The health-probe listener (``--health-probe-bind-address``, app/web/healthprobe.py):
the same answers as the main port's ``/healthz`` and ``/readyz``, on a thread of its own,
bounded in connections and time (docs/design.md §7.1)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from app.config import InvalidSettings, Settings, from_flags
from app.web.app import create_app
from app.web.healthprobe import MAX_PROBE_CONNECTIONS, HealthProbeServer, start_health_probes
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


def get(server: HealthProbeServer, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{server.port}{path}", timeout=5)


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


def test_connections_over_the_cap_are_closed_at_once_and_the_port_recovers(
    probes: HealthProbeServer,
) -> None:
    idle = [
        socket.create_connection(("127.0.0.1", probes.port)) for _ in range(MAX_PROBE_CONNECTIONS)
    ]
    try:
        time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", probes.port)) as extra:
            extra.settimeout(2)  # well under the 0.5 s deadline + poll if closed at once
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert extra.recv(64) == b""
            assert time.monotonic() - started < 0.4
    finally:
        for sock in idle:
            sock.close()
    time.sleep(1.0)  # the idle ones are past their deadline and gone
    assert get(probes, "/healthz").status_code == 200


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


@pytest.mark.parametrize("value", ["8081", "::1:8081", "host:65536", "host:x", "host:", ""])
def test_a_bad_address_is_a_start_up_error_naming_the_flag(value: str) -> None:
    with pytest.raises(InvalidSettings, match="--health-probe-bind-address"):
        from_flags(Settings, {"health_probe_bind_address": value})
