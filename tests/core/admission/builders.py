"""Builders for AdmissionReview bodies, Services, Nodes and EndpointSlices (plain dicts)."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch

from app.core.views import endpoint_slice_view, node_view

ANNOTATION = "io.cilium.nodeipam/match-node-labels"


def service(
    *,
    name: str = "web",
    type: str | None = "LoadBalancer",
    cls: str | None = None,
    selector: str | None = None,
    etp: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if type is not None:
        spec["type"] = type
    if cls is not None:
        spec["loadBalancerClass"] = cls
    if etp is not None:
        spec["externalTrafficPolicy"] = etp
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if selector is not None:
        metadata["annotations"] = {ANNOTATION: selector}
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    kind: tuple[str, str, str] = ("", "v1", "Service"),
    uid: str = "uid-1",
    dry_run: bool = False,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": kind[0], "version": kind[1], "kind": kind[2]},
        "operation": operation,
        "namespace": "default",
        "name": (obj or old or {}).get("metadata", {}).get("name", ""),
        "object": obj,
        "dryRun": dry_run,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def node(name: str, labels: dict[str, str] | None = None, ip: str = "10.0.0.1") -> Any:
    return node_view(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ip}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def endpoint_slice(service_name: str, *ready_nodes: str) -> Any:
    return endpoint_slice_view(
        {
            "metadata": {
                "name": f"{service_name}-abc",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": service_name},
            },
            "endpoints": [
                {"addresses": ["10.1.0.1"], "nodeName": n, "conditions": {"ready": True}}
                for n in ready_nodes
            ],
        }
    )


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """Apply the base64 JSONPatch of an AdmissionReview response to ``obj``."""
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(obj, ops)
    return result
