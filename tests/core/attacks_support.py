"""What the port-ownership attack tests share (test_ports_attacks.py,
test_ports_refused_attacks.py): two nodes, Service, Pod and EndpointSlice builders, a
decision over them (``decided``, ``published``, ``reason``), and a reconciler ``World``."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

from app.controller.cache import ClusterCache
from app.controller.events import EventRecorder
from app.controller.informer import object_key
from app.controller.reconciler import Reconciler
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.ports import (
    PortIndex,
    stored_vip_ips,
    with_port_status,
)
from app.core.views import (
    EndpointSliceView,
    PodView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    pod_view,
    service_view,
)
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import node as node_obj
from tests.controller.support import service as service_obj
from tests.core.builders import NOW, rfc3339
from tests.core.ports_support import NODES, owned_on

SETTINGS = SelectionSettings()


def filled(
    *services: ServiceView,
    pods: Sequence[PodView] = (),
    slices: Sequence[EndpointSliceView] = (),
    order_seed: int | None = None,
    settings: SelectionSettings = SETTINGS,
) -> PortIndex:
    """A port index of ``services``, ``pods`` and ``slices`` (shuffled with ``order_seed``)."""
    items: list[tuple[str, Any]] = [("svc", s) for s in services]
    items += [("pod", p) for p in pods] + [("slice", s) for s in slices]
    if order_seed is not None:
        random.Random(order_seed).shuffle(items)
    index = PortIndex(lambda view: is_managed(view, settings)[0])
    for kind, item in items:
        puts: dict[str, Callable[[str, Any, Any], None]] = {
            "svc": index.put_service,
            "pod": index.put_pod,
            "slice": index.put_slice,
        }
        put = puts[kind]
        put(f"{item.namespace}/{item.name}", None, item)
    return index


def decided(
    target: ServiceView,
    *others: ServiceView,
    pods: Sequence[PodView] = (),
    slices: Sequence[EndpointSliceView] = (),
    order_seed: int | None = None,
    settings: SelectionSettings = SETTINGS,
    nodes: NodeIndex = NODES,
) -> Any:
    """``target``'s Selection after port ownership among ``others``, as preview runs it."""
    index = filled(
        target, *others, pods=pods, slices=slices, order_seed=order_seed, settings=settings
    )
    return owned_on(target, index, settings, nodes=nodes, slices=slices)


def published(target: ServiceView, *others: ServiceView, **kw: Any) -> tuple[str, ...]:
    result = decided(target, *others, **kw)
    return tuple(e["ip"] for e in result.ingress or ())


def reason(target: ServiceView, *others: ServiceView, **kw: Any) -> str:
    result = decided(target, *others, **kw)
    return " ".join([result.reason, *(v.reason for v in result.nodes)])


def stored(
    service: ServiceView,
    ips: Sequence[str],
    *,
    recorded: ServiceView | None = None,
    mode: str = "VIP",
) -> ServiceView:
    """``service`` as the controller left it: ``ips`` published (``ipMode`` ``mode``) with
    the ports of ``recorded`` (default: its own) in each entry."""
    base = [{"ip": ip, "ipMode": mode} for ip in ips]
    entries = [dict(e) for e in with_port_status(base, recorded or service)]
    return dataclasses.replace(service, ingress=tuple(entries))


def with_ingress(service: ServiceView, entries: list[dict[str, Any]]) -> ServiceView:
    return dataclasses.replace(service, ingress=tuple(entries))


def plain_service(
    name: str,
    *ports: int,
    namespace: str = "att",
    type_: str = "ClusterIP",
    external_ips: Sequence[str] = (),
) -> ServiceView:
    """A Service that is not ours (``type_``, no class)."""
    return service_view(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": rfc3339(NOW),
            },
            "spec": {
                "type": type_,
                "ports": [{"port": p, "protocol": "TCP"} for p in ports],
                "externalIPs": list(external_ips),
            },
        }
    )


def pod(
    name: str,
    node_name: str | None,
    ports: list[dict[str, Any]],
    *,
    namespace: str = "team-a",
    host_network: bool = False,
    phase: str | None = "Running",
    init_ports: list[dict[str, Any]] | None = None,
    init_restart: str | None = None,
) -> PodView:
    spec: dict[str, Any] = {
        "hostNetwork": host_network,
        "containers": [{"name": "c", "ports": ports}],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if init_ports is not None:
        init: dict[str, Any] = {"name": "i", "ports": init_ports}
        if init_restart is not None:
            init["restartPolicy"] = init_restart
        spec["initContainers"] = [init]
    status = {"phase": phase} if phase is not None else {}
    return pod_view(
        {"metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}
    )


def slice_obj(
    namespace: str,
    service_name: str,
    refs: list[dict[str, Any] | None],
    *,
    ports: list[dict[str, Any]],
    name: str | None = None,
    node_name: str = "n1",
) -> EndpointSliceView:
    """An EndpointSlice in ``namespace`` labelled for ``service_name``, one ready endpoint
    per ``refs`` entry (its ``targetRef`` as given, ``None``: none)."""
    endpoints = []
    for ref in refs:
        endpoint: dict[str, Any] = {
            "addresses": ["10.244.0.9"],
            "nodeName": node_name,
            "conditions": {"ready": True},
        }
        if ref is not None:
            endpoint["targetRef"] = ref
        endpoints.append(endpoint)
    return endpoint_slice_view(
        {
            "metadata": {
                "name": name or f"{service_name}-x1y2z",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service_name},
            },
            "endpoints": endpoints,
            "ports": ports,
        }
    )


def captured(service: ServiceView) -> set[tuple[str, str, int]]:
    """What kube-proxy captures for ``service`` (docs/reference/node-addresses-in-the-datapath.md):
    every VIP (or no ``ipMode``) ingress address x every ``spec.ports`` pair, whatever the
    Service's type or class (``serviceport.go`` reads the ingress of any Service)."""
    return {(ip, proto, port) for ip in stored_vip_ips(service) for proto, port in service.ports}


VIEWS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "nodes": node_view,
    "services": service_view,
    "endpointslices": endpoint_slice_view,
}


class World:
    """MemoryAPI + a cache kept equal to it by hand + one Reconciler (no threads), as in
    tests/controller/test_reconciler.py. ``apply`` of a Service without ``status`` keeps
    the stored status, as the API server does (``PrepareForUpdate`` copies it)."""

    def __init__(self, settings: SelectionSettings = SETTINGS) -> None:
        self.api = MemoryAPI()
        self.cache = ClusterCache(settings)
        self.recorder = EventRecorder(api=self.api, identity="pod-a", clock=lambda: 1e9)
        self.reconciler = Reconciler(
            cache=self.cache,
            api=self.api,
            recorder=self.recorder,
            settings=settings,
            is_leader=lambda: True,
            wall_clock=lambda: NOW,
        )
        self.apply("nodes", node_obj("n1", internal=["10.0.0.1"]))
        self.apply("nodes", node_obj("n2", internal=["10.0.0.2"]))

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        stored_obj = self.api.apply(kind, obj)
        self.cache.put(kind, object_key(stored_obj), VIEWS[kind](stored_obj))  # type: ignore[arg-type]

    def reconcile(self, *keys: str) -> None:
        for key in keys:
            self.reconciler.reconcile(key)
            self.recorder.flush()
            found = self.api.get("services", key)
            if found is not None:
                self.cache.put("services", key, service_view(found))

    def view(self, key: str) -> ServiceView:
        found = self.api.get("services", key)
        assert found is not None
        return service_view(found)


def svc_obj(name: str, port: int, *, namespace: str, created: float) -> dict[str, Any]:
    obj = service_obj(name, namespace=namespace, port=port)
    obj["metadata"]["creationTimestamp"] = rfc3339(created)
    del obj["status"]  # an update keeps the stored status (MemoryAPI.apply, API server)
    return obj
