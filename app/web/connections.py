"""Connection bounds for ``serve`` (docs/design.md §7.1): a cap on open connections, a deadline
for each request head, an idle timeout.

- :class:`CappedListener`: the listening socket. Its ``accept`` (what asyncio calls for each
  pending connection) closes a new connection at once when ``limit`` connections are open
  already, before any TLS handshake: a refused connection costs no TLS buffers (asyncio
  allocates about 256 KiB per TLS connection), so memory stays bounded however many
  connections are attempted. The accepted ones are counted until their socket is closed.
- :func:`protocol_class`: uvicorn's h11 protocol with a request-head deadline. Each
  connection must deliver a complete request head within ``head_timeout`` seconds of
  being opened or of its previous response; otherwise it is aborted. uvicorn's own
  keep-alive timeout stops at the first byte received, so a client sending one header
  byte every few seconds would hold its connection forever (docs/design.md §7.1).
- The idle timeout is uvicorn's ``timeout_keep_alive``, set in :mod:`app.server`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("node_ipam_lb.connections")


class CappedListener(socket.socket):
    """A listening socket that accepts at most ``limit`` open connections at a time.

    Build it with :meth:`wrap` from a bound, listening socket. ``refused`` counts the
    connections closed on arrival because the cap was reached.
    """

    def wrap_limit(self, limit: int) -> None:
        """Set the cap (called once by :meth:`wrap`)."""
        self.limit = limit
        self.open = 0
        self.refused = 0
        self._count_lock = threading.Lock()

    @classmethod
    def wrap(cls, sock: socket.socket, *, limit: int) -> CappedListener:
        """A :class:`CappedListener` taking over ``sock`` (which must not be used after).

        Raises:
            ValueError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ValueError(f"limit: Invalid value: {limit}: must be at least 1")
        listener = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        listener.wrap_limit(limit)
        return listener

    def accept(self) -> tuple[socket.socket, Any]:
        """The next connection under the cap; those beyond it are closed as they come.

        Raises:
            BlockingIOError: no connection is pending (as for any non-blocking socket).
        """
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]
            with self._count_lock:
                admitted = self.open < self.limit
                if admitted:
                    self.open += 1
                else:
                    self.refused += 1
            if not admitted:
                socket.socket(self.family, self.type, self.proto, fileno=fd).close()
                if self.refused % 1000 == 1:
                    log.warning(
                        "refusing connections: %d open (the cap); %d refused so far",
                        self.limit,
                        self.refused,
                    )
                continue
            connection = _CountedSocket(self.family, self.type, self.proto, fileno=fd)
            connection.listener = self
            if socket.getdefaulttimeout() is None and self.gettimeout():
                connection.setblocking(True)
            return connection, address

    def released(self) -> None:
        """One accepted connection was closed (called by its socket, once)."""
        with self._count_lock:
            self.open -= 1


class _CountedSocket(socket.socket):
    """An accepted connection that tells its listener when it is closed."""

    listener: CappedListener | None = None

    def close(self) -> None:
        listener, self.listener = self.listener, None
        try:
            super().close()
        finally:
            if listener is not None:
                listener.released()


def protocol_class(*, head_timeout: float) -> type[H11Protocol]:
    """uvicorn's :class:`H11Protocol` with a request-head deadline of ``head_timeout`` s.

    Raises:
        ValueError: ``head_timeout`` is not positive.
    """
    if head_timeout <= 0:
        raise ValueError(f"head_timeout: Invalid value: {head_timeout}: must be positive")

    class HeadDeadlineH11Protocol(_HeadDeadlineH11Protocol):
        HEAD_TIMEOUT = head_timeout

    return HeadDeadlineH11Protocol


class _HeadDeadlineH11Protocol(H11Protocol):
    HEAD_TIMEOUT = 5.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
            self._head_timer.cancel()  # the head is complete
            self._head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.HEAD_TIMEOUT, self._head_deadline)

    def _head_deadline(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("closing a connection: no complete request head in %gs", self.HEAD_TIMEOUT)
            self.transport.abort()
