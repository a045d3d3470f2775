"""Fake API throughput: create 5,000 Nodes and list them through the official client.

Run: ``.venv/bin/python -m bench.bench_fakeapi [--nodes N]`` (prints figures; asserts nothing).
The server runs in a background thread of this process, as the ``fake_api`` fixture does.
"""

from __future__ import annotations

import argparse
import time

from kubernetes import client

from tests.fakeapi import FakeApiServer


def node(i: int) -> dict[str, object]:
    """A kind-like Node with labels, a taint and two addresses."""
    return {
        "metadata": {
            "name": f"node-{i:05d}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}",
                "kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.{i // 256 % 256}.{i % 256}"},
                {"type": "Hostname", "address": f"node-{i:05d}"},
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    with FakeApiServer() as server, server.client() as api:
        v1 = client.CoreV1Api(api)
        start = time.perf_counter()
        for i in range(args.nodes):
            v1.create_node(body=node(i))
        created = time.perf_counter()
        items = v1.list_node().items
        listed = time.perf_counter()
        raw = v1.list_node(_preload_content=False).data
        raw_listed = time.perf_counter()
    print(f"fakeapi: created {args.nodes} nodes in {created - start:.2f} s")
    print(f"fakeapi: listed {len(items)} nodes (deserialized) in {listed - created:.2f} s")
    print(f"fakeapi: listed {len(raw)} bytes (raw) in {raw_listed - listed:.2f} s")
    print(f"fakeapi: create+list total {listed - start:.2f} s")


if __name__ == "__main__":
    main()
