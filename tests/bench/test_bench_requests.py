"""bench/bench_requests.py at a tiny scale: every figure is made and the writes it times
really reach the API (correctness only, never timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_requests
from tests.fakeapi.server import FakeApiServer

pytestmark = pytest.mark.slow


def test_the_timed_writes_reach_the_fake_api(fake_api: FakeApiServer) -> None:
    fake_api.seed(bench_requests.seed_objects(5))
    for path in bench_requests.PATHS:
        api = bench_requests.new_api(fake_api.kubeconfig_path, path)
        for op in bench_requests.OPS:
            cpu, wall = bench_requests.measure(api, op=op, count=5, round_=0)
            assert cpu > 0 and wall > 0
        api.close()
    counts = fake_api.requests()
    # 5 warm-up and 5 timed requests of each kind, on each path.
    assert (counts["patch services/status"], counts["create events"]) == (20, 20)
    stored = fake_api.get("services", "svc-4", "bench-4")
    assert stored is not None and stored["status"]["loadBalancer"]["ingress"][0]["ip"]


def test_every_scheme_path_and_request_gets_a_figure(tmp_path: Path) -> None:
    figures = bench_requests.run(count=3, workdir=tmp_path)
    assert {(f.scheme, f.path, f.op) for f in figures} == {
        (scheme, path, op)
        for scheme in bench_requests.SCHEMES
        for path in bench_requests.PATHS
        for op in bench_requests.OPS
    }
    assert "patch status" in bench_requests.table(figures)
