"""Fault injection, request counters and the request log of the fake API.

Counters are keyed ``"<verb> <resource>[/<subresource>]"`` with Kubernetes verbs (``get``,
``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``, ``deletecollection``),
e.g. ``"patch services/status"``. Every request to the API counts, including ones answered
with an injected failure.
"""

from __future__ import annotations

import fnmatch
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from typing import Any

LOG_LIMIT = 200_000  # request log entries kept (oldest dropped first); counters are exact


@dataclass
class FailRule:
    """Fail the next ``times`` requests whose method and path match (``*`` globs)."""

    method: str
    path: str
    status: int
    times: int
    message: str = ""

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and fnmatch.fnmatchcase(path, self.path)


@dataclass
class Latency:
    """Delay matching requests by ``seconds`` (``*`` globs)."""

    seconds: float
    method: str = "*"
    path: str = "*"


@dataclass
class RequestRecord:
    """One request as an RBAC check needs it."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str
    user: str
    method: str
    path: str


@dataclass
class Faults:
    """Mutable fault/counter state shared by the HTTP layer and the Python handle."""

    rules: list[FailRule] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    holds: list[tuple[str, str]] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    log: deque[RequestRecord] = field(default_factory=lambda: deque(maxlen=LOG_LIMIT))

    def fail(
        self,
        *,
        method: str = "*",
        path: str = "*",
        status: int = 500,
        times: int = 1,
        message: str = "",
    ) -> None:
        """Make the next ``times`` matching requests answer ``status`` (state unchanged)."""
        self.rules.append(FailRule(method.upper(), path, status, times, message))

    def take_failure(self, method: str, path: str) -> FailRule | None:
        for rule in self.rules:
            if rule.times > 0 and rule.matches(method, path):
                rule.times -= 1
                return rule
        self.rules = [r for r in self.rules if r.times > 0]
        return None

    def delay(self, method: str, path: str) -> float:
        return sum(
            lat.seconds
            for lat in self.latencies
            if lat.method in ("*", method) and fnmatch.fnmatchcase(path, lat.path)
        )

    def held(self, method: str, path: str) -> bool:
        """Whether a ``hold`` (method, path globs) currently stalls this request."""
        return any(m in ("*", method) and fnmatch.fnmatchcase(path, p) for m, p in list(self.holds))

    def record(self, rec: RequestRecord) -> None:
        key = f"{rec.resource}/{rec.subresource}" if rec.subresource else rec.resource
        self.counters[f"{rec.verb} {key}"] += 1
        self.log.append(rec)

    def reset_counters(self) -> None:
        """Forget counters and the request log."""
        self.counters.clear()
        self.log.clear()

    def log_dicts(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in list(self.log)]
