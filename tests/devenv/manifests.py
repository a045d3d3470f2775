"""The objects the walk-throughs apply, as plain dicts: the webhooks of deploy/ pointed at
a local ``serve``, the kind example as a client creates it, the same example's Services
rendered for the nodes of tests/cluster, their backend, and a Service with a malformed
node selector. Also used by the real-API tier (tests/controlplane, tests/peers, bench).
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = ROOT / "deploy" / "base" / "webhooks.yaml"
EXAMPLE = ROOT / "examples" / "kind-4node" / "cluster.yaml"
CLASS = "io.cilium/node"
SELECTOR = "io.cilium.nodeipam/match-node-labels"
BAD_SELECTOR = "node-role.kubernetes.io/control-plane in (,"
"""A selector apimachinery refuses (``found ',', expected: identifier``)."""
BACKEND_PORT = 8080
"""Where tests/cluster's backend image listens (its ``PORT``, default 8080)."""
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
_SERVER_SET = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation")


def webhook_configurations(url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """``deploy/base/webhooks.yaml`` with every ``clientConfig`` pointing at ``url`` (its
    ``service.path`` appended) and ``caBundle`` set: the manifests of a cluster install,
    wired to a local process."""
    bundle = base64.b64encode(ca_pem).decode()
    configs = [doc for doc in yaml.safe_load_all(WEBHOOKS.read_text()) if doc]
    for config in configs:
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
    return configs


def example_objects() -> list[dict[str, Any]]:
    """The kind example as a client would create it: no server-set metadata, no cluster
    IPs or node ports (the server allocates them), Services without status; Nodes, then
    EndpointSlices, then Services."""
    dump = yaml.safe_load(EXAMPLE.read_text())
    objects = []
    for obj in dump["items"]:
        obj = copy.deepcopy(obj)
        metadata = obj.get("metadata", {})
        for key in _SERVER_SET:
            metadata.pop(key, None)
        if obj["kind"] == "Service":
            obj.pop("status", None)
            spec = obj.get("spec", {})
            for key in ("clusterIP", "clusterIPs", "healthCheckNodePort"):
                spec.pop(key, None)
            for port in spec.get("ports", []):
                port.pop("nodePort", None)
        objects.append(obj)
    # Nodes and EndpointSlices first: a Service applied before its endpoints would get
    # the webhook's (true, but passing) "no ready endpoint now" warning.
    order = {"Node": 0, "EndpointSlice": 1}
    return sorted(objects, key=lambda o: order.get(o["kind"], 2))


def example_workers() -> list[str]:
    """The kind example's worker Nodes (every Node without the control-plane role label),
    by name: ``kind-worker``, ``kind-worker2``, ``kind-worker3``."""
    nodes = [o for o in example_objects() if o["kind"] == "Node"]
    labels = [(n["metadata"]["name"], n["metadata"].get("labels", {})) for n in nodes]
    return sorted(name for name, node_labels in labels if CONTROL_PLANE_ROLE not in node_labels)


def example_services_for(nodes: list[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The kind example's Services for a cluster whose nodes are ``nodes`` (tests/cluster:
    ``node-1`` ...): the example's Nodes and EndpointSlices stay out (the cluster has its
    own), every kind worker named in a ``match-node-labels`` selector is replaced by the
    node of the same rank (``kind-worker`` -> the first of ``nodes``), and ``targetPort``
    80 becomes :data:`BACKEND_PORT`, where the backend listens. Returns the Services and
    the name mapping used (a worker without a node of its rank keeps its name and
    selects nothing)."""
    mapping = dict(zip(example_workers(), sorted(nodes), strict=False))
    names = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, mapping)) + r")(?![\w.-])")
    services = []
    for obj in example_objects():
        if obj["kind"] != "Service":
            continue
        annotations = obj["metadata"].get("annotations", {})
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
        if SELECTOR in annotations and mapping:
            annotations[SELECTOR] = names.sub(lambda m: mapping[m.group(1)], annotations[SELECTOR])
        for port in obj["spec"].get("ports", []):
            if port.get("targetPort") == 80:
                port["targetPort"] = BACKEND_PORT
        services.append(obj)
    return services, mapping


def example_backend(*, replicas: int, image: str) -> dict[str, Any]:
    """The Pods behind the example's Services (``app: nginx-pod``, namespace
    ``default``): ``image`` is tests/cluster's backend (it answers ``pod=… node=…
    version=… client=…``; POD_NAME and NODE_NAME from the downward API, as
    tests/cluster/helpers.py's backend_manifest), one replica per node at most
    (spread over ``kubernetes.io/hostname``), so an ``externalTrafficPolicy: Local``
    Service has an endpoint on every node."""
    labels = {"app": "nginx-pod"}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "VERSION", "value": "1"},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": labels},
                        }
                    ],
                    "containers": [
                        {
                            "name": "backend",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "env": env,
                            "ports": [{"containerPort": BACKEND_PORT, "name": "http"}],
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": BACKEND_PORT},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }


def bad_service() -> dict[str, Any]:
    """A LoadBalancer Service whose node selector annotation is malformed."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "bad-selector",
            "namespace": "default",
            "annotations": {SELECTOR: BAD_SELECTOR},
        },
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "ports": [{"port": 80}]},
    }
