"""The health-probe listener: ``/healthz`` and ``/readyz`` on a port and thread of their own.

controller-runtime's manager serves its health probes on ``--health-probe-bind-address``
(default ``:8081``, plain HTTP, ``0`` disables it), apart from the webhook server, so a
kubelet probe never queues behind webhook work. This is the same: a
:class:`http.server.ThreadingHTTPServer` (stdlib) on its own thread, answering with the
checks of the main port's async routes (:func:`app.web.routes.health.liveness`,
:func:`~app.web.routes.health.readiness`: flag reads, safe from any thread). Under the
hostile loads of issue 14 the main port's event loop is busy decoding TLS and answering
rejections; this listener needs only the GIL for a few hundred microseconds per probe
(bench/README.md, ``bench_hostile``).

Bounded (docs/design.md §7.1): at most :data:`MAX_PROBE_CONNECTIONS` connections at once
(more are closed on arrival), one request per connection (HTTP/1.0, closed after the
answer), and a connection still open ``deadline`` seconds after it was accepted is shut
down, however slowly its client sends; nothing else (no body is read, no other path).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.web.routes.deps import AppState
from app.web.routes.health import liveness, readiness

log = logging.getLogger("node_ipam_lb.healthprobe")

MAX_PROBE_CONNECTIONS = 16
"""Connections served at once; a kubelet opens one per probe (startup, liveness, readiness)."""
POLL_SECONDS = 0.25
"""How often the accept loop looks for connections past their deadline."""

CHECKS: dict[str, Callable[[AppState], tuple[int, str]]] = {
    "/healthz": liveness,
    "/readyz": readiness,
}


class _ProbeHandler(BaseHTTPRequestHandler):
    """``GET``/``HEAD`` of ``/healthz`` or ``/readyz``; 404 for any other path."""

    server: HealthProbeServer
    protocol_version = "HTTP/1.0"  # one request per connection: closed after the answer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.deadline)  # per read; per connection: server

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        check = CHECKS.get(self.path.partition("?")[0])
        status, text = check(self.server.state) if check else (404, "404 page not found\n")
        data = text.encode()
        head = (
            f"{self.protocol_version} {status} {HTTPStatus(status).phrase}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n"
        )
        self.wfile.write(head.encode() + (data if body else b""))  # one send
        self.log_request(status)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("health probe: " + format, *args)


class HealthProbeServer(ThreadingHTTPServer):
    """The listener: ``state`` is the app's :class:`AppState` (what the checks read);
    ``deadline`` is the longest a connection stays open, in seconds."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, sock: socket.socket, *, state: AppState, deadline: float) -> None:
        """Serve on ``sock`` (bound and listening; this server owns it from now on)."""
        super().__init__(sock.getsockname()[:2], _ProbeHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()
        self.state = state
        self.deadline = deadline
        self._open: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on."""
        port: int = self.server_address[1]
        return port

    def start(self) -> None:
        """Serve on a daemon thread named ``health-probe`` until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name="health-probe"
        )
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, shut down the open connections and close the socket."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        with self._lock:
            for conn in list(self._open):
                _shut(conn)
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Close at once over :data:`MAX_PROBE_CONNECTIONS`; else serve on a thread."""
        with self._lock:
            full = len(self._open) >= MAX_PROBE_CONNECTIONS
            if not full:
                self._open[request] = time.monotonic() + self.deadline
        if full:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Forget the connection, then close it."""
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Every :data:`POLL_SECONDS`: shut down connections past their deadline (their
        handler's read then ends, and the handler closes them)."""
        now = time.monotonic()
        with self._lock:
            late = [conn for conn, deadline in self._open.items() if deadline <= now]
        for conn in late:
            _shut(conn)


def _shut(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by its handler
        conn.shutdown(socket.SHUT_RDWR)


def start_health_probes(
    sock: socket.socket, *, state: AppState, deadline: float
) -> HealthProbeServer:
    """Serve ``/healthz`` and ``/readyz`` of ``state`` on ``sock`` (bound, listening) on a
    thread of its own; a connection lives at most ``deadline`` seconds. Returns the running
    server (:meth:`HealthProbeServer.stop` ends it)."""
    server = HealthProbeServer(sock, state=state, deadline=deadline)
    server.start()
    return server
