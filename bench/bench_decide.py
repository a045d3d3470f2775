"""The decision path alone, in one process (``.venv/bin/python -m bench.bench_decide``).

What a cold start's reconciler asks of :class:`app.core.decision.Decider` at 5,000 Nodes
and 10,000 managed Services (``bench.cluster``'s cluster, as ``bench_peer`` seeds it), with
0 and with N NodeAddressPools (``bench.address_pools``): one ``Decider(memo_local=False)``
per pass, as the reconciler's, calling ``decide`` on every managed Service over one
Snapshot (Node index, port index, EndpointSlices, pools, namespace labels). Prints per
pass the CPU seconds (``time.process_time``), the outcomes computed (misses) and answered
from the memo (hits); then one more pass under ``tracemalloc`` for the memory the
decisions keep (the Node index's memos and verdict caches included: they are built in
that pass). The first pass of each pool count pays for building those memos, so compare
the later ones. Then the same number of passes of the whole reconcile
(:func:`reconcile_pass`: ``Reconciler.reconcile`` of every managed Service over a
``ClusterCache``, to an API that only counts the PATCH bodies). Last, the memory the
informer's Service views keep once every managed Service's status is written
(:func:`stored_statuses`: each Service's object with its expected ingress, through JSON
and ``service_view`` as a watch event arrives). Figures: bench/README.md §13.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from app.controller.cache import ClusterCache
from app.controller.events import EventRecorder
from app.controller.reconciler import Reconciler
from app.core.decision import Decider
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.pools import pool_from_object
from app.core.views import (
    endpoint_slice_view,
    forget_shared_ingress,
    namespace_view,
    node_view,
    service_view,
)
from app.kube.client import KubeAPI
from bench.cluster import (
    Cluster,
    Scale,
    decision_snapshot,
    expected_ingress,
    make_cluster,
    service_key,
    with_address_pools,
)
from bench.procs import machine


@dataclass(frozen=True)
class Pass:
    """One pass over every managed Service: CPU seconds, misses, hits, and the memory (MB)
    the Decider and the Node index keep afterwards (``None``: not traced)."""

    pools: int
    cpu: float
    misses: int
    hits: int
    kept_mb: float | None = None


def run(cluster: Cluster, *, passes: int, trace: bool) -> list[Pass]:
    """``passes`` timed passes of ``cluster`` (and one traced pass when ``trace``), each
    with a new Decider over a new Node index, so every pass starts cold."""
    settings = SelectionSettings()
    count = len(cluster.address_pools)
    results = []
    for traced in [False] * passes + [True] * trace:
        # Port version 1: rivals' claims are kept across decisions, as the reconciler's.
        snap, views = decision_snapshot(cluster, settings, port_version=1)
        managed = [svc for svc in views.values() if is_managed(svc, settings)[0]]
        decider = Decider(settings, memo_local=False)
        if traced:
            tracemalloc.start()
        started = time.process_time()
        for svc in managed:
            decider.decide(svc, snap)
        cpu = time.process_time() - started
        kept = None
        if traced:
            kept = tracemalloc.get_traced_memory()[0] / 1e6
            tracemalloc.stop()
        results.append(Pass(count, cpu, decider.misses, decider.hits, kept))
    return results


def stored_statuses(cluster: Cluster) -> tuple[int, float]:
    """The managed Services' views as the informer keeps them once their statuses are
    written: each managed Service's object with ``status.loadBalancer.ingress`` set to its
    expected ingress (:func:`bench.cluster.expected_ingress`, ``ports`` included), through
    a JSON round trip (as a watch event is decoded) and ``service_view``, from an empty
    :func:`~app.core.views.shared_ingress` table. Returns the ingress entries and the
    memory (MB, ``tracemalloc``) the views keep, the shared lists and entries included."""
    expected = expected_ingress(cluster)
    objects = []
    for raw in cluster.services:
        ingress = expected.get(service_key(raw))
        if ingress is not None:
            objects.append(json.dumps({**raw, "status": {"loadBalancer": {"ingress": ingress}}}))
    forget_shared_ingress()
    tracemalloc.start()
    kept = [service_view(json.loads(text)) for text in objects]
    memory = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    return sum(len(view.ingress or ()) for view in kept), memory


class _CountingAPI:
    """The one :class:`~app.kube.client.KubeAPI` call a reconcile makes here: the status
    PATCH, counted with its JSON bytes, never sent (Events are queued, never flushed)."""

    def __init__(self) -> None:
        self.writes = 0
        self.bytes = 0

    def patch_service_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> str | None:
        self.writes += 1
        self.bytes += len(json.dumps(patch, separators=(",", ":")))
        return str(self.writes)


def reconcile_pass(cluster: Cluster) -> tuple[float, int, int]:
    """Every managed Service of ``cluster`` through :meth:`Reconciler.reconcile` once, on
    a :class:`ClusterCache` holding the cluster (its Namespaces, Nodes, EndpointSlices,
    NodeAddressPools and Services, blank statuses), writing to an API that only counts:
    what a cold start's reconcile workers do but the HTTP request (no TLS, no socket, no
    answer to parse; Events queued, not sent). Returns the CPU seconds
    (``time.process_time``), the status writes and their JSON bytes."""
    settings = SelectionSettings()
    cache = ClusterCache(settings)
    cache.replace(
        "namespaces",
        {
            o["metadata"]["name"]: namespace_view(o)
            for o in cluster.objects()
            if o["kind"] == "Namespace"
        },
    )
    cache.replace("nodes", {n["metadata"]["name"]: node_view(n) for n in cluster.nodes})
    cache.replace(
        "endpointslices",
        {
            f"{s['metadata']['namespace']}/{s['metadata']['name']}": endpoint_slice_view(s)
            for s in cluster.endpoint_slices
        },
    )
    cache.replace(
        "nodeaddresspools",
        {p["metadata"]["name"]: pool_from_object(p) for p in cluster.address_pools},
    )
    views = {service_key(raw): service_view(raw) for raw in cluster.services}
    cache.replace("services", views)
    counting = _CountingAPI()
    api = cast(KubeAPI, counting)
    recorder = EventRecorder(api=api, identity="bench-decide")
    reconciler = Reconciler(
        cache=cache, api=api, recorder=recorder, settings=settings, is_leader=lambda: True
    )
    keys = [key for key, view in views.items() if is_managed(view, settings)[0]]
    started = time.process_time()
    for key in keys:
        reconciler.reconcile(key)
    return time.process_time() - started, counting.writes, counting.bytes


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and print one line per pass."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="0,20", help="pool counts, comma-separated")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per count")
    parser.add_argument("--nodes", type=int, default=Scale().nodes)
    parser.add_argument("--services", type=int, default=Scale().managed, help="managed")
    parser.add_argument(
        "--no-trace", action="store_true", help="skip the tracemalloc pass and the statuses"
    )
    args = parser.parse_args(argv)
    scale = Scale(nodes=args.nodes, managed=args.services)
    base = make_cluster(scale)
    print(f"machine: {machine()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    for count in (int(c) for c in args.pools.split(",")):
        cluster = with_address_pools(base, count, scale)
        for n, result in enumerate(run(cluster, passes=args.passes, trace=not args.no_trace)):
            kept = "" if result.kept_mb is None else f", kept {result.kept_mb:.1f} MB (traced)"
            print(
                f"{count} pools, pass {n + 1}: decide CPU {result.cpu:.2f} s,"
                f" {result.misses} outcomes computed, {result.hits} from the memo{kept}",
                flush=True,
            )
        for n in range(args.passes):
            cpu, writes, size = reconcile_pass(cluster)
            print(
                f"{count} pools, reconcile pass {n + 1}: CPU {cpu:.2f} s, {writes} status"
                f" writes, {size / 1e6:.1f} MB of PATCH bodies",
                flush=True,
            )
        if not args.no_trace:
            entries, memory = stored_statuses(cluster)
            print(f"{count} pools, statuses: {entries} ingress entries, kept {memory:.1f} MB")


if __name__ == "__main__":
    main()
