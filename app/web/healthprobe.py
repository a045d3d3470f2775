"""The health-probe listener: ``/healthz`` and ``/readyz`` on a port and thread of their own.

controller-runtime's manager serves its health probes on ``--health-probe-bind-address``
(default ``:8081``, plain HTTP, ``0`` disables it), apart from the webhook server, so a
kubelet probe never queues behind webhook work. This is the same: a
:class:`http.server.ThreadingHTTPServer` (stdlib) on its own thread, answering with the
checks of the main port's async routes (:func:`app.web.routes.health.liveness`,
:func:`~app.web.routes.health.readiness`: flag reads, safe from any thread). Under the
hostile loads of docs/design.md §7.1 the main port's event loop is busy decoding TLS and answering
rejections; this listener needs only the GIL for a few hundred microseconds per probe
(bench/README.md, ``bench_hostile``).

Bounded (docs/design.md §7.1): at most :data:`MAX_PROBE_CONNECTIONS` connections waiting
for or being answered at once; when one more arrives, the oldest connection still waiting for
its request is shut down to make room (a kubelet sends its request as soon as it connects,
so what is evicted is a client holding a connection idle, never the next probe); only when
every connection is mid-answer is the new one closed. One request per connection (HTTP/1.0,
closed after the answer), and a connection still open ``deadline`` seconds after it was
accepted is shut down, however slowly its client sends; nothing else (no body is read, no
other path). Every other request gets one plain-text line (``400 Bad request syntax
(...)``), never the stdlib's HTML page or its Python version; a client's connection error
(reset, broken pipe) is one DEBUG log line, any other error one WARNING line, never a
traceback on stderr.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
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
MAX_PROBE_HANDLERS = 2 * MAX_PROBE_CONNECTIONS
"""Handler threads at most: the served connections plus evicted ones whose handler has not
yet seen its end of file (it does at its next read, at once)."""
HEAD_DEADLINE_SECONDS = 2.0
"""Longest a probe connection lives (with ``request_head_timeout_seconds`` if shorter): the
kubelet sends its request at once and gives up after the probe's ``timeoutSeconds``."""
POLL_SECONDS = 0.25
"""How often the accept loop looks for connections past their deadline."""

CHECKS: dict[str, Callable[[AppState], tuple[int, str]]] = {
    "/healthz": liveness,
    "/readyz": readiness,
}


class _ProbeHandler(BaseHTTPRequestHandler):
    """``GET``/``HEAD`` of ``/healthz`` or ``/readyz``; 404 for any other path."""

    server: HealthProbeServer
    raw_requestline: bytes  # set by handle_one_request (not in typeshed)
    protocol_version = "HTTP/1.0"  # one request per connection: closed after the answer
    # Errors before the version is read get a status line and headers (the stdlib's default,
    # HTTP/0.9, sends a bare body).
    default_request_version = "HTTP/1.0"
    server_version = "node-ipam-lb"  # not BaseHTTP/0.6 Python/3.x.y
    sys_version = ""
    error_message_format = "%(code)d %(message)s\n"
    error_content_type = "text/plain; charset=utf-8"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.deadline)  # per read; per connection: server

    def version_string(self) -> str:
        """The ``Server`` header: our name, no Python version."""
        return self.server_version

    def parse_request(self) -> bool:
        """The stdlib's parsing, except that an HTTP/0.9 request line (``GET /healthz``, no
        version) gets 400 at once: the stdlib would wait for headers until the deadline."""
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if len(requestline.split()) != 2:
            return super().parse_request()
        self.command, self.requestline, self.close_connection = "", requestline, True
        self.request_version = self.default_request_version
        self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 request (no HTTP version)")
        return False

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        self.server.answering(self.connection)
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
        self._open: dict[socket.socket, float] = {}  # every handler's connection: its deadline
        self._waiting: dict[socket.socket, None] = {}  # no request yet: evictable, oldest first
        self._evicted: set[socket.socket] = set()  # shut to make room, handler not yet ended
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def connections(self) -> int:
        """Connections whose handler is running (evicted ones included until it ends)."""
        with self._lock:
            return len(self._open)

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
        """Serve on a thread of its own; at :data:`MAX_PROBE_CONNECTIONS` first shut down the
        oldest connection still waiting for its request (its handler then reads end of file
        and ends). Closed at once when every connection is mid-answer or
        :data:`MAX_PROBE_HANDLERS` handlers are still running."""
        victim = None
        with self._lock:
            served = len(self._open) - len(self._evicted)
            full = len(self._open) >= MAX_PROBE_HANDLERS
            if not full and served >= MAX_PROBE_CONNECTIONS:
                victim = next(iter(self._waiting), None)
                full = victim is None
            if victim is not None:
                del self._waiting[victim]
                self._evicted.add(victim)
            if not full:
                self._open[request] = time.monotonic() + self.deadline
                self._waiting[request] = None
        if victim is not None:
            log.debug("health probe: shut the oldest idle connection to make room")
            _shut(victim)
        if full:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def answering(self, request: socket.socket) -> None:
        """``request``'s request head is read: no longer evictable."""
        with self._lock:
            self._waiting.pop(request, None)

    def shutdown_request(self, request: Any) -> None:
        """Forget the connection, then close it."""
        with self._lock:
            self._open.pop(request, None)
            self._waiting.pop(request, None)
            self._evicted.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line for an exception of a handler (the stdlib prints a traceback to
        stderr): DEBUG for the client's connection error (``ConnectionResetError``,
        ``BrokenPipeError``, any other ``OSError`` of its socket), else WARNING, with the
        exception's type and message."""
        err = sys.exc_info()[1]
        level = logging.DEBUG if isinstance(err, OSError) else logging.WARNING
        log.log(
            level,
            "health probe: %s from %s: %s",
            type(err).__name__,
            client_address[0] if client_address else "?",
            err,
        )

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
