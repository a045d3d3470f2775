"""Builders, the kind-4node case and a bounded poll helper for the reconciler tests."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import yaml

from app.config import Settings
from app.controller.cache import ClusterCache
from app.controller.events import EventRecorder
from app.controller.informer import object_key
from app.controller.reconciler import Reconciler
from app.core.nodehealth import NO_HEALTH
from app.core.options import SelectionSettings
from app.core.views import endpoint_slice_view, node_view, service_view
from tests.cases import CASES, read_ours
from tests.controller.memory_api import MemoryAPI

CASE = CASES / "kind-4node"
CLASS = "io.cilium/node"
ANNOTATION = "io.cilium.nodeipam/match-node-labels"
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"
KIND_PLURAL = {"Node": "nodes", "Service": "services", "EndpointSlice": "endpointslices"}


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll ``predicate`` every 20 ms until truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def kind_4node() -> tuple[list[tuple[str, dict[str, Any]]], dict[str, list[str] | None]]:
    """``([(plural, object)], {"ns/name": [ips] or None for 'untouched'})``."""
    cluster = yaml.safe_load((CASE / "cluster.yaml").read_text())
    objects = [(KIND_PLURAL[o["kind"]], o) for o in cluster["items"]]
    return objects, read_ours(CASE)


def node(
    name: str,
    *,
    internal: Sequence[str] = (),
    external: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[str] = (),
    heartbeat: str = "2024-07-16T06:01:00Z",
) -> dict[str, Any]:
    addresses = [{"type": "InternalIP", "address": a} for a in internal]
    addresses += [{"type": "ExternalIP", "address": a} for a in external]
    addresses.append({"type": "Hostname", "address": name})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {
            "addresses": addresses,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": "2024-07-16T05:13:05Z",
                    "lastHeartbeatTime": heartbeat,
                }
            ],
        },
    }


def distinct_port(namespace: str, name: str) -> int:
    """A TCP port for Service ``namespace/name`` in 40000-59999 (above the NodePort range,
    no reserved port), stable per key: CRC-32 of the key."""
    return 40000 + zlib.crc32(f"{namespace}/{name}".encode()) % 20000


def service(
    name: str,
    *,
    namespace: str = "default",
    selector: str | None = None,
    local: bool = False,
    lb_class: str | None = CLASS,
    type_: str = "LoadBalancer",
    ingress: Sequence[str] | None = None,
    port: int | None = None,
) -> dict[str, Any]:
    """A v1 Service dict. ``port`` defaults to :func:`distinct_port` of its key, so two
    Services of a test never share a port (port ownership, docs/design.md §4.9) unless
    the test says so."""
    spec: dict[str, Any] = {
        "type": type_,
        "ipFamilies": ["IPv4"],
        "externalTrafficPolicy": "Local" if local else "Cluster",
        "ports": [
            {"port": port or distinct_port(namespace, name), "protocol": "TCP"},
        ],
    }
    if lb_class is not None:
        spec["loadBalancerClass"] = lb_class
    annotations = {} if selector is None else {ANNOTATION: selector}
    status: dict[str, Any] = {"loadBalancer": {}}
    if ingress is not None:
        status["loadBalancer"]["ingress"] = [{"ip": ip, "ipMode": "VIP"} for ip in ingress]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec,
        "status": status,
    }


def endpoint_slice(
    service_name: str, *, nodes: Sequence[str], namespace: str = "default", suffix: str = "abcde"
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {
            "name": f"{service_name}-{suffix}",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "endpoints": [
            {"addresses": [f"10.0.0.{i + 1}"], "conditions": {"ready": True}, "nodeName": n}
            for i, n in enumerate(nodes)
        ],
    }


def host_pod(
    name: str, *, node_name: str, port: int, namespace: str = "monitoring", host: bool = True
) -> dict[str, Any]:
    """A v1 Pod bound to ``node_name`` declaring TCP ``port`` (``hostNetwork: host``)."""
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "c", "image": "exporter:1", "ports": [{"containerPort": port}]}],
    }
    if host:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def fast_settings(**overrides: Any) -> Settings:
    """Settings with short leader-election durations and watch timeouts for tests."""
    values: dict[str, Any] = {
        "lease_duration_seconds": 1.0,
        "renew_deadline_seconds": 0.8,
        "retry_period_seconds": 0.1,
        "watch_timeout_seconds": 5,
        "request_timeout_seconds": 2.0,
        "workers": 2,
        "leader_election_namespace": "kube-system",
    }
    values.update(overrides)
    return Settings(**values)


PATHS = {
    "nodes": "/api/v1/nodes",
    "services": "/api/v1/namespaces/{ns}/services",
    "endpointslices": "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "serviceaccounts": "/api/v1/namespaces/{ns}/serviceaccounts",
}


class Kubectl:
    """What an operator does with kubectl, as plain HTTP calls to the fake API server."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)

    def __enter__(self) -> Kubectl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _path(self, kind: str, name: str = "", *, ns: str = "default", sub: str = "") -> str:
        path = PATHS[kind].format(ns=ns)
        return "/".join(p for p in (path, name, sub) if p)

    def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace", "default")
        response = self.http.post(self._path(kind, ns=ns), json=obj)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def patch(
        self, kind: str, name: str, patch: dict[str, Any], *, ns: str = "default", sub: str = ""
    ) -> dict[str, Any]:
        response = self.http.patch(
            self._path(kind, name, ns=ns, sub=sub),
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def delete(
        self, kind: str, name: str, *, ns: str = "default", grace_period: int | None = None
    ) -> dict[str, Any]:
        """DELETE; ``grace_period`` is ``gracePeriodSeconds`` (a bound Pod's delete is
        graceful otherwise). Returns the answer (a Pod or Service, else a Status)."""
        params = {} if grace_period is None else {"gracePeriodSeconds": grace_period}
        response = self.http.delete(self._path(kind, name, ns=ns), params=params)
        assert response.status_code in (200, 202), response.text
        return dict(response.json())


Start = Callable[..., Any]
"""The ``start`` fixture of conftest.py: ``start(identity="pod-a", **settings)`` gives a
running :class:`~app.controller.controller.Controller`."""


def converged(api: Any, key: str, ips: list[str]) -> Callable[[], bool]:
    """A condition for :func:`wait_until`: Service ``key``'s stored ingress IPs are ``ips``
    (``api``: a :class:`~tests.controller.memory_api.MemoryAPI`)."""
    return lambda: (api.ingress(key) or []) == ips


class QueueAdds:
    """Counts the keys a :class:`~app.controller.controller.Controller`'s event handlers put
    on its work queue from now on (a spy on ``controller.queue.add``)."""

    def __init__(self, controller: Any) -> None:
        self.count = 0
        queue, real = controller.queue, controller.queue.add

        def add(key: str) -> None:
            self.count += 1
            real(key)

        queue.add = add


VIEWS = {"nodes": node_view, "services": service_view, "endpointslices": endpoint_slice_view}


class World:
    """MemoryAPI + a cache kept equal to it by hand (no informer threads)."""

    def __init__(
        self,
        settings: SelectionSettings | None = None,
        *,
        api: MemoryAPI | None = None,
        cache: ClusterCache | None = None,
        identity: str = "pod-a",
    ) -> None:
        self.api = api or MemoryAPI()
        self.cache = cache or ClusterCache()
        self.leader = True
        self.now = 1.8e9  # the wall clock (creationTimestamp ages); Events are at 1e9
        self.recorder = EventRecorder(api=self.api, identity=identity, clock=lambda: 1e9)
        self.health = NO_HEALTH  # what the prober last decided (docs/design.md §4.11)
        self.reconciler = Reconciler(
            cache=self.cache,
            api=self.api,
            recorder=self.recorder,
            settings=settings or SelectionSettings(),
            is_leader=lambda: self.leader,
            wall_clock=lambda: self.now,
            health=lambda: self.health,
        )

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        stored = self.api.apply(kind, obj)
        self.cache.put(kind, object_key(stored), VIEWS[kind](stored))  # type: ignore[arg-type]

    def sync_service(self, key: str) -> None:
        """Deliver the stored Service to the cache (what the watch would do)."""
        stored = self.api.get("services", key)
        assert stored is not None
        self.cache.put("services", key, service_view(stored))

    def reconcile(self, key: str) -> float | None:
        result = self.reconciler.reconcile(key)
        self.recorder.flush()  # no sender thread here: send what was queued, in order
        self.sync_service(key) if self.api.get("services", key) else None
        return result

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.api.events]


def two_workers() -> World:
    """A :class:`World` with Nodes worker-1 (10.0.0.1) and worker-2 (10.0.0.2)."""
    world = World()
    world.apply("nodes", node("worker-1", internal=["10.0.0.1"]))
    world.apply("nodes", node("worker-2", internal=["10.0.0.2"]))
    return world


def kube_proxy(mode: str) -> dict[str, Any]:
    """kubeadm's ConfigMap kube-system/kube-proxy with ``mode`` in its config.conf."""
    text = (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
        "kind: KubeProxyConfiguration\n"
        "clusterCIDR: 10.244.0.0/16\n"
        f"mode: {mode}\n"
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"config.conf": text, "kubeconfig.conf": "apiVersion: v1\nkind: Config\n"},
    }
