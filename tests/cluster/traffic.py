"""Sending traffic from one of the cluster's network namespaces (the client's).

A thread can join a network namespace on its own (``setns(2)`` with ``CLONE_NEWNET``
changes only the calling thread), so :func:`in_netns` runs a function in a fresh thread
that joins the namespace first: every socket it opens lives there. :class:`Prober`
keeps such a thread sending HTTP requests to a list of addresses and counts failures;
:class:`DnsProber` does what a client of a DNS name does: :func:`resolve` the name,
keep the answer for its TTL, send each request to one of its addresses.
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
from typing import Self, TypeVar

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from tests.cluster.netns import NETNS_DIR

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


class ResolveError(RuntimeError):
    """The server answered with an error (SERVFAIL, REFUSED, ...), not with addresses."""


def resolve(
    name: str,
    *,
    server: str,
    port: int = 53,
    timeout: float = 2.0,
    rdtypes: Sequence[str] = ("A", "AAAA"),
) -> tuple[list[str], int]:
    """Ask the DNS server ``server``:``port`` for ``name``'s addresses, as a stub resolver
    does (one query per type in ``rdtypes``, over UDP, TCP when truncated); returns
    ``(addresses, ttl)``: the A then AAAA addresses in answer order, and the smallest TTL
    of those records (how long a client may keep the answer). A name without addresses
    (NXDOMAIN or no data) gives ``([], ttl)`` with the negative-caching TTL of the
    authority section's SOA (RFC 2308: the smaller of its TTL and its minimum; 0 without
    one). Raises :class:`ResolveError` on any other answer code and
    ``dns.exception.Timeout`` when the server does not answer. Call it from inside a
    namespace (:func:`in_netns`)."""
    addresses: list[str] = []
    ttls: list[int] = []
    negative: list[int] = []
    for rdtype in rdtypes:
        query = dns.message.make_query(name, rdtype)
        answer, _ = dns.query.udp_with_fallback(query, server, timeout=timeout, port=port)
        code = answer.rcode()
        if code not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
            raise ResolveError(f"{name} {rdtype} at {server}:{port}: {dns.rcode.to_text(code)}")
        wanted = dns.rdatatype.from_text(rdtype)
        found = False
        for rrset in answer.answer:
            if rrset.rdtype == wanted:
                addresses += [rdata.address for rdata in rrset]
                ttls.append(rrset.ttl)
                found = True
        if not found:
            negative += [
                min(rrset.ttl, rrset[0].minimum)
                for rrset in answer.authority
                if rrset.rdtype == dns.rdatatype.SOA
            ]
    if ttls:
        return addresses, min(ttls)
    return [], min(negative, default=0)


@dataclasses.dataclass(frozen=True)
class Resolution:
    """One answer a :class:`DnsProber` got: when (``time.monotonic()``), the addresses,
    their TTL, or the error instead (``addresses`` then empty)."""

    at: float
    addresses: tuple[str, ...]
    ttl: int
    error: str | None = None


@dataclasses.dataclass
class ProbeResult:
    """What a :class:`Prober` saw: requests sent, failures (``address: error``; with
    their ``time.monotonic()`` in ``failures``), the answers per ``(address, node)``, and
    for a :class:`DnsProber` every resolution of the name, in order."""

    sent: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    answered_by: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    failures: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    resolutions: list[Resolution] = dataclasses.field(default_factory=list)

    def failed_between(self, start: float, end: float = float("inf")) -> list[str]:
        """The failures from ``start`` to ``end`` (``time.monotonic()`` values)."""
        return [what for at, what in self.failures if start <= at <= end]

    def first_answer_without(self, address: str, after: float) -> Resolution | None:
        """The first successful resolution at or after ``after`` whose answer does not
        hold ``address`` (when a client following the name stopped using it), or
        ``None``."""
        for resolution in self.resolutions:
            found = resolution.at >= after and resolution.error is None
            if found and address not in resolution.addresses:
                return resolution
        return None


class Prober:
    """Round-robin ``GET`` requests to ``addresses`` (``(ip, port)``) from ``netns``,
    one every ``interval`` seconds, until :meth:`stop`; use as a context manager."""

    def __init__(
        self, netns: str, addresses: Sequence[tuple[str, int]], *, interval: float = 0.05
    ) -> None:
        self.netns, self.addresses, self.interval = netns, list(addresses), interval
        self.result = ProbeResult()
        self._index = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._error: BaseException | None = None

    def _next(self) -> tuple[str, int] | str:
        """The ``(address, port)`` of the next request, or why there is none (a failure)."""
        target = self.addresses[self._index % len(self.addresses)]
        self._index += 1
        return target

    def _failed(self, what: str) -> None:
        self.result.failed.append(what)
        self.result.failures.append((time.monotonic(), what))

    def _run(self) -> None:
        try:
            _join(self.netns)
        except BaseException as err:
            self._error = err
            return
        start = time.monotonic()
        while not self._stop.is_set():
            target = self._next()
            self.result.sent += 1
            if isinstance(target, str):
                self._failed(target)
            else:
                ip, port = target
                try:
                    answer = parse_answer(http_get(ip, port, timeout=2.0))
                    key = (ip, answer.get("node", "?"))
                    self.result.answered_by[key] = self.result.answered_by.get(key, 0) + 1
                except (OSError, http.client.HTTPException, RuntimeError) as err:
                    self._failed(f"{ip}:{port}: {err}")
            self._stop.wait(self.interval)
        self.result.seconds = time.monotonic() - start

    def __enter__(self) -> Self:
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


class DnsProber(Prober):
    """``GET`` requests to ``name``:``port`` from ``netns`` the way a client of a DNS name
    sends them: :func:`resolve` the name at ``server``:``dns_port``, keep the answer for
    its TTL and resolve again once it has run out (at once after a failed resolution or
    an empty answer), and send each request to the next of the answered addresses,
    round-robin. Every resolution is recorded (``result.resolutions``) and every failure
    with its time (``result.failures``; a resolution error or an empty answer counts as a
    failed request), so a test can measure when the answer dropped an address
    (:meth:`ProbeResult.first_answer_without`) and how many requests failed meanwhile
    (:meth:`ProbeResult.failed_between`)."""

    def __init__(
        self,
        netns: str,
        name: str,
        port: int,
        *,
        server: str,
        dns_port: int = 53,
        interval: float = 0.05,
        rdtypes: Sequence[str] = ("A", "AAAA"),
    ) -> None:
        super().__init__(netns, [], interval=interval)
        self.name, self.port, self.server, self.dns_port = name, port, server, dns_port
        self.rdtypes = tuple(rdtypes)
        self._answer: tuple[str, ...] = ()
        self._expires = 0.0

    def _next(self) -> tuple[str, int] | str:
        now = time.monotonic()
        if now >= self._expires or not self._answer:
            try:
                found, ttl = resolve(
                    self.name, server=self.server, port=self.dns_port, rdtypes=self.rdtypes
                )
            except (dns.exception.DNSException, OSError, ResolveError) as err:
                error = f"{type(err).__name__}: {err}"
                self.result.resolutions.append(Resolution(now, (), 0, error))
                self._answer, self._expires = (), now
                return f"{self.name}: resolving failed: {error}"
            self.result.resolutions.append(Resolution(now, tuple(found), ttl))
            self._answer, self._expires = tuple(found), now + ttl
            if not found:
                return f"{self.name}: no address in the answer"
        ip = self._answer[self._index % len(self._answer)]
        self._index += 1
        return ip, self.port


@contextlib.contextmanager
def probing(netns: str, addresses: Sequence[tuple[str, int]]) -> Iterator[Prober]:
    """``with probing(ns, addrs) as prober: ...``; ``prober.result`` afterwards."""
    prober = Prober(netns, addresses)
    with prober:
        yield prober
