"""The reconciler through the real ``node-ipam-lb serve`` process against the fake API server.

Two replicas: the elected one writes the kind-4node statuses; killing it (SIGKILL, no Lease
release) hands over within the lease duration; SIGTERM releases the Lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controller.memory_api import nodes_serving
from tests.controller.support import CASE, kind_4node, node, wait_until
from tests.fakeapi.server import FakeApiServer
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("node-ipam-lb")
LEASE = ("leases.coordination.k8s.io", "node-ipam-lb", "kube-system")


class Replica:
    def __init__(self, server: FakeApiServer, tmp: Path, name: str) -> None:
        self.port = free_port()
        self.log = tmp / f"{name}.log"
        env = {
            **os.environ,
            "POD_NAME": name,
            "NODE_IPAM_LEASE_DURATION_SECONDS": "2",
            "NODE_IPAM_RENEW_DEADLINE_SECONDS": "1.5",
            "NODE_IPAM_RETRY_PERIOD_SECONDS": "0.2",
            "NODE_IPAM_LEADER_ELECTION_NAMESPACE": "kube-system",
            "TMPDIR": str(tmp),  # serve's temp dir: nothing left in /tmp after a SIGKILL
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    str(EXE),
                    "serve",
                    "--kubeconfig",
                    str(server.kubeconfig_path),
                    "--bind-address",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    # two replicas on one host: the default :8081 would be taken twice
                    "--health-probe-bind-address",
                    "0",
                    "--no-webhook",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str) -> httpx.Response | None:
        try:
            return httpx.get(f"https://127.0.0.1:{self.port}{path}", verify=False, timeout=2)
        except httpx.HTTPError:
            return None

    def ready(self) -> bool:
        response = self.get("/readyz")
        return response is not None and response.status_code == 200

    def end(self, sig: signal.Signals) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(15)


@pytest.fixture
def replicas(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.end(signal.SIGKILL)


def holder(server: FakeApiServer) -> str:
    lease: dict[str, Any] | None = server.get(*LEASE)
    return "" if lease is None else str(lease["spec"].get("holderIdentity") or "")


def ingress(server: FakeApiServer, name: str) -> list[str]:
    obj = server.get("services", name, "default") or {}
    return [e["ip"] for e in obj.get("status", {}).get("loadBalancer", {}).get("ingress") or []]


def serving(server: FakeApiServer, name: str) -> dict[str, Any] | None:
    """The stored Service's ``node-ipam-lb.io/NodesServing`` condition, or ``None``."""
    return nodes_serving(server.get("services", name, "default"))


@pytest.mark.slow
def test_two_serve_replicas_elect_one_writer_and_hand_over_when_it_dies(
    fake_api: FakeApiServer, replicas: list[Replica], tmp_path: Path
) -> None:
    fake_api.seed(files=[str(CASE / "cluster.yaml")])
    _, expected = kind_4node()
    replicas += [Replica(fake_api, tmp_path, "pod-a"), Replica(fake_api, tmp_path, "pod-b")]
    for replica in replicas:
        wait_until(replica.ready, timeout=30, what=f"{replica.log.name} ready")
    for key, ips in expected.items():
        name = key.split("/")[1]
        want = ["203.0.113.10"] if ips is None else ips
        wait_until(lambda n=name, w=want: ingress(fake_api, n) == w, what=f"{key} = {want}")
    # One write per Service of ours (a pending one's is its NodesServing condition alone).
    ours = [key.split("/")[1] for key, ips in expected.items() if ips is not None]
    for name in ours:
        wait_until(lambda n=name: serving(fake_api, n) is not None, what=f"{name} condition")
    assert fake_api.requests()["patch services/status"] == len(ours), "exactly one replica wrote"
    metrics = replicas[0].get("/metrics")
    assert metrics is not None and "controller_runtime_reconcile_total" in metrics.text

    leader = next(r for r in replicas if holder(fake_api).startswith(r.log.stem))
    standby = next(r for r in replicas if r is not leader)
    leader.end(signal.SIGKILL)
    assert holder(fake_api).startswith(leader.log.stem), "a killed leader releases nothing"
    fake_api.seed([node("kind-worker3", internal=["10.89.0.99"])])
    wait_until(
        lambda: holder(fake_api).startswith(standby.log.stem),
        timeout=6,
        what="the standby holds the Lease (lease duration 2 s)",
    )
    wait_until(
        lambda: ingress(fake_api, "nginx-cluster") == ["10.89.0.6", "10.89.0.7", "10.89.0.99"],
        what="the new leader writes",
    )

    assert standby.end(signal.SIGTERM) == 0
    assert holder(fake_api) == "", "SIGTERM releases the Lease"
