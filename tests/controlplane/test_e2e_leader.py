"""Two ``serve`` replicas with leader election on a real kube-apiserver (docs/design.md §5).

Both run as deploy/'s ServiceAccount, so the Lease ``node-ipam-lb/node-ipam-lb``
(``coordination.k8s.io/v1``) is read, created and updated under deploy/'s Role
``node-ipam-lb-leader-election``. Short timings respecting client-go's
``leaseDuration > renewDeadline > JitterFactor (1.2) x retryPeriod``: 4 s / 3 s / 1 s.
Exactly one holds the Lease and writes statuses; SIGKILL it (no release) and the other
takes over within the Lease duration plus retry slack, and a change made after the kill
converges. The real server accepted every call (no 4xx in either log).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controller.support import distinct_port
from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import (
    CLASS,
    EXCLUDE,
    NAMESPACE,
    apply_deploy,
    refused,
    start_serve,
    stop,
    tls,
    wait_ready,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4, 3, 1
JITTER = 1.2  # client-go leaderelection.JitterFactor
TAKEOVER_BOUND = LEASE_DURATION + 2 * JITTER * RETRY_PERIOD + 2.0
"""Seconds from the SIGKILL to the new holder: the follower waits until the record it
last observed (at most one jittered retry after the last renew) is a Lease duration old,
then takes it at its next jittered retry; plus 2 s for a loaded machine."""
MATCH = "io.cilium.nodeipam/match-node-labels"


@dataclass
class Replica:
    name: str  # POD_NAME: the holderIdentity is "<name>_<random suffix>"
    url: str
    ca: Path
    log: Path
    process: subprocess.Popen[bytes]

    def metrics(self) -> str:
        got = httpx.get(f"{self.url}/metrics", verify=tls(self.ca), timeout=5)
        assert got.status_code == 200, got.text[:300]
        return got.text

    def sample(self, text: str, name: str, labels: str) -> float:
        """The value of ``name{labels}`` in the exposition ``text``; 0 when absent."""
        found = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def leading(self) -> float:
        return self.sample(self.metrics(), "leader_election_master_status", f'name="{NAMESPACE}"')

    def writes(self) -> float:
        text = self.metrics()
        return sum(
            self.sample(text, "node_ipam_lb_status_writes_total", f'result="{result}"')
            for result in ("success", "conflict", "error", "not_found")
        )


@dataclass
class Pair:
    plane: ControlPlane
    replicas: list[Replica]
    namespace: str
    run: str  # the value of label "e2e-run" on this module's Nodes

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, check=False)

    def holder(self) -> str:
        got = self.kubectl("get", "lease", NAMESPACE, "-n", NAMESPACE, "-o", "json")
        if got.returncode != 0:
            return ""
        return str(json.loads(got.stdout)["spec"].get("holderIdentity") or "")

    def lease(self) -> dict[str, Any]:
        got = self.kubectl("get", "lease", NAMESPACE, "-n", NAMESPACE, "-o", "json")
        assert got.returncode == 0, got.stderr
        spec: dict[str, Any] = json.loads(got.stdout)["spec"]
        return spec

    def ingress(self) -> list[str]:
        got = self.kubectl("get", "svc", "web", "-n", self.namespace, "-o", "json")
        assert got.returncode == 0, got.stderr
        entries = json.loads(got.stdout)["status"].get("loadBalancer", {}).get("ingress") or []
        return [e.get("ip", "") for e in entries]


def _node(name: str, address: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"e2e-run": run}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture(scope="module")
def pair(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    apply_deploy(control_plane)
    run = uuid.uuid4().hex[:8]
    namespace = f"leader-{run}"
    control_plane.kubectl("create", "namespace", namespace)
    nodes = [_node(f"le-{run}-{i}", f"10.77.0.{i}", run) for i in (1, 2, 3)]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": namespace,
            "annotations": {MATCH: f"e2e-run={run}"},
        },
        # A port of its own: the real API server is shared by every module (§4.9).
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "ports": [{"port": distinct_port(namespace, "web")}],
        },
    }
    listing = {"apiVersion": "v1", "kind": "List", "items": [*nodes, service]}
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(listing))
    workdir = tmp_path_factory.mktemp("leader")
    timings = (
        f"--lease-duration-seconds={LEASE_DURATION}",
        f"--renew-deadline-seconds={RENEW_DEADLINE}",
        f"--retry-period-seconds={RETRY_PERIOD}",
    )
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b"):
            process, url, ca, log = start_serve(
                control_plane, workdir, name, *timings, env={"POD_NAME": name}
            )
            replicas.append(Replica(name, url, ca, log, process))
        for r in replicas:
            wait_ready(r.process, r.url, r.ca, r.log)
        yield Pair(control_plane, replicas, namespace, run)
    finally:
        for r in replicas:
            stop(r.process)
        for node in nodes:
            control_plane.kubectl(
                "delete", "node", node["metadata"]["name"], "--wait=false", check=False
            )


def test_one_holder_writes_and_the_other_takes_over_after_a_sigkill(pair: Pair) -> None:
    names = [r.name for r in pair.replicas]
    # A Lease left by an earlier module's serve may be held for its duration (15 s).
    holder = wait_for(
        "one replica holds the Lease",
        lambda: next((n for n in names if pair.holder().startswith(f"{n}_")), ""),
        timeout=30,
    )
    leader = next(r for r in pair.replicas if r.name == holder)
    follower = next(r for r in pair.replicas if r.name != holder)
    wait_for("web converges", lambda: pair.ingress() == ["10.77.0.1", "10.77.0.2", "10.77.0.3"])
    assert (leader.leading(), follower.leading()) == (1.0, 0.0)
    assert leader.writes() >= 1
    assert follower.writes() == 0, "only the Lease holder writes status"
    transitions = pair.lease().get("leaseTransitions", 0)

    leader.process.send_signal(signal.SIGKILL)  # no release: the Lease must expire
    leader.process.wait(5)
    killed = time.monotonic()
    wait_for(
        f"{follower.name} takes the Lease",
        lambda: pair.holder().startswith(f"{follower.name}_"),
        timeout=TAKEOVER_BOUND,
    )
    took = time.monotonic() - killed
    assert took <= TAKEOVER_BOUND, took
    assert pair.lease()["leaseTransitions"] == transitions + 1
    wait_for("the new holder reports leadership", lambda: follower.leading() == 1.0)

    # A change made after the kill converges through the new leader.
    node = f"le-{pair.run}-3"
    labelled = pair.kubectl("label", "node", node, f"{EXCLUDE}=")
    assert labelled.returncode == 0, labelled.stderr
    wait_for(
        "the excluded node leaves web after the failover",
        lambda: pair.ingress() == ["10.77.0.1", "10.77.0.2"],
    )
    assert follower.writes() >= 1
    for replica in pair.replicas:
        refusals = refused(replica.log)
        assert not refusals, f"{replica.name}:\n" + "\n".join(refusals[:20])
    assert follower.process.poll() is None
