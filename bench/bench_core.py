"""Benchmark of the selection core (``.venv/bin/python -m bench.bench_core``).

Scenarios (target: ``select`` on 5,000 nodes well under 5 ms per call):

- ``cluster-5000``: 5,000 dual-stack NodeViews, half labelled ``pool=edge``, every 50th
  excluded by label and every 97th being deleted; a dual-stack eTP=Cluster Service with
  selector ``pool=edge``.
- ``local-200-slices``: the same nodes, an eTP=Local Service with no selector against 200
  EndpointSlices of that Service (100 endpoints each) plus 200 of other Services.

Prints median and p99 per call in milliseconds. ``--profile`` prints a cProfile summary
of the first scenario instead.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable

from app.core.nodeipam import select
from app.core.options import SelectionSettings
from app.core.views import (
    EXCLUDE_FROM_LB_LABEL,
    EndpointSliceView,
    NodeView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    service_view,
)

NODES = 5000


def make_nodes(count: int = NODES) -> list[NodeView]:
    """``count`` dual-stack nodes (one InternalIP per family, ExternalIP on every 3rd)."""
    nodes = []
    for i in range(count):
        labels = {"kubernetes.io/hostname": f"node-{i}", "pool": "edge" if i % 2 else "core"}
        if i % 50 == 0:
            labels[EXCLUDE_FROM_LB_LABEL] = ""
        addresses = [
            {"type": "InternalIP", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"},
            {"type": "InternalIP", "address": f"fd00::{i:x}"},
            {"type": "Hostname", "address": f"node-{i}"},
        ]
        if i % 3 == 0:
            addresses.append({"type": "ExternalIP", "address": f"2001:db8::{i:x}"})
        meta = {"name": f"node-{i:05d}", "labels": labels}
        if i % 97 == 0:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        nodes.append(
            node_view({"kind": "Node", "metadata": meta, "status": {"addresses": addresses}})
        )
    return nodes


def make_service(*, name: str, local: bool, selector: str | None) -> ServiceView:
    """A dual-stack (IPv4, IPv6) io.cilium/node Service."""
    meta: dict[str, object] = {"name": name, "namespace": "default"}
    if selector is not None:
        meta["annotations"] = {"io.cilium.nodeipam/match-node-labels": selector}
    spec = {
        "type": "LoadBalancer",
        "loadBalancerClass": "io.cilium/node",
        "externalTrafficPolicy": "Local" if local else "Cluster",
        "ipFamilies": ["IPv4", "IPv6"],
    }
    return service_view({"kind": "Service", "metadata": meta, "spec": spec})


def make_slices(service: str, count: int = 200, per_slice: int = 100) -> list[EndpointSliceView]:
    """``count`` EndpointSlices of ``service`` and as many of another Service."""
    slices = []
    for owner in (service, "other"):
        for s in range(count):
            endpoints = [
                {
                    "addresses": [f"10.244.{s}.{e}"],
                    "conditions": {"ready": e % 10 != 0},
                    "nodeName": f"node-{(s * per_slice + e) * 7 % NODES:05d}",
                }
                for e in range(per_slice)
            ]
            meta = {
                "name": f"{owner}-{s}",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": owner},
            }
            slices.append(endpoint_slice_view({"metadata": meta, "endpoints": endpoints}))
    return slices


def measure(call: Callable[[], object], *, rounds: int = 200) -> tuple[float, float]:
    """Median and p99 wall time of ``call`` in milliseconds (after 10 warm-up calls)."""
    for _ in range(10):
        call()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    """Run the scenarios and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    settings = SelectionSettings()
    nodes = make_nodes()
    cluster = make_service(name="web", local=False, selector="pool=edge")
    local = make_service(name="api", local=True, selector=None)
    slices = make_slices("api")
    now = time.time()

    def run_cluster() -> object:
        return select(service=cluster, nodes=nodes, endpoint_slices=(), settings=settings, now=now)

    def run_local() -> object:
        return select(
            service=local, nodes=nodes, endpoint_slices=slices, settings=settings, now=now
        )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [run_cluster() for _ in range(50)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        return
    result = run_cluster()
    print(
        f"cluster-5000: {len(result.ingress or ())} ingress entries, {len(result.nodes)} verdicts"
    )  # type: ignore[attr-defined]
    for name, call in (("cluster-5000", run_cluster), ("local-200-slices", run_local)):
        median, p99 = measure(call, rounds=args.rounds)
        print(f"{name:18} median {median:6.3f} ms   p99 {p99:6.3f} ms   per select() call")


if __name__ == "__main__":
    main()
