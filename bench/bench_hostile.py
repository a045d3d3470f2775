"""Hostile and heavy load (issue 14): ``.venv/bin/python -m bench.bench_hostile``.

A real ``node-ipam-lb serve`` (TLS, loopback) against the fake API with ``--nodes`` Nodes
(default 1,000). For each of the six attacks of issue 14 it prints the figure measured now
next to the figure quoted in the issue for the code before the fix:

1. CPU: ``--clients`` (48) concurrent reviews of distinct ~250 KB valid selectors
   (``!a,!a,...``) matching every Node;
2. event loop: 8 connections sending ~60 KB malformed selectors;
3. memory: 16 concurrent reviews just under the body cap (padding inside ``spec``), and
   16 of 7.3 MB (over the cap: 413);
4. slow clients: ``--slow`` (2,000) TLS connections sending a request head one byte
   every ``--slow-interval`` s (20 s);
5. auth amplification: ``serve --auth kubernetes``, TokenReview delayed 5 s by the fake
   API, 64 connections with random bearer tokens on ``/metrics``;
6. memo (run first, on the fresh process): ``--memo-selectors`` (10,000) dry-run reviews
   of distinct selectors matching no Node.

During each, a prober measures ``/healthz`` (on serve's health-probe port,
``--health-probe-bind-address``, where the kubelet probes it) and an ordinary review (the
~2 KB ``kubectl apply`` review of :mod:`bench.bench_admission`) every 50 ms, and a sampler
reads serve's RSS every 50 ms. Every loop is bounded by count and by ``--seconds`` per attack.

The prober runs in a process of its own (``multiprocessing``, spawned), not as threads
beside the attackers: with 48-64 attacker threads in one process, a probe thread waited
for that process's GIL before sending and after receiving, so its figure held the bench's
own contention, not ``serve``'s latency (a kubelet is never inside the attacker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import random
import ssl
import string
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import ADMISSION_BODY_LIMIT
from bench.bench_admission import admission_review
from bench.cluster import Scale, make_node
from bench.procs import FakeApi, Serve, machine, start_fakeapi, start_serve, trusting
from tests.support.waiting import wait_for

BEFORE = {
    "cpu": "7.7 s per review; /healthz p50 30 s; ordinary review 30 s (48 clients)",
    "loop": "/healthz p50 2.75 s (8 connections, ~60 KB malformed selectors)",
    "memory": "1 x 7.3 MB: 262 MiB peak; 8: 677 MiB; 16: 1,483 MiB, 436 MiB after",
    "slow": "0 of 300 closed after 70 s; 1,200 connections: 406 MiB, kept after close",
    "auth": "/healthz and ordinary reviews 4.6 s (64 connections, TokenReview 5 s)",
    "memo": "50,000 distinct no-match selectors: +32 MiB, kept until a Node change",
}
ANNOTATION = "io.cilium.nodeipam/match-node-labels"


def rss_mb(serve: Serve) -> float:
    """VmRSS of ``serve`` plus its child processes (the review worker), in MiB."""
    return rss_mb_of(serve.process.pid)


def rss_mb_of(pid: int) -> float:
    """VmRSS of process ``pid`` plus its child processes, in MiB."""
    total = 0.0
    pids = [pid]
    while pids:
        pid = pids.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        total += next(
            (
                int(line.split()[1]) / 1024
                for line in status.splitlines()
                if line.startswith("VmRSS:")
            ),
            0.0,
        )
        pids.extend(int(child) for child in children)
    return total


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def ms(values: list[float]) -> str:
    """``p50 X ms / p99 Y ms (n)`` of latencies in seconds."""
    return (
        f"p50 {percentile(values, 0.5) * 1000:.0f} ms / p99 {percentile(values, 0.99) * 1000:.0f}"
        f" ms (n={len(values)})"
    )


def review_with(
    selector: str | None, *, uid: str = "u", dry_run: bool = False, pad: int = 0
) -> dict[str, Any]:
    """The ordinary review with ``selector`` as the node selector annotation (``None``
    keeps the ordinary one) and ``pad`` bytes of padding inside ``spec``."""
    body = admission_review()
    request = body["request"]
    request["uid"] = uid
    request["dryRun"] = dry_run
    if selector is not None:
        request["object"]["metadata"]["annotations"][ANNOTATION] = selector
    if pad:
        # Many small objects: the costliest padding to decode, ~24x its size in memory.
        request["object"]["spec"]["x-padding"] = [{} for _ in range(pad // 3)]
    return body


def encode(body: dict[str, Any]) -> bytes:
    """Compact JSON of ``body``."""
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class Probe:
    """Latencies measured while an attack runs: /healthz, an ordinary review, RSS; ``pid``
    is the process that measured them (not the bench's own: see the module docstring)."""

    health: list[float] = field(default_factory=list)
    ordinary: list[float] = field(default_factory=list)
    ordinary_status: Counter[int] = field(default_factory=Counter)
    rss_peak_mb: float = 0.0
    pid: int = 0


PROBE_FIELDS = ("health", "ordinary", "ordinary_status", "rss_peak_mb", "pid")


@dataclass(frozen=True)
class ProbeTarget:
    """What the probe process needs (picklable): ``serve``'s base URL and CA for the
    ordinary review, the URL of ``/healthz``, and serve's pid for RSS."""

    url: str
    ca: Path
    health_url: str
    pid: int

    @classmethod
    def of(cls, serve: Serve, ca: Path) -> ProbeTarget:
        """The target of ``serve``: ``/healthz`` on its health-probe port, where a
        kubelet probes it (deploy/), the ordinary review on its TLS port."""
        return cls(
            url=serve.url, ca=ca, health_url=serve.health_url + "/healthz", pid=serve.process.pid
        )


def _probe_process(target: ProbeTarget, period: float, started: Any, stop: Any, out: Any) -> None:
    """Body of the probe process: three threads measure until ``stop`` is set, then the
    figures go to ``out`` as a :class:`Probe`."""
    probe = Probe(pid=os.getpid())
    halt = threading.Event()
    body = encode(admission_review())

    def client(url: str) -> httpx.Client:
        verify: ssl.SSLContext | bool = trusting(target.ca) if url.startswith("https:") else False
        return httpx.Client(verify=verify, timeout=30)

    def health() -> None:
        with client(target.health_url) as http:
            while not halt.wait(period):
                started_at = time.perf_counter()
                with suppress(httpx.HTTPError):
                    http.get(target.health_url)
                probe.health.append(time.perf_counter() - started_at)

    def ordinary() -> None:
        headers = {"content-type": "application/json"}
        with client(target.url) as http:
            while not halt.wait(period):
                started_at = time.perf_counter()
                try:
                    status = http.post(
                        target.url + "/validate", content=body, headers=headers
                    ).status_code
                except httpx.HTTPError:
                    status = 0
                probe.ordinary.append(time.perf_counter() - started_at)
                probe.ordinary_status[status] += 1

    def rss() -> None:
        while not halt.wait(period):
            try:
                probe.rss_peak_mb = max(probe.rss_peak_mb, rss_mb_of(target.pid))
            except (OSError, ValueError):
                return

    threads = [threading.Thread(target=f, daemon=True) for f in (health, ordinary, rss)]
    for thread in threads:
        thread.start()
    started.set()
    stop.wait()
    halt.set()
    for thread in threads:
        thread.join(35)
    # Plain builtins: a class pickles by module name, and this module is ``__main__`` in
    # the bench but ``__mp_main__`` in the spawned child.
    out.put({name: getattr(probe, name) for name in PROBE_FIELDS})


@contextmanager
def probing(target: ProbeTarget, *, period: float = 0.05) -> Iterator[Probe]:
    """Measure /healthz, an ordinary review (each on its own connection) and RSS every
    ``period`` s until the block ends, from a process of their own (the attackers' threads
    in this one would otherwise hold up the prober's, see the module docstring); the
    yielded :class:`Probe` is filled in when the block ends."""
    probe = Probe()
    context = multiprocessing.get_context("spawn")
    started, stop, out = context.Event(), context.Event(), context.Queue()
    process = context.Process(
        target=_probe_process,
        args=(target, period, started, stop, out),
        name="bench-hostile-probe",
        daemon=True,
    )
    process.start()
    try:
        if not started.wait(60):
            raise RuntimeError("the probe process did not start within 60 s")
        yield probe
    finally:
        stop.set()
        try:
            measured: dict[str, Any] = out.get(timeout=60)
        except queue.Empty:
            measured = {}
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(5)
        for name, value in measured.items():
            setattr(probe, name, value)


@dataclass
class Flood:
    """Answers of the attack's own requests: latencies and HTTP status counts."""

    latencies: list[float] = field(default_factory=list)
    status: Counter[int] = field(default_factory=Counter)


def flood(
    serve: Serve,
    ca: Path,
    *,
    clients: int,
    seconds: float,
    make: Callable[[int], tuple[str, str, bytes, dict[str, str]]],
    max_requests: int = 100_000,
) -> Flood:
    """``clients`` threads sending ``make(i)`` = (method, path, body, headers) in a loop
    for ``seconds`` (at most ``max_requests`` in all)."""
    result = Flood()
    deadline = time.monotonic() + seconds
    counter = iter(range(max_requests))
    lock = threading.Lock()

    def client_loop() -> None:
        with httpx.Client(base_url=serve.url, verify=trusting(ca), timeout=60) as client:
            while time.monotonic() < deadline:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                method, path, body, headers = make(i)
                started = time.perf_counter()
                try:
                    status = client.request(method, path, content=body, headers=headers).status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    result.latencies.append(time.perf_counter() - started)
                    result.status[status] += 1

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 90)
    return result


JSON = {"content-type": "application/json"}


def attack_cpu(serve: Serve, ca: Path, *, clients: int, seconds: float, size: int) -> str:
    """Attack 1: distinct ~``size``-byte valid selectors matching every Node."""
    base = ",".join(["!a"] * (size // 3)) + ",kubernetes.io/hostname"

    def make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        return "POST", "/validate", encode(review_with(f"{base},!z{i}", uid=f"cpu-{i}")), JSON

    with probing(ProbeTarget.of(serve, ca)) as probe:
        attack = flood(serve, ca, clients=clients, seconds=seconds, make=make)
    return (
        f"attack reviews {ms(attack.latencies)} {dict(attack.status)}; /healthz {ms(probe.health)};"
        f" ordinary review {ms(probe.ordinary)} {dict(probe.ordinary_status)}"
    )


def attack_loop(serve: Serve, ca: Path, *, seconds: float, size: int) -> str:
    """Attack 2: 8 connections sending ~``size``-byte malformed selectors."""
    base = ",".join(["!a"] * (size // 3))

    def make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        return "POST", "/validate", encode(review_with(f"{base},x{i} in (a", uid=f"l-{i}")), JSON

    with probing(ProbeTarget.of(serve, ca)) as probe:
        attack = flood(serve, ca, clients=8, seconds=seconds, make=make)
    return (
        f"/healthz {ms(probe.health)}; ordinary review {ms(probe.ordinary)};"
        f" attack reviews {ms(attack.latencies)} {dict(attack.status)}"
    )


def attack_memory(serve: Serve, ca: Path, *, clients: int, seconds: float) -> str:
    """Attack 3: ``clients`` concurrent reviews just under the cap, then over it."""
    under = encode(review_with(None, pad=ADMISSION_BODY_LIMIT - 4096))
    under = under if len(under) <= ADMISSION_BODY_LIMIT else under[:0]
    over = encode(review_with(None, pad=7_300_000))
    parts = []
    with probing(ProbeTarget.of(serve, ca)) as probe:
        alone = flood(
            serve,
            ca,
            clients=1,
            seconds=seconds,
            make=lambda _i: ("POST", "/validate", under, JSON),
            max_requests=3,
        )
    parts.append(
        f"1 x {len(under) / 1e6:.2f} MB at a time: {ms(alone.latencies)} {dict(alone.status)},"
        f" RSS peak {probe.rss_peak_mb:.0f} MiB"
    )
    for name, body in (("just under the cap", under), ("7.3 MB, over the cap", over)):
        with probing(ProbeTarget.of(serve, ca)) as probe:
            attack = flood(
                serve,
                ca,
                clients=clients,
                seconds=seconds,
                make=lambda _i, b=body: ("POST", "/validate", b, JSON),  # type: ignore[misc]
                max_requests=clients * 4,
            )
        time.sleep(2)
        parts.append(
            f"{clients} x {len(body) / 1e6:.2f} MB ({name}): RSS peak {probe.rss_peak_mb:.0f} MiB,"
            f" after {rss_mb(serve):.0f} MiB, {dict(attack.status)},"
            f" /healthz {ms(probe.health)}, ordinary {ms(probe.ordinary)}"
        )
    return "\n    ".join(parts)


def attack_slow(
    serve: Serve, ca: Path, *, connections: int, interval: float, seconds: float
) -> str:
    """Attack 4: ``connections`` TLS connections sending a head one byte per ``interval``."""
    counts: Counter[str] = Counter()
    closed_after: list[float] = []
    context = trusting(ca)

    async def one(i: int) -> None:
        await asyncio.sleep(i * 0.002)  # spread the handshakes a little
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", serve.port, ssl=context), 20
            )
        except (OSError, ssl.SSLError, TimeoutError):
            counts["refused"] += 1
            return
        counts["opened"] += 1
        opened = time.monotonic()
        head = b"POST /validate HTTP/1.1\r\nHost: x\r\n"
        try:
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), interval)
                except TimeoutError:
                    if time.monotonic() - opened > seconds:
                        counts["still open at the end"] += 1
                        return
                    continue
                if not data:
                    break
            counts["closed by serve"] += 1
            closed_after.append(time.monotonic() - opened)
        except (OSError, ssl.SSLError):
            counts["closed by serve"] += 1
            closed_after.append(time.monotonic() - opened)
        finally:
            writer.close()

    async def everyone() -> None:
        await asyncio.gather(*(one(i) for i in range(connections)))

    with probing(ProbeTarget.of(serve, ca)) as probe:
        asyncio.run(everyone())
    time.sleep(2)
    return (
        f"{connections} slow connections: {dict(counts)}; closed after"
        f" {ms(closed_after)}; RSS peak {probe.rss_peak_mb:.0f} MiB, after"
        f" {rss_mb(serve):.0f} MiB; ordinary review {ms(probe.ordinary)}"
        f" {dict(probe.ordinary_status)}; /healthz {ms(probe.health)}"
    )


def attack_auth(serve: Serve, ca: Path, fake: FakeApi, *, seconds: float) -> str:
    """Attack 5: random bearer tokens on /metrics while TokenReview takes 5 s."""
    fake.http.post(
        "/_fake/latency",
        json={"seconds": 5, "method": "POST", "path": "/apis/authentication.k8s.io/v1/*"},
    ).raise_for_status()
    letters = string.ascii_letters

    def make(_i: int) -> tuple[str, str, bytes, dict[str, str]]:
        token = "".join(random.choices(letters, k=32))
        return "GET", "/metrics", b"", {"authorization": f"Bearer {token}"}

    try:
        with probing(ProbeTarget.of(serve, ca)) as probe:
            attack = flood(serve, ca, clients=64, seconds=seconds, make=make)
    finally:
        fake.http.post("/_fake/latency", json={"seconds": 0})
    reviews = fake.count("create tokenreviews")
    return (
        f"/healthz {ms(probe.health)}; ordinary review {ms(probe.ordinary)};"
        f" attack requests {ms(attack.latencies)} {dict(attack.status)};"
        f" TokenReviews sent {reviews}"
    )


def attack_memo(serve: Serve, ca: Path, *, selectors: int, seconds: float) -> str:
    """Attack 6: ``selectors`` distinct no-match selectors, as dry-run reviews."""
    before = rss_mb(serve)

    def make(i: int) -> tuple[str, str, bytes, dict[str, str]]:
        body = review_with(f"node-pool=nowhere-{i}", uid=f"m-{i}", dry_run=True)
        return "POST", "/validate", encode(body), JSON

    attack = flood(serve, ca, clients=8, seconds=seconds, make=make, max_requests=selectors)
    time.sleep(1)
    after = rss_mb(serve)
    sent = sum(attack.status.values())
    return (
        f"{sent} distinct no-match selectors {dict(attack.status)}: RSS {before:.0f} -> {after:.0f}"
        f" MiB ({after - before:+.1f} MiB)"
    )


def start(workdir: Path, *, nodes: int, flags: tuple[str, ...] = ()) -> tuple[FakeApi, Serve, Path]:
    """The fake API with ``nodes`` Nodes and a synced ``serve`` against it."""
    scale = Scale(nodes=nodes, managed=0, unmanaged=0)
    fake = start_fakeapi(objects=[make_node(i, scale) for i in range(nodes)], workdir=workdir)
    serve = start_serve(kubeconfig=fake.kubeconfig, workdir=workdir, flags=flags)
    try:
        wait_for("serve ready", serve.ready, timeout=120, interval=0.05)
    except BaseException:
        serve.stop()
        fake.stop()
        raise
    return fake, serve, workdir / "certs" / "ca.crt"


@dataclass
class Options:
    """Scale of each attack (the defaults are issue 14's)."""

    nodes: int = 1000
    seconds: float = 15.0
    clients: int = 48
    selector_bytes: int = 250_000
    malformed_bytes: int = 60_000
    memory_clients: int = 16
    slow: int = 2000
    slow_interval: float = 20.0
    slow_seconds: float = 30.0
    memo_selectors: int = 10_000


def run(options: Options, workdir: Path, *, out: Callable[[str], None] = print) -> dict[str, str]:
    """Run the six attacks; ``out`` gets one block per attack; returns the figures by name."""
    figures: dict[str, str] = {}

    def report(name: str, title: str, now: str) -> None:
        figures[name] = now
        out(f"{title}\n  before: {BEFORE[name]}\n  now:    {now}")

    def probed(serve: Serve) -> None:
        out(
            f"serve: webhook on {serve.url}; /healthz probed on its health-probe port"
            f" {serve.health_url} (--health-probe-bind-address), as a kubelet does"
        )

    fake, serve, ca = start(workdir / "plain", nodes=options.nodes)
    probed(serve)
    try:
        report(
            "memo",
            f"6. memo: {options.memo_selectors} distinct no-match selectors (dry run)",
            attack_memo(
                serve, ca, selectors=options.memo_selectors, seconds=max(120, options.seconds)
            ),
        )
        report(
            "cpu",
            f"1. CPU: {options.clients} clients, ~{options.selector_bytes // 1000} KB selectors",
            attack_cpu(
                serve,
                ca,
                clients=options.clients,
                seconds=options.seconds,
                size=options.selector_bytes,
            ),
        )
        report(
            "loop",
            f"2. event loop: 8 connections, ~{options.malformed_bytes // 1000} KB malformed",
            attack_loop(serve, ca, seconds=options.seconds, size=options.malformed_bytes),
        )
        report(
            "memory",
            f"3. memory: {options.memory_clients} concurrent large reviews",
            attack_memory(serve, ca, clients=options.memory_clients, seconds=options.seconds),
        )
        report(
            "slow",
            f"4. slow clients: {options.slow} connections, 1 byte / {options.slow_interval:g} s",
            attack_slow(
                serve,
                ca,
                connections=options.slow,
                interval=options.slow_interval,
                seconds=options.slow_seconds,
            ),
        )
    finally:
        serve.stop()
        fake.stop()
    fake, serve, ca = start(workdir / "auth", nodes=options.nodes, flags=("--auth", "kubernetes"))
    probed(serve)
    try:
        report(
            "auth",
            "5. auth: 64 connections, random tokens, TokenReview 5 s",
            attack_auth(serve, ca, fake, seconds=options.seconds),
        )
    finally:
        serve.stop()
        fake.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, print."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_hostile")
    defaults = Options()
    for name, value in vars(defaults).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    options = Options(**{k: getattr(args, k) for k in vars(defaults)})
    print(f"bench_hostile: {machine()}, Python {sys.version.split()[0]}, {options}")
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        workdir = args.workdir or Path(tmp)
        for sub in ("plain", "auth"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        run(options, workdir)
    print(f"bench_hostile: done, {machine()}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
