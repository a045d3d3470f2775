"""The shutdown delay: after SIGTERM, keep answering until nothing sends here any more.

A Pod is deleted before the clients that reach it through its Service know: the
EndpointSlice controller drops the endpoint, then every kube-proxy (kube-apiserver's host's
too: webhook calls go to the Service's ClusterIP) rewrites its rules. A process that closes
its listener at SIGTERM refuses the calls sent in between, and once the Pod is gone they go
unanswered until the webhook's ``timeoutSeconds``; with ``failurePolicy: Ignore`` either way
admits the request unchecked (a rolling update let a malformed selector through, tests/cluster
``test_a_rollout_keeps_the_webhook_in_force``).

So ``serve --shutdown-delay-seconds N`` does what kube-apiserver's
``--shutdown-delay-duration`` does: on the first SIGTERM it sets :class:`Draining`, keeps
serving for N seconds, and only then starts uvicorn's graceful shutdown (a second SIGTERM,
or SIGINT, starts it at once). ``/readyz`` does not change: the endpoint of a Pod being
deleted is not ready anyway (the webhook Service lists Ready Pods only), and while it stays
``serving`` kube-proxy falls back to it when no endpoint is ready (KEP-1669: a single
replica evicted, every replica deleted at once), so the webhook stays in force then too. A
SIGTERM that arrives before the server runs (Python as a container's PID 1 ignores it until
a handler is installed) starts the delay too (:func:`catch_early_sigterm`). While
draining, every response carries ``Connection: close`` (:class:`CloseWhenDraining`), so a
client's kept-alive connection, which conntrack keeps pinned to this Pod whatever kube-proxy
now says, ends after its answer and the client's next call opens one through the new rules;
Go's ``net/http`` (kube-apiserver's webhook client) does not retry a POST on a kept-alive
connection the server closed while idle, so a connection is closed only after an answer that
says so. An N above ``idle_timeout_seconds`` also lets every idle connection time out before
the listener closes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

# ASGI's types (the spec's names, as starlette.types spells them).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CLOSE = (b"connection", b"close")


class Draining:
    """Whether the shutdown delay has started, and when. Set from the signal handler (a
    plain attribute write, no lock: a handler must not wait for a lock its own thread may
    hold), read by ``/readyz`` on the health-probe thread and by every response."""

    def __init__(self) -> None:
        self._since: float | None = None

    def start(self, now: float | None = None) -> None:
        """Start draining (a second call changes nothing); ``now`` is monotonic seconds,
        default the clock."""
        if self._since is None:
            self._since = time.monotonic() if now is None else now

    def is_set(self) -> bool:
        """True once :meth:`start` ran."""
        return self._since is not None

    @property
    def since(self) -> float | None:
        """Monotonic seconds when draining started, ``None`` before."""
        return self._since


def catch_early_sigterm(draining: Draining) -> Callable[[], None]:
    """Until uvicorn installs its own handlers, a SIGTERM starts ``draining`` (counted from
    then) instead of being lost: as PID 1 of a container, the default disposition ignores
    it, and the Pod would wait for SIGKILL. Returns the function that puts the previous
    handler back. Main thread only (``signal.signal``)."""
    previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: draining.start())

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


class CloseWhenDraining:
    """ASGI middleware: while ``draining`` is set, add ``Connection: close`` to each HTTP
    response's headers (unless present), so uvicorn's h11 protocol closes the connection
    once the answer is sent (RFC 9112 §9.6) and the client does not reuse it."""

    def __init__(self, app: ASGIApp, *, draining: Draining) -> None:
        self.app = app
        self.draining = draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        draining = self.draining

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and draining.is_set():
                headers: list[Any] = list(message.get("headers", ()))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, CLOSE]}
            await send(message)

        await self.app(scope, receive, send_closing)
