"""Bearer-token access control for preview and ``/metrics``.

Follows controller-runtime's ``pkg/metrics/filters.WithAuthenticationAndAuthorization``:
the token is checked with a ``TokenReview``, access with a ``SubjectAccessReview`` on the
non-resource URL (verb = lower-cased HTTP method, path = request path). Results are cached
briefly (authentication 1 min, a rejected token 10 s; allow 5 min, deny 30 s) so a scraper
does not cost two API calls per request, keyed by the SHA-256 of the token (never the token
itself), in caches bounded by entries (oldest dropped first; rejected tokens in their own
cache, so a flood of random tokens cannot push out the good ones). At most
``max_in_flight`` reviews are outstanding at once; beyond that a request gets 503 at once
instead of holding a thread (issue 14). 401 for a missing or rejected token, 403 for a
denial.

This module holds the caching and the decision only: the two requests go through the
client layer, :class:`app.kube.client.ReviewAPI` (``KubernetesAPI`` in ``serve``), as raw JSON.
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


@dataclass(frozen=True, slots=True)
class User:
    """The authenticated user as TokenReview reports it (``status.user``)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


class Authorizer(Protocol):
    """Decides whether a request to ``path`` with ``verb`` may proceed."""

    def check(self, *, token: str | None, verb: str, path: str) -> None:
        """Return when allowed; raise :class:`AccessError` otherwise."""


class AllowAll:
    """``--auth none``: every request proceeds (local development with a kubeconfig)."""

    def check(self, *, token: str | None, verb: str, path: str) -> None:
        """Allow everything."""


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
        """Authenticate ``token`` and authorize ``verb`` on ``path``.

        Raises:
            AccessError: 401 without a token or when TokenReview rejects it; 403 when the
                SubjectAccessReview denies; 503 (not cached) when the API server cannot
                be asked, or ``max_in_flight`` reviews are already outstanding.
        """
        if not token:
            raise AccessError(401, "Unauthorized: a bearer token is required")
        digest = hashlib.sha256(token.encode()).hexdigest()
        user = self._authenticate(digest, token)
        key = (digest, verb, path)
        found, allowed = self._decisions.get(key)
        if not found:
            allowed = self._ask(lambda: access_review(self._api, user=user, verb=verb, path=path))
            self._decisions.put(key, allowed, ALLOW_TTL_SECONDS if allowed else DENY_TTL_SECONDS)
        if not allowed:
            raise AccessError(403, f'Forbidden: user "{user.username}" cannot {verb} path "{path}"')

    def _authenticate(self, digest: str, token: str) -> User:
        rejected, _ = self._rejected.get(digest)
        if rejected:
            raise AccessError(401, "Unauthorized: the bearer token was rejected")
        found, user = self._tokens.get(digest)
        if not found:
            user = self._ask(lambda: token_review(self._api, token))
            if user is None:
                self._rejected.put(digest, True, REJECTED_TOKEN_TTL_SECONDS)
            else:
                self._tokens.put(digest, user, TOKEN_TTL_SECONDS)
        if user is None:
            raise AccessError(401, "Unauthorized: the bearer token was rejected")
        assert isinstance(user, User)
        return user

    def _ask(self, call: Callable[[], Any]) -> Any:
        if not self._in_flight.acquire(blocking=False):
            raise AccessError(
                503, f"cannot review access now: {self._max_in_flight} reviews in flight"
            )
        try:
            return call()
        except Exception as err:  # any API failure is "cannot decide now", never a 500
            log.warning("access review failed: %s", err)
            raise AccessError(503, f"cannot review access now: {err}") from err
        finally:
            self._in_flight.release()


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
