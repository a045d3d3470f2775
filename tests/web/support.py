"""What the web tests share: ``FakeReviews`` (TokenReview/SubjectAccessReview answers
for the auth tests) and ``BlockingLabels`` (labels whose reading blocks until released)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.kube.client import ApiError


@dataclass
class FakeReviews:
    """A :class:`app.kube.client.ReviewAPI` answering TokenReview/SubjectAccessReview bodies (raw
    JSON, like the API server) by token and by (user, verb, path)."""

    users: dict[str, str] = field(
        default_factory=lambda: {"good": "system:serviceaccount:mon:prom"}
    )
    allowed: set[tuple[str, str, str]] = field(
        default_factory=lambda: {("system:serviceaccount:mon:prom", "get", "/metrics")}
    )
    failing: bool = False
    calls: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def create_token_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("TokenReview")
        self.bodies.append(body)
        if self.failing:
            raise ApiError(0, "connection refused")
        name = self.users.get(body["spec"]["token"])
        if not name:
            return {**body, "status": {"authenticated": False, "error": "invalid token"}}
        user = {"username": name, "uid": "u-1", "groups": ["system:authenticated"]}
        return {**body, "status": {"authenticated": True, "user": user}}

    def create_subject_access_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("SubjectAccessReview")
        self.bodies.append(body)
        spec = body["spec"]
        attrs = spec["nonResourceAttributes"]
        allowed = (spec["user"], attrs["verb"], attrs["path"]) in self.allowed
        return {**body, "status": {"allowed": allowed}}


class BlockingLabels(Mapping[str, str]):
    """Node labels whose every read, once :attr:`armed`, blocks until :attr:`release` is
    set (at most 20 s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.armed = False
        self.blocked = 0
        self._lock = threading.Lock()

    def _wait(self) -> None:
        if not self.armed:
            return
        with self._lock:
            self.blocked += 1
        self.release.wait(20)

    def __getitem__(self, key: str) -> str:
        self._wait()
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._wait()
        return default

    def __contains__(self, key: object) -> bool:
        self._wait()
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0
