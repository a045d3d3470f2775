"""bench_peer's phases, per controller: cold start, restart, steady state, churn
(bench/bench_peer.py's docstring says what each measures), and one size's run."""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.address_pools import COLLECTION, crd_object
from bench.cluster import (
    Cluster,
    Scale,
    expected_ingress,
    make_cluster,
    node_name,
    service_key,
    with_address_pools,
)
from bench.peer_controllers import (
    AdmissionWindow,
    CiliumController,
    Controller,
    OursController,
    Prober,
    read_probes,
    start_prober,
)
from bench.peer_oracle import StatusWatch, Verification, blank_statuses, verify
from bench.peer_workload import (
    ADMISSION_RATE,
    CILIUM_MODE,
    CONTROLLERS,
    KINDS,
    REPORT_FREQUENCY,
    WRITE_KEYS,
    apply_change,
    plan_churn,
    report_body,
    report_count,
    report_schedule,
    say,
)
from bench.procs import Process, cpu_by_thread
from bench.profile import PySpy, summary
from bench.realapi import RealApi, start_realapi
from tests.peers.cilium.differential import cilium_manages
from tests.peers.cilium.peer import PeerError


@dataclass
class Phase:
    """Figures of one phase of one controller; times in seconds from the process start
    (``ready_after``, ``written_after``, ``quiet_after``); CPU in seconds (``cpu_*``: of
    the process since its start; steady and churn: over the phase); ``requests`` by
    ``"verb resource[/subresource]"`` over the phase (cold start: until quiet;
    ``requests_written``: until written); ``api_cpu`` of kube-apiserver and etcd over
    the same window; ``changed`` Services whose ingress changed (restart, steady)."""

    name: str
    converged: bool = True
    note: str = ""
    ready_after: float | None = None
    written_after: float | None = None
    quiet_after: float | None = None
    cpu_written: float | None = None
    threads_written: dict[str, float] = field(default_factory=dict)
    """Cold start: CPU seconds by thread name until written (:func:`bench.procs.cpu_by_thread`)."""
    cpu_quiet: float | None = None
    rss_mb: float | None = None
    requests_written: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    api_cpu: dict[str, float] = field(default_factory=dict)
    changed: int | None = None
    verification: Verification | None = None
    admission: AdmissionWindow | None = None
    gave_up_after: float | None = None  # not converged: seconds until it was given up

    @property
    def status_writes(self) -> int:
        """``update`` plus ``patch`` of ``services/status`` in :attr:`requests`."""
        return status_writes(self.requests)


def status_writes(requests: Mapping[str, int]) -> int:
    """Status writes (:data:`WRITE_KEYS`) in a request count."""
    return sum(requests.get(key, 0) for key in WRITE_KEYS)


@dataclass
class ChangeResult:
    """One churn change: ``affected`` Services, ``seconds`` from its PATCH until each held
    its new ingress (``None``: none affected, or not converged), status ``writes``
    between the previous change's convergence (this PATCH follows at once) and its own
    (so the tail of a controller that keeps writing after the affected Services are
    right counts for the next change), ``unexpected`` Services whose ingress changed
    though it does not affect them."""

    kind: str
    what: str
    affected: int
    seconds: float | None
    writes: int
    unexpected: int
    converged: bool = True


@dataclass
class ControllerRun:
    """Everything one controller did at one size: ``managed`` Services, ``with_ingress``
    of them with a non-empty expected ingress at its cold start, its phases by name, the
    churn changes,
    the phases skipped (with why) and the failures (unexplained statuses, non-convergence,
    unmanaged Services written, admission answers that did not allow)."""

    controller: str
    managed: int
    with_ingress: int
    pools: int | None = None
    """NodeAddressPools present (``--pools``; ``None``: the CRD was not installed)."""
    phases: dict[str, Phase] = field(default_factory=dict)
    churn: list[ChangeResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The controller's name, with its pools when ``--pools`` was given
        (``ours/20 pools``): the report's column head."""
        return self.controller if self.pools is None else f"{self.controller}/{self.pools} pools"

    def churn_seconds(self, kind: str | None = None) -> list[float]:
        """Convergence times of the churn changes of ``kind`` (every kind: ``None``)."""
        return [
            c.seconds
            for c in self.churn
            if c.seconds is not None and (kind is None or c.kind == kind)
        ]


PHASES = ("cold start", "restart", "steady", "churn")


@dataclass
class Options:
    """The run's settings (the command's flags): ``cap`` and ``steady_seconds`` in
    seconds, ``admission_rate`` reviews per second (0: none), ``peer`` the Cilium peer's
    binary (``None``: the cached build)."""

    sizes: list[int] = field(default_factory=lambda: [1000, 5000])
    unmanaged_fraction: float = 0.1
    conflicting: int = 0
    pools: list[int] | None = None
    """``--pools``: NodeAddressPools per run of each controller, in order, on the same
    seeded API server (``[0, 20, 0, 20]``: four runs); ``None``: no CRD, one run."""
    steady_seconds: float = 300.0
    churn: int = 20
    cap: float = 900.0
    controllers: list[str] = field(default_factory=lambda: list(CONTROLLERS))
    plot: Path | None = None
    workdir: Path | None = None
    save: Path | None = None
    profile: bool = False
    admission_rate: float = ADMISSION_RATE
    peer: Path | None = None


@dataclass
class Context:
    """What the phases of one controller share."""

    api: RealApi
    cluster: Cluster
    scale: Scale
    options: Options
    workdir: Path
    families: dict[str, list[str]]
    log: Callable[[str], None]
    probers: list[Process] = field(default_factory=list)
    """Every prober started, stopped (again) when the controller's phases end."""


def _verify(ctx: Context, ctl: Controller, watch: StatusWatch, phase: Phase) -> None:
    phase.verification = verify(ctx.api, watch.expected, ctx.families, ctl.judge)
    ctx.log(f"    {phase.name}: {phase.verification.text(converged=phase.converged)}")


def _prober(ctx: Context, ctl: Controller, name: str) -> Prober | None:
    if not isinstance(ctl, OursController) or ctx.options.admission_rate <= 0:
        return None
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    prober = start_prober(ctx.options.admission_rate, ctx.workdir / f"admission-{name}.jsonl")
    ctx.probers.append(prober.process)
    return prober


def _aim(prober: Prober | None, ctl: Controller) -> None:
    if prober is not None and isinstance(ctl, OursController) and ctl.serve is not None:
        prober.aim(ctl.serve, ctl.ca)


def _prober_done(prober: Prober | None, phase: Phase, ctx: Context) -> None:
    if prober is None:
        return
    prober.process.stop()
    phase.admission = read_probes(prober.out)
    ctx.log(f"    {phase.name}: admission {phase.admission.text()}")


def _not_converged(phase: Phase, watch: StatusWatch, cap: float, *, what: str, detail: str) -> int:
    """Mark ``phase`` not converged within ``cap`` s, saying how far ``watch``'s target
    got ("not converged after 900 s: N of M statuses right (detail)"); returns M."""
    right, of = watch.progress()
    phase.converged = False
    phase.note = f"not converged after {cap:.0f} s: {right} of {of} {what} right ({detail})"
    return of


def _deltas(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def _by_thread(phase: Phase) -> str:
    ordered = sorted(phase.threads_written.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in ordered if seconds >= 0.01)


def cold_start(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 1 (module docstring): start ``ctl`` on blank statuses, wait for every managed
    Service (``watch``'s first target) and for quiet, within ``--cap`` seconds."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("cold start")
    prober = _prober(ctx, ctl, "cold")  # up before serve starts (probe_admission)
    api_cpu0 = api.cpu_by_process()
    api.reset_requests()
    ctl.start(ctx.workdir / "cold", timeout=cap)
    _aim(prober, ctl)
    spy = None
    if ctx.options.profile and isinstance(ctl, OursController):
        spy = PySpy(pid=ctl.pid(), out=ctx.workdir / "serve-cold.raw")
    waiting = "its caches to sync"
    try:
        phase.ready_after = ctl.wait_ready(cap) - ctl.started
        left = cap - (time.monotonic() - ctl.started)
        waiting = "every managed status"
        written_at = watch.wait(max(left, 0.0), alive=ctl.check_alive)
        phase.written_after = written_at - ctl.started
        phase.cpu_written = ctl.cpu()
        if isinstance(ctl, OursController):
            phase.threads_written = cpu_by_thread(ctl.pid())
            ctx.log("    cold start: CPU until written by thread: " + _by_thread(phase))
            if ctl.serve is not None:
                with contextlib.suppress(httpx.HTTPError, OSError, ValueError):
                    samples = ctl.serve.metrics()
                    counted = {
                        name: int(samples.get(name, 0))
                        for name in ("controller_runtime_reconcile_total", "workqueue_adds_total")
                    }
                    ctx.log(f"    cold start: until written, {counted}")
        phase.requests_written = api.requests()
        if spy is not None:
            spy.stop()
            ctx.log(summary(spy.out))
            spy = None
        left = cap - (time.monotonic() - ctl.started)
        waiting = "quiet"
        phase.quiet_after = ctl.wait_quiet(max(left, 1.0)) - ctl.started
    except TimeoutError:
        _not_converged(phase, watch, cap, what="statuses", detail=f"waiting for {waiting}")
    finally:
        if spy is not None:
            spy.stop()
    phase.cpu_quiet = ctl.cpu()
    phase.rss_mb = ctl.rss_mb()
    phase.requests = api.requests()
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    if isinstance(ctl, OursController) and phase.converged:
        ctl.events_sent()
    _prober_done(prober, phase, ctx)
    _verify(ctx, ctl, watch, phase)
    return phase


def restart(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 2: stop ``ctl``'s process and start a new one on the synced cluster; until
    quiet, within ``--cap``."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("restart")
    ctl.stop()
    api_cpu0 = api.cpu_by_process()
    api.reset_requests()
    mark = time.monotonic()
    ctl.start(ctx.workdir / "restart", timeout=cap)
    try:
        phase.ready_after = ctl.wait_ready(cap) - ctl.started
        phase.quiet_after = ctl.wait_quiet(cap) - ctl.started
    except TimeoutError as err:
        phase.converged, phase.note = False, f"not quiet after {cap:.0f} s ({err})"
    phase.cpu_quiet = ctl.cpu()
    phase.rss_mb = ctl.rss_mb()
    phase.requests = api.requests()
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.changed = len(watch.changed_since(mark))
    _verify(ctx, ctl, watch, phase)
    return phase


def steady_note(nodes: int, seconds: float) -> str:
    """How the steady state's reports relate to kubelet's cadence (printed)."""
    count = report_count(nodes, seconds)
    if math.isclose(seconds, REPORT_FREQUENCY):
        return f"{count} reports: every Node once (nodeStatusReportFrequency 300 s)"
    share = "shorter" if seconds < REPORT_FREQUENCY else "longer"
    return (
        f"{count} reports in {seconds:g} s, {share} than kubelet's 300 s nodeStatusReport"
        f"Frequency: scaled to keep its per-Node rate ({count / nodes:.2f} reports per Node)"
    )


def steady(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 3: Node status reports at kubelet's cadence for ``--steady-seconds`` (status
    writes, controller and API server CPU over the window), then quiet and a List."""
    api, seconds, phase = ctx.api, ctx.options.steady_seconds, Phase("steady")
    schedule = report_schedule(len(ctx.cluster.nodes), seconds)
    phase.note = steady_note(len(ctx.cluster.nodes), seconds) + (
        f", {sum(1 for r in schedule if r.toggle)} of them toggling MemoryPressure/DiskPressure"
    )
    ctx.log(f"    steady: {phase.note}")
    cpu0, api_cpu0 = ctl.cpu(), api.cpu_by_process()
    api.reset_requests()
    mark = time.monotonic()
    for report in schedule:
        time.sleep(max(0.0, mark + report.offset - time.monotonic()))
        beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = report_body(ctx.cluster.nodes[report.node], beat, report.toggle)
        api.patch(f"/api/v1/nodes/{node_name(report.node)}/status", body)
        apply_change(ctx.cluster, ("nodes", report.node), body)
    time.sleep(max(0.0, mark + seconds - time.monotonic()))
    phase.requests = api.requests()
    phase.cpu_quiet = ctl.cpu() - cpu0
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.changed = len(watch.changed_since(mark))
    try:
        phase.quiet_after = ctl.wait_quiet(ctx.options.cap) - ctl.started
    except TimeoutError as err:
        phase.converged, phase.note = False, f"not quiet after {ctx.options.cap:.0f} s ({err})"
    phase.rss_mb = ctl.rss_mb()
    _verify(ctx, ctl, watch, phase)
    return phase


def churn(ctx: Context, ctl: Controller, watch: StatusWatch, run: ControllerRun) -> Phase:
    """Phase 4: :func:`plan_churn` (made before the first change, on a copy), then each
    change written once the one before converged (or ``--cap`` ran out: the rest is not
    written); per change into ``run.churn``."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("churn")
    plan = plan_churn(ctx.cluster, watch.expected, ctx.scale, ctx.options.churn)
    prober = _prober(ctx, ctl, "churn")
    _aim(prober, ctl)
    cpu0, api_cpu0 = ctl.cpu(), api.cpu_by_process()
    api.reset_requests()
    written = 0
    for change in plan:
        watch.target(change.updates)
        sent = time.monotonic()
        api.patch(change.path, change.body)
        apply_change(ctx.cluster, change.target, change.body)
        try:
            done = watch.wait(cap, alive=ctl.check_alive)
        except TimeoutError:
            of = _not_converged(phase, watch, cap, what="affected statuses", detail=change.what)
            run.churn.append(ChangeResult(change.kind, change.what, of, None, 0, 0, False))
            ctx.log(f"    churn: {phase.note}")
            break
        counts = api.requests()
        writes, written = status_writes(counts) - written, status_writes(counts)
        unexpected = len(watch.changed_since(sent) - set(change.updates))
        seconds = done - sent if change.updates else None
        run.churn.append(
            ChangeResult(change.kind, change.what, len(change.updates), seconds, writes, unexpected)
        )
    if phase.converged:
        try:
            phase.quiet_after = ctl.wait_quiet(cap) - ctl.started
        except TimeoutError as err:
            phase.converged, phase.note = False, f"not quiet after {cap:.0f} s ({err})"
    phase.requests = api.requests()
    phase.cpu_quiet = ctl.cpu() - cpu0
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.rss_mb = ctl.rss_mb()
    _prober_done(prober, phase, ctx)
    _verify(ctx, ctl, watch, phase)
    return phase


def run_controller(ctx: Context, name: str, pools: int | None = None) -> ControllerRun:
    """Every phase of controller ``name`` (``cilium`` or ``ours``) on blank statuses of
    ``ctx``'s API server, in order; a phase that does not converge skips the rest.
    ``pools``: how many NodeAddressPools ``ctx.cluster`` holds (already created on the
    server; ``None``: no CRD), for the report."""
    api, cluster = ctx.api, ctx.cluster
    expected = expected_ingress(cluster)
    run = ControllerRun(
        name, len(expected), sum(1 for ingress in expected.values() if ingress), pools
    )
    cilium_set = {service_key(s) for s in cluster.services if cilium_manages(s, CILIUM_MODE)}
    if cilium_set != set(expected):
        run.failures.append(
            f"Cilium manages {len(cilium_set)} Services, ours {len(expected)}: the sets differ"
        )
    ctl: Controller = (
        CiliumController(api, expected, ctx.options.peer)
        if name == "cilium"
        else OursController(api)
    )
    ctx.log(f"  {name}: {blank_statuses(api, expected)}")
    changes = len(KINDS) * ctx.options.churn + 4
    budget = ctx.options.cap * changes + ctx.options.steady_seconds
    watch = StatusWatch(api, expected, ctx.families, ctl.judge, timeout=budget)
    steps: dict[str, Callable[[], Phase]] = {
        "cold start": lambda: cold_start(ctx, ctl, watch),
        "restart": lambda: restart(ctx, ctl, watch),
        "steady": lambda: steady(ctx, ctl, watch),
        "churn": lambda: churn(ctx, ctl, watch, run),
    }
    why = ""
    try:
        for phase_name in PHASES:
            if why:
                run.skipped[phase_name] = why
                continue
            ctx.log(f"  {name}: {phase_name} ...")
            began = time.monotonic()
            try:
                phase = steps[phase_name]()
            except PeerError as err:  # Cilium did not start (e.g. its caches never synced)
                first = str(err).splitlines()[0]
                phase = Phase(
                    phase_name,
                    converged=False,
                    note=f"did not start: {first}",
                    gave_up_after=time.monotonic() - began,
                )
                ctx.log(f"    {phase_name}: {phase.note}")
            run.phases[phase_name] = phase
            check_phase(run, phase)
            if not phase.converged:
                why = f"{phase_name} did not converge: the state is not settled"
            elif phase.verification is not None and not phase.verification.ok:
                why = f"{phase_name} ended with wrong statuses: the state is not settled"
        for phase_name, reason in run.skipped.items():
            ctx.log(f"  {name}: {phase_name} skipped ({reason})")
    finally:
        for prober in ctx.probers:
            prober.stop()
        ctl.stop()
        watch.close()
    return run


def check_phase(run: ControllerRun, phase: Phase) -> None:
    """Add ``phase``'s failures to ``run.failures``: not converged (its statuses still
    wrong are part of that), statuses wrong (unexplained) after it converged or
    unmanaged Services written in its closing List, admission answers that did not allow
    the review."""
    where = f"{run.controller} {phase.name}"
    if not phase.converged:
        run.failures.append(f"{where}: {phase.note}")
    check = phase.verification
    if check is not None and check.wrong and phase.converged:
        run.failures.append(f"{where}: {len(check.wrong)} statuses wrong: {check.wrong[:5]}")
    if check is not None and check.unmanaged_written:
        run.failures.append(f"{where}: {check.unmanaged_written} unmanaged Services written")
    window = phase.admission
    if window is not None and window.allowed != window.answered:
        run.failures.append(f"{where}: admission answers {dict(window.outcomes)}")


@dataclass
class SizeResult:
    """One size: its scale, the seeding line and each controller's run (in run order)."""

    scale: Scale
    seeded: str
    runs: list[ControllerRun]

    def run(self, controller: str) -> ControllerRun | None:
        """The run of ``controller``, or ``None`` when it did not run."""
        return next((r for r in self.runs if r.controller == controller), None)


def _with_pools(
    api: RealApi, cluster: Cluster, scale: Scale, count: int | None, log: Callable[[str], None]
) -> Cluster:
    """``cluster`` with ``count`` NodeAddressPools, made the server's only pools
    (``None``: ``cluster`` as it is, no CRD)."""
    if count is None:
        return cluster
    variant = with_address_pools(cluster, count, scale)
    api.replace_all(COLLECTION, variant.address_pools)
    log(f"  {count} NodeAddressPools on the server")
    return variant


def run_size(
    nodes: int, options: Options, workdir: Path, log: Callable[[str], None] = say
) -> SizeResult:
    """Seed one API server with the synthetic cluster of ``nodes`` Nodes and run each
    controller of ``options.controllers`` on it (logs under ``workdir``).

    Raises:
        tests.controlplane.build.ControlPlaneUnavailable: no kube-apiserver/etcd binaries.
        (A controller that does not start is a phase that did not converge, not an error.)
        RuntimeError: seeding or clearing the statuses failed, or serve exited.
    """
    unmanaged = round(nodes * options.unmanaged_fraction)
    scale = Scale(
        nodes=nodes, managed=2 * nodes, unmanaged=unmanaged, conflicting=options.conflicting
    )
    cluster = make_cluster(scale)
    log(
        f"size {nodes} Nodes: {scale.managed} managed Services"
        f" ({len(cluster.endpoint_slices)} Local with an EndpointSlice), {unmanaged} unmanaged,"
        f" {scale.conflicting} conflicting (a twin's ports: pending by port ownership)"
    )
    lines: list[str] = []
    api = start_realapi(objects=cluster.objects(), say=lines.append)
    for line in lines:
        log(line)
    try:
        families = {service_key(s): list(s["spec"].get("ipFamilies", [])) for s in cluster.services}
        if options.pools is not None:
            took = api.install_crd(crd_object())
            log(f"  NodeAddressPool CRD Established and served in {took:.1f} s")
        runs = []
        for name in options.controllers:
            for i, count in enumerate(options.pools or [None]):
                where = workdir / str(nodes) / (name if count is None else f"{name}-{i}")
                where.mkdir(parents=True, exist_ok=True)
                variant = _with_pools(api, cluster, scale, count, log)
                # The harness keeps the cluster, the oracle and every watched status (a
                # million objects): each full collection walked them all (~0.4 s, 84 of
                # them, 30 CPU-s of a 5,000-Node run on the two cores serve and the API
                # server share). What exists before a run lives through it: frozen.
                gc.collect()
                gc.freeze()
                ctx = Context(api, variant, scale, options, where, families, log)
                runs.append(run_controller(ctx, name, count))
    finally:
        api.stop()
    return SizeResult(scale, "\n".join(lines), runs)
