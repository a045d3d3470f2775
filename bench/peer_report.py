"""bench_peer's report: the table per size, ratios and targets, the detail lines, and the
cold-start plot (bench/peer.png)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.bench_cold_start import columns
from bench.peer_phases import PHASES, ControllerRun, Phase, SizeResult
from bench.peer_workload import CONTROLLERS, KINDS, UNSET, percentile
from tests.peers.cilium.differential import IDENTICAL


def _get(
    run: ControllerRun | None, phase: str, read: Callable[[Phase], float | int | None]
) -> float | int:
    found = None if run is None else run.phases.get(phase)
    value = None if found is None else read(found)
    return UNSET if value is None else value


def _per_service(run: ControllerRun, phase: Phase) -> float:
    return sum(phase.requests_written.values()) / run.managed if run.managed else UNSET


def _churn_figure(run: ControllerRun | None, kind: str, what: str) -> float:
    if run is None:
        return UNSET
    seconds = run.churn_seconds(kind)
    changes = [c for c in run.churn if c.kind == kind]
    if what == "writes":
        return sum(c.writes for c in changes) / len(changes) if changes else UNSET
    if not seconds:
        return UNSET
    return percentile(seconds, 50 if what == "p50" else 99)


def size_table(result: SizeResult) -> str:
    """The size's figures, one column per controller that ran
    (:func:`bench.bench_cold_start.columns`; ``nan``: not taken or skipped)."""
    runs = result.runs

    def row(
        label: str, phase: str, read: Callable[[Phase], float | int | None]
    ) -> tuple[str, list[float]]:
        return label, [_get(run, phase, read) for run in runs]

    rows = [
        row("cold: ready (s)", "cold start", lambda p: p.ready_after),
        row("cold: every status written (s)", "cold start", lambda p: p.written_after),
        row("cold: quiet (s)", "cold start", lambda p: p.quiet_after),
        row("cold: CPU until written (s)", "cold start", lambda p: p.cpu_written),
        row("cold: CPU until quiet (s)", "cold start", lambda p: p.cpu_quiet),
        row("cold: peak RSS (MB)", "cold start", lambda p: p.rss_mb),
        row("cold: status writes until quiet", "cold start", lambda p: p.status_writes),
        row(
            "cold: requests until written", "cold start", lambda p: sum(p.requests_written.values())
        ),
        (
            "cold: requests/managed Service",
            [
                _per_service(run, run.phases["cold start"]) if "cold start" in run.phases else UNSET
                for run in runs
            ],
        ),
        row("cold: apiserver+etcd CPU (s)", "cold start", lambda p: sum(p.api_cpu.values())),
        row("restart: ready (s)", "restart", lambda p: p.ready_after),
        row("restart: quiet (s)", "restart", lambda p: p.quiet_after),
        row("restart: CPU until quiet (s)", "restart", lambda p: p.cpu_quiet),
        row("restart: status writes", "restart", lambda p: p.status_writes),
        row("restart: ingress changes", "restart", lambda p: p.changed),
        row("restart: apiserver+etcd CPU (s)", "restart", lambda p: sum(p.api_cpu.values())),
        row("steady: status writes", "steady", lambda p: p.status_writes),
        row("steady: controller CPU (s)", "steady", lambda p: p.cpu_quiet),
        row("steady: apiserver+etcd CPU (s)", "steady", lambda p: sum(p.api_cpu.values())),
    ]
    for kind in KINDS:
        for what in ("p50", "p99", "writes"):
            unit = "writes/change" if what == "writes" else f"{what} (s)"
            rows.append((f"churn {kind}: {unit}", [_churn_figure(run, kind, what) for run in runs]))
    rows.append(row("churn: controller CPU (s)", "churn", lambda p: p.cpu_quiet))
    last = [
        next((run.phases[p] for p in reversed(PHASES) if p in run.phases), None) for run in runs
    ]
    rows.append(
        (
            "statuses right, last List",
            [UNSET if p is None or p.verification is None else p.verification.right for p in last],
        )
    )
    heads = [run.label for run in runs]
    return columns(f"{result.scale.nodes} Nodes", heads, rows)


def ratio(ours: float | int, theirs: float | int) -> float:
    """``ours / theirs`` (``nan`` when either is missing or ``theirs`` is 0)."""
    if math.isnan(ours) or math.isnan(theirs) or not theirs:
        return UNSET
    return ours / theirs


def ratio_lines(result: SizeResult) -> list[str]:
    """ours/Cilium for the cold start's CPU (until written, until quiet) and wall time
    (until written), with the 1,000-Node target; empty unless both ran."""
    ours, cilium = result.run("ours"), result.run("cilium")
    if ours is None or cilium is None:
        return []
    figures = [
        ("CPU until written", lambda p: p.cpu_written),
        ("CPU until quiet", lambda p: p.cpu_quiet),
        ("wall until written", lambda p: p.written_after),
    ]
    parts = [
        f"{label} {ratio(_get(ours, 'cold start', read), _get(cilium, 'cold start', read)):.3f}"
        for label, read in figures
    ]
    return [f"  ratio ours/Cilium, cold start: {', '.join(parts)} (target <= 0.1 at 1,000 Nodes)"]


def _met(value: float, limit: float) -> str:
    if math.isnan(value):
        return "not measured"
    return "met" if value <= limit else "MISSED"


def target_lines(result: SizeResult) -> list[str]:
    """The targets of this size (1,000 and 5,000 Nodes; admission at every size), each
    with the figure and met / MISSED (nothing is asserted)."""
    ours, cilium = result.run("ours"), result.run("cilium")
    nodes, lines = result.scale.nodes, []

    def add(text: str, value: float, limit: float) -> None:
        lines.append(f"  target {text}: {value:.3f} ({_met(value, limit)})")

    if ours is not None and nodes == 1000:
        add(
            "ours every status written <= 6 s",
            _get(ours, "cold start", lambda p: p.written_after),
            6,
        )
        if cilium is not None:
            for label, read in (
                ("CPU", lambda p: p.cpu_quiet),
                ("wall", lambda p: p.written_after),
            ):
                value = ratio(_get(ours, "cold start", read), _get(cilium, "cold start", read))
                add(f"ours/Cilium cold-start {label} <= 0.1", value, 0.1)
        add(
            "ours steady-state status writes = 0",
            _get(ours, "steady", lambda p: p.status_writes),
            0,
        )
        seconds = ours.churn_seconds()
        add("ours churn p99 <= 1 s", percentile(seconds, 99) if seconds else UNSET, 1)
    if ours is not None and nodes == 5000:
        add(
            "ours every status written <= 20 s",
            _get(ours, "cold start", lambda p: p.written_after),
            20,
        )
        add("serve CPU until quiet <= 8 s", _get(ours, "cold start", lambda p: p.cpu_quiet), 8)
        cold = ours.phases.get("cold start")
        per = _per_service(ours, cold) if cold is not None else UNSET
        add("requests until written per managed Service <= 1.1", per, 1.1)
    if nodes not in (1000, 5000):
        lines.append("  (the size targets are set for 1,000 and 5,000 Nodes)")
    for phase in () if ours is None else ours.phases.values():
        window = phase.admission
        if window is not None:
            p99 = percentile(window.latencies_ms, 99) if window.latencies_ms else UNSET
            add(f"admission p99 <= 50 ms during ours' {phase.name} (ms)", p99, 50)
    return lines


def summary_line(result: SizeResult, run: ControllerRun) -> str:
    """One line per size and controller: the cold start, restart, steady and churn
    figures, the last check, the skipped phases and the failure count."""
    cold, rst, std = (run.phases.get(p) for p in ("cold start", "restart", "steady"))
    parts = []
    if cold is not None:
        parts.append(
            f"cold written {_fmt(cold.written_after)} s quiet {_fmt(cold.quiet_after)} s"
            f" CPU {_fmt(cold.cpu_written)}/{_fmt(cold.cpu_quiet)} s"
            f" RSS {_fmt(cold.rss_mb)} MB writes {cold.status_writes}"
        )
    if rst is not None:
        parts.append(f"restart writes {rst.status_writes} CPU {_fmt(rst.cpu_quiet)} s")
    if std is not None:
        parts.append(f"steady writes {std.status_writes} CPU {_fmt(std.cpu_quiet)} s")
    seconds = run.churn_seconds()
    if run.churn:
        p99 = _fmt(percentile(seconds, 99) if seconds else None)
        parts.append(f"churn {len(run.churn)} changes p99 {p99} s")
    last = next((run.phases[p] for p in reversed(PHASES) if p in run.phases), None)
    if last is not None and last.verification is not None:
        check = last.verification
        explained = {r: n for r, n in check.rules.items() if r != IDENTICAL}
        rules = ", ".join(f"{r} {n}" for r, n in sorted(explained.items()))
        parts.append(
            f"statuses {check.right}/{check.managed}" + (f" (explained: {rules})" if rules else "")
        )
    if run.skipped:
        parts.append(f"skipped: {', '.join(run.skipped)}")
    parts.append(f"failures {len(run.failures)}")
    return f"summary {result.scale.nodes} Nodes {run.label}: " + "; ".join(parts)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


def detail_lines(result: SizeResult) -> list[str]:
    """Per controller: the cold start's requests by verb and resource, the churn by kind,
    the notes of each phase and the rules that explained Cilium's statuses."""
    lines = []
    for run in result.runs:
        cold = run.phases.get("cold start")
        windows = [] if cold is None else [("written", cold.requests_written)]
        windows += [] if cold is None else [("quiet", cold.requests)]
        for when, counts in windows:
            top = sorted(counts.items(), key=lambda kv: -kv[1])
            lines.append(
                f"  {run.controller} cold start requests until {when} ({sum(counts.values())}): "
                + ", ".join(f"{key} {n}" for key, n in top)
            )
        for kind, label in KINDS.items():
            changes = [c for c in run.churn if c.kind == kind]
            if not changes:
                continue
            seconds = run.churn_seconds(kind)
            timing = (
                f"p50 {percentile(seconds, 50):.3f} s p99 {percentile(seconds, 99):.3f} s"
                if seconds
                else "no timing"
            )
            lines.append(
                f"  {run.controller} churn {label}: {len(changes)} changes,"
                f" {sum(c.affected for c in changes)} Services affected, {timing},"
                f" {sum(c.writes for c in changes) / len(changes):.1f} status writes per change,"
                f" {sum(c.unexpected for c in changes)} unaffected Services changed"
            )
        for name, phase in run.phases.items():
            if phase.note:
                lines.append(f"  {run.controller} {name}: {phase.note}")
        rules = Counter[str]()
        for phase in run.phases.values():
            if phase.verification is not None:
                rules.update(phase.verification.rules)
        explained = {r: n for r, n in rules.items() if r != IDENTICAL}
        if explained:
            lines.append(
                f"  {run.controller}: explained by docs/design.md §4.8 over every check: "
                + ", ".join(f"{r} {n}" for r, n in sorted(explained.items()))
            )
    return lines


def report(result: SizeResult) -> str:
    """The size's printed block: table, ratios, targets, details, summary lines."""
    lines = [size_table(result), *ratio_lines(result), *target_lines(result), *detail_lines(result)]
    lines += [summary_line(result, run) for run in result.runs]
    return "\n".join(lines)


def cold_start_points(results: Sequence[SizeResult], cap: float) -> list[dict[str, Any]]:
    """The plotted figures, one dict per size and controller: ``nodes``, ``controller``,
    ``written_after`` (s after start until every status was written) and ``cpu_quiet``
    (CPU s until quiet), each ``None`` when not measured, and ``converged`` (False: the
    cold start hit the ``cap`` of seconds, and the figures are lower bounds: the cap for
    the wall time, the CPU spent until then). ``--save`` writes these as JSON."""
    points = []
    for result in results:
        for run in result.runs:
            phase = run.phases.get("cold start")
            if phase is None:
                continue
            points.append(
                {
                    "nodes": result.scale.nodes,
                    "controller": run.controller,
                    "written_after": (
                        phase.written_after if phase.converged else phase.gave_up_after or cap
                    ),
                    "cpu_quiet": phase.cpu_quiet if phase.cpu_quiet is not None else None,
                    "converged": phase.converged,
                }
            )
    return points


def saved_points(path: Path) -> list[dict[str, Any]]:
    """The :func:`cold_start_points` that ``--save`` wrote to ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not JSON, or not a list of such points (``nodes`` a positive
            integer, ``controller`` one of :data:`CONTROLLERS`, ``written_after`` and
            ``cpu_quiet`` numbers or null, ``converged`` a boolean); the message names the
            file, the point and the field.
    """
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, list):
        raise ValueError(
            f"{path}: expected a list of points (bench_peer --save), got {type(data).__name__}"
        )
    for index, point in enumerate(data):
        where = f"{path}: point {index}"
        if not isinstance(point, dict):
            raise ValueError(f"{where}: expected an object, got {type(point).__name__}")
        nodes = point.get("nodes")
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 0:
            raise ValueError(f"{where}: 'nodes' must be a positive integer, got {nodes!r}")
        if point.get("controller") not in CONTROLLERS:
            raise ValueError(f"{where}: 'controller' must be one of {', '.join(CONTROLLERS)}")
        for name in ("written_after", "cpu_quiet"):
            value = point.get(name)
            if value is not None and (
                not isinstance(value, (int, float)) or isinstance(value, bool)
            ):
                raise ValueError(f"{where}: '{name}' must be a number or null, got {value!r}")
        if not isinstance(point.get("converged", True), bool):
            raise ValueError(f"{where}: 'converged' must be true or false")
    return data


def plot_points(points: Sequence[Mapping[str, Any]], out: Path) -> None:
    """Both controllers' cold start against Nodes as a PNG at ``out`` (matplotlib, Agg),
    from :func:`cold_start_points` dicts (of one run or several: ``bench_peer plot``):
    wall time until every status was written, CPU until quiet; a figure of a cold start
    that hit the cap is drawn hollow and labelled as a lower bound; a log y axis when the
    figures span more than a factor of 10."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("cold start: every status written", "seconds after start", "written_after"),
        ("cold start: controller CPU until quiet", "CPU seconds", "cpu_quiet"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(10, 4))
    for ax, (title, unit, key) in zip(axes, panels, strict=True):
        shown: list[float] = []
        for controller in CONTROLLERS:
            mine = sorted(
                (p for p in points if p["controller"] == controller and p.get(key) is not None),
                key=lambda p: p["nodes"],
            )
            if not mine:
                continue
            ys = [float(p[key]) for p in mine]
            # The line joins converged figures only: a lower bound is no point of a trend.
            trend = [
                (p["nodes"], y) for p, y in zip(mine, ys, strict=True) if p.get("converged", True)
            ]
            (line,) = ax.plot([x for x, _ in trend], [y for _, y in trend], "-", label=controller)
            for p, y in zip(mine, ys, strict=True):
                hollow = not p.get("converged", True)
                ax.plot(
                    [p["nodes"]],
                    [y],
                    "o",
                    color=line.get_color(),
                    markerfacecolor="none" if hollow else line.get_color(),
                )
                if hollow:
                    ax.annotate(
                        "not converged (≥)",
                        (p["nodes"], y),
                        xytext=(-6, -12),
                        textcoords="offset points",
                        ha="right",
                        fontsize=7,
                    )
            shown += ys
        positive = [v for v in shown if v > 0]
        if positive and max(positive) > 10 * min(positive):
            ax.set_yscale("log")
        ax.set(title=title, xlabel="Nodes (two managed Services each)", ylabel=unit)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot(results: Sequence[SizeResult], out: Path, cap: float = 900.0) -> None:
    """:func:`plot_points` of this run's :func:`cold_start_points`."""
    plot_points(cold_start_points(results, cap), out)


def failures(results: Iterable[SizeResult]) -> list[str]:
    """Every run's failures, prefixed with the size."""
    return [f"{r.scale.nodes} Nodes: {f}" for r in results for run in r.runs for f in run.failures]
