"""Benchmark of the admission webhook (``.venv/bin/python -m bench.bench_webhook``).

Scenarios, each through the FastAPI app (httpx ASGI transport, no sockets, no TLS), so
the figures cover body decoding, the pure decision and the response encoding:

- ``validate-5000``: ``POST /validate`` of a managed Service with selector ``pool=edge``
  against a synced cache of 5,000 nodes (the cluster warnings run ``select``);
- ``validate-unsynced``: the same while the cache is not synced (no cluster warnings);
- ``mutate``: ``POST /mutate`` of a class-less LoadBalancer Service (default nodeipam).

Prints median and p99 per request in milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import httpx

from app.config import Settings
from app.core.nodeindex import NodeIndex
from app.web.app import create_app
from bench.bench_core import make_nodes

ROUNDS = 300


class Cache:
    """A synced in-memory cache with ``nodes`` and no EndpointSlices."""

    def __init__(self, nodes: list[Any], *, synced: bool) -> None:
        self._nodes, self.synced = nodes, synced
        self._index = NodeIndex(nodes)

    def nodes(self) -> list[Any]:
        return self._nodes

    def node_index(self) -> NodeIndex:
        return self._index

    def service(self, namespace: str, name: str) -> None:
        return None

    def endpoint_slices(self, namespace: str, service_name: str) -> list[Any]:
        return []


def review(spec: dict[str, Any], annotations: dict[str, str]) -> bytes:
    obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"ports": [{"port": 80}], **spec},
    }
    request = {
        "uid": "bench",
        "kind": {"group": "", "version": "v1", "kind": "Service"},
        "operation": "CREATE",
        "namespace": "default",
        "name": "web",
        "object": obj,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


async def measure(cache: Cache, path: str, body: bytes) -> list[float]:
    app = create_app(Settings(default_lb_service_ipam="nodeipam", auth="none"), cache=cache)
    transport = httpx.ASGITransport(app=app)
    headers = {"content-type": "application/json"}
    timings = []
    async with httpx.AsyncClient(transport=transport, base_url="https://bench") as client:
        for _ in range(ROUNDS):
            started = time.perf_counter()
            response = await client.post(path, content=body, headers=headers)
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
    return timings


def main() -> None:
    nodes = make_nodes()
    managed = review(
        {"type": "LoadBalancer", "loadBalancerClass": "io.cilium/node"},
        {"io.cilium.nodeipam/match-node-labels": "pool=edge"},
    )
    scenarios = [
        ("validate-5000", Cache(nodes, synced=True), "/validate", managed),
        ("validate-unsynced", Cache(nodes, synced=False), "/validate", managed),
        ("mutate", Cache(nodes, synced=True), "/mutate", review({"type": "LoadBalancer"}, {})),
    ]
    for name, cache, path, body in scenarios:
        timings = sorted(asyncio.run(measure(cache, path, body)))
        p99 = timings[int(len(timings) * 0.99) - 1]
        print(f"{name:20s} median {statistics.median(timings):7.3f} ms   p99 {p99:7.3f} ms")


if __name__ == "__main__":
    main()
