"""bench/bench_decide.py runs at a tiny scale, so the script cannot rot (no timings)."""

from __future__ import annotations

import pytest

from bench import bench_decide
from bench.cluster import Scale, expected_ingress, make_cluster, with_address_pools

TINY = Scale(nodes=60, managed=120, unmanaged=10)


@pytest.mark.parametrize("count", [0, 20])
def test_every_pass_decides_alike_and_the_traced_one_measures(count: int) -> None:
    cluster = with_address_pools(make_cluster(TINY), count, TINY)
    passes = bench_decide.run(cluster, passes=2, trace=True)
    assert len(passes) == 3 and {p.pools for p in passes} == {count}
    # Each pass starts cold, so each computes and reuses the same number of outcomes.
    assert len({(p.misses, p.hits) for p in passes}) == 1
    assert passes[0].misses > 0 and passes[0].misses + passes[0].hits <= TINY.managed
    assert passes[-1].kept_mb is not None and passes[-1].kept_mb > 0
    assert passes[0].kept_mb is None


def test_the_command_prints_a_line_per_pass(capsys: pytest.CaptureFixture[str]) -> None:
    bench_decide.main(["--pools", "0,3", "--passes", "1", "--nodes", "40", "--services", "50"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("machine: ")
    assert [line.split(",")[0] for line in lines[1:] if "statuses" not in line] == [
        "0 pools"
    ] * 3 + ["3 pools"] * 3
    assert "kept" in lines[2] and "kept" not in lines[1]
    assert lines[3].startswith("0 pools, reconcile pass 1: CPU ")
    assert lines[4].startswith("0 pools, statuses: ") and lines[8].startswith("3 pools, statuses")


@pytest.mark.parametrize("count", [0, 20])
def test_the_reconcile_pass_writes_every_managed_status_it_decides(count: int) -> None:
    """Blank statuses: every managed Service whose expected ingress is not empty gets one
    write (an empty one only its condition, which is a write too): one per Service."""
    cluster = with_address_pools(make_cluster(TINY), count, TINY)
    cpu, writes, size = bench_decide.reconcile_pass(cluster)
    assert writes == TINY.managed
    assert size > writes * 100 and cpu > 0


def test_statuses_are_every_expected_entry_and_cost_memory() -> None:
    cluster = make_cluster(TINY)
    entries, memory = bench_decide.stored_statuses(cluster)
    expected = sum(len(v) for v in expected_ingress(cluster).values())
    assert entries == expected > 0
    assert memory > 0
