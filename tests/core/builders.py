"""Small builders for Node/Service/EndpointSlice objects as the API server returns them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.core.nodeipam import Selection, select
from app.core.options import SelectionSettings
from app.core.views import (
    EndpointSliceView,
    NodeView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    service_view,
)

ANNOTATION = "io.cilium.nodeipam/match-node-labels"
CLASS = "io.cilium/node"
UNSET: Any = object()
NOW = 1_800_000_000.0


def rfc3339(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_obj(
    name: str,
    *,
    internal: Sequence[str] = (),
    external: Sequence[str] = (),
    other: Sequence[tuple[str, str]] = (),
    labels: Mapping[str, str] | None = None,
    deleting: bool = False,
    taints: Sequence[Mapping[str, str]] = (),
    ready: str | None = "True",
    ready_since: float = NOW - 3600,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A v1 Node dict; ``ready=None`` leaves out the Ready condition."""
    addresses = [{"type": "InternalIP", "address": a} for a in internal]
    addresses += [{"type": "ExternalIP", "address": a} for a in external]
    addresses += [{"type": t, "address": a} for t, a in other]
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"kubernetes.io/hostname": name, **(labels or {})},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["example.com/keep"]
    conditions = []
    if ready is not None:
        conditions.append(
            {"type": "Ready", "status": ready, "lastTransitionTime": rfc3339(ready_since)}
        )
    spec: dict[str, Any] = {"taints": list(taints)}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {"addresses": addresses, "conditions": conditions},
    }


def node(name: str, **kwargs: Any) -> NodeView:
    return node_view(node_obj(name, **kwargs))


def service_obj(
    name: str = "web",
    *,
    namespace: str = "default",
    type: str | None = "LoadBalancer",
    cls: str | None = CLASS,
    selector: str | None = None,
    etp: str | None = "Cluster",
    families: Sequence[str] = ("IPv4",),
    policy: str | None = None,
    deleting: bool = False,
    ingress: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A v1 Service dict; ``cls=UNSET`` leaves ``spec.loadBalancerClass`` out."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
    if selector is not None:
        meta["annotations"] = {ANNOTATION: selector}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"ipFamilies": list(families)}
    for key, value in (
        ("type", type),
        ("loadBalancerClass", cls),
        ("externalTrafficPolicy", etp),
        ("ipFamilyPolicy", policy),
    ):
        if value is not None and value is not UNSET:
            spec[key] = value
    status = {"loadBalancer": {"ingress": ingress} if ingress is not None else {}}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec, "status": status}


def service(name: str = "web", **kwargs: Any) -> ServiceView:
    return service_view(service_obj(name, **kwargs))


def endpoint(node_name: str | None, ready: bool | None = True) -> dict[str, Any]:
    ep: dict[str, Any] = {"addresses": ["10.244.0.5"], "conditions": {}}
    if ready is not None:
        ep["conditions"]["ready"] = ready
    if node_name is not None:
        ep["nodeName"] = node_name
    return ep


def endpoint_slice(
    service_name: str | None,
    endpoints: Iterable[dict[str, Any]],
    *,
    namespace: str = "default",
    name: str | None = None,
) -> EndpointSliceView:
    labels = {} if service_name is None else {"kubernetes.io/service-name": service_name}
    return endpoint_slice_view(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "addressType": "IPv4",
            "metadata": {
                "name": name or f"{service_name}-abcde",
                "namespace": namespace,
                "labels": labels,
            },
            "endpoints": list(endpoints),
        }
    )


def run(
    svc: ServiceView,
    nodes: Sequence[NodeView],
    slices: Sequence[EndpointSliceView] = (),
    *,
    now: float = NOW,
    unhealthy: Mapping[str, str] | None = None,
    **settings: Any,
) -> Selection:
    return select(
        service=svc,
        nodes=nodes,
        endpoint_slices=slices,
        settings=SelectionSettings(**settings),
        now=now,
        **({"unhealthy": unhealthy} if unhealthy is not None else {}),
    )


def ips(selection: Selection) -> list[str] | None:
    if selection.ingress is None:
        return None
    return [entry["ip"] for entry in selection.ingress]


def codes(selection: Selection) -> dict[str, str]:
    return {v.name: v.code for v in selection.nodes}
