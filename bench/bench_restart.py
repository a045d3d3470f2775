"""Restart / failover on a synced cluster (issue 15): ``.venv/bin/python -m bench.bench_restart``.

The cold start of :mod:`bench.bench_cold_start` (5,000 Nodes, 10,000 managed Services,
1,000 unmanaged) brings every status to its expected value; then ``serve`` is stopped and
a new ``serve`` process is started against the same fake API server, as after an upgrade,
a pod restart or a leader failover (a new leadership term: every Service is reconciled
once, the Event recorder primes its series from a List). Measured for the new process:
status writes (the fake API's ``patch services/status`` counter), Events created and Event
series updates (``create events``, ``patch events``), ``serve``'s CPU until quiet, the
time from start to ready (``/readyz``) and to quiet (no reconcile for a second with an
empty queue), peak RSS; then every status is checked again.

Targets: 0 writes, 0 Events, ``serve`` CPU ≤ 4 s, quiet ≤ 6 s after start. The output ends
with one line ``restart: writes N events N cpu X.X s quiet Y.Y s``: writes are status
writes, events are Event writes of any kind (creates plus series PATCHes; the line before
gives each).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.bench_cold_start import (
    WRITES,
    ColdStart,
    add_scale_flags,
    check_statuses,
    cilium_side_by_side,
    parse_scale,
    report,
    run_cold_start,
    wait_quiet,
)
from bench.procs import machine, start_serve, wait_for
from bench.profile import PySpy, summary

CREATES = "create events"
SERIES = "patch events"


@dataclass
class Restart:
    """Figures of one restart (times in seconds from the new process's start)."""

    writes: int
    created: int
    series: int
    cpu: float
    cpu_ready: float
    ready_after: float
    quiet_after: float
    reconciles: int
    peak_rss_mb: float
    mismatched: list[str]
    unmanaged_written: int

    @property
    def events(self) -> int:
        """Event writes of any kind: created plus series updated."""
        return self.created + self.series

    def line(self) -> str:
        """The one-line summary (events: Event writes of any kind)."""
        return (
            f"restart: writes {self.writes} events {self.events}"
            f" cpu {self.cpu:.1f} s quiet {self.quiet_after:.1f} s"
        )


def wait_events_sent(run: ColdStart, *, settle: float = 2.0, timeout: float = 300.0) -> None:
    """Wait until the fake API's Event counters (creates, series updates) stay still for
    ``settle`` seconds: the recorder sends after the reconciles are done, and stopping
    ``serve`` earlier would drop what it still holds."""
    deadline = time.monotonic() + timeout
    last, since = (-1, -1), time.monotonic()
    while time.monotonic() < deadline:
        counts = run.fakeapi.requests()
        now = (counts.get(CREATES, 0), counts.get(SERIES, 0))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return
        time.sleep(0.2)
    raise TimeoutError("serve kept sending Events")


def restart(
    run: ColdStart, *, workdir: Path, timeout: float = 300.0, profile: bool = False
) -> Restart:
    """Stop ``run``'s ``serve``, start a new one on the same fake API, measure it until
    quiet. ``run.serve`` is replaced by the new process (the caller still stops ``run``)."""
    wait_events_sent(run)
    run.serve.stop()
    run.fakeapi.http.delete("/_fake/requests")
    serve = start_serve(kubeconfig=run.fakeapi.kubeconfig, workdir=workdir, name="serve-restart")
    run.serve = serve
    spy = PySpy(pid=serve.process.pid, out=workdir / "serve-restart.raw") if profile else None
    try:
        ready_at = wait_for(serve.ready, timeout=timeout, what="serve /readyz")
        cpu_ready = serve.process.cpu_seconds()
        quiet_at, reconciles = wait_quiet(serve, timeout=timeout)
        cpu = serve.process.cpu_seconds()
    finally:
        if spy is not None:
            spy.stop()
    if spy is not None:
        print(summary(spy.out), flush=True)
    counts = run.fakeapi.requests()
    mismatched, unmanaged_written = check_statuses(run.fakeapi, run.expected)
    t0 = serve.process.started
    return Restart(
        writes=counts.get(WRITES, 0),
        created=counts.get(CREATES, 0),
        series=counts.get(SERIES, 0),
        cpu=cpu,
        cpu_ready=cpu_ready,
        ready_after=ready_at - t0,
        quiet_after=quiet_at - t0,
        reconciles=reconciles,
        peak_rss_mb=serve.process.memory_mb("VmHWM"),
        mismatched=mismatched,
        unmanaged_written=unmanaged_written,
    )


def restart_report(result: Restart, managed: int) -> str:
    """The figures as printed lines, ending with :meth:`Restart.line`."""
    return "\n".join(
        [
            "restart of serve on the synced cluster (a new process, a new leadership term):",
            f"  ready (caches synced):        {result.ready_after:6.2f} s after start",
            f"  quiet (queue empty, 1 s still): {result.quiet_after:6.2f} s after start"
            f" ({result.reconciles} reconciles)   (target <= 6 s)",
            f"  serve CPU until quiet:        {result.cpu:6.2f} s   (target <= 4 s);"
            f" {result.cpu_ready:.2f} s of it until ready (imports, lists, views)",
            f"  serve peak RSS (VmHWM):       {result.peak_rss_mb:6.1f} MB",
            f"  status writes {result.writes} (target 0), Event writes {result.events}"
            f" (target 0: {result.created} created, {result.series} series updated)",
            f"  status check: {managed - len(result.mismatched)}/{managed} managed Services"
            f" hold the expected ingress; {result.unmanaged_written} unmanaged Services written",
            result.line(),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    """Cold start, then restart; print both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_flags(parser)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    scale = parse_scale(args)
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        run = run_cold_start(scale=scale, workdir=workdir)
        try:
            print(report(run, scale), flush=True)
            wait_quiet(run.serve, timeout=300)
            result = restart(run, workdir=workdir, profile=args.profile)
        finally:
            run.stop()
        if args.cilium:
            print(cilium_side_by_side(run, scale, workdir), flush=True)
    print(f"machine at the end: {machine()}")
    print(restart_report(result, len(run.expected)))


if __name__ == "__main__":
    main()
