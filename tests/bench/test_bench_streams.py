"""The benchmarks' watches end cleanly: :func:`bench.procs.stop_stream` under
:class:`bench.realapi.IngressWatch` (and so bench_peer's ``StatusWatch``)."""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.realapi import IngressWatch


class _IdleWatch(socketserver.BaseRequestHandler):
    """Answers one GET with the head of a chunked 200 (once ``head`` is set) and then
    sends nothing: an idle watch."""

    release: threading.Event
    head: threading.Event

    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        self.head.wait(30)
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.release.wait(30)


class _StubApi:
    def __init__(self, url: str) -> None:
        self.url = url

    def list_all(self, path: str) -> tuple[list[dict[str, Any]], str]:
        return [], "1"

    def client(self, *, timeout: float | None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)


@pytest.fixture
def head() -> threading.Event:
    """Set: the server sends the answer's head."""
    return threading.Event()


@pytest.fixture
def idle_watch_server(head: threading.Event) -> Iterator[str]:
    release = threading.Event()
    handler = type("Handler", (_IdleWatch,), {"release": release, "head": head})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def _pending_watch(url: str) -> IngressWatch:
    """An IngressWatch with one Service still pending, so that its reader thread runs."""
    return IngressWatch(
        _StubApi(url),  # type: ignore[arg-type]
        {"ns/svc": [{"ip": "10.0.0.1"}]},
        timeout=30,
    )


def test_close_returns_only_once_the_reader_has_ended(
    idle_watch_server: str, head: threading.Event
) -> None:
    # Before: close() closed the client under the thread blocked in recv; the freed file
    # descriptor went to the next connection (the next controller's watch), whose TLS
    # stream the old thread then read from: "[SSL: WRONG_VERSION_NUMBER]" at 5,000 Nodes.
    watch = _pending_watch(idle_watch_server)
    head.set()
    deadline = time.monotonic() + 5
    while watch._socket is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch._socket is not None, "the watch never got its answer's head"
    sock = watch._socket
    assert watch._thread.is_alive()
    began = time.monotonic()
    watch.close()
    assert not watch._thread.is_alive(), "close() returned with the reader still in recv"
    assert time.monotonic() - began < 5
    assert watch._finished.is_set() and watch._error is not None
    assert sock.fileno() == -1  # closed by the client, after the reader ended
    with pytest.raises(RuntimeError, match="watch on Services failed"):
        watch.wait(0.1)


def test_close_before_the_answer_ends_the_reader_once_the_head_arrives(
    idle_watch_server: str, head: threading.Event
) -> None:
    # close() that finds no socket yet (the answer's head not read) must still end the
    # reader: it sees the flag once the head is in, instead of reading for good.
    watch = _pending_watch(idle_watch_server)
    began = time.monotonic()
    closer = threading.Thread(target=watch.close)
    closer.start()  # finds no socket: the head has not been sent
    time.sleep(0.2)
    head.set()
    closer.join(15)
    assert not closer.is_alive()
    assert time.monotonic() - began < 5, "close() waited out its timeout"
    assert not watch._thread.is_alive(), "the reader kept reading after close()"
