"""What the cluster test modules share (tests/cluster/README.md): ``kubectl`` against the
cluster, the backend and Service manifests, the Helm release,
and requests from the client namespace to published addresses with who answered them.

The Services here are of our class (``io.cilium/node``) and dual-stack; the backend is the
test image of ``images.py`` (it answers ``pod=… node=… version=…``). Measured figures are
printed (``-s``) and collected in ``FIGURES``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import PROXY_MODES
from tests.cluster.cleanup import leftovers
from tests.cluster.cluster import Cluster
from tests.cluster.images import BACKEND_IMAGE, Images
from tests.cluster.traffic import http_get, in_netns, parse_answer
from tests.controlplane.build import Binaries
from tests.deploy.helmchart import CHART, RELEASE, run

NAMESPACE = "node-ipam-lb"


APP = "traffic"


CLASS = "io.cilium/node"


SELECTOR = "io.cilium.nodeipam/match-node-labels"


NODES = 3
"""Nodes of the cluster the fixture ``cluster`` brings up."""
PROXY_MODE_ENV = "NODE_IPAM_CLUSTER_PROXY_MODE"
FIGURES: dict[str, Any] = {}


def figure(name: str, value: Any) -> None:
    """Record and print a measured figure (collected in ``FIGURES``)."""
    FIGURES[name] = value
    print(f"\nmeasured: {name} = {value}")


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    assert cluster.plane is not None
    return json.loads(cluster.plane.kubectl(*args, "-o", "json").stdout)


def kubectl(cluster: Cluster, *args: str, **kwargs: Any) -> str:
    assert cluster.plane is not None
    return cluster.plane.kubectl(*args, **kwargs).stdout


def run_helm(helm_binary: Path, cluster: Cluster, *args: str) -> str:
    result = run(helm_binary, *args, kubeconfig=cluster.kubeconfig_path, timeout=150)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def helm_install(helm_binary: Path, cluster: Cluster) -> float:
    """``helm install --wait`` as deploy/README.md says, default image settings (the
    image ``node-ipam-lb:<version>`` the cluster imported on every node), into the
    namespace ``NAMESPACE`` (created, Pod Security ``restricted``); returns the
    ``time.monotonic()`` at which helm started."""
    kubectl(cluster, "create", "namespace", NAMESPACE)
    kubectl(
        cluster, "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    started = time.monotonic()
    run_helm(
        helm_binary, cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--wait", "--timeout", "120s",
    )  # fmt: skip
    return started


def ask(cluster: Cluster, ip: str, port: int) -> dict[str, str]:
    """One GET from the client namespace; the backend's answer as a dict."""
    return parse_answer(in_netns(cluster.client_netns, lambda: http_get(ip, port)))


def answers(cluster: Cluster, ip: str, port: int) -> dict[str, str] | None:
    """The answer, or ``None`` when the request failed."""
    try:
        return ask(cluster, ip, port)
    except (OSError, RuntimeError):
        return None


def backend_container(version: str, *, port: int = 8080) -> dict[str, Any]:
    """The backend container: it answers ``pod=<its Pod> node=<its node> version=<version>``
    on ``port`` (declared as containerPort ``http``; ready once ``/healthz`` answers),
    and keeps serving 5 s after SIGTERM."""
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "VERSION", "value": version},
        {"name": "SHUTDOWN_DELAY", "value": "5s"},
        {"name": "PORT", "value": str(port)},
    ]
    return {
        "name": "backend",
        "image": BACKEND_IMAGE,
        "imagePullPolicy": "Never",
        "env": env,
        "ports": [{"containerPort": port, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def backend_manifest(replicas: int, version: str) -> dict[str, Any]:
    """The Deployment ``backend`` in ``APP``: ``replicas`` backend Pods (label
    ``app: backend``) spread over the nodes, rolled one at a time."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "backend", "namespace": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "backend"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "backend"}},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": "backend"}},
                        }
                    ],
                    "containers": [backend_container(version)],
                },
            },
        },
    }


def service_manifest(name: str, port: int, policy: str, selector: str | None) -> dict[str, Any]:
    annotations = {SELECTOR: selector} if selector is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": APP, "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "externalTrafficPolicy": policy,
            "ipFamilyPolicy": "RequireDualStack",
            "ipFamilies": ["IPv4", "IPv6"],
            "selector": {"app": "backend"},
            "ports": [{"port": port, "targetPort": 8080, "name": "http"}],
        },
    }


def apply(cluster: Cluster, *objects: dict[str, Any]) -> None:
    kubectl(
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": list(objects)}),
    )


def rolled_out(
    cluster: Cluster, namespace: str, deployment: str, *, kind: str = "deployment"
) -> None:
    """``kubectl rollout status`` of the Deployment (or ``kind``, e.g. ``daemonset``)."""
    kubectl(
        cluster,
        "-n",
        namespace,
        "rollout",
        "status",
        f"{kind}/{deployment}",
        "--timeout=100s",
        timeout=110,
    )


def our_service(
    namespace: str, name: str, port: int, *, selector: str | None = None, app: str = "backend"
) -> dict[str, Any]:
    """A Cluster Service of our class in ``namespace`` selecting the Pods ``app=<app>``
    (node selector annotation ``selector``, none: every node)."""
    manifest = service_manifest(name, port, "Cluster", selector)
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["selector"] = {"app": app}
    return manifest


def team_backend(namespace: str, version: str, replicas: int = 2) -> dict[str, Any]:
    """The backend Deployment in ``namespace``, answering ``version=<version>``."""
    return {
        **backend_manifest(replicas, version),
        "metadata": {"name": "backend", "namespace": namespace},
    }


@contextlib.contextmanager
def namespaces(cluster: Cluster, *names: str) -> Iterator[None]:
    """Create the namespaces; delete them (and wait) on the way out, whatever happened."""
    for name in names:
        kubectl(cluster, "create", "namespace", name)
    try:
        yield
    finally:
        kubectl(cluster, "delete", "namespace", *names, "--timeout=150s", timeout=160)


def ingress_of(cluster: Cluster, namespace: str, name: str) -> list[str]:
    svc = kubectl_json(cluster, "-n", namespace, "get", "service", name)
    return [e["ip"] for e in svc["status"].get("loadBalancer", {}).get("ingress", [])]


def external_ip_column(cluster: Cluster, namespace: str, name: str) -> str:
    """EXTERNAL-IP as ``kubectl get svc`` shows it (``<pending>`` without ingress)."""
    (row,) = kubectl(cluster, "-n", namespace, "get", "svc", name, "--no-headers").splitlines()
    return row.split()[3]


def service_events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Events of Service ``namespace/name``, oldest first (as the API lists them)."""
    return list(
        kubectl_json(
            cluster,
            "-n",
            namespace,
            "get",
            "events",
            "--field-selector",
            f"involvedObject.kind=Service,involvedObject.name={name}",
        )["items"]
    )


def warning_event(cluster: Cluster, namespace: str, name: str, reason: str) -> str | None:
    """The message of the Service's latest Warning Event with ``reason`` (e.g.
    ``PortNotInPool``), once there is one; else ``None``."""
    found = [
        str(e.get("message", ""))
        for e in service_events(cluster, namespace, name)
        if e.get("type") == "Warning" and e.get("reason") == reason
    ]
    return found[-1] if found else None


def port_in_use(cluster: Cluster, namespace: str, name: str) -> str | None:
    """The message of the Service's ``PortInUse`` Warning Event, once there is one."""
    return warning_event(cluster, namespace, name, "PortInUse")


def service_story(cluster: Cluster, *keys: str) -> str:
    """What a failure message needs of each Service ``namespace/name``: its ports, its
    ``status.loadBalancer.ingress`` (with the ``ports`` each entry records) and its Events
    (type, reason, count, message), one line each."""
    lines = []
    for key in keys:
        namespace, name = key.split("/", 1)
        raw = kubectl(
            cluster, "-n", namespace, "get", "svc", name, "--ignore-not-found", "-o", "json"
        )
        if not raw.strip():
            lines.append(f"{key}: absent")
            continue
        svc = json.loads(raw)
        ports = [f"{p.get('protocol', 'TCP')}/{p['port']}" for p in svc["spec"].get("ports", [])]
        ingress = svc["status"].get("loadBalancer", {}).get("ingress", [])
        lines.append(f"{key}: ports {ports}, ingress {ingress or '<pending>'}")
        for event in service_events(cluster, namespace, name):
            lines.append(
                f"  Event {event.get('type')} {event.get('reason')} x{event.get('count', 1)}:"
                f" {event.get('message', '')}"
            )
    return "\n".join(lines)


def backend_pods(cluster: Cluster, namespace: str) -> set[str]:
    pods = kubectl_json(cluster, "-n", namespace, "get", "pods", "-l", "app=backend")["items"]
    return {p["metadata"]["name"] for p in pods}


Answer = dict[str, str] | str
"""The backend's answer, or ``"failed: <error>"``."""


def requests_to(
    cluster: Cluster, targets: list[tuple[str, int]], per_address: int
) -> list[tuple[str, Answer]]:
    """``per_address`` GETs (a new connection each) to every target from the client
    namespace: ``(address, answer or "failed: <error>")`` each."""
    out: list[tuple[str, Answer]] = []
    for ip, port in targets:
        for _ in range(per_address):
            try:
                out.append((ip, ask(cluster, ip, port)))
            except (OSError, RuntimeError, http.client.HTTPException) as err:
                out.append((ip, f"failed: {type(err).__name__}: {err}"))
    return out


def by_whom(results: list[tuple[str, Answer]]) -> dict[str, dict[str, int]]:
    """Address -> ``{"<pod> version=<v>" or the failure: count}`` (for figures and
    failure messages)."""
    table: dict[str, Counter[str]] = {}
    for ip, answer in results:
        label = (
            f"{answer.get('pod')} version={answer.get('version')}"
            if isinstance(answer, dict)
            else answer
        )
        table.setdefault(ip, Counter())[label] += 1
    return {ip: dict(counts) for ip, counts in table.items()}


def all_from(results: list[tuple[str, Answer]], pods: set[str]) -> bool:
    return bool(results) and all(
        isinstance(answer, dict) and answer.get("pod") in pods for _, answer in results
    )


def pod_ready(cluster: Cluster, namespace: str, name: str) -> None:
    kubectl(
        cluster,
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        f"pod/{name}",
        "--timeout=100s",
        timeout=110,
    )


# -- the fixture ``cluster`` (conftest.py, live/conftest.py) -----------------------------


def configured_proxy_mode() -> str:
    """``$NODE_IPAM_CLUSTER_PROXY_MODE`` (one of ``PROXY_MODES``) or ``iptables``."""
    mode = os.environ.get(PROXY_MODE_ENV, "iptables")
    if mode not in PROXY_MODES:
        pytest.fail(f"{PROXY_MODE_ENV}={mode!r} is not one of {PROXY_MODES}", pytrace=False)
    return mode


def running_cluster(
    binaries: Binaries, images: Images, proxy_mode: str, *, nodes: int = NODES
) -> Iterator[Cluster]:
    """A :class:`~tests.cluster.cluster.Cluster` of ``nodes`` nodes (``NODES`` by default;
    kube-proxy in ``proxy_mode``) while the generator runs; after it is stopped, nothing
    of it may be left (:func:`leftovers`)."""
    running = Cluster(nodes, binaries=binaries, images=images, proxy_mode=proxy_mode)
    with running:
        yield running
    assert leftovers(running.id, running.workdir) == []
