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
    assert synced.writes == sum(1 for ingress in synced.expected.values() if ingress)
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
        env={"NODE_IPAM_CILIUM_COMPAT_FANOUT": "true"},
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
