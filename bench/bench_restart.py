"""Restart / failover on a synced cluster (issue 15): ``.venv/bin/python -m bench.bench_restart``.

The cold start of :mod:`bench.bench_cold_start` (5,000 Nodes, 10,000 managed Services,
1,000 unmanaged) brings every status to its expected value; then ``serve`` is stopped and
a new ``serve`` process is started against the same API server (``--api fake``, the
default: the fake API; ``real``: kube-apiserver + etcd; ``both``: one after the other,
side by side), as after an upgrade, a pod restart or a leader failover (a new leadership
term: every Service is reconciled once, the Event recorder primes its series from a
List). Measured for the new process:
status writes (``patch services/status``: the fake API's counter, or
``apiserver_request_total`` of the real one), Events created and Event series updates
(``create events``, ``patch events``), ``serve``'s CPU until quiet (and the API
server's), the time from start to ready (``/readyz``) and to quiet (no reconcile for a
second with an empty queue), peak RSS; then every status is checked again.

Targets: 0 writes, 0 Events, ``serve`` CPU ≤ 4 s, quiet ≤ 6 s after start. The output ends
with one line ``restart: writes N events N cpu X.X s quiet Y.Y s`` per API server (with
``(fake API)`` or ``(kube-apiserver + etcd)`` at its end unless only the fake ran): writes
are status writes, events are Event writes of any kind (creates plus series PATCHes; the
lines before give each).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.bench_cold_start import (
    CREATES,
    SERIES,
    WRITES,
    ColdStart,
    add_scale_flags,
    api_kinds,
    api_side_by_side,
    check_statuses,
    cilium_side_by_side,
    columns,
    parse_scale,
    report,
    run_cold_start,
    wait_events_sent,
    wait_quiet,
)
from bench.procs import machine, start_serve
from bench.profile import PySpy, summary
from tests.support.waiting import wait_for


@dataclass
class Restart:
    """Figures of one restart (times in seconds from the new process's start)."""

    writes: int
    created: int
    series: int
    cpu: float
    cpu_ready: float
    api_cpu: float
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

    def line(self, label: str = "") -> str:
        """The one-line summary (events: Event writes of any kind), ``label`` (the API
        server, when a command runs on more than one) in parentheses at the end."""
        return (
            f"restart: writes {self.writes} events {self.events}"
            f" cpu {self.cpu:.1f} s quiet {self.quiet_after:.1f} s"
            + (f" ({label})" if label else "")
        )


def restart(
    run: ColdStart, *, workdir: Path, timeout: float = 300.0, profile: bool = False
) -> Restart:
    """Stop ``run``'s ``serve``, start a new one on the same API server, measure it until
    quiet. ``run.serve`` is replaced by the new process (the caller still stops ``run``)."""
    wait_events_sent(run.api)
    run.serve.stop()
    run.api.reset_requests()
    api_cpu0 = run.api.cpu_seconds()
    serve = start_serve(kubeconfig=run.api.kubeconfig, workdir=workdir, name="serve-restart")
    run.serve = serve
    spy = PySpy(pid=serve.process.pid, out=workdir / "serve-restart.raw") if profile else None
    try:
        wait_for("serve /readyz", serve.ready, timeout=timeout, interval=0.05)
        ready_at = time.monotonic()
        cpu_ready = serve.process.cpu_seconds()
        quiet_at, reconciles = wait_quiet(serve, timeout=timeout)
        cpu = serve.process.cpu_seconds()
        api_cpu = run.api.cpu_seconds() - api_cpu0
    finally:
        if spy is not None:
            spy.stop()
    if spy is not None:
        print(summary(spy.out), flush=True)
    counts = run.api.requests()
    mismatched, unmanaged_written = check_statuses(run.api, run.expected)
    t0 = serve.process.started
    return Restart(
        writes=counts.get(WRITES, 0),
        created=counts.get(CREATES, 0),
        series=counts.get(SERIES, 0),
        cpu=cpu,
        cpu_ready=cpu_ready,
        api_cpu=api_cpu,
        ready_after=ready_at - t0,
        quiet_after=quiet_at - t0,
        reconciles=reconciles,
        peak_rss_mb=serve.process.memory_mb("VmHWM"),
        mismatched=mismatched,
        unmanaged_written=unmanaged_written,
    )


def restart_report(result: Restart, managed: int, label: str = "") -> str:
    """The figures as printed lines, ending with :meth:`Restart.line` (``label``: the API
    server, named in the heading and at the end of that line)."""
    on = f" on the {label}" if label else ""
    return "\n".join(
        [
            f"restart of serve on the synced cluster{on} (a new process, a new leadership term):",
            f"  ready (caches synced):        {result.ready_after:6.2f} s after start",
            f"  quiet (queue empty, 1 s still): {result.quiet_after:6.2f} s after start"
            f" ({result.reconciles} reconciles)   (target <= 6 s)",
            f"  serve CPU until quiet:        {result.cpu:6.2f} s   (target <= 4 s);"
            f" {result.cpu_ready:.2f} s of it until ready (imports, lists, views)",
            f"  API server CPU until quiet:   {result.api_cpu:6.2f} s",
            f"  serve peak RSS (VmHWM):       {result.peak_rss_mb:6.1f} MB",
            f"  status writes {result.writes} (target 0), Event writes {result.events}"
            f" (target 0: {result.created} created, {result.series} series updated)",
            f"  status check: {managed - len(result.mismatched)}/{managed} managed Services"
            f" hold the expected ingress; {result.unmanaged_written} unmanaged Services written",
            result.line(label),
        ]
    )


def restart_side_by_side(runs: list[tuple[ColdStart, Restart]]) -> str:
    """The restarts of one command on each API server, one column each."""
    rows: list[tuple[str, list[float]]] = [
        ("ready (s)", [r.ready_after for _, r in runs]),
        ("quiet (s)", [r.quiet_after for _, r in runs]),
        ("serve CPU until quiet (s)", [r.cpu for _, r in runs]),
        ("serve CPU until ready (s)", [r.cpu_ready for _, r in runs]),
        ("API server CPU until quiet (s)", [r.api_cpu for _, r in runs]),
        ("serve peak RSS (MB)", [r.peak_rss_mb for _, r in runs]),
        ("status writes", [r.writes for _, r in runs]),
        ("Events created", [r.created for _, r in runs]),
        ("Event series updated", [r.series for _, r in runs]),
        ("reconciles", [r.reconciles for _, r in runs]),
        ("statuses as expected", [len(c.expected) - len(r.mismatched) for c, r in runs]),
        ("unmanaged Services written", [r.unmanaged_written for _, r in runs]),
    ]
    return columns("restart", [c.api_kind for c, _ in runs], rows)


def main(argv: list[str] | None = None) -> None:
    """Cold start, then restart, on each API server asked for; print both, side by side
    when there are two, and end with one :meth:`Restart.line` per API server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_flags(parser)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    scale = parse_scale(args)
    kinds = api_kinds(args)
    runs: list[tuple[ColdStart, Restart]] = []
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        base = args.workdir or Path(tmp)
        for kind in kinds:
            workdir = base / kind
            workdir.mkdir(parents=True, exist_ok=True)
            run = run_cold_start(scale=scale, workdir=workdir, api_kind=kind)
            try:
                print(report(run, scale), flush=True)
                wait_quiet(run.serve, timeout=300)
                result = restart(run, workdir=workdir, profile=args.profile)
            finally:
                run.stop()
            runs.append((run, result))
            if args.cilium:
                print(cilium_side_by_side(run, scale, workdir), flush=True)
            print(f"machine: {machine()}", flush=True)
    print(f"machine at the end: {machine()}")
    if len(runs) > 1:
        print(api_side_by_side([run for run, _ in runs]))
        print(restart_side_by_side(runs))
    for run, result in runs:
        label = run.api.label if kinds != ["fake"] else ""
        print(restart_report(result, len(run.expected), label))


if __name__ == "__main__":
    main()
