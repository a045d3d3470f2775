"""bench/address_pools.py and ``bench_peer --pools``: NodeAddressPools on the synthetic cluster.

The oracle (:func:`bench.cluster.expected_ingress`) holds the product's pool choice to the
bench's own reading of the rule and its addresses to the pool's Nodes; these tests show
the two readings agree on the generated pools, that a disagreement fails the run, and (the
slow one) that the pools on a real kube-apiserver give exactly the oracle's statuses.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from app.core.pools import PoolSet, pool_from_object
from app.core.views import service_view
from bench import cluster as bench_cluster
from bench.address_pools import (
    chosen_pool,
    crd_object,
    make_address_pools,
    namespace_labels,
    selector_matches,
)
from bench.bench_peer import parse_args, run_bench
from bench.cluster import (
    NAMESPACES,
    Scale,
    expected_ingress,
    make_cluster,
    service_key,
    with_address_pools,
)
from bench.peer_phases import PHASES, Options
from bench.peer_report import failures, size_table
from tests.controlplane.build import Binaries

SCALE = Scale(nodes=250, managed=10000, unmanaged=0)  # ports 40000-59999: every kind
SMALL = Scale(nodes=40, managed=80, unmanaged=0)
LABELS = {f"bench-{n}": namespace_labels(n) for n in range(NAMESPACES)}


def test_no_pools_for_zero_and_a_negative_count_is_refused() -> None:
    assert make_address_pools(0, node_pools=25, namespaces=20) == []
    with pytest.raises(ValueError, match="--pools: Invalid value: -1"):
        make_address_pools(-1, node_pools=25, namespaces=20)


def test_the_pools_parse_and_the_crd_is_the_shipped_one() -> None:
    pools = make_address_pools(20, node_pools=25, namespaces=20)
    assert len(pools) == 20 and pools[-1]["metadata"]["name"] == "zz-catch-all"
    assert all(pool_from_object(p).error is None for p in pools)
    crd = crd_object()
    assert crd["metadata"]["name"] == "nodeaddresspools.node-ipam-lb.io"
    assert crd["spec"]["scope"] == "Cluster"


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {}, True),
        ({"matchLabels": {"tenant": "t1"}}, {"tenant": "t1"}, True),
        ({"matchLabels": {"tenant": "t1"}}, {"tenant": "t2"}, False),
        ({"matchExpressions": [{"key": "p", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "p", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "p", "operator": "In", "values": ["a"]}]}, {"p": "a"}, True),
    ],
)
def test_the_bench_reads_label_selectors_as_apimachinery(
    selector: dict[str, object] | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selector, labels) is matches


def test_both_readings_choose_the_same_pool_for_every_service_and_every_pool_is_used() -> None:
    cluster = with_address_pools(make_cluster(SCALE), 20, SCALE)
    product = PoolSet(pool_from_object(p) for p in cluster.address_pools)
    used: Counter[str] = Counter()
    for raw in cluster.services:
        view = service_view(raw)
        if raw["spec"].get("loadBalancerClass") != "io.cilium/node":
            continue
        choice = product.choose(view, LABELS.get)
        want = chosen_pool(cluster.address_pools, raw, LABELS[view.namespace])
        assert choice.pool is not None and choice.pool.name == want, service_key(raw)
        used[want] += 1
    assert set(used) == {p["metadata"]["name"] for p in cluster.address_pools}
    # The pools change what is published: narrowed Nodes, both address types.
    plain, pooled = expected_ingress(make_cluster(SCALE)), expected_ingress(cluster)
    assert plain.keys() == pooled.keys()
    assert sum(plain[k] != pooled[k] for k in plain) > len(plain) // 50


def test_the_oracle_fails_when_the_decision_uses_another_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = with_address_pools(make_cluster(SMALL), 20, SMALL)
    monkeypatch.setattr(bench_cluster, "chosen_pool", lambda *_args: "pool-07")
    with pytest.raises(ValueError, match=r"the decision uses pool .*, the rule gives pool-07"):
        expected_ingress(cluster)


def test_the_oracle_fails_when_an_address_is_outside_the_pools_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = with_address_pools(make_cluster(SMALL), 20, SMALL)
    monkeypatch.setattr(bench_cluster, "pool_node_ips", lambda *_args: frozenset())
    with pytest.raises(ValueError, match="are not on Nodes of pool"):
        expected_ingress(cluster)


def test_pools_flag() -> None:
    assert parse_args(["--controllers", "ours", "--pools", "0,20,0,20"]).pools == [0, 20, 0, 20]
    assert parse_args([]).pools is None
    for bad in (["--pools", "x"], ["--pools", "-1"], ["--pools", "20"]):  # the last: Cilium too
        with pytest.raises(SystemExit):
            parse_args(bad)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pools_and_none_alternate_on_one_real_api_server(
    control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    tiny = Scale(nodes=40, managed=80, unmanaged=4)
    options = Options(
        sizes=[tiny.nodes],
        unmanaged_fraction=tiny.unmanaged / tiny.nodes,
        controllers=["ours"],
        pools=[20, 0],
        steady_seconds=2.0,
        churn=1,
        cap=60.0,
        admission_rate=0.0,
    )
    lines: list[str] = []
    (result,) = run_bench(options, tmp_path / "work", lines.append)
    text = "\n".join(lines)
    assert failures([result]) == [], text
    assert [(run.controller, run.pools) for run in result.runs] == [("ours", 20), ("ours", 0)]
    for run in result.runs:
        assert list(run.phases) == list(PHASES), text
        for phase in run.phases.values():
            check = phase.verification
            assert check is not None and check.right == check.managed == tiny.managed
        requests = run.phases["cold start"].requests_written
        assert requests.get("list nodeaddresspools", 0) >= 1, requests
    assert size_table(result).splitlines()[0].split()[-4:] == [
        "ours/20",
        "pools",
        "ours/0",
        "pools",
    ]
    assert "NodeAddressPool CRD Established and served" in text
