"""bench.bench_differential's loop and report, on canned results (the comparison itself,
:class:`tests.peers.cilium.differential.Differential`, is what
tests/peers/cilium/test_differential.py runs on real servers): modes one after the
other, counts per rule, rejections, shrink and exit 1 on an unexplained difference."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from bench import bench_differential
from tests.peers.cilium.clusters import Cluster
from tests.peers.cilium.differential import ClusterResult, Outcome


class _Canned:
    """Stands in for Differential: seed 2 has an unexplained difference."""

    runs: ClassVar[list[tuple[int, str]]] = []
    shrunk: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self.version = "v1.20.2"

    def __enter__(self) -> _Canned:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, cluster: Cluster, mode: str) -> ClusterResult:
        self.runs.append((cluster.seed, mode))
        outcomes = [
            Outcome("ns/a", ["IPv4"], ["10.0.0.1"], ["10.0.0.1"], ["10.0.0.1"], "identical"),
            Outcome("ns/b", ["IPv6"], ["FD00::A"], ["fd00::a"], ["fd00::a"], "canonical-addresses"),
        ]
        if cluster.seed == 2:
            outcomes.append(Outcome("ns/c", ["IPv4"], ["10.0.0.1"], [], [], None))
        return ClusterResult(cluster.seed, mode, outcomes, {"Node/x": "422 Node is invalid"}, 0.1)

    def shrink(self, cluster: Cluster, mode: str, key: str, *, budget: float) -> Cluster:
        self.shrunk.append(key)
        return cluster


def test_counts_rules_and_fails_on_an_unexplained_difference(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_differential, "Differential", _Canned)
    assert bench_differential.main(["--clusters", "4", "--first-seed", "0"]) == 1
    out = capsys.readouterr().out
    assert _Canned.runs == [(0, "lbipam"), (2, "lbipam"), (1, "nodeipam"), (3, "nodeipam")]
    assert _Canned.shrunk == ["ns/c"]
    counted: dict[str, Any] = {}
    for line in out.split("Services per rule", 1)[1].splitlines()[1:6]:
        name, value = line.split()
        counted[name] = int(value)
    assert counted == {
        "identical": 4,
        "canonical-addresses": 4,
        "family-numeric-order": 0,
        "port-ownership": 0,
        "unexplained": 1,
    }
    assert "unexplained difference, seed 2, --default-lb-service-ipam lbipam: ns/c" in out
    assert "    4  422 Node is invalid" in out


def test_tally_sums_earlier_runs_once_per_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(
        "bench_differential: 2 clusters\n"
        "seed 1 lbipam (cilium v1.20.2): 3 Services in 1.0 s; canonical-addresses 1, identical 2\n"
        "Traceback (most recent call last):\n"
    )
    second.write_text(
        "seed 1 lbipam (cilium v1.20.2): 3 Services in 1.0 s; canonical-addresses 1, identical 2\n"
        "seed 2 nodeipam (cilium v1.20.2): 2 Services in 1.0 s; identical 1, unexplained 1\n"
    )
    assert bench_differential.main(["--tally", str(first), str(second)]) == 1
    out = capsys.readouterr().out
    assert "over 2 clusters (5 Services; cilium v1.20.2; {'lbipam': 1, 'nodeipam': 1})" in out
    assert "  identical                      3" in out
    assert "  canonical-addresses            1" in out
    assert "  unexplained                    1" in out
