"""``bench.bench_pods`` at a tiny scale on the fake API: the cluster it builds, and one
``serve`` run per ``host-port-pods`` setting, checked for what each reads, keeps and
publishes (never for timings: bench/README.md §11 holds the figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.views import pod_view
from bench.bench_pods import (
    SERVICES,
    PodScale,
    as_listed,
    base_objects,
    dump_cost,
    informer_list,
    list_pods,
    pod_object,
    pod_specs,
    pod_status,
    run_serve,
)
from bench.procs import start_fakeapi

TINY = PodScale(nodes=40, pods=300)

pytestmark = pytest.mark.slow


def test_the_cluster_has_the_pods_it_says() -> None:
    """3 of every 5 Nodes of a pool run one port-holding Pod; the rest are ordinary Pods,
    which hold nothing; a real-sized Pod is a few kilobytes of JSON."""
    specs = list(pod_specs(TINY))
    assert len(specs) == TINY.pods and len({(s.namespace, s.name) for s in specs}) == TINY.pods
    holders = [s for s in specs if s.kind != "app"]
    assert len(holders) == len(TINY.holder_nodes) == 24
    assert {s.kind for s in holders} == {"exporter", "ingress", "dns"}
    views = {s.kind: pod_view(pod_object(s) | {"status": pod_status(s)}) for s in specs}
    assert views["exporter"].host_network and views["exporter"].ports == (("TCP", 9100),)
    assert views["ingress"].ports == (("TCP", 80), ("TCP", 443))
    assert views["dns"].ports == (("UDP", 53), ("TCP", 53))
    assert not views["app"].holds_ports
    assert PodScale().ordinary == 147_000 and len(PodScale().holder_nodes) == 3000


def test_one_run_per_setting_reads_keeps_and_publishes_as_the_setting_says(
    tmp_path: Path,
) -> None:
    api = start_fakeapi(objects=base_objects(TINY, with_pods=True), workdir=tmp_path)
    specs = list(pod_specs(TINY))
    try:
        listed = list_pods(api, None)
        assert listed.pods == TINY.pods and listed.bytes > 1000 * TINY.pods
        assert list_pods(api, "spec.hostNetwork=true").pods == 8
        runs = {
            on: run_serve(
                api,
                TINY,
                specs,
                on=on,
                workdir=tmp_path,
                name=f"serve-{on}",
                idle=0.5,
                rate=20,
                seconds=1.0,
                seed=1,
            )
            for on in (True, False)
        }
    finally:
        api.stop()
    on, off = runs[True], runs[False]
    assert (on.pods_read, on.pods_kept) == (TINY.pods, 24)
    assert (off.pods_read, off.pods_kept) == (8, 8)
    assert on.churn.failed == off.churn.failed == 0 and on.churn.sent == 20
    assert on.exposed == dict.fromkeys(SERVICES, 0), on
    assert off.exposed["svc-metrics"] == 0, "a hostNetwork Pod's port: held either way"
    assert off.exposed["svc-http"] > 0 and off.exposed["svc-dns"] > 0, off
    assert off.published["svc-http"] == on.published["svc-http"] + off.exposed["svc-http"]
    assert on.rss_quiet > 0 and on.cpu_ready > 0
    assert informer_list(tmp_path / "serve-True.log")[:2] == (TINY.pods, 24)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_offline_preview_of_a_pod_dump_runs(tmp_path: Path, fmt: str) -> None:
    """``--dump``: every Pod as kubectl prints it, the holders kept by the preview."""
    spec = next(s for s in pod_specs(TINY) if s.kind == "ingress")
    listed = as_listed(spec)
    assert listed["spec"]["serviceAccountName"] == "default" and "status" in listed
    assert pod_view(listed).ports == (("TCP", 80), ("TCP", 443))
    line = dump_cost(TINY, fmt, tmp_path)
    assert f"-f pods.{fmt}" in line and f"{TINY.pods} Pods" in line, line
