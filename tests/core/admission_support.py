"""What the admission port tests share (tests/core/test_admission_ports.py,
tests/web/test_admission_ports_http.py): a Service builder and ports that are garbage."""

from __future__ import annotations

from typing import Any

OURS = "io.cilium/node"


def svc(
    name: str = "web",
    *,
    namespace: str = "default",
    ports: Any = ((80, "TCP"),),
    type: str | None = "LoadBalancer",
    cls: str | None = OURS,
    ingress: tuple[str, ...] = (),
    created: str | None = None,
    external_ips: tuple[str, ...] = (),
    health: int | None = None,
) -> dict[str, Any]:
    """A v1 Service dict; ``ports`` is ``(port, protocol[, nodePort])`` tuples or raw JSON."""
    spec: dict[str, Any] = {}
    if isinstance(ports, tuple):
        spec["ports"] = [
            {"port": p[0], "protocol": p[1], **({"nodePort": p[2]} if len(p) > 2 else {})}
            for p in ports
        ]
    else:
        spec["ports"] = ports
    if type is not None:
        spec["type"] = type
    if cls is not None:
        spec["loadBalancerClass"] = cls
    if external_ips:
        spec["externalIPs"] = list(external_ips)
    if health is not None:
        spec["healthCheckNodePort"] = health
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    status = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in ingress]}}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


GARBAGE_PORTS = [
    "x",
    {"port": 22},
    [1, 2],
    [None],
    [{"port": "22"}],
    [{"port": 22.0}],
    [{"port": 22.5}],
    [{"port": 1e300}],
    [{"port": True}],
    [{"port": -1}],
    [{"port": 0}],
    [{"port": 99999}],
    [{"port": None}],
    [{"port": [22]}],
    [{"protocol": 5, "port": 22}],
    [{"protocol": "", "port": 22}],
    [{"protocol": "tcp", "port": 22}],
    [{"port": 22, "nodePort": "x"}],
    [{"port": 22}, {"port": 22}],
]
