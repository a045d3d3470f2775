"""Sending traffic from one of the cluster's network namespaces (the client's).

A thread can join a network namespace on its own (``setns(2)`` with ``CLONE_NEWNET``
changes only the calling thread), so :func:`in_netns` runs a function in a fresh thread
that joins the namespace first: every socket it opens lives there. :class:`Prober`
keeps such a thread sending HTTP requests to a list of addresses and counts failures.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import http.client
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from tests.cluster.cluster import NETNS_DIR

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def _join(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({NETNS_DIR / netns}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def in_netns(netns: str, function: Callable[[], T]) -> T:
    """Run ``function()`` in a new thread inside network namespace ``netns`` and return
    its result (or raise its exception)."""
    outcome: dict[str, object] = {}

    def body() -> None:
        try:
            _join(netns)
            outcome["value"] = function()
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=body, name=f"in-{netns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def http_get(address: str, port: int, path: str = "/", *, timeout: float = 2.0) -> str:
    """One ``GET`` on a new connection (so kube-proxy picks an endpoint each time);
    returns the body of a 200. Raises ``OSError``/``http.client.HTTPException`` on a
    failure, ``RuntimeError`` on another status. Call it from inside a namespace."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        body = response.read().decode()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"{address}:{port}{path}: HTTP {response.status}")
    return body


def parse_answer(body: str) -> dict[str, str]:
    """``pod=… node=… version=… client=…`` (the backend's one line) as a dict."""
    return dict(part.split("=", 1) for part in body.split() if "=" in part)


@dataclasses.dataclass
class ProbeResult:
    """What a :class:`Prober` saw: requests sent, failures (``address: error``), and the
    answers per ``(address, node)``."""

    sent: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    answered_by: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0


class Prober:
    """Round-robin ``GET`` requests to ``addresses`` (``(ip, port)``) from ``netns``,
    one every ``interval`` seconds, until :meth:`stop`; use as a context manager."""

    def __init__(
        self, netns: str, addresses: Sequence[tuple[str, int]], *, interval: float = 0.05
    ) -> None:
        self.netns, self.addresses, self.interval = netns, list(addresses), interval
        self.result = ProbeResult()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            _join(self.netns)
        except BaseException as err:
            self._error = err
            return
        start = time.monotonic()
        index = 0
        while not self._stop.is_set():
            ip, port = self.addresses[index % len(self.addresses)]
            index += 1
            self.result.sent += 1
            try:
                answer = parse_answer(http_get(ip, port, timeout=2.0))
                key = (ip, answer.get("node", "?"))
                self.result.answered_by[key] = self.result.answered_by.get(key, 0) + 1
            except (OSError, http.client.HTTPException, RuntimeError) as err:
                self.result.failed.append(f"{ip}:{port}: {err}")
            self._stop.wait(self.interval)
        self.result.seconds = time.monotonic() - start

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> ProbeResult:
        """Stop and return the result (raises what joining the namespace raised)."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self._error is not None:
            raise self._error
        return self.result


@contextlib.contextmanager
def probing(netns: str, addresses: Sequence[tuple[str, int]]) -> Iterator[Prober]:
    """``with probing(ns, addrs) as prober: ...``; ``prober.result`` afterwards."""
    prober = Prober(netns, addresses)
    with prober:
        yield prober
