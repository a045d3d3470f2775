"""bench/bench_peer.py: Cilium's own controller and ours on one real API server.

The slow test runs the whole benchmark at a tiny scale (40 Nodes, 80 managed Services)
against a real kube-apiserver + etcd and the Cilium peer, and checks that what it
measured is right, not how fast; the others pin the pure helpers (percentiles, the
scaled report schedule, the churn plan, the judges, the prober's output, the table).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from app.core.views import EXCLUDE_FROM_LB_LABEL
from bench.bench_peer import main, parse_args, run_bench
from bench.cluster import Scale, expected_ingress, make_cluster
from bench.peer_controllers import AdmissionWindow, read_probes
from bench.peer_oracle import Verification, judge_cilium, judge_ours
from bench.peer_phases import (
    PHASES,
    ChangeResult,
    ControllerRun,
    Options,
    Phase,
    SizeResult,
    status_writes,
    steady_note,
)
from bench.peer_report import (
    cold_start_points,
    failures,
    plot,
    ratio_lines,
    size_table,
    summary_line,
    target_lines,
)
from bench.peer_workload import (
    KINDS,
    PRESSURE,
    apply_change,
    percentile,
    plan_churn,
    report_body,
    report_schedule,
)
from tests.controlplane.build import Binaries
from tests.peers.cilium.differential import IDENTICAL, RULES

TINY = Scale(nodes=40, managed=80, unmanaged=4)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_both_controllers_every_phase_on_one_real_api_server(
    control_plane_binaries: Binaries, cilium_nodeipam: Path, tmp_path: Path
) -> None:
    options = Options(
        sizes=[TINY.nodes],
        unmanaged_fraction=TINY.unmanaged / TINY.nodes,
        steady_seconds=8.0,
        churn=2,
        cap=120.0,
        plot=tmp_path / "peer.png",
        peer=cilium_nodeipam,
    )
    lines: list[str] = []
    results = run_bench(options, tmp_path / "work", lines.append)
    text = "\n".join(lines)
    (result,) = results
    cilium, ours = result.run("cilium"), result.run("ours")
    assert cilium is not None and ours is not None
    assert failures(results) == [], text
    for run in (cilium, ours):
        assert run.managed == TINY.managed and 0 < run.with_ingress <= run.managed
        assert list(run.phases) == list(PHASES) and run.skipped == {}, text
        for phase in run.phases.values():
            check = phase.verification
            assert phase.converged and check is not None, (run.controller, phase.name, phase.note)
            assert check.right == check.managed == TINY.managed and check.wrong == []
            assert check.unmanaged_written == 0
        cold = run.phases["cold start"]
        assert cold.written_after is not None and cold.quiet_after is not None
        assert 0 < cold.written_after <= cold.quiet_after + 1.5
        assert cold.cpu_written is not None and 0 < cold.cpu_written <= (cold.cpu_quiet or 0)
        assert set(cold.api_cpu) == {"etcd", "kube-apiserver"}
        assert sum(cold.requests_written.values()) > status_writes(cold.requests_written) > 0
        assert run.phases["restart"].changed == 0  # nothing rewritten differently
        # Churn: every change counted, each affected Services, timed, nothing else changed.
        assert [c.kind for c in run.churn] == [kind for kind in KINDS for _ in range(2)]
        for change in run.churn:
            assert change.converged and change.affected > 0 and change.seconds is not None
            assert change.seconds > 0 and change.unexpected == 0, change
            assert change.writes >= 1, change
    # Ours: one write per managed Service (its ingress and NodesServing condition, or the
    # condition alone), none on restart or in the steady state.
    assert ours.phases["cold start"].status_writes == ours.managed
    assert ours.phases["restart"].status_writes == 0
    assert ours.phases["steady"].status_writes == 0
    assert ours.phases["cold start"].verification.rules == {IDENTICAL: TINY.managed}  # type: ignore[union-attr]
    # Cilium: every reconcile writes (each managed Service, then again for each Node event).
    assert cilium.phases["cold start"].status_writes >= TINY.managed
    assert cilium.phases["restart"].status_writes >= TINY.managed
    assert cilium.phases["steady"].status_writes > 0
    rules = cilium.phases["cold start"].verification.rules  # type: ignore[union-attr]
    assert set(rules) <= {IDENTICAL, *RULES} and rules["family-numeric-order"] > 0
    # Admission: answered, each allowed, during ours' cold start and churn; none for Cilium.
    for name in ("cold start", "churn"):
        window = ours.phases[name].admission
        assert window is not None and window.answered > 0, name
        assert window.allowed == window.answered == sum(window.outcomes.values()), window
        assert window.first_answer is not None
    assert all(p.admission is None for p in cilium.phases.values())
    # Output: a column per controller, the ratios, the summaries, the PNG.
    assert size_table(result).splitlines()[0].split()[-2:] == ["cilium", "ours"]
    assert "ratio ours/Cilium, cold start: CPU until written" in text
    assert (
        f"summary {TINY.nodes} Nodes cilium:" in text
        and f"summary {TINY.nodes} Nodes ours:" in text
    )
    assert "family-numeric-order" in text and "scaled to keep its per-Node rate" in text
    assert (tmp_path / "peer.png").read_bytes().startswith(PNG)


# -- pure helpers ---------------------------------------------------------------------------


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([0.25], 99) == 0.25
    assert percentile([1.0, 2.0], 50) == 1.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="expected 0 < q"):
        percentile([1.0], 0)


def test_a_full_window_reports_every_node_once_evenly_with_one_percent_toggles() -> None:
    reports = report_schedule(5000, 300.0)
    assert sorted(r.node for r in reports) == list(range(5000))
    assert [r.offset for r in reports[:3]] == [0.0, 0.06, 0.12]
    assert reports[-1].offset == pytest.approx(300.0 - 0.06)
    toggles = [r.toggle for r in reports if r.toggle]
    assert len(toggles) == 50 and set(toggles) == set(PRESSURE)
    assert toggles[:2] == ["MemoryPressure", "DiskPressure"]
    positions = [i for i, r in enumerate(reports) if r.toggle]
    assert {b - a for a, b in itertools.pairwise(positions)} == {100}


def test_a_shorter_window_keeps_kubelets_per_node_rate() -> None:
    reports = report_schedule(5000, 60.0)  # a fifth of the Nodes, spread over the cluster
    nodes = [r.node for r in reports]
    assert len(reports) == 1000 and len(set(nodes)) == 1000
    assert nodes[:3] == [2, 7, 12] and nodes == sorted(nodes)
    assert sum(1 for r in reports if r.toggle) == 10
    assert "shorter than kubelet's 300 s" in steady_note(5000, 60.0)
    assert "1000 reports" in steady_note(5000, 60.0) and "0.20 reports per Node" in steady_note(
        5000, 60.0
    )
    tiny = report_schedule(40, 8.0)  # 40 x 8 / 300 = 1.07: rounded up, one toggle at least
    assert [(r.offset, r.node) for r in tiny] == [(0.0, 10), (4.0, 30)]
    assert [r.toggle for r in tiny] == [None, "MemoryPressure"]


def test_a_longer_window_reports_each_node_again_after_the_frequency() -> None:
    reports = report_schedule(10, 600.0)
    assert len(reports) == 20
    by_node: dict[int, list[float]] = {}
    for report in reports:
        by_node.setdefault(report.node, []).append(report.offset)
    assert all(b - a == pytest.approx(300.0) for a, b in by_node.values())
    assert "every Node once" in steady_note(10, 300.0)
    with pytest.raises(ValueError):
        report_schedule(0, 60.0)
    with pytest.raises(ValueError):
        report_schedule(10, 0.0)


def test_reports_bump_heartbeats_and_toggle_only_what_selection_ignores() -> None:
    cluster = make_cluster(TINY)
    before = expected_ingress(cluster)
    node = cluster.nodes[3]
    plain = report_body(node, "2026-12-02T10:00:00Z")["status"]["conditions"]
    assert [c["lastHeartbeatTime"] for c in plain] == ["2026-12-02T10:00:00Z"] * 5
    assert [{**c, "lastHeartbeatTime": ""} for c in plain] == [
        {**c, "lastHeartbeatTime": ""} for c in node["status"]["conditions"]
    ]
    for i in range(TINY.nodes):
        for toggle in ("MemoryPressure", "DiskPressure", "MemoryPressure"):
            body = report_body(cluster.nodes[i], "2026-12-02T10:00:01Z", toggle)
            apply_change(cluster, ("nodes", i), body)
    conditions = {c["type"]: c for c in cluster.nodes[3]["status"]["conditions"]}
    assert conditions["MemoryPressure"]["status"] == "False"  # toggled twice
    assert conditions["DiskPressure"]["status"] == "True"
    assert conditions["DiskPressure"]["reason"] == "KubeletHasDiskPressure"
    assert conditions["DiskPressure"]["lastTransitionTime"] == "2026-12-02T10:00:01Z"
    assert conditions["Ready"]["status"] == "True"
    assert expected_ingress(cluster) == before  # nothing for ours to write
    with pytest.raises(KeyError):
        report_body(node, "x", "Ready")


def test_changes_are_applied_to_the_copy_as_the_server_applies_merge_patches() -> None:
    cluster = make_cluster(TINY)
    node = cluster.nodes[0]
    assert EXCLUDE_FROM_LB_LABEL in node["metadata"]["labels"]
    apply_change(cluster, ("nodes", 0), {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: None}}})
    assert EXCLUDE_FROM_LB_LABEL not in cluster.nodes[0]["metadata"]["labels"]
    assert EXCLUDE_FROM_LB_LABEL in node["metadata"]["labels"]  # a new object, not an edit
    endpoints = cluster.endpoint_slices[1]["endpoints"][:1]
    apply_change(cluster, ("endpoint_slices", 1), {"endpoints": endpoints})
    assert cluster.endpoint_slices[1]["endpoints"] == endpoints  # lists are replaced


@pytest.mark.parametrize("count", [2, 3])
def test_the_churn_plan_keeps_the_expected_ingress_in_step(count: int) -> None:
    cluster = make_cluster(TINY)
    original = copy.deepcopy(cluster)
    expected = expected_ingress(cluster)
    plan = plan_churn(cluster, expected, TINY, count)
    assert cluster == original  # planned on a copy
    assert Counter(change.kind for change in plan) == {kind: count for kind in KINDS}
    current = dict(expected)
    for change in plan:
        assert change.updates, change.what  # each change moves some Service's ingress
        apply_change(cluster, change.target, change.body)
        full = expected_ingress(cluster)
        assert set(change.updates) == {key for key in full if current[key] != full[key]}
        current.update(change.updates)
        assert current == full, change.what
    labels = [c.body["metadata"]["labels"][EXCLUDE_FROM_LB_LABEL] for c in plan[:count]]
    assert labels == ["true", None, "true"][:count]
    assert all(c.path.endswith("/status") for c in plan if c.kind == "internal-ip")
    scale = [c for c in plan if c.kind == "scale"]
    assert len(scale[1].body["endpoints"]) == len(scale[0].body["endpoints"]) - 1


def test_the_judges() -> None:
    ours = [{"ip": "10.0.0.9", "ipMode": "VIP"}, {"ip": "10.0.0.10", "ipMode": "VIP"}]
    cilium = [{"ip": "10.0.0.10", "ipMode": "VIP"}, {"ip": "10.0.0.9", "ipMode": "VIP"}]
    assert judge_ours(ours, ours) == IDENTICAL
    assert judge_ours(cilium, ours) is None
    assert judge_ours([{"ip": "10.0.0.9"}], [{"ip": "10.0.0.9", "ipMode": "VIP"}]) is None
    assert judge_cilium(ours, ours, ["IPv4"]) == IDENTICAL
    assert judge_cilium(cilium, ours, ["IPv4"]) == "family-numeric-order"
    assert judge_cilium([{"ip": "10.0.0.9"}, {"ip": "10.0.0.10"}], ours, ["IPv4"]) is None
    assert judge_cilium(cilium[:1], ours, ["IPv4"]) is None
    assert judge_cilium([], [], ["IPv4"]) == IDENTICAL
    assert judge_cilium([{"ip": "bogus", "ipMode": "VIP"}], ours[:1], ["IPv4"]) is None


def test_probes_are_split_into_refused_before_the_listener_and_answers(tmp_path: Path) -> None:
    out = tmp_path / "probes.jsonl"
    records = [
        {"t": 1.0, "ms": None, "outcome": "refused"},
        {"t": 1.05, "ms": None, "outcome": "refused"},
        {"t": 1.1, "ms": 30.0, "outcome": "allowed"},
        {"t": 1.15, "ms": 2.0, "outcome": "allowed"},
        {"t": 1.2, "ms": None, "outcome": "refused"},  # after the first answer: counted
        {"t": 1.25, "ms": 4.0, "outcome": "denied"},
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"t": 1.3, "m')
    window = read_probes(out)
    assert window.refused == 2 and window.first_answer == 1.1
    assert window.latencies_ms == [30.0, 2.0, 4.0] and window.answered == 3
    assert window.outcomes == {"allowed": 2, "refused": 1, "denied": 1}
    assert window.allowed == 2
    assert "3 answered: p50 4.0 ms, p99 30.0 ms, max 30.0 ms" in window.text()
    assert read_probes(tmp_path / "missing.jsonl").answered == 0


def _phase(name: str, **figures: float) -> Phase:
    check = Verification(10, Counter({IDENTICAL: 7, "family-numeric-order": 3}), [], 0)
    return Phase(name=name, verification=check, **figures)  # type: ignore[arg-type]


def _result(nodes: int) -> SizeResult:
    cilium = ControllerRun("cilium", 10, 8)
    ours = ControllerRun("ours", 10, 8)
    cilium.phases["cold start"] = _phase("cold start", written_after=40.0, cpu_quiet=20.0)
    cilium.phases["cold start"].requests_written = {"update services/status": 10, "list nodes": 2}
    ours.phases["cold start"] = _phase("cold start", written_after=2.0, cpu_quiet=1.0)
    ours.phases["cold start"].requests_written = {"patch services/status": 8, "list nodes": 3}
    ours.phases["steady"] = _phase("steady")
    ours.churn = [
        ChangeResult("exclusion", "n on", 3, 0.2, 3, 0),
        ChangeResult("exclusion", "n off", 3, 0.4, 3, 0),
    ]
    ours.phases["churn"] = _phase("churn")
    ours.phases["churn"].admission = AdmissionWindow([3.0, 5.0], Counter(allowed=2), 1, 0.0)
    cilium.skipped = {"restart": "cold start did not converge"}
    return SizeResult(Scale(nodes=nodes, managed=2 * nodes), "", [cilium, ours])


def test_the_table_has_a_column_per_controller_and_the_ratios() -> None:
    result = _result(1000)
    table = size_table(result).splitlines()
    assert table[0].split()[-2:] == ["cilium", "ours"]
    written = next(line for line in table if "every status written" in line).split()
    assert written[-2:] == ["40.00", "2.00"]
    assert next(line for line in table if "restart: quiet" in line).split()[-2:] == ["nan", "nan"]
    per = next(line for line in table if "requests/managed Service" in line).split()
    assert per[-2:] == ["1.20", "1.10"]  # 12 and 11 requests until written, 10 managed
    exclusion = next(line for line in table if "churn exclusion: p99" in line).split()
    assert exclusion[-2:] == ["nan", "0.40"]
    (ratios,) = ratio_lines(result)
    assert "CPU until quiet 0.050" in ratios and "wall until written 0.050" in ratios
    targets = "\n".join(target_lines(result))
    assert "ours every status written <= 6 s: 2.000 (met)" in targets
    assert "ours churn p99 <= 1 s: 0.400 (met)" in targets
    assert "admission p99 <= 50 ms during ours' churn (ms): 5.000 (met)" in targets
    big = "\n".join(target_lines(_result(5000)))
    assert "requests until written per managed Service <= 1.1: 1.100 (met)" in big
    assert "size targets are set" in "\n".join(target_lines(_result(40)))
    line = summary_line(result, result.runs[0])
    assert line.startswith("summary 1000 Nodes cilium: cold written 40.00 s")
    assert "explained: family-numeric-order 3" in line and "skipped: restart" in line
    only_ours = SizeResult(result.scale, "", [result.runs[1]])
    assert size_table(only_ours).splitlines()[0].split()[-1] == "ours"
    assert ratio_lines(only_ours) == []


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    out = tmp_path / "growth.png"
    plot([_result(1000), _result(5000)], out)
    assert out.read_bytes().startswith(PNG)


def test_saved_figures_of_separate_runs_plot_together(tmp_path: Path) -> None:
    small, big = _result(1000), _result(5000)
    big.runs[0].phases["cold start"].converged = False  # Cilium hit the cap at 5,000
    points = cold_start_points([small], 900.0) + cold_start_points([big], 600.0)
    capped = next(p for p in points if p["nodes"] == 5000 and p["controller"] == "cilium")
    assert capped["converged"] is False and capped["written_after"] == 600.0
    assert {(p["nodes"], p["controller"]) for p in points} == {
        (n, c) for n in (1000, 5000) for c in ("cilium", "ours")
    }
    saved = []
    for index, part in enumerate((points[:2], points[2:])):
        saved.append(tmp_path / f"run{index}.json")
        saved[-1].write_text(json.dumps(part))
    out = tmp_path / "both.png"
    assert main(["plot", str(out), *map(str, saved)]) == 0
    assert out.read_bytes().startswith(PNG)
    assert main(["plot", str(out)]) == 2


def test_flags() -> None:
    options = parse_args([])
    assert options.sizes == [1000, 5000] and options.controllers == ["cilium", "ours"]
    assert (options.steady_seconds, options.churn, options.cap) == (300.0, 20, 900.0)
    assert math.isclose(options.unmanaged_fraction, 0.1)
    assert parse_args(["--controllers", "ours,cilium"]).controllers == ["cilium", "ours"]
    assert parse_args(["--controllers", "ours", "--sizes", "40"]).sizes == [40]
    with pytest.raises(SystemExit):
        parse_args(["--controllers", "metallb"])
    with pytest.raises(SystemExit):
        parse_args(["--steady-seconds", "0"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ('{"nodes": 1000}', "expected a list of points"),
        ("[1]", "point 0: expected an object"),
        ('[{"controller": "ours"}]', "'nodes' must be a positive integer"),
        ('[{"nodes": 1000, "controller": "metallb"}]', "'controller' must be one of"),
        ('[{"nodes": 1000, "controller": "ours", "cpu_quiet": "x"}]', "'cpu_quiet' must be"),
        ('[{"nodes": 1000, "controller": "ours", "converged": "no"}]', "'converged' must be"),
    ],
)
def test_plot_names_the_file_and_field_of_a_malformed_save(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    # Before: a raw traceback (JSONDecodeError, TypeError, KeyError) for each of these.
    saved = tmp_path / "run.json"
    saved.write_text(content)
    assert main(["plot", str(tmp_path / "out.png"), str(saved)]) == 2
    said = capsys.readouterr()
    assert message in said.out + said.err and str(saved) in said.out + said.err
    assert not (tmp_path / "out.png").exists()
    assert main(["plot", str(tmp_path / "out.png"), str(tmp_path / "missing.json")]) == 2
