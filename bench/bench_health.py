"""Node health checks: one probe round over many Nodes (``.venv/bin/python -m bench.bench_health``).

What it costs the Lease holder to probe kube-proxy's ``/healthz`` on every Node
(``app/controller/nodeprober.py``): a :class:`NodeHealthProber` with the default
settings (period 10 s, timeout 2 s, 64 connections, 500 probes/s) runs ``--rounds``
rounds over ``--nodes`` targets, every one pointing at one local healthz server on
127.0.0.1 that answers as kube-proxy does (HTTP 200, its JSON body, ``Connection: close``).
The server runs in a child process, so its CPU is not counted.

Prints per round: targets, round seconds (wall, pacing included: ``nodes / max-rate``),
failed probes, the prober's CPU seconds per round (``utime + stime`` of this process, every
thread, minus the sampler thread's own; on loopback it includes the kernel's TCP work for
the server's end of each connection too), peak threads and open descriptors added by the
prober, RSS growth, and the sockets left in TIME_WAIT towards the server. ``--client
httpx`` runs the same round with each probe sent through one shared
``httpx.AsyncClient`` (no keep-alive: every Node is another host) instead of the h11 probe,
``both`` prints the two side by side. Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import resource
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from app.controller import nodeprober
from app.core.nodehealth import HealthPolicy, HealthTable
from bench.procs import Process, machine, memory_mb, python

BODY = (
    b'{"lastUpdated":"2026-12-04T10:00:00.000000000Z","currentTime":'
    b'"2026-12-04T10:00:00.000000000Z","nodeEligible":true,"healthy":true,'
    b'"status":{"IPv4":{"lastUpdated":"2026-12-04T10:00:00.000000000Z","healthy":true}}}'
)
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"
    b"Date: Fri, 04 Dec 2026 10:00:00 GMT\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    % len(BODY)
) + BODY
"""What kube-proxy v1.35 answers a healthy ``GET /healthz`` (Go's net/http, ``Connection:
close`` asked: it closes after the answer)."""
CLIENTS = ("h11", "httpx")


class _Healthz(asyncio.Protocol):
    """Answers the first request head on a connection with :data:`RESPONSE`, then closes."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\r\n\r\n" in self.buffer and self.transport is not None:
            self.transport.write(RESPONSE)
            self.transport.close()


def serve_healthz() -> None:
    """The child process: serve on 127.0.0.1 (ephemeral port, printed first) until SIGTERM."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Healthz, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        server.close()

    asyncio.run(main())


def start_healthz(workdir: Path) -> tuple[Process, int]:
    """The healthz server in a child process, and its port.

    Raises:
        RuntimeError: it printed no port; the message holds its log tail.
    """
    process = Process(
        name="healthz",
        argv=python("-m", "bench.bench_health", "--serve"),
        log=workdir / "healthz.log",
        env={},
        capture_stdout=True,
    )
    assert process.popen.stdout is not None
    line = process.popen.stdout.readline().decode().strip()
    if not line.isdigit():
        process.stop()
        raise RuntimeError(f"healthz server did not start:\n{process.tail()}")
    return process, int(line)


class Sampler(threading.Thread):
    """Samples this process's thread and open-descriptor counts every ``interval`` seconds,
    keeping the peaks, and its own CPU time (to subtract it)."""

    def __init__(self, interval: float = 0.005) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.interval = interval
        self.peak_threads = 0
        self.peak_fds = 0
        self.cpu = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.peak_threads = max(self.peak_threads, len(os.listdir("/proc/self/task")))
            self.peak_fds = max(self.peak_fds, len(os.listdir("/proc/self/fd")))
            self.cpu = time.thread_time()

    def stop(self) -> None:
        """Stop sampling (joins)."""
        self._halt.set()
        self.join()


@dataclass(frozen=True)
class Figure:
    """One measured round."""

    client: str
    targets: int
    round_seconds: float
    failures: int
    cpu_seconds: float
    threads: int
    fds: int
    rss_growth_mb: float
    time_wait: int


def settled_threads(timeout: float = 1.0) -> int:
    """This process's threads (``/proc/self/task``) once every one is a live Python thread:
    a thread just joined may take a moment to leave the kernel's list."""
    deadline = time.monotonic() + timeout
    while True:
        count = len(os.listdir("/proc/self/task"))
        if count <= threading.active_count() or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


def process_cpu() -> float:
    """User + system CPU seconds of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_wait(port: int) -> int:
    """Sockets in TIME_WAIT whose remote end is 127.0.0.1:``port`` (``/proc/net/tcp``)."""
    remote = f"0100007F:{port:04X}"
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == remote and fields[3] == "06":
            count += 1
    return count


Probe = Callable[..., Awaitable[tuple[bool, str]]]


def httpx_probe() -> Probe:
    """A drop-in for :func:`app.controller.nodeprober.probe` sending through one shared
    ``httpx.AsyncClient`` (made in the prober's loop on first use; no keep-alive)."""
    import httpx

    clients: list[httpx.AsyncClient] = []

    async def probe(
        ip: str, port: int, *, timeout: float, path: str = "/healthz"
    ) -> tuple[bool, str]:
        if not clients:
            clients.append(
                httpx.AsyncClient(
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
                    headers={"User-Agent": "node-ipam-lb", "Connection": "close"},
                )
            )
        url = f"http://{ip}:{port}{path}"
        try:
            response = await clients[0].get(url, timeout=timeout)
        except httpx.HTTPError as err:
            return False, f"GET {url}: {err}"
        return response.status_code == 200, f"GET {url}: HTTP {response.status_code}"

    return probe


def measure(
    *,
    client: str,
    nodes: int,
    port: int,
    rounds: int,
    period: float,
    timeout: float,
    concurrency: int,
    max_rate: float,
    sample: float = 0.005,
) -> list[Figure]:
    """``rounds`` rounds of a prober over ``nodes`` targets at 127.0.0.1:``port``."""
    targets = {f"node-{i:05d}": "127.0.0.1" for i in range(nodes)}
    prober = nodeprober.NodeHealthProber(
        table=HealthTable(HealthPolicy()),
        targets=lambda: targets,
        port=port,
        period=period,
        timeout=timeout,
        concurrency=concurrency,
        max_rate=max_rate,
        is_leader=lambda: True,
        on_change=lambda names: None,
    )
    patch: Any = (
        mock.patch.object(nodeprober, "probe", httpx_probe())
        if client == "httpx"
        else mock.patch.object(nodeprober, "probe", nodeprober.probe)
    )
    figures = []
    with patch:
        sampler = Sampler(sample)
        threads0 = settled_threads() + 1  # the sampler's own
        fds0 = len(os.listdir("/proc/self/fd"))
        sampler.start()
        rss0 = memory_mb(os.getpid(), "VmRSS")
        cpu0, sampled0 = process_cpu(), sampler.cpu
        prober.start()
        seen = None
        try:
            for _ in range(rounds):
                while prober.last_round is seen or prober.last_round is None:
                    time.sleep(0.01)
                seen = prober.last_round
                cpu1, sampled1 = process_cpu(), sampler.cpu
                figures.append(
                    Figure(
                        client=client,
                        targets=seen.targets,
                        round_seconds=seen.seconds,
                        failures=seen.failures,
                        cpu_seconds=(cpu1 - cpu0) - (sampled1 - sampled0),
                        threads=sampler.peak_threads - threads0,
                        fds=sampler.peak_fds - fds0,
                        rss_growth_mb=memory_mb(os.getpid(), "VmRSS") - rss0,
                        time_wait=time_wait(port),
                    )
                )
                cpu0, sampled0 = cpu1, sampled1
        finally:
            prober.stop()
            sampler.stop()
    return figures


def run(*, workdir: Path, clients: Sequence[str], **settings: Any) -> tuple[list[Figure], float]:
    """Start the healthz server (its log in ``workdir``), :func:`measure` each client
    with ``settings`` against it, stop it: ``(figures, the server's CPU seconds)``."""
    server, port = start_healthz(workdir)
    figures: list[Figure] = []
    try:
        for client in clients:
            figures += measure(client=client, port=port, **settings)
        return figures, server.cpu_seconds()
    finally:
        server.stop()


def table(figures: list[Figure]) -> str:
    """The figures as an aligned text table."""
    lines = [
        f"{'client':<6} {'round':>5} {'targets':>7} {'round s':>8} {'failed':>6}"
        f" {'cpu s':>6} {'cpu µs/probe':>12} {'+threads':>8} {'+fds':>5} {'+rss MiB':>8}"
        f" {'TIME_WAIT':>9}"
    ]
    rounds: dict[str, int] = {}
    for f in figures:
        rounds[f.client] = rounds.get(f.client, 0) + 1
        per_probe = f.cpu_seconds / f.targets * 1e6 if f.targets else 0.0
        lines.append(
            f"{f.client:<6} {rounds[f.client]:>5} {f.targets:>7} {f.round_seconds:>8.2f}"
            f" {f.failures:>6} {f.cpu_seconds:>6.2f} {per_probe:>12.0f} {f.threads:>8} {f.fds:>5}"
            f" {f.rss_growth_mb:>8.1f} {f.time_wait:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="targets per round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between rounds")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per probe")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-rate", type=float, default=500.0, help="probes started per s")
    parser.add_argument("--client", choices=(*CLIENTS, "both"), default="h11")
    parser.add_argument(
        "--sample-ms", type=float, default=5.0, help="thread and descriptor sampling interval"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep the server's log")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_healthz()
        return 0
    if not 1 <= args.nodes <= 100_000 or args.rounds < 1:
        parser.error("--nodes: 1 to 100000; --rounds: at least 1")
    clients = CLIENTS if args.client == "both" else (args.client,)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"date: {now}  python {sys.version.split()[0]}")
    print(f"machine: {machine()} (start)")
    print(
        f"prober: {args.nodes} targets, period {args.period:g} s, timeout {args.timeout:g} s,"
        f" concurrency {args.concurrency}, max rate {args.max_rate:g}/s"
    )
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-health-"))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        figures, server_cpu = run(
            workdir=workdir,
            clients=clients,
            nodes=args.nodes,
            rounds=args.rounds,
            period=args.period,
            timeout=args.timeout,
            concurrency=args.concurrency,
            max_rate=args.max_rate,
            sample=args.sample_ms / 1000,
        )
    print(table(figures))
    print(f"healthz server (child process) CPU over the run: {server_cpu:.2f} s")
    print(f"machine: {machine()} (end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
