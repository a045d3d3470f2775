"""Bearer-token access control for preview and ``/metrics``.

Follows controller-runtime's ``pkg/metrics/filters.WithAuthenticationAndAuthorization``:
the token is checked with a ``TokenReview``, access with a ``SubjectAccessReview`` on the
non-resource URL (verb = lower-cased HTTP method, path = request path). Results are cached
briefly (authentication 1 min, a rejected token 10 s; allow 5 min, deny 30 s) so a scraper
does not cost two API calls per request, keyed by the SHA-256 of the token (never the token
itself), in caches bounded by entries (oldest dropped first; rejected tokens in their own
cache, so a flood of random tokens cannot push out the good ones). At most
``max_in_flight`` reviews are outstanding at once; beyond that a request gets 503 at once
instead of holding a thread (docs/design.md §7.1). 401 for a missing or rejected token, 403 for a
denial.

This module holds the caching and the decision only: the two requests go through the
client layer, :class:`app.kube.client.ReviewAPI` (``KubernetesAPI`` in ``serve``), as raw JSON.

The check comes in two parts so that the web layer answers on its event loop whatever
needs no API call (docs/design.md §7.1: a flood of random tokens is ~650 rejections a second, each a
thread-pool hop otherwise): :meth:`KubernetesAuthorizer.begin` decides from the caches
(no token, a rejected token, a cached decision) or takes a review slot (503 when none is
free) and returns a :class:`PendingReview`, whose :meth:`~PendingReview.run` sends the
TokenReview/SubjectAccessReview in a thread. :meth:`~KubernetesAuthorizer.check` is both
in one call.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.kube.client import ReviewAPI

log = logging.getLogger("node_ipam_lb.auth")

TOKEN_TTL_SECONDS = 60.0
REJECTED_TOKEN_TTL_SECONDS = 10.0
"""A token the API server rejected is not reviewed again for this long (the failure TTL of
client-go's cached token authenticator, ``tokencache``, is 10 s too)."""
MAX_ACCESS_REVIEWS_IN_FLIGHT = 8
ALLOW_TTL_SECONDS = 300.0
DENY_TTL_SECONDS = 30.0
_MAX_ENTRIES = 4096


class AccessError(Exception):
    """Access refused: ``status`` is 401 (unauthenticated) or 403 (forbidden)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class NoReviewSlot(AccessError):
    """503: ``max_in_flight`` reviews are outstanding; a caller that can wait without
    holding a thread (the event loop) may try again when one ends."""

    def __init__(self, max_in_flight: int) -> None:
        super().__init__(503, f"cannot review access now: {max_in_flight} reviews in flight")


@dataclass(frozen=True, slots=True)
class User:
    """The authenticated user as TokenReview reports it (``status.user``)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


class Review(Protocol):
    """The part of a check that needs the API server (:class:`PendingReview`)."""

    def run(self) -> None:
        """Send the reviews (blocking: call it in a thread); return when allowed, raise
        :class:`AccessError` otherwise. Frees the review slot."""

    def abandon(self) -> None:
        """Free the review slot if :meth:`run` never started (the request went away)."""


class Authorizer(Protocol):
    """Decides whether a request to ``path`` with ``verb`` may proceed."""

    def check(self, *, token: str | None, verb: str, path: str) -> None:
        """Return when allowed; raise :class:`AccessError` otherwise (may block on the
        API server: :meth:`begin` + :meth:`Review.run` in one call)."""

    def begin(self, *, token: str | None, verb: str, path: str) -> Review | None:
        """Without blocking: ``None`` when allowed now, :class:`AccessError` when refused
        now, else the :class:`Review` to run in a thread."""


class AllowAll:
    """``--auth none``: every request proceeds (local development with a kubeconfig)."""

    def check(self, *, token: str | None, verb: str, path: str) -> None:
        """Allow everything."""

    def begin(self, *, token: str | None, verb: str, path: str) -> Review | None:
        """Allow everything, now."""
        return None


class _TTLCache:
    """A small thread-safe map whose entries expire ``ttl`` seconds after being set; at
    most ``max_entries``, the oldest dropped first."""

    def __init__(self, clock: Callable[[], float], *, max_entries: int = _MAX_ENTRIES) -> None:
        self._clock = clock
        self._entries: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._max = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any) -> tuple[bool, Any]:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0] <= self._clock():
                self._entries.pop(key, None)
                return False, None
            return True, hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        with self._lock:
            self._entries.pop(key, None)
            while len(self._entries) >= self._max:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = (self._clock() + ttl, value)


class KubernetesAuthorizer:
    """``--auth kubernetes``: TokenReview + SubjectAccessReview with brief caching."""

    def __init__(
        self,
        api: ReviewAPI,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_in_flight: int = MAX_ACCESS_REVIEWS_IN_FLIGHT,
    ):
        self._api = api
        self._tokens = _TTLCache(clock)
        self._rejected = _TTLCache(clock)
        self._decisions = _TTLCache(clock)
        self._in_flight = threading.BoundedSemaphore(max_in_flight)
        self._max_in_flight = max_in_flight

    def check(self, *, token: str | None, verb: str, path: str) -> None:
        """Authenticate ``token`` and authorize ``verb`` on ``path`` (:meth:`begin`, then
        the reviews it needs, in the calling thread).

        Raises:
            AccessError: 401 without a token or when TokenReview rejects it; 403 when the
                SubjectAccessReview denies; 503 (not cached) when the API server cannot
                be asked, or ``max_in_flight`` reviews are already outstanding.
        """
        review = self.begin(token=token, verb=verb, path=path)
        if review is not None:
            review.run()

    def begin(self, *, token: str | None, verb: str, path: str) -> PendingReview | None:
        """What the caches decide, without blocking (safe on an event loop): ``None`` when
        a cached decision allows; else a :class:`PendingReview` holding one of the
        ``max_in_flight`` review slots, to :meth:`~PendingReview.run` in a thread.

        Raises:
            AccessError: 401 without a token or for a token rejected within
                :data:`REJECTED_TOKEN_TTL_SECONDS`; 403 for a cached denial;
                :class:`NoReviewSlot` (503) when no review slot is free (checked only when
                a review is needed).
        """
        if not token:
            raise AccessError(401, "Unauthorized: a bearer token is required")
        digest = hashlib.sha256(token.encode()).hexdigest()
        rejected, _ = self._rejected.get(digest)
        if rejected:
            raise AccessError(401, "Unauthorized: the bearer token was rejected")
        found, user = self._tokens.get(digest)
        if found:
            assert isinstance(user, User)
            decided, allowed = self._decisions.get((digest, verb, path))
            if decided:
                self._raise_unless(allowed, user, verb, path)
                return None
        if not self._in_flight.acquire(blocking=False):
            raise NoReviewSlot(self._max_in_flight)
        known = user if found else None
        return PendingReview(
            lambda: self._review(token=token, digest=digest, verb=verb, path=path, user=known),
            release=self._in_flight.release,
        )

    def _review(self, *, token: str, digest: str, verb: str, path: str, user: User | None) -> None:
        """The API calls :meth:`begin` could not avoid (its review slot is held)."""
        if user is None:
            user = self._ask(lambda: token_review(self._api, token))
            if user is None:
                self._rejected.put(digest, True, REJECTED_TOKEN_TTL_SECONDS)
                raise AccessError(401, "Unauthorized: the bearer token was rejected")
            self._tokens.put(digest, user, TOKEN_TTL_SECONDS)
        key = (digest, verb, path)
        found, allowed = self._decisions.get(key)
        if not found:
            reviewed = user  # bound for the lambda (mypy: not None from here)
            allowed = self._ask(
                lambda: access_review(self._api, user=reviewed, verb=verb, path=path)
            )
            self._decisions.put(key, allowed, ALLOW_TTL_SECONDS if allowed else DENY_TTL_SECONDS)
        self._raise_unless(allowed, user, verb, path)

    @staticmethod
    def _raise_unless(allowed: Any, user: User, verb: str, path: str) -> None:
        if not allowed:
            raise AccessError(403, f'Forbidden: user "{user.username}" cannot {verb} path "{path}"')

    @staticmethod
    def _ask(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as err:  # any API failure is "cannot decide now", never a 500
            log.warning("access review failed: %s", err)
            raise AccessError(503, f"cannot review access now: {err}") from err


class PendingReview:
    """A check that needs the API server, holding one review slot of a
    :class:`KubernetesAuthorizer` until :meth:`run` ends or :meth:`abandon` frees it."""

    def __init__(self, work: Callable[[], None], *, release: Callable[[], None]) -> None:
        """``work`` sends the reviews; ``release`` frees the slot (called exactly once)."""
        self._work = work
        self._release = release
        self._lock = threading.Lock()
        self._state = "pending"  # -> "running" -> "done", or -> "abandoned"

    def run(self) -> None:
        """Send the TokenReview (unless the token is cached) and the SubjectAccessReview
        (unless the decision is cached by now); blocking, for a thread. Caches what they
        answer, as :meth:`KubernetesAuthorizer.check` does.

        Raises:
            AccessError: 401, 403 or 503 as :meth:`KubernetesAuthorizer.check`; 503 also
                when called twice or after :meth:`abandon`.
        """
        with self._lock:
            if self._state != "pending":
                raise AccessError(503, f"cannot review access now: review {self._state}")
            self._state = "running"
        try:
            self._work()
        finally:
            with self._lock:
                self._state = "done"
            self._release()

    def abandon(self) -> None:
        """Free the review slot unless :meth:`run` started (which frees it itself)."""
        with self._lock:
            if self._state != "pending":
                return
            self._state = "abandoned"
        self._release()


def token_review(api: ReviewAPI, token: str) -> User | None:
    """Who ``token`` belongs to, by an ``authentication.k8s.io/v1`` TokenReview; ``None``
    when the API server does not authenticate it (or answers without a username).
    Raises :class:`app.kube.client.ApiError`."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    status = _mapping(api.create_token_review(body=body).get("status"))
    user = _mapping(status.get("user"))
    username = user.get("username")
    if status.get("authenticated") is not True or not isinstance(username, str) or not username:
        return None  # not authenticated, or an answer that names nobody: never a user ""
    return User(
        username=username,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra={
            str(k): [str(x) for x in v] if isinstance(v, list) else []
            for k, v in _mapping(user.get("extra")).items()
        },
    )


def access_review(api: ReviewAPI, *, user: User, verb: str, path: str) -> bool:
    """Whether ``user`` may ``verb`` the non-resource URL ``path``, by an
    ``authorization.k8s.io/v1`` SubjectAccessReview (``status.allowed``).
    Raises :class:`app.kube.client.ApiError`."""
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = user.extra
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    return (
        _mapping(api.create_subject_access_review(body=body).get("status")).get("allowed") is True
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
