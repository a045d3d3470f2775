"""bench_peer's controllers: Cilium's Node IPAM and ours (``serve``) as restartable
processes on the API server, and the admission prober (a separate process sending
AdmissionReviews while a phase runs)."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import httpx

from bench.bench_admission import admission_review
from bench.bench_cold_start import wait_quiet
from bench.peer_oracle import judge_cilium, judge_ours
from bench.peer_workload import CILIUM_MODE, PROBE_COMMAND, Judge, percentile
from bench.procs import (
    Process,
    Serve,
    cpu_seconds,
    memory_mb,
    python,
    start_serve,
    trusting,
)
from bench.realapi import RealApi
from tests.peers.cilium.peer import CiliumNodeIpam
from tests.support.waiting import wait_for


def probe_admission(aim: Path, rate: float, out: Path, *, wait: float = 3600.0) -> None:
    """Wait (up to ``wait`` s) for the file ``aim`` (JSON ``{"url", "ca"}``, written by
    :meth:`Prober.aim`), then POST :func:`bench.bench_admission.admission_review` to
    ``url`` ``rate`` times per second (one kept-alive TLS connection trusting ``ca``; no
    burst to catch up) until killed; one JSON line per request to ``out`` (flushed):
    ``t`` (monotonic start, s), ``ms`` (latency, ``null`` without an answer) and
    ``outcome`` (``allowed``, ``denied``, ``http-<status>``, ``refused``: connection
    refused, ``error:<type>``). ``out`` is created first, once the imports are done: the
    bench starts ``serve`` after that and then aims it, so the prober's own start-up
    (~1 s of CPU) is not in ``serve``'s cold start.

    Raises:
        TimeoutError: ``aim`` did not appear in time.
    """
    out.touch()  # started: the bench waits for this before it starts serve
    wait_for(str(aim), aim.exists, timeout=wait, interval=0.01)
    target = json.loads(aim.read_text())
    url, ca = target["url"], Path(target["ca"])
    body = json.dumps(admission_review(), separators=(",", ":")).encode()
    uid = admission_review()["request"]["uid"]
    headers = {"Content-Type": "application/json"}
    period, next_at = 1.0 / rate, time.monotonic()
    # TCP_NODELAY, as Go's net/http (kube-apiserver's webhook client) sets it.
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.HTTPTransport(verify=trusting(ca), socket_options=nodelay)
    with (
        httpx.Client(transport=transport, timeout=10.0) as client,
        out.open("a", buffering=1) as log,
    ):
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            started = time.monotonic()
            ms: float | None = None
            try:
                response = client.post(url, content=body, headers=headers)
                ms = (time.monotonic() - started) * 1000
                outcome = f"http-{response.status_code}"
                if response.status_code == 200:
                    answer = response.json().get("response") or {}
                    allowed = answer.get("uid") == uid and answer.get("allowed") is True
                    outcome = "allowed" if allowed else "denied"
            except httpx.ConnectError:
                outcome = "refused"
            except (httpx.HTTPError, ValueError) as err:
                outcome = f"error:{type(err).__name__}"
            log.write(json.dumps({"t": started, "ms": ms, "outcome": outcome}) + "\n")
            next_at = max(next_at + period, time.monotonic())


@dataclass
class AdmissionWindow:
    """The prober's requests in one window: ``latencies_ms`` of the answers (from the
    first answer on), ``outcomes`` counted, ``refused`` connections refused before the
    first answer (the listener not up yet), ``first_answer`` monotonic time of it."""

    latencies_ms: list[float]
    outcomes: Counter[str]
    refused: int
    first_answer: float | None

    @property
    def answered(self) -> int:
        """Requests that got an HTTP answer."""
        return len(self.latencies_ms)

    @property
    def allowed(self) -> int:
        """Answers that allowed the review (echoing its uid)."""
        return self.outcomes.get("allowed", 0)

    def text(self) -> str:
        """One line: count, p50/p99/max, outcomes, refused before the first answer."""
        if not self.latencies_ms:
            return f"no answer ({dict(self.outcomes)}; {self.refused} refused)"
        lat = self.latencies_ms
        return (
            f"{self.answered} answered: p50 {percentile(lat, 50):.1f} ms, p99"
            f" {percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms (target p99 <= 50 ms);"
            f" {dict(sorted(self.outcomes.items()))}; {self.refused} refused before the"
            " listener was up"
        )


def read_probes(path: Path) -> AdmissionWindow:
    """The prober's output file as an :class:`AdmissionWindow` (a torn last line is
    skipped)."""
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    first = min((r["t"] for r in records if r["ms"] is not None), default=None)
    window = AdmissionWindow([], Counter(), 0, first)
    for record in records:
        before = first is None or record["t"] < first
        if before and record["outcome"] == "refused":
            window.refused += 1
            continue
        window.outcomes[record["outcome"]] += 1
        if record["ms"] is not None:
            window.latencies_ms.append(record["ms"])
    return window


class Prober(NamedTuple):
    """A running prober process, the file it waits for and the file it writes."""

    process: Process
    aim_file: Path
    out: Path

    def aim(self, serve: Serve, ca: Path) -> None:
        """Point it at ``serve``'s ``/validate``, trusting ``ca`` (written atomically)."""
        staged = self.aim_file.with_suffix(".tmp")
        staged.write_text(json.dumps({"url": f"{serve.url}/validate", "ca": str(ca)}))
        staged.replace(self.aim_file)


def start_prober(rate: float, out: Path) -> Prober:
    """The prober (:func:`probe_admission`) in its own process
    (``python -m bench.bench_peer probe-admission AIM RATE OUT``), returned once it is
    up and waits for :meth:`Prober.aim`; it writes to ``out`` (its log beside it). Stop
    it with ``.process.stop()``.

    Raises:
        RuntimeError: it exited or was not up within 60 s (its log tail).
    """
    aim = out.with_suffix(".aim")
    aim.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    argv = python("-m", "bench.bench_peer", PROBE_COMMAND, str(aim), str(rate), str(out))
    process = Process(name="admission-probe", argv=argv, log=out.with_suffix(".log"), env={})

    def up() -> bool:
        if not process.alive():
            raise RuntimeError(f"the admission prober exited:\n{process.tail()}")
        return out.exists()

    try:
        wait_for("the admission prober", up, timeout=60, interval=0.02)
    except BaseException as err:
        process.stop()
        raise RuntimeError(f"the admission prober did not start: {err}") from err
    return Prober(process, aim, out)


class Controller:
    """One controller's process on the API server, restartable: a base for
    :class:`CiliumController` and :class:`OursController`. ``started`` is the monotonic
    time its current process started."""

    name = ""

    def __init__(self, api: RealApi, judge: Judge) -> None:
        self.api = api
        self.judge = judge
        self.started = 0.0

    def start(self, workdir: Path, *, timeout: float) -> None:
        """Start a new process (logs in ``workdir``, created)."""
        raise NotImplementedError

    def pid(self) -> int:
        """The current process's id."""
        raise NotImplementedError

    def wait_ready(self, timeout: float) -> float:
        """Monotonic time its caches were synced."""
        raise NotImplementedError

    def wait_quiet(self, timeout: float) -> float:
        """Monotonic time it last did anything, once it has been quiet for ~1 s.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        raise NotImplementedError

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` when the process has exited."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the current process (nothing when none runs)."""
        raise NotImplementedError

    def cpu(self) -> float:
        """CPU time (``utime + stime``) of the current process so far, in seconds."""
        return cpu_seconds(self.pid())

    def rss_mb(self) -> float:
        """Peak RSS (``VmHWM``) of the current process, in MiB."""
        return memory_mb(self.pid())


class CiliumController(Controller):
    """Cilium's controller (:class:`CiliumNodeIpam`, ``lbipam``) on the API server's
    plane; quiet is its services/status requests still for 1 s once every managed Service
    has been reconciled by this process (scraped every 0.5 s by
    :meth:`CiliumNodeIpam.wait_quiet`)."""

    name = "cilium"

    def __init__(self, api: RealApi, managed: Iterable[str], binary: Path | None) -> None:
        super().__init__(api, judge_cilium)
        self.managed = sorted(managed)
        self.binary = binary
        self.peer: CiliumNodeIpam | None = None
        self._ready_at = 0.0

    def start(self, workdir: Path, *, timeout: float) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        peer = CiliumNodeIpam(
            self.api.plane, default_lb_service_ipam=CILIUM_MODE, binary=self.binary, workdir=workdir
        )
        self.started = time.monotonic()
        self.peer = peer.start(timeout=timeout)
        self._ready_at = time.monotonic()

    def _peer(self) -> CiliumNodeIpam:
        if self.peer is None or self.peer.proc is None:
            raise RuntimeError("Cilium's controller is not running")
        return self.peer

    def pid(self) -> int:
        proc = self._peer().proc
        assert proc is not None
        return proc.pid

    def wait_ready(self, timeout: float) -> float:
        """When ``start`` saw "Starting workers" in its log."""
        return self._ready_at

    def wait_quiet(self, timeout: float) -> float:
        quiet = 1.0
        self._peer().wait_quiet(self.managed, quiet=quiet, timeout=timeout)
        return time.monotonic() - quiet

    def check_alive(self) -> None:
        self._peer().check_alive()

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.stop()
            self.peer = None


class OursController(Controller):
    """``serve`` (:func:`bench.procs.start_serve`); quiet is
    :func:`bench.bench_cold_start.wait_quiet` (no reconcile for 1 s, empty queue)."""

    name = "ours"

    def __init__(self, api: RealApi) -> None:
        super().__init__(api, judge_ours)
        self.serve: Serve | None = None
        self.ca = Path()

    def start(self, workdir: Path, *, timeout: float) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.serve = start_serve(kubeconfig=self.api.kubeconfig, workdir=workdir)
        self.ca = workdir / "certs" / "ca.crt"  # bench.procs.tls_files
        self.started = self.serve.process.started

    def _serve(self) -> Serve:
        if self.serve is None:
            raise RuntimeError("serve is not running")
        return self.serve

    def pid(self) -> int:
        return self._serve().process.pid

    def wait_ready(self, timeout: float) -> float:
        wait_for("serve /readyz", self._serve().ready, timeout=timeout, interval=0.05)
        return time.monotonic()

    def wait_quiet(self, timeout: float) -> float:
        return wait_quiet(self._serve(), timeout=timeout)[0]

    def check_alive(self) -> None:
        serve = self._serve()
        if not serve.process.alive():
            raise RuntimeError(f"serve exited:\n{serve.process.tail()}")

    def events_sent(self, *, settle: float = 1.0, timeout: float = 60.0) -> None:
        """Wait until serve's ``node_ipam_lb_events_total`` (its own ``/metrics``, not the
        API server's) stays still for ``settle`` s: its recorder sends Events after the
        reconciles, and a stop drops what it still holds."""
        serve = self._serve()
        last, since = -1.0, time.monotonic()
        deadline = since + timeout
        while time.monotonic() - since < settle and time.monotonic() < deadline:
            sent = serve.metrics().get("node_ipam_lb_events_total", 0.0)
            if sent != last:
                last, since = sent, time.monotonic()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.serve is not None:
            self.serve.stop()
            self.serve = None
