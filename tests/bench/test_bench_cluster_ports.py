"""The benchmark cluster and port ownership (docs/design.md §4.9): every managed Service
has ports of its own, and ``Scale.conflicting`` twins lose every address to their twin."""

from __future__ import annotations

from bench.cluster import Scale, expected_ingress, make_cluster

TINY = Scale(nodes=40, managed=60, unmanaged=10, conflicting=5)


def test_managed_services_share_no_port_and_twins_are_pending() -> None:
    cluster = make_cluster(TINY)
    ports = [
        (p["protocol"], p["port"])
        for s in cluster.services
        if s["metadata"]["name"].startswith("svc-") and not s["metadata"]["name"].endswith("-dup")
        for p in s["spec"]["ports"]
    ]
    assert len(ports) == len(set(ports)) == 2 * TINY.managed
    assert all(40000 <= port < 65536 for _, port in ports)
    expected = expected_ingress(cluster)
    twins = {k for k in expected if k.endswith("-dup")}
    assert len(twins) == TINY.conflicting
    assert all(expected[k] == [] for k in twins)
    assert all(expected[k.removesuffix("-dup")] for k in twins)
