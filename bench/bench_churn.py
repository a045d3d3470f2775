"""Node churn (issue 7, scenario 3): ``.venv/bin/python -m bench.bench_churn``.

On the synced cold-start cluster (:mod:`bench.bench_cold_start`):

(a) 1,000 heartbeat-style Node updates (only ``lastHeartbeatTime`` of the conditions);
(b) one Node gets ``node.kubernetes.io/exclude-from-external-load-balancers``;
(c) one (other) Node's IPv4 InternalIP changes.

For each: reconciles run (``controller_runtime_reconcile_total`` on ``serve``'s
``/metrics``), status writes sent (the fake API's ``patch services/status`` counter),
Services whose ingress changed (a watch on Services), and the time from the update to the
last affected status written (the watch event carrying the expected ingress) and to quiet
(no reconcile for a second, empty queue). Then (b) again on a fresh cluster with Cilium's
policy (:mod:`bench.cilium_policy`: every Node event enqueues every managed
Service, a status write on every reconcile), printed side by side with the ratio.

Targets: (a) 0 writes and ≤ 1% of Services reconciled; (b)/(c) writes only to the
Services whose ingress changed, converged ≤ 2 s.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.core.views import EXCLUDE_FROM_LB_LABEL
from bench.bench_cold_start import (
    SERVICES,
    WRITES,
    ColdStart,
    add_scale_flags,
    parse_scale,
    report,
    run_cold_start,
    status_ingress,
    wait_quiet,
)
from bench.bench_cold_start import side_by_side as cold_start_side_by_side
from bench.cluster import (
    Cluster,
    Scale,
    changed_keys,
    expected_ingress,
    node_conditions,
    node_name,
    pick_node,
    service_key,
)
from bench.procs import FakeApi, machine, stop_stream, stream_socket
from bench.profile import PySpy, summary
from tests.support.waiting import wait_for

HEARTBEATS = 1000


class ServiceWatch:
    """A watch on every Service from ``resourceVersion``: when each ingress changed."""

    def __init__(self, fakeapi: FakeApi) -> None:
        _, version = fakeapi.list_all(SERVICES, limit=1)
        self.changes: dict[str, list[tuple[float, list[dict[str, str]] | None]]] = {}
        self._lock = threading.Lock()
        self._client = httpx.Client(base_url=fakeapi.url, timeout=None)
        self._params = {
            "watch": "true",
            "resourceVersion": version,
            "timeoutSeconds": "3600",
        }
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopped = threading.Event()
        self._socket: socket.socket | None = None
        self._thread.start()

    def _run(self) -> None:
        last: dict[str, Any] = {}
        try:
            with self._client.stream("GET", SERVICES, params=self._params) as response:
                self._socket = stream_socket(response)
                if self._stopped.is_set():  # stop() came before the head: it saw no socket
                    return
                for line in response.iter_lines():
                    if self._stopped.is_set():
                        return
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if obj.get("kind") != "Service":
                        continue
                    key, ingress = service_key(obj), status_ingress(obj)
                    if last.get(key, "unset") != ingress:
                        last[key] = ingress
                        with self._lock:
                            self.changes.setdefault(key, []).append((time.monotonic(), ingress))
        except httpx.HTTPError:
            if not self._stopped.is_set():
                raise

    def since(self, t0: float) -> dict[str, list[tuple[float, list[dict[str, str]] | None]]]:
        """Ingress changes seen at or after monotonic time ``t0``, by Service key."""
        with self._lock:
            result = {}
            for key, entries in self.changes.items():
                later = [entry for entry in entries if entry[0] >= t0]
                if later:
                    result[key] = later
            return result

    def stop(self) -> None:
        """End the watch (:func:`bench.procs.stop_stream`)."""
        self._stopped.set()
        stop_stream(self._socket, self._thread, self._client)


@dataclass
class Step:
    """Figures of one churn step."""

    name: str
    affected: int
    reconciles: int
    writes: int
    changed: int
    wrong: int
    send_seconds: float
    converged_after: float | None
    quiet_after: float
    serve_cpu: float
    notes: list[str] = field(default_factory=list)


def run_step(
    *,
    name: str,
    run: ColdStart,
    watch: ServiceWatch,
    action: Callable[[], None],
    expected: dict[str, list[dict[str, str]]],
    settle: float = 1.0,
    timeout: float = 300.0,
) -> Step:
    """Apply ``action`` and measure until quiet; ``expected`` is the oracle after it."""
    affected = changed_keys(run.expected, expected)
    reconciles0, writes0 = run.serve.reconciles(), run.fakeapi.count(WRITES)
    cpu0, t0 = run.serve.process.cpu_seconds(), time.monotonic()
    action()
    sent = time.monotonic()

    def converged() -> bool:
        seen = watch.since(t0)
        return all(key in seen and seen[key][-1][1] == expected[key] for key in affected)

    converged_after = None
    if affected:
        wait_for(
            f"{name}: {len(affected)} Services written", converged, timeout=timeout, interval=0.05
        )
        seen = watch.since(t0)
        converged_after = max(seen[key][-1][0] for key in affected) - t0
    quiet_at, reconciles = wait_quiet(run.serve, timeout=timeout, settle=settle)
    seen = watch.since(t0)
    wrong = sum(1 for key, entries in seen.items() if entries[-1][1] != expected.get(key))
    run.expected = expected
    return Step(
        name=name,
        affected=len(affected),
        reconciles=reconciles - reconciles0,
        writes=run.fakeapi.count(WRITES) - writes0,
        changed=len(seen),
        wrong=wrong,
        send_seconds=sent - t0,
        converged_after=converged_after,
        quiet_after=max(quiet_at - t0, 0.0),
        serve_cpu=run.serve.process.cpu_seconds() - cpu0,
    )


def heartbeats(run: ColdStart, count: int) -> Callable[[], None]:
    """Update ``lastHeartbeatTime`` of ``count`` Nodes, one PATCH each (kubelet-like)."""

    def act() -> None:
        beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for index in range(min(count, len(run.cluster.nodes))):
            body = {"status": {"conditions": node_conditions(beat)}}
            run.fakeapi.patch(f"/api/v1/nodes/{node_name(index)}/status", body)

    return act


def exclude_node(cluster: Cluster, index: int, fakeapi: FakeApi | None) -> Callable[[], None]:
    """Add the exclusion label to Node ``index`` (in ``cluster`` and, on call, the API)."""
    cluster.nodes[index]["metadata"]["labels"][EXCLUDE_FROM_LB_LABEL] = "true"

    def act() -> None:
        assert fakeapi is not None
        body = {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}}
        fakeapi.patch(f"/api/v1/nodes/{node_name(index)}", body)

    return act


def move_internal_ip(cluster: Cluster, index: int, fakeapi: FakeApi) -> Callable[[], None]:
    """Give Node ``index`` a new IPv4 InternalIP (in ``cluster`` and, on call, the API)."""
    addresses = cluster.nodes[index]["status"]["addresses"]
    for address in addresses:
        if address["type"] == "InternalIP" and ":" not in address["address"]:
            address["address"] = f"10.200.{index // 256 % 256}.{index % 256}"

    def act() -> None:
        body = {"status": {"addresses": addresses}}
        fakeapi.patch(f"/api/v1/nodes/{node_name(index)}/status", body)

    return act


def churn_steps(run: ColdStart, scale: Scale, *, heartbeat_count: int) -> list[Step]:
    """(a), (b), (c) on the synced cluster of ``run``."""
    watch = ServiceWatch(run.fakeapi)
    try:
        cluster = run.cluster
        steps = [
            run_step(
                name=f"(a) {heartbeat_count} heartbeats",
                run=run,
                watch=watch,
                action=heartbeats(run, heartbeat_count),
                expected=run.expected,
                settle=2.0,
            )
        ]
        excluded = pick_node(cluster, scale)
        act_b = exclude_node(cluster, excluded, run.fakeapi)
        steps.append(
            run_step(
                name="(b) exclusion label",
                run=run,
                watch=watch,
                action=act_b,
                expected=expected_ingress(cluster),
            )
        )
        moved = pick_node(cluster, scale, skip=[excluded])
        act_c = move_internal_ip(cluster, moved, run.fakeapi)
        steps.append(
            run_step(
                name="(c) InternalIP change",
                run=run,
                watch=watch,
                action=act_c,
                expected=expected_ingress(cluster),
            )
        )
        return steps
    finally:
        watch.stop()


def cilium_step(run: ColdStart, scale: Scale, *, profile_dir: Path | None) -> Step:
    """(b) on a cluster synced by ``serve`` with Cilium's policy."""
    watch = ServiceWatch(run.fakeapi)
    spy = None
    try:
        excluded = pick_node(run.cluster, scale)
        act = exclude_node(run.cluster, excluded, run.fakeapi)
        expected = expected_ingress(run.cluster)
        if profile_dir is not None:
            spy = PySpy(pid=run.serve.process.pid, out=profile_dir / "serve-cilium-b.raw")
        return run_step(
            name="(b) exclusion label, Cilium policy",
            run=run,
            watch=watch,
            action=act,
            expected=expected,
            timeout=900.0,
        )
    finally:
        if spy is not None:
            spy.stop()
            print(summary(spy.out), flush=True)
        watch.stop()


def format_step(step: Step, managed: int) -> str:
    """Two lines of figures for ``step`` (percentages of ``managed`` Services)."""
    converged = (
        f"{step.converged_after:6.2f} s"
        if step.converged_after is not None
        else "   n/a (no ingress changes)"
    )
    return (
        f"  {step.name:38} reconciles {step.reconciles:6d} ({step.reconciles / managed:6.2%})"
        f"  writes {step.writes:6d}  ingress changed {step.changed:5d}"
        f" (expected {step.affected}, wrong {step.wrong})\n"
        f"  {'':38} sent in {step.send_seconds:5.2f} s, last affected status written"
        f" {converged}, quiet after {step.quiet_after:6.2f} s, serve CPU {step.serve_cpu:6.2f} s"
    )


def side_by_side(ours: Step, cilium: Step) -> str:
    """The (b) figures of both policies and their ratio, one row each."""

    def ratio(a: float, b: float) -> str:
        return f"{b / a:8.1f}x" if a else "      n/a"

    ours_conv = ours.converged_after or 0.0
    cil_conv = cilium.converged_after or 0.0
    rows = [
        ("reconciles", ours.reconciles, cilium.reconciles),
        ("status writes", ours.writes, cilium.writes),
        ("last affected written (s)", ours_conv, cil_conv),
        ("quiet after (s)", ours.quiet_after, cilium.quiet_after),
        ("serve CPU (s)", ours.serve_cpu, cilium.serve_cpu),
    ]
    lines = [
        f"  {'(b) one Node excluded':28} {'node-ipam-lb':>12} {'Cilium policy':>14} {'ratio':>9}"
    ]
    for label, a, b in rows:
        lines.append(f"  {label:28} {a:12.2f} {b:14.2f} {ratio(a, b)}")
    return "\n".join(lines)


COLD_STARTS_NOTE = (
    "the two cold starts above set up the churn steps; side by side as bench_cold_start"
    " --cilium prints them (compare CPU until quiet: under Cilium's policy every Service's"
    " first write is already right, so 'until written' comes before its second round of"
    " writes and the two policies' 'until written' CPU is about equal):"
)


def main(argv: list[str] | None = None) -> None:
    """Run scenario 3 (cold start, (a), (b), (c), then (b) under Cilium's policy)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scale_flags(parser)
    parser.add_argument("--heartbeats", type=int, default=HEARTBEATS)
    parser.add_argument("--no-cilium", action="store_true", help="skip the Cilium-policy run")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    scale = parse_scale(args)
    with tempfile.TemporaryDirectory(prefix="bench-churn-") as tmp:
        workdir = args.workdir or Path(tmp)
        (workdir / "ours").mkdir(parents=True, exist_ok=True)
        print("cold start (node-ipam-lb policy)", flush=True)
        run = run_cold_start(scale=scale, workdir=workdir / "ours")
        try:
            print(report(run, scale), flush=True)
            steps = churn_steps(run, scale, heartbeat_count=args.heartbeats)
        finally:
            run.stop()
        print("node churn (node-ipam-lb policy):")
        for step in steps:
            print(format_step(step, scale.managed), flush=True)
        if args.no_cilium:
            return
        (workdir / "cilium").mkdir(exist_ok=True)
        print("cold start (Cilium policy)", flush=True)
        cilium_run = run_cold_start(
            scale=scale,
            workdir=workdir / "cilium",
            cilium_policy=True,
        )
        try:
            print(report(cilium_run, scale), flush=True)
            print(COLD_STARTS_NOTE)
            print(cold_start_side_by_side(run, cilium_run), flush=True)
            cilium = cilium_step(
                cilium_run, scale, profile_dir=workdir / "cilium" if args.profile else None
            )
        finally:
            cilium_run.stop()
        print(format_step(cilium, scale.managed))
        print(side_by_side(steps[1], cilium))
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
