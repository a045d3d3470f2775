"""Port ownership's rank-order rule in the running controller (docs/design.md §4.9): a
Service that publishes an address nowhere claims nothing there, and a status write of ours
that takes an address away requeues the sharers of its ports (one hop per write), so a
chain of Services converges without any event of its own."""

from __future__ import annotations

from typing import Any

from tests.controller.memory_api import MemoryAPI
from tests.controller.support import Start, converged, node, service, wait_until


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
