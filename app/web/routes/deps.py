"""Shared state and dependencies of the routers (injected with ``Depends``/``Annotated``).

The routers see the controller and its cache through the small protocols below, so
tests can hand in in-memory stand-ins (fakes over mocks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Protocol

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from app.config import ADMISSION_BODY_LIMIT, Settings
from app.core.decision import Decider
from app.core.hazards import Hazard
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex
from app.core.options import SelectionSettings
from app.core.pools import PoolSet
from app.core.ports import PortLookup
from app.core.views import EndpointSliceView, NodeView, ServiceView
from app.web.auth import AccessError, Authorizer, NoReviewSlot
from app.web.draining import Draining
from app.web.limits import HEAVY_QUEUE, BodyBudget, ReviewPools, Wakeup

MAX_BODY_BYTES = ADMISSION_BODY_LIMIT
"""Cap on an AdmissionReview body (:data:`app.config.ADMISSION_BODY_LIMIT`, 6 MiB + 64 KiB):
object and oldObject each at most kube-apiserver's 3 MiB request body limit."""
BODY_READ_SECONDS = 10.0
"""kube-apiserver's default webhook ``timeoutSeconds``: a body slower than this is abandoned."""
ACCESS_REVIEW_WAIT_SECONDS = 1.0
"""How long a request needing a TokenReview/SubjectAccessReview waits (on the event loop,
no thread) for one of the ``max_access_reviews`` slots before its 503: a scraper arriving
while reviews are out gets in when one ends; a flood of new tokens gets at most one answer
per connection per wait (docs/design.md §7.1). Well under Prometheus' 10 s scrape timeout."""


class CacheLike(PortLookup, Protocol):
    """What the routers read from :class:`app.controller.cache.ClusterCache`, its port
    index included (:class:`app.core.ports.PortLookup`, for the admission port checks)."""

    @property
    def synced(self) -> bool: ...
    def unsynced(self) -> tuple[str, ...]: ...
    def nodes(self) -> list[NodeView]: ...
    def node_index(self) -> NodeIndex: ...
    def service(self, namespace: str, name: str) -> ServiceView | None: ...
    def services(self) -> list[ServiceView]: ...
    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]: ...
    def pools(self) -> PoolSet: ...
    def namespace_labels(self, name: str) -> dict[str, str] | None: ...


class ControllerLike(Protocol):
    """What the app drives of :class:`app.controller.controller.Controller`."""

    @property
    def cache(self) -> CacheLike: ...
    def start(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...
    def ready(self) -> bool: ...
    def healthy(self) -> tuple[bool, str]: ...
    def is_leader(self) -> bool: ...


class BackgroundLike(Protocol):
    """A background task the app checks in ``/healthz`` and stops on shutdown
    (:class:`app.web.certsync.CertSync`)."""

    def healthy(self) -> tuple[bool, str]: ...
    def stop(self) -> None: ...


class ReadinessLike(Protocol):
    """A condition ``/readyz`` waits for besides the cache
    (:class:`app.web.webhookready.CaBundleReadiness`): ``(True, "")`` or ``(False, why)``,
    from a cached verdict (never blocks: read by the probe thread and the event loop)."""

    def ready(self) -> tuple[bool, str]: ...


def no_hazard(load_balancer_class: str | None) -> Hazard | None:
    """The :attr:`AppState.kube_proxy_hazard` of an app without a controller: none known."""
    return None


@dataclass(frozen=True, slots=True)
class AppState:
    """Everything a request handler needs; stored on ``app.state.node_ipam``.

    ``clock`` is the wall clock (epoch seconds) passed to the selection as ``now``;
    ``decider`` is the decision path the webhook's warnings and preview decide with
    (:class:`app.core.decision.Decider`; its memo is kept across requests, apart from the
    reconciler's); ``background`` are the
    tasks besides the controller that ``/healthz`` checks; ``readiness`` the conditions
    besides the synced cache that ``/readyz`` waits for; ``kube_proxy_hazard`` gives the
    controller's datapath hazard concerning a Service of that class while it holds, else
    ``None`` (kube-proxy's ipvs mode or Cilium's wildcard entries, docs/design.md §4.10,
    §4.12), whose message preview adds to the Service when it gets addresses; ``unhealthy`` the
    nodes failing their health checks as the controller last decided (§4.11: node name ->
    why; empty off the leader or with health checks off), which preview selects with;
    ``draining`` is set once SIGTERM starts the shutdown delay (:mod:`app.web.draining`:
    each response closes its connection).
    """

    settings: Settings
    selection: SelectionSettings
    controller: ControllerLike | None
    cache: CacheLike | None
    authorizer: Authorizer
    clock: Callable[[], float]
    decider: Decider
    background: tuple[BackgroundLike, ...] = ()
    readiness: tuple[ReadinessLike, ...] = ()
    limits: RequestLimits = field(default_factory=lambda: RequestLimits())
    kube_proxy_hazard: Callable[[str | None], Hazard | None] = no_hazard
    unhealthy: Callable[[], Mapping[str, str]] = lambda: NO_UNHEALTHY
    draining: Draining = field(default_factory=Draining)


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What admission requests may hold at once (docs/design.md §7.1): ``budget`` bounds the
    body bytes in progress, ``heavy`` the large reviews queued or running (one unit each),
    ``pools`` the decision threads and the worker process; ``review_slots`` wakes the
    requests waiting for an access-review slot (:func:`require_access`)."""

    budget: BodyBudget = field(default_factory=lambda: BodyBudget(2 * ADMISSION_BODY_LIMIT))
    heavy: BodyBudget = field(default_factory=lambda: BodyBudget(HEAVY_QUEUE))
    pools: ReviewPools = field(default_factory=ReviewPools)
    review_slots: Wakeup = field(default_factory=Wakeup)


async def get_state(request: Request) -> AppState:
    """The :class:`AppState` of the running app (``async``: FastAPI would run a plain
    ``def`` dependency in the thread pool, a thread hop per request for an attribute read)."""
    state: AppState = request.app.state.node_ipam
    return state


State = Annotated[AppState, Depends(get_state)]


async def require_access(request: Request, state: State) -> None:
    """Bearer-token check for preview and ``/metrics``: decided on the event loop from
    the authorizer's caches (no token, a rejected token, a cached decision), in a thread
    only to send a TokenReview/SubjectAccessReview (:meth:`app.web.auth.Authorizer.begin`;
    docs/design.md §7.1: a flood of random tokens must not cost a thread-pool hop per rejection).
    When every review slot is taken, the request waits on the loop, holding no thread, up
    to :data:`ACCESS_REVIEW_WAIT_SECONDS` for one to end, then gets 503: a flood of new
    tokens is answered at most once per connection and wait, not as fast as it is sent.

    Raises:
        HTTPException: 401/403 (or 503 when access cannot be reviewed now).
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" else None
    verb, path = request.method.lower(), request.url.path
    slots = state.limits.review_slots
    try:
        deadline = asyncio.get_running_loop().time() + ACCESS_REVIEW_WAIT_SECONDS
        while True:
            try:
                review = state.authorizer.begin(token=bearer, verb=verb, path=path)
                break
            except NoReviewSlot:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise
                with contextlib.suppress(TimeoutError):  # one last try, then the 503
                    await slots.wait(remaining)
        if review is not None:
            try:
                await run_in_threadpool(review.run)
            finally:
                review.abandon()  # frees the slot only if run never started
                slots.notify_all()  # the slot is free: waiting requests try again
    except AccessError as err:
        headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
        raise HTTPException(status_code=err.status, detail=err.reason, headers=headers) from err


Protected = Depends(require_access)


class BodyError(ValueError):
    """The request body cannot be read; ``str(err)`` is the reason (HTTP 400)."""


class BodyTooLarge(BodyError):
    """The request body exceeds the route's limit (HTTP 413 where the route says so)."""


class BodyTimeout(BodyError):
    """The request body did not arrive within :data:`BODY_READ_SECONDS` (HTTP 408 Request
    Timeout, RFC 9110 §15.5.9: the server gave up waiting for the request)."""


class UnsupportedMediaType(BodyError):
    """The request's ``Content-Type`` is not one the route reads (HTTP 415, RFC 9110
    §15.5.16)."""


def declared_length(request: Request, *, limit: int = MAX_BODY_BYTES) -> int | None:
    """The request's ``Content-Length`` (``None`` without one).

    Raises:
        BodyTooLarge: it is not a number or exceeds ``limit`` (checked before any read).
    """
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    if not declared.isdigit() or int(declared) > limit:
        raise BodyTooLarge(f"body: Too long: Content-Length {declared} exceeds {limit} bytes")
    return int(declared)


async def read_body(
    request: Request,
    *,
    limit: int = MAX_BODY_BYTES,
    received: Callable[[int], Awaitable[None]] | None = None,
) -> bytes:
    """Read the body, refusing more than ``limit`` bytes or a sender slower than 10 s.

    ``Content-Length`` is checked before reading; without it the bytes are counted as
    they arrive and reading stops at the first chunk past ``limit`` (the rest is never
    read, so an oversized body costs at most ``limit`` plus one chunk). ``received``, when
    given, is awaited with the byte count so far after each chunk arrives (before the
    next is read): the admission routes grow their share of the byte budget there, so a
    sender holds what it sent, not what it declared (docs/design.md §7.1).

    Raises:
        BodyTooLarge: too large (by ``Content-Length`` or by count).
        BodyTimeout: not received within :data:`BODY_READ_SECONDS`.
        Exception: whatever ``received`` raised.
    """
    declared_length(request, limit=limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_READ_SECONDS):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"body: Too long: more than {limit} bytes")
                chunks.append(chunk)
                if received is not None:
                    await received(size)
    except TimeoutError as err:
        raise BodyTimeout(f"body: not received within {BODY_READ_SECONDS:g} s") from err
    return b"".join(chunks)


def media_type(request: Request) -> str:
    """The request's media type, lower-cased, without parameters (``application/json``)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
