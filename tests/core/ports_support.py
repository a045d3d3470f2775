"""What the port-ownership tests share (tests/core/test_ports*.py): two nodes (n1:
10.0.0.1, n2: 10.0.0.2), Service and host-network Pod builders, a filled port index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.decision import Decider, Snapshot
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.ports import PortIndex
from app.core.views import EndpointSliceView, PodView, ServiceView, pod_view, service_view
from tests.core.builders import NOW, node, rfc3339, service_obj

NODES = NodeIndex([node("n1", internal=["10.0.0.1"]), node("n2", internal=["10.0.0.2"])])
BOTH = ("10.0.0.1", "10.0.0.2")


def svc(
    name: str,
    *ports: Any,
    namespace: str = "default",
    created: float = NOW,
    ingress: tuple[str, ...] = (),
    selector: str | None = None,
    cls: Any = "io.cilium/node",
    node_ports: tuple[int, ...] = (),
    health: int | None = None,
    external_ips: tuple[str, ...] = (),
    proxy: bool = False,
) -> ServiceView:
    """A Service with ``ports`` (``80`` or ``(53, "UDP")``), created at ``created``."""
    obj = service_obj(
        name,
        namespace=namespace,
        selector=selector,
        cls=cls,
        ingress=[{"ip": ip, "ipMode": "Proxy" if proxy else "VIP"} for ip in ingress],
    )
    obj["metadata"]["creationTimestamp"] = rfc3339(created)
    entries = []
    for i, port in enumerate(ports):
        number, protocol = port if isinstance(port, tuple) else (port, "TCP")
        entry: dict[str, Any] = {"port": number, "protocol": protocol}
        if i < len(node_ports):
            entry["nodePort"] = node_ports[i]
        entries.append(entry)
    obj["spec"]["ports"] = entries
    if health is not None:
        obj["spec"]["healthCheckNodePort"] = health
    if external_ips:
        obj["spec"]["externalIPs"] = list(external_ips)
    return service_view(obj)


def host_pod(name: str, node_name: str, *ports: int) -> PodView:
    return pod_view(
        {
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {
                "hostNetwork": True,
                "nodeName": node_name,
                "containers": [{"name": "c", "ports": [{"containerPort": p} for p in ports]}],
            },
            "status": {"phase": "Running"},
        }
    )


def index_of(
    *services: ServiceView, pods: tuple[PodView, ...] = (), settings: SelectionSettings
) -> PortIndex:
    index = PortIndex(lambda view: is_managed(view, settings)[0])
    for s in services:
        index.put_service(f"{s.namespace}/{s.name}", None, s)
    for p in pods:
        index.put_pod(f"{p.namespace}/{p.name}", None, p)
    return index


def owned_on(
    target: ServiceView,
    ports: PortIndex,
    settings: SelectionSettings,
    nodes: NodeIndex = NODES,
    slices: Sequence[EndpointSliceView] = (),
) -> Any:
    """``select`` then port ownership for ``target`` on ``nodes``, as preview runs them
    (``slices``: the EndpointSlices of the Services, each given to its own ``select``)."""
    by_service = {(s.namespace, s.service_name): s for s in slices}

    def slices_of(namespace: str, name: str) -> list[EndpointSliceView]:
        return [by_service[namespace, name]] if (namespace, name) in by_service else []

    snap = Snapshot(nodes=nodes, now=NOW, ports=ports, endpoint_slices_of=slices_of)
    return Decider(settings).preview(target, snap)
