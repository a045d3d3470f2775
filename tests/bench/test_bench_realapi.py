"""The cold start and restart benchmarks on a real kube-apiserver + etcd (``--api real``),
at a tiny scale: every status verified, counters from ``/metrics`` sane. Not timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_cold_start import api_side_by_side, report, run_cold_start
from bench.bench_restart import restart, restart_report, restart_side_by_side
from bench.cluster import Scale, make_cluster
from bench.realapi import collection_path, for_real_server
from tests.controlplane.build import Binaries
from tests.controlplane.metrics import request_counts

TINY = Scale(nodes=40, managed=60, unmanaged=10)


@pytest.mark.slow
def test_cold_start_and_restart_on_the_real_api_server(
    control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    run = run_cold_start(scale=TINY, workdir=tmp_path, timeout=90, log=False, api_kind="real")
    try:
        cold_text = report(run, TINY)
        result = restart(run, workdir=tmp_path, timeout=90)
    finally:
        run.stop()
    with_ingress = sum(1 for ingress in run.expected.values() if ingress)
    assert with_ingress > 0
    # Cold start: every managed status written once, as select() says; nothing else.
    assert run.mismatched == [] and run.unmanaged_written == 0
    # One write per managed Service: its ingress and NodesServing condition, or (pending)
    # the condition alone (docs/design.md §5).
    assert run.writes == len(run.expected)
    assert run.events_created >= with_ingress  # at least one IPsAssigned per Service written
    assert run.reconciles >= TINY.managed + TINY.unmanaged
    assert set(run.api_cpu) == {"etcd", "kube-apiserver"}
    assert run.api_cpu["kube-apiserver"] > 0
    assert 0 < run.ready_after <= run.written_after <= run.verified_after
    assert run.written_after <= run.quiet_after + 1.0
    assert run.serve_cpu > 0 and run.serve_cpu_quiet >= run.serve_cpu and run.peak_rss_mb > 0
    assert "on the kube-apiserver + etcd" in cold_text and "etcd" in cold_text
    assert f"{TINY.managed}/{TINY.managed} managed Services hold" in cold_text
    # Restart on the synced cluster: nothing to write, no Event.
    assert result.mismatched == [] and result.unmanaged_written == 0
    assert (result.writes, result.created, result.series) == (0, 0, 0)
    assert result.reconciles >= TINY.managed + TINY.unmanaged
    lines = restart_report(result, len(run.expected), run.api.label).splitlines()
    assert lines[-1].startswith("restart: writes 0 events 0 cpu ")
    assert lines[-1].endswith("(kube-apiserver + etcd)")
    # The side-by-side tables take one column per run.
    table = api_side_by_side([run, run]).splitlines()
    assert table[0].split()[-2:] == ["real", "real"]
    row = next(line for line in table if line.strip().startswith("status writes"))
    assert row.split()[-2:] == [str(len(run.expected))] * 2
    restart_table = restart_side_by_side([(run, result)]).splitlines()
    assert next(line for line in restart_table if "status writes" in line).split()[-1] == "0"


def test_services_are_created_without_what_the_server_allocates() -> None:
    cluster = make_cluster(TINY)
    local = next(s for s in cluster.services if s["spec"].get("externalTrafficPolicy") == "Local")
    cluster_ip = next(s for s in cluster.services if s["spec"]["type"] == "ClusterIP")
    created = for_real_server(local)
    assert not {"clusterIP", "clusterIPs", "healthCheckNodePort"} & set(created["spec"])
    assert created["spec"]["allocateLoadBalancerNodePorts"] is False
    assert created["spec"]["ipFamilies"] == local["spec"]["ipFamilies"]
    assert created["spec"]["ipFamilyPolicy"] == local["spec"]["ipFamilyPolicy"]
    assert "status" not in created and "clusterIP" in local["spec"]  # the input is unchanged
    assert "allocateLoadBalancerNodePorts" not in for_real_server(cluster_ip)["spec"]
    node = cluster.nodes[0]
    assert for_real_server(node)["status"]["addresses"] == node["status"]["addresses"]
    assert collection_path(node) == "/api/v1/nodes"
    assert collection_path(local) == f"/api/v1/namespaces/{local['metadata']['namespace']}/services"
    slice_ = cluster.endpoint_slices[0]
    namespace = slice_["metadata"]["namespace"]
    group = "/apis/discovery.k8s.io/v1"
    assert collection_path(slice_) == f"{group}/namespaces/{namespace}/endpointslices"
    with pytest.raises(ValueError, match="Pod"):
        collection_path({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})


def test_request_counts_sum_codes_and_groups_by_verb_resource_and_subresource() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests",
            'apiserver_request_total{code="200",component="apiserver",group="",resource="services",'
            'scope="resource",subresource="status",verb="PATCH",version="v1"} 7',
            'apiserver_request_total{code="409",component="apiserver",group="",resource="services",'
            'scope="resource",subresource="status",verb="PATCH",version="v1"} 2',
            'apiserver_request_total{code="201",component="apiserver",group="events.k8s.io",'
            'resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 5',
            'apiserver_request_total{code="201",component="apiserver",group="",'
            'resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 1',
            'apiserver_request_total{code="200",component="",group="",resource="",'
            'scope="",subresource="/readyz",verb="GET",version=""} 3',
            'apiserver_request_total{code="200",component="apiserver",group="",resource="services",'
            'scope="cluster",subresource="",verb="LIST",version="v1"} 1.0',
            'apiserver_request_duration_seconds_count{verb="PATCH",resource="services"} 99',
        ]
    )
    assert request_counts(text) == {
        "patch services/status": 9,
        "create events": 6,
        "list services": 1,
    }
