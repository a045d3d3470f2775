"""bench_peer's oracle: whether a controller's stored statuses are right (ours: identical to
``select``; Cilium: identical or a rule of docs/design.md §4.8), blank statuses between
the two controllers, and the watch that times when every status is right."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.bench_cold_start import SERVICES, status_ingress
from bench.cluster import (
    service_key,
)
from bench.peer_workload import Entry, Judge
from bench.realapi import SEED_PARALLEL, IngressWatch, RealApi
from tests.peers.cilium.differential import IDENTICAL, classify


def judge_ours(
    stored: Sequence[Mapping[str, str]],
    expected: Sequence[Mapping[str, str]],
    _families: Sequence[str] = (),
) -> str | None:
    """``"identical"`` when ``stored`` is exactly ``expected`` (ours writes
    :func:`bench.cluster.expected_ingress`, ``ipMode`` included), else ``None``."""
    return IDENTICAL if list(stored) == list(expected) else None


def judge_cilium(
    stored: Sequence[Mapping[str, str]],
    expected: Sequence[Mapping[str, str]],
    families: Sequence[str] = (),
) -> str | None:
    """What makes Cilium's ``stored`` entries right against our ``expected`` ones:
    :func:`tests.peers.cilium.differential.classify` of the IPs (``"identical"`` or the
    docs/design.md §4.8 rule that explains the difference) when every stored entry has
    ``ipMode: VIP`` (the API server's default; Cilium writes none), else ``None``."""
    if any(entry.get("ipMode") != "VIP" for entry in stored):
        return None
    return classify(
        [entry.get("ip", "") for entry in stored],
        [entry["ip"] for entry in expected],
        families,
    )


@dataclass
class Verification:
    """One List of every Service judged: ``rules`` counts the managed Services by what
    made them right, ``wrong`` the managed keys that are not (nor explained), and
    ``unmanaged_written`` the other Services holding an ingress."""

    managed: int
    rules: Counter[str]
    wrong: list[str]
    unmanaged_written: int

    @property
    def right(self) -> int:
        """Managed Services whose status is right."""
        return self.managed - len(self.wrong)

    @property
    def ok(self) -> bool:
        """Every managed status right and no unmanaged Service written."""
        return not self.wrong and self.unmanaged_written == 0

    def text(self, *, converged: bool = True) -> str:
        """One line: right of managed, per rule, unmanaged with an ingress, the first wrong
        keys (``converged`` False: named as not right yet, not as unexplained)."""
        rules = ", ".join(f"{rule} {n}" for rule, n in sorted(self.rules.items()))
        line = (
            f"{self.right}/{self.managed} managed statuses right ({rules or 'none'});"
            f" {self.unmanaged_written} unmanaged Services with an ingress"
        )
        if self.wrong:
            what = "WRONG (unexplained)" if converged else "not right yet"
            line += f"; {what}: {self.wrong[:5]}"
        return line


def verify(
    api: RealApi,
    expected: Mapping[str, list[Entry]],
    families: Mapping[str, Sequence[str]],
    judge: Judge,
) -> Verification:
    """List every Service (pages of 500) and judge each managed one's stored ingress
    against ``expected`` with ``judge``; count the unmanaged ones holding an ingress."""
    items, _ = api.list_all(SERVICES)
    stored = {service_key(obj): status_ingress(obj) or [] for obj in items}
    rules: Counter[str] = Counter()
    wrong = []
    for key, want in expected.items():
        rule = judge(stored[key], want, families.get(key, ())) if key in stored else None
        if rule is None:
            wrong.append(key)
        else:
            rules[rule] += 1
    unmanaged = sum(1 for key, got in stored.items() if got and key not in expected)
    return Verification(len(expected), rules, wrong, unmanaged)


def status_path(key: str) -> str:
    """``/api/v1/namespaces/<ns>/services/<name>/status`` of Service ``namespace/name``."""
    namespace, name = key.split("/", 1)
    return f"/api/v1/namespaces/{namespace}/services/{name}/status"


CLEAR = {"status": {"loadBalancer": {"ingress": None}}}
"""The merge patch that clears a status: ``{"loadBalancer": {}}`` would merge nothing
(RFC 7396), ``"ingress": null`` removes the list."""


def clear_statuses(api: RealApi, keys: Iterable[str], *, parallel: int = SEED_PARALLEL) -> int:
    """Merge-PATCH :data:`CLEAR` onto the status of every Service in ``keys``,
    ``parallel`` at a time (as :meth:`RealApi.seed`); returns how many were patched.

    Raises:
        httpx.HTTPStatusError: a PATCH failed.
    """
    paths = [status_path(key) for key in keys]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(api.patch, path, CLEAR) for path in paths]:
            future.result()
    return len(paths)


def blank_statuses(api: RealApi, managed: Iterable[str]) -> str:
    """Make every ``managed`` Service's status blank: a List; if any holds an ingress,
    clear them all (:func:`clear_statuses`) and List again. Returns what was done.

    Raises:
        RuntimeError: a Service still holds an ingress after the clearing.
    """
    keys = set(managed)

    def holding() -> list[str]:
        items, _ = api.list_all(SERVICES)
        return [service_key(o) for o in items if status_ingress(o) and service_key(o) in keys]

    if not holding():
        return "every managed status blank (checked by a List)"
    started = time.perf_counter()
    cleared = clear_statuses(api, sorted(keys))
    left = holding()
    if left:
        raise RuntimeError(f"{len(left)} statuses still hold an ingress after clearing: {left[:5]}")
    return (
        f"{cleared} managed statuses cleared in {time.perf_counter() - started:.1f} s"
        " (checked by a List)"
    )


class StatusWatch(IngressWatch):
    """:class:`bench.realapi.IngressWatch` extended: one watch on every Service (from a
    List, so what was written before it started counts) that follows them until
    :meth:`close`, judges each managed one with a controller's :data:`Judge`, and waits
    for one target after another: every managed Service at first, then each churn
    change's affected ones (:meth:`target`).

    The parent's List and stream loop are used as they are; ``_observe`` (called for each
    listed Service and each ADDED/MODIFIED event) is overridden to keep every Service's
    ingress and when it last changed. The parent is handed one marker key that never
    appears, so its loop, which ends once nothing is pending, follows until the stream
    ends (``timeout`` + 60 s) or :meth:`close`.
    """

    _MARKER = "\x00following"

    def __init__(
        self,
        api: RealApi,
        expected: Mapping[str, list[Entry]],
        families: Mapping[str, Sequence[str]],
        judge: Judge,
        *,
        timeout: float,
    ) -> None:
        self.expected = dict(expected)
        self._families = families
        self._judge = judge
        self._cond = threading.Condition()
        self._stored: dict[str, list[Entry]] = {}
        self._changed_at: dict[str, float] = {}
        self._targets: set[str] = set()
        self._wrong: set[str] = set()
        self._met_at: float | None = None
        super().__init__(api, {self._MARKER: [{"ip": ""}]}, timeout=timeout)
        self.target(self.expected)

    def _right(self, key: str) -> bool:
        stored = self._stored.get(key, [])
        return self._judge(stored, self.expected[key], self._families.get(key, ())) is not None

    def _observe(self, obj: Mapping[str, Any]) -> None:
        key, now = service_key(obj), time.monotonic()
        ingress = status_ingress(obj) or []
        with self._cond:
            if self._stored.get(key) != ingress:
                self._stored[key] = ingress
                self._changed_at[key] = now
            if key not in self._targets:
                return
            if self._right(key):
                if key in self._wrong:
                    self._wrong.discard(key)
                    if not self._wrong:
                        self._met_at = now
                        self._cond.notify_all()
            else:
                self._wrong.add(key)
                self._met_at = None

    def target(self, updates: Mapping[str, list[Entry]]) -> None:
        """Wait for ``updates`` next: their expected ingress replaces the old one, and
        :meth:`wait` returns once each of them holds it (at once if they all do)."""
        with self._cond:
            self.expected.update(updates)
            self._targets = set(updates)
            self._wrong = {key for key in self._targets if not self._right(key)}
            self._met_at = None if self._wrong else time.monotonic()

    def wait(self, timeout: float, *, alive: Callable[[], None] = lambda: None) -> float:
        """Monotonic time the last Service of the current target became right (the watch
        event's arrival). ``alive`` is called about once a second (it raises when the
        controller died).

        Raises:
            TimeoutError: not every target right within ``timeout`` seconds.
            RuntimeError: the watch ended (the server's message).
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if self._met_at is not None and not self._wrong:
                    return self._met_at
                if self._finished.is_set():
                    raise RuntimeError(f"watch on Services ended: {self._error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    right, of = self.progress()
                    raise TimeoutError(f"{right} of {of} statuses right after {timeout:.0f} s")
                self._cond.wait(min(left, 1.0))
            alive()

    def progress(self) -> tuple[int, int]:
        """``(target Services right now, target Services)``."""
        with self._cond:
            return len(self._targets) - len(self._wrong), len(self._targets)

    def changed_since(self, since: float) -> set[str]:
        """Keys of the Services whose ingress changed at or after monotonic ``since``."""
        with self._cond:
            return {key for key, at in self._changed_at.items() if at >= since}
