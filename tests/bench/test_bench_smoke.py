"""Each benchmark scenario runs end to end at a tiny scale, so the scripts cannot rot.

These assert correctness (every status written as the selection core says, no stray
writes, no errors), never timings: the figures are the benchmarks' job (bench/README.md).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from bench import bench_admission, bench_churn, bench_core
from bench.bench_cold_start import ColdStart, run_cold_start
from bench.cluster import Scale

TINY = Scale(nodes=40, managed=60, unmanaged=10)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> ColdStart:
    run = run_cold_start(scale=TINY, workdir=tmp_path_factory.mktemp("cold"), timeout=60, log=False)
    yield run
    run.stop()


def test_cold_start_writes_every_managed_status_and_no_other(synced: ColdStart) -> None:
    assert synced.mismatched == []
    assert synced.unmanaged_written == 0
    # One per managed Service: its ingress and NodesServing condition, or (pending) the
    # condition alone (docs/design.md §5).
    assert synced.writes == len(synced.expected)
    assert synced.peak_rss_mb > 0 and synced.serve_cpu > 0


def test_node_churn_writes_only_the_services_whose_ingress_changed(synced: ColdStart) -> None:
    heartbeat, excluded, moved = bench_churn.churn_steps(synced, TINY, heartbeat_count=20)
    assert (heartbeat.reconciles, heartbeat.writes, heartbeat.changed) == (0, 0, 0)
    for step in (excluded, moved):
        assert step.affected > 0, step.name
        assert step.wrong == 0 and step.changed == step.affected, step
        assert step.writes >= step.affected, step


def test_cilium_policy_run_reconciles_every_managed_service(tmp_path: Path) -> None:
    run = run_cold_start(
        scale=TINY,
        workdir=tmp_path,
        cilium_policy=True,
        timeout=60,
        log=False,
    )
    try:
        step = bench_churn.cilium_step(run, TINY, profile_dir=None)
    finally:
        run.stop()
    assert step.wrong == 0 and step.changed == step.affected
    assert step.reconciles >= TINY.managed and step.writes >= TINY.managed


def test_selection_core_benchmark_prints_both_scenarios(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_core", "--rounds", "3"])
    bench_core.main()
    out = capsys.readouterr().out
    assert "cluster-5000" in out and "local-200-slices" in out


def test_admission_review_body_is_a_realistic_two_kilobyte_create() -> None:
    body = json.dumps(bench_admission.admission_review(), separators=(",", ":"))
    assert 1800 <= len(body) <= 3000


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed (apt-get install wrk)")
def test_admission_loads_run_without_errors_against_serve_and_ceiling(tmp_path: Path) -> None:
    body_file = tmp_path / "review.json"
    body_file.write_text(json.dumps(bench_admission.admission_review()))
    serve, serve_answer = bench_admission.bench_serve(
        nodes=20, workdir=tmp_path, body_file=body_file, duration=1, profile=False
    )
    ceiling, ceiling_answer = bench_admission.bench_ceiling(
        workdir=tmp_path, body_file=body_file, duration=1
    )
    assert serve_answer.startswith("allowed") and ceiling_answer.startswith("allowed")
    for load in [*serve, *ceiling]:
        assert load.errors == 0 and load.requests_per_second > 0, load


def test_restart_on_a_synced_cluster_writes_nothing_and_creates_no_event(tmp_path: Path) -> None:
    from bench.bench_restart import restart, restart_report

    run = run_cold_start(scale=TINY, workdir=tmp_path, timeout=60, log=False)
    try:
        result = restart(run, workdir=tmp_path, timeout=60)
    finally:
        run.stop()
    assert result.mismatched == [] and result.unmanaged_written == 0
    assert (result.writes, result.created, result.series, result.events) == (0, 0, 0, 0)
    assert (
        restart_report(result, len(run.expected))
        .splitlines()[-1]
        .startswith("restart: writes 0 events 0 cpu ")
    )


def test_growth_table_and_plot(tmp_path: Path) -> None:
    from bench import bench_growth

    points = [bench_growth.measure(20, tmp_path / "20", timeout=60)]
    points.append(bench_growth.measure(40, tmp_path / "40", timeout=60))
    assert [p.services for p in points] == [40, 80] and all(p.correct for p in points)
    assert "all right" in bench_growth.table(points)
    bench_growth.plot(points, tmp_path / "growth.png")
    assert (tmp_path / "growth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
