"""bench/bench_health.py at a tiny scale: every client probes every target, none fails
(correctness only, never timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_health

pytestmark = pytest.mark.slow


def test_each_client_probes_every_target_of_every_round(tmp_path: Path) -> None:
    figures, server_cpu = bench_health.run(
        workdir=tmp_path,
        clients=bench_health.CLIENTS,
        nodes=20,
        rounds=2,
        period=0.05,
        timeout=2.0,
        concurrency=4,
        max_rate=2000.0,
    )
    assert [(f.client, f.targets, f.failures) for f in figures] == [
        (client, 20, 0) for client in bench_health.CLIENTS for _ in range(2)
    ]
    assert all(f.cpu_seconds > 0 and f.fds <= 4 + 8 for f in figures)
    assert server_cpu > 0
    assert "cpu µs/probe" in bench_health.table(figures)
