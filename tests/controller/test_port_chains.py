"""Port ownership's rank-order rule in the running controller (docs/design.md §4.9): a
Service that publishes an address nowhere claims nothing there, and a status write of ours
that takes an address away requeues the sharers of its ports (one hop per write), so a
chain of Services converges without any event of its own."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from tests.controller.memory_api import MemoryAPI
from tests.controller.support import (
    Start,
    converged,
    endpoint_slice,
    host_pod,
    node,
    service,
    wait_until,
)


def _created(obj: dict[str, Any], when: str) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = when
    return obj


def _two_ports(name: str, first: int, second: int, **kw: Any) -> dict[str, Any]:
    obj = service(name, port=first, **kw)
    obj["spec"]["ports"].append({"port": second, "protocol": "TCP"})
    return obj


def test_a_service_that_loses_an_address_frees_its_other_ports_there(
    memory_api: MemoryAPI, start: Start
) -> None:
    """B (8087, 8088) publishes n1 and n2; C (8088, newer) is pending. A hostPort Pod on n1
    takes 8087 from B there (the Pod's change requeues B only: C has no port of it). B's
    write removes n1, and its echo requeues C, which then publishes n1's 8088."""
    memory_api.apply("nodes", node("n1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("n2", internal=["10.0.0.2"]))
    b = _created(_two_ports("b", 8087, 8088, namespace="team-b"), "2026-01-01T00:00:00Z")
    c = _created(service("c", port=8088, namespace="team-c"), "2026-06-01T00:00:00Z")
    memory_api.apply("services", b)
    memory_api.apply("services", c)
    start(leader_elect=False)
    wait_until(converged(memory_api, "team-b/b", ["10.0.0.1", "10.0.0.2"]), what="b on both")
    wait_until(lambda: memory_api.ingress("team-c/c") is None, what="c pending")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "team-a"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8087}]}],
        },
        "status": {"phase": "Running"},
    }
    memory_api.apply("pods", pod)
    wait_until(converged(memory_api, "team-b/b", ["10.0.0.2"]), what="b loses n1 to the Pod")
    wait_until(converged(memory_api, "team-c/c", ["10.0.0.1"]), what="c takes n1's 8088")


def _scenario() -> list[tuple[str, dict[str, Any]]]:
    """Objects whose outcome exercises every rule of §4.9 at once: an older Service and a
    younger one on a port (age), one with two ports that loses an address and so frees its
    other port there (rank order), a host-network Pod that is its Service's own backend
    (no rival) and one that is not (rival), and a hostPort Pod."""
    objects: list[tuple[str, dict[str, Any]]] = [
        ("nodes", node("n1", internal=["10.0.0.1"])),
        ("nodes", node("n2", internal=["10.0.0.2"])),
    ]
    dated = [
        (service("a", port=8087, namespace="team-a"), "2026-01-01T00:00:00Z"),
        (_two_ports("b", 8087, 8088, namespace="team-b"), "2026-02-01T00:00:00Z"),
        (service("c", port=8088, namespace="team-c"), "2026-03-01T00:00:00Z"),
        (service("edge", port=8095, namespace="edge"), "2026-04-01T00:00:00Z"),
        (service("thief", port=8091, namespace="team-d"), "2026-05-01T00:00:00Z"),
    ]
    objects += [("services", _created(obj, when)) for obj, when in dated]
    edge_pod = host_pod("edge-1", node_name="n1", port=8095, namespace="edge")
    objects.append(("pods", edge_pod))
    own = endpoint_slice("edge", nodes=["n1"], namespace="edge")
    own["endpoints"][0]["targetRef"] = {"kind": "Pod", "name": "edge-1", "namespace": "edge"}
    own["ports"] = [{"port": 8095, "protocol": "TCP"}]
    objects.append(("endpointslices", own))
    held = host_pod("web-1", node_name="n2", port=80, namespace="team-a", host=False)
    held["spec"]["containers"][0]["ports"][0]["hostPort"] = 8091
    objects.append(("pods", held))
    return objects


EXPECTED = {
    "team-a/a": ["10.0.0.1", "10.0.0.2"],
    "team-b/b": None,
    "team-c/c": ["10.0.0.1", "10.0.0.2"],
    "edge/edge": ["10.0.0.1", "10.0.0.2"],
    "team-d/thief": ["10.0.0.1"],
}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_outcome_does_not_depend_on_the_order_of_events(
    memory_api: MemoryAPI, start: Start, seed: int
) -> None:
    """The same API state, stored in a shuffled order (so the informers list and hand over
    the objects in that order, and the workers reconcile in an order of their own): every
    order ends in the same statuses (docs/design.md §4.9, "reads API state only"). The
    statuses start blank: with objects arriving while the controller runs, the first to
    publish an address is its incumbent, which is history, not order of events."""
    objects = _scenario()
    random.Random(seed).shuffle(objects)
    for kind, obj in objects:
        memory_api.apply(kind, obj)
    start(leader_elect=False, workers=1 + seed % 3)
    for key, ips in EXPECTED.items():
        if ips is not None:
            wait_until(converged(memory_api, key, ips), what=f"{key} = {ips}")
    time.sleep(0.5)  # nothing moves afterwards
    assert {key: memory_api.ingress(key) for key in EXPECTED} == EXPECTED
