"""Server-side ``Table`` output (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``).

Columns follow kube-apiserver's printers (``pkg/printers/internalversion/printers.go``) for
Services (NAME, TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S), AGE) and Nodes (NAME, STATUS,
ROLES, AGE, VERSION + wide columns); every other resource gets the default table (NAME,
CREATED AT). ``includeObject`` ``None``/``Metadata`` (default)/``Object`` is honoured.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from tests.fakeapi.resources import Resource

Obj = dict[str, Any]
TABLE_MEDIA_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def wants_table(accept: str) -> bool:
    """Whether the client's first acceptable type is a meta.k8s.io/v1 Table."""
    params = set(accept.split(",")[0].replace(" ", "").split(";")[1:])
    return {"as=Table", "g=meta.k8s.io", "v=v1"} <= params


def human_duration(seconds: float) -> str:
    """apimachinery ``duration.HumanDuration``."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if h < 24 * 365 * 2:
        return f"{d}d"
    y = d // 365
    if y < 8:
        return f"{y}y{d % 365}d"
    return f"{y}y"


def _age(obj: Obj) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return human_duration((datetime.datetime.now(datetime.UTC) - created).total_seconds())


def _service_row(obj: Obj) -> list[Any]:
    spec = obj.get("spec", {})
    svc_type = spec.get("type", "ClusterIP")
    external: list[str] = list(spec.get("externalIPs") or [])
    if svc_type == "LoadBalancer":
        ingress = (obj.get("status", {}).get("loadBalancer") or {}).get("ingress") or []
        external = [i.get("ip") or i.get("hostname") or "" for i in ingress] + external
        shown = ",".join(external) if external else "<pending>"
    elif svc_type == "ExternalName":
        shown = spec.get("externalName", "<none>")
    else:
        shown = ",".join(external) if external else "<none>"
    ports = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol', 'TCP')}")
    name = obj["metadata"]["name"]
    cluster_ip = spec.get("clusterIP") or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        name,
        svc_type,
        cluster_ip,
        shown,
        ",".join(ports) or "<none>",
        _age(obj),
        selector or "<none>",
    ]


def _node_row(obj: Obj) -> list[Any]:
    status = obj.get("status", {})
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get((ready or {}).get("status", ""), "Unknown")
    if obj.get("spec", {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    roles += [v for k, v in labels.items() if k == "kubernetes.io/role"]
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        found = [a["address"] for a in status.get("addresses") or [] if a.get("type") == kind]
        return found[0] if found else "<none>"

    return [
        obj["metadata"]["name"],
        state,
        ",".join(r for r in roles if r) or "<none>",
        _age(obj),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _default_row(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


def _col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


COLUMNS: dict[str, tuple[list[dict[str, Any]], Callable[[Obj], list[Any]]]] = {
    "services": (
        [
            _col("Name", fmt="name"),
            _col("Type"),
            _col("Cluster-IP"),
            _col("External-IP"),
            _col("Port(s)"),
            _col("Age"),
            _col("Selector", priority=1),
        ],
        _service_row,
    ),
    "nodes": (
        [
            _col("Name", fmt="name"),
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
            _col("Internal-IP", priority=1),
            _col("External-IP", priority=1),
            _col("OS-Image", priority=1),
            _col("Kernel-Version", priority=1),
            _col("Container-Runtime", priority=1),
        ],
        _node_row,
    ),
}
DEFAULT = ([_col("Name", fmt="name"), _col("Created At", "date")], _default_row)


def _row(res: Resource, obj: Obj, include: str) -> dict[str, Any]:
    _, cells = COLUMNS.get(res.key, DEFAULT)
    row: dict[str, Any] = {"cells": cells(obj)}
    if include == "Object":
        row["object"] = obj
    elif include != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata", {}),
        }
    return row


def table(res: Resource, objects: list[Obj], *, metadata: dict[str, Any], include: str) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (``include`` = the includeObject policy)."""
    columns, _ = COLUMNS.get(res.key, DEFAULT)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": [_row(res, obj, include) for obj in objects],
    }
