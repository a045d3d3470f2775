"""Pods at scale (issue 35): what the ``host-port-pods`` setting costs.
``.venv/bin/python -m bench.bench_pods``.

The cluster: 5,000 Nodes (:func:`bench.cluster.make_node`), 150,000 Pods and three managed
Services on the ports the Pods hold. Of the Pods, 3,000 hold node ports, one per Node in
three of every five Nodes of each pool (DaemonSet-like): ``monitoring/node-exporter-*``
(``hostNetwork: true``, containerPort TCP/9100), ``ingress/ingress-*`` (Pod network,
hostPorts TCP/80 and TCP/443) and ``dns/dns-cache-*`` (Pod network, hostPort UDP/53 and
TCP/53); the 147,000 others are ordinary Deployment Pods on the Pod network (one
containerPort, no hostPort) in 300 namespaces, 30 per Node. Every Pod has the shape of a
Deployment's Pod on a real cluster (labels, ownerReference, probes, resources, env); on
the real API server it is created as kube-controller-manager would (``User-Agent``
``kube-controller-manager``) and its status written as a kubelet would (``kubelet``), so
the server adds what it adds on a real cluster: defaults, the ServiceAccount token
volume, the default tolerations and two ``managedFields`` entries. The Services
(``bench-pods/svc-http`` TCP/80, ``svc-dns`` UDP/53, ``svc-metrics`` TCP/9100) select the
20 Nodes of ``node-pool=pool-1``.

The API server: a real kube-apiserver v1.35 + etcd (``--api real``, the default;
:mod:`bench.realapi`, etcd with an 8 GiB quota) or the fake one (``--api fake``: it keeps
every object as Python dicts, so small scales only; ``tests/bench`` runs it so). Seeded once;
then ``serve`` runs ``--runs`` times per setting, alternating ``host-port-pods`` on and off
(``NODE_IPAM_HOST_PORT_PODS``), each a fresh process, and for each run:

- **List**: seconds from the process start to ``/readyz`` (every informer's first List
  cached) and ``serve``'s CPU (``utime + stime``) until then; the Pod informer's own List
  from its log (``listed`` ``kind=pods``: Pods read and kept, and the seconds since
  ``controller starting``);
- **memory**: ``VmRSS`` once quiet after the start (every reconcile done) and ``VmHWM``;
- **watch**: ``serve``'s CPU over ``--idle-seconds`` without changes, then over
  ``--churn-seconds`` of ``--churn-rate`` Pod status updates per second (a kubelet's:
  the Ready condition and the container's readiness flip; Pods drawn at random from all,
  so 2% of the updates are of Pods that hold ports), and the API server's CPU over it;
- **outcome**: how many of each Service's published addresses belong to a Node where a
  Pod holds its port (0 with the setting on; with it off, the hostPort Pods' Nodes are
  published).

Before the runs the benchmark lists every Pod itself (pages of 500, as the informer does),
with and without ``fieldSelector=spec.hostNetwork=true``: wall time, the API server's
CPU, and the bytes a Pod takes on the wire.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.bench_cold_start import wait_quiet
from bench.cluster import Scale, internal_ipv4, make_node, node_name
from bench.procs import HttpApi, Serve, machine, start_fakeapi, start_serve
from bench.realapi import RealApi
from tests.support.waiting import wait_for

Obj = dict[str, Any]
POD_NAMESPACES = 300
"""Namespaces of the ordinary Pods (``app-000``...)."""
HOLDER_KINDS = ("exporter", "ingress", "dns")
"""The three DaemonSet-like kinds of Pods that hold node ports, by Node (module docstring)."""
SERVICE_NAMESPACE = "bench-pods"
SERVICE_POOL = "pool-1"
"""The pool the three Services select (pool-0's Nodes all carry the exclusion label)."""
SERVICES = {"svc-http": ("TCP", 80), "svc-dns": ("UDP", 53), "svc-metrics": ("TCP", 9100)}
"""The managed Services and the one port each, held on some Nodes by a kind of Pod."""
HOLDER_OF_PORT = {("TCP", 80): "ingress", ("UDP", 53): "dns", ("TCP", 9100): "exporter"}
CREATOR = "kube-controller-manager/v1.35.0 (linux/amd64) kubernetes/bench"
KUBELET = "kubelet/v1.35.0 (linux/amd64) kubernetes/bench"
SEED_PARALLEL = 16
ETCD_QUOTA = 8 * 1024**3
"""etcd's backend quota for this benchmark (its default, 2 GiB, is too small for 150,000
Pods written twice before the API server compacts)."""
STARTED = "2026-11-30T08:00:00Z"


@dataclass(frozen=True)
class PodScale:
    """Sizes of the cluster (defaults: issue 35)."""

    nodes: int = 5000
    pods: int = 150_000
    """Every Pod, the port holders included."""

    @property
    def node_scale(self) -> Scale:
        """The :class:`bench.cluster.Scale` of the Nodes (no Service of bench.cluster's)."""
        return Scale(nodes=self.nodes, managed=0, unmanaged=0)

    def holder_kind(self, node: int) -> str | None:
        """Which kind of port-holding Pod runs on Node ``node``: by its place in its pool
        (``node // pools``) modulo 5, the first three of :data:`HOLDER_KINDS`, else none."""
        slot = (node // self.node_scale.pools) % 5
        return HOLDER_KINDS[slot] if slot < len(HOLDER_KINDS) else None

    @property
    def holder_nodes(self) -> list[int]:
        """The Nodes with a port-holding Pod, in Node order."""
        return [n for n in range(self.nodes) if self.holder_kind(n) is not None]

    @property
    def ordinary(self) -> int:
        """Pods that hold no node port."""
        return max(0, self.pods - len(self.holder_nodes))


def _hex(seed: str, length: int) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, seed).hex[:length]


_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
"""The letters of a generated Pod name's suffix (apimachinery ``utilrand.String``)."""


def _suffix(n: int) -> str:
    """A five-letter suffix like a ReplicaSet's Pods get, a different one for each ``n``
    below 27^5 (a multiplication by a number prime to 27, modulo 27^5, then base 27)."""
    n = n * 1_000_003 % 27**5
    out = ""
    for _ in range(5):
        n, digit = divmod(n, 27)
        out += _ALPHANUMS[digit]
    return out


def _pod_ip(i: int) -> str:
    return f"10.{64 + i // 65536 % 64}.{i // 256 % 256}.{i % 256}"


def _container(name: str, image: str, ports: list[Obj]) -> Obj:
    return {
        "name": name,
        "image": image,
        "ports": ports,
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": ports[0]["containerPort"]},
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": ports[0]["containerPort"]},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
    }


@dataclass(frozen=True)
class PodSpec:
    """One Pod of the cluster: where it is, what it is, and its index (its Pod IP)."""

    index: int
    namespace: str
    name: str
    node: int
    kind: str
    """``app`` (ordinary) or one of :data:`HOLDER_KINDS`."""

    @property
    def path(self) -> str:
        """Its path on the API server."""
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    @property
    def app(self) -> str:
        """Its controller's name (the name without the Pod's own suffix)."""
        return self.name.rsplit("-", 1)[0]

    @property
    def container(self) -> tuple[str, str]:
        """``(name, image)`` of its one container."""
        if self.kind == "app":
            return "app", "registry.example.org/team/app:1.27.3"
        return self.app, f"registry.example.org/infra/{self.app}:2.4.1"


def pod_specs(scale: PodScale) -> Iterator[PodSpec]:
    """Every Pod of the cluster: the holders (one per holder Node), then the ordinary
    Pods, ``index`` counting all of them."""
    index = 0
    namespaces = {"exporter": "monitoring", "ingress": "ingress", "dns": "dns"}
    names = {"exporter": "node-exporter", "ingress": "ingress", "dns": "dns-cache"}
    for node in scale.holder_nodes:
        kind = scale.holder_kind(node)
        assert kind is not None
        name = f"{names[kind]}-{_suffix(node)}"
        yield PodSpec(index, namespaces[kind], name, node, kind)
        index += 1
    for i in range(scale.ordinary):
        deployment = f"web-{i // 50 % 1000:03d}"
        name = f"{deployment}-7d4b9c8f6d-{_suffix(i)}"
        yield PodSpec(index, f"app-{i % POD_NAMESPACES:03d}", name, i % scale.nodes, "app")
        index += 1


def pod_object(spec: PodSpec) -> Obj:
    """The Pod as its controller creates it (no status; the server adds its defaults)."""
    app = spec.app
    extra: Obj = {}
    if spec.kind == "app":
        owner = "ReplicaSet"
        labels = {
            "app.kubernetes.io/name": app.rsplit("-", 1)[0],
            "pod-template-hash": "7d4b9c8f6d",
        }
        ports = [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    else:
        owner = "DaemonSet"
        labels = {"app.kubernetes.io/name": app, "controller-revision-hash": "6c9b8d7f5"}
        if spec.kind == "exporter":
            ports = [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
            extra = {"hostNetwork": True, "hostPID": True}
        elif spec.kind == "ingress":
            ports = [
                {"name": "http", "containerPort": 8080, "hostPort": 80, "protocol": "TCP"},
                {"name": "https", "containerPort": 8443, "hostPort": 443, "protocol": "TCP"},
            ]
        else:
            ports = [
                {"name": "dns", "containerPort": 5353, "hostPort": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": 5353, "hostPort": 53, "protocol": "TCP"},
            ]
    container = _container(*spec.container, ports)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "generateName": spec.name[:-5],
            "namespace": spec.namespace,
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T17:02:11Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": app,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{spec.namespace}/{app}")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"nodeName": node_name(spec.node), "containers": [container], **extra},
    }


def pod_status(spec: PodSpec, *, ready: bool = True, restarts: int = 0) -> Obj:
    """A running Pod's status as its kubelet writes it (``ready`` flips the Ready and
    ContainersReady conditions and the container's readiness)."""
    host_ip = internal_ipv4(spec.node)
    pod_ip = host_ip if spec.kind == "exporter" else _pod_ip(spec.index)
    flag = "True" if ready else "False"
    name, image = spec.container
    conditions = [
        {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": STARTED}
        for kind, status in (
            ("PodReadyToStartContainers", "True"),
            ("Initialized", "True"),
            ("Ready", flag),
            ("ContainersReady", flag),
            ("PodScheduled", "True"),
        )
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": STARTED,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": name,
                "state": {"running": {"startedAt": STARTED}},
                "lastState": {},
                "ready": ready,
                "restartCount": restarts,
                "image": image,
                "imageID": f"{image.split(':')[0]}@sha256:{_hex(image, 32) * 2}",
                "containerID": f"containerd://{_hex(spec.name, 32) * 2}",
                "started": True,
            }
        ],
    }


def service_objects() -> list[Obj]:
    """The three managed Services (module docstring)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": SERVICE_NAMESPACE,
                "annotations": {
                    "io.cilium.nodeipam/match-node-labels": f"node-pool={SERVICE_POOL}"
                },
            },
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"name": "p", "port": port, "protocol": protocol}],
            },
        }
        for name, (protocol, port) in SERVICES.items()
    ]


def as_listed(spec: PodSpec) -> Obj:
    """The Pod as ``kubectl get pods -o json|yaml`` prints it from a v1.35 kube-apiserver
    (copied from one of this benchmark's Pods there): :func:`pod_object` with the
    server's defaults, the ServiceAccount token volume, the default tolerations, the
    generated metadata and :func:`pod_status` (kubectl leaves ``managedFields`` out)."""
    obj = pod_object(spec)
    volume = f"kube-api-access-{_suffix(spec.index)}"
    obj["metadata"] |= {
        "creationTimestamp": STARTED,
        "generation": 1,
        "resourceVersion": str(1000 + spec.index),
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, spec.path)),
    }
    container = obj["spec"]["containers"][0]
    container |= {
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": volume,
                "readOnly": True,
            }
        ],
    }
    for probe in ("livenessProbe", "readinessProbe"):
        container[probe] |= {"successThreshold": 1, "timeoutSeconds": 1}
        container[probe].setdefault("failureThreshold", 3)
        container[probe]["httpGet"]["scheme"] = "HTTP"
    obj["spec"] |= {
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "effect": "NoExecute",
                "key": f"node.kubernetes.io/{key}",
                "operator": "Exists",
                "tolerationSeconds": 300,
            }
            for key in ("not-ready", "unreachable")
        ],
        "volumes": [
            {
                "name": volume,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                "name": "kube-root-ca.crt",
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                        "path": "namespace",
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ],
    }
    obj["status"] = pod_status(spec)
    return obj


def base_objects(scale: PodScale, *, with_pods: bool) -> list[Obj]:
    """Namespaces, Nodes and Services (and, for the fake API, every Pod with its status)."""
    namespaces = {SERVICE_NAMESPACE, "monitoring", "ingress", "dns"}
    namespaces |= {f"app-{i:03d}" for i in range(min(POD_NAMESPACES, scale.ordinary))}
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in sorted(namespaces)
    ]
    objects += [make_node(i, scale.node_scale) for i in range(scale.nodes)]
    objects += service_objects()
    if with_pods:
        for spec in pod_specs(scale):
            objects.append(pod_object(spec) | {"status": pod_status(spec)})
    return objects


# -- the real API server ----------------------------------------------------------------------


def start_real(scale: PodScale, say: Callable[[str], None]) -> RealApi:
    """kube-apiserver + etcd (:data:`ETCD_QUOTA`) with the cluster created in it (module
    docstring); progress lines go to ``say``.

    Raises:
        RuntimeError: a create or status write failed.
    """
    from tests.controlplane.plane import ControlPlane

    plane = ControlPlane(dual_stack=True, extra_etcd_args=[f"--quota-backend-bytes={ETCD_QUOTA}"])
    plane.start()
    try:
        api = RealApi(plane)
        started = time.perf_counter()
        api.seed(base_objects(scale, with_pods=False))
        namespaces = sorted({spec.namespace for spec in pod_specs(scale)})
        for ns in namespaces:  # the ServiceAccount admission plugin wants one
            _send(
                api.http,
                "POST",
                f"/api/v1/namespaces/{ns}/serviceaccounts",
                {"metadata": {"name": "default"}},
                agent=CREATOR,
                expect=201,
            )
        say(f"  Nodes, Services, namespaces created in {time.perf_counter() - started:.1f} s")
        seed_pods(api.http, scale, say)
    except BaseException:
        plane.stop()
        raise
    return api


def _send(
    http: httpx.Client, method: str, path: str, body: Obj, *, agent: str, expect: int
) -> None:
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    response = http.request(
        method,
        path,
        content=orjson.dumps(body),
        headers={"Content-Type": content_type, "User-Agent": agent},
    )
    if response.status_code != expect:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")


def seed_pods(http: httpx.Client, scale: PodScale, say: Callable[[str], None]) -> None:
    """Create every Pod (as its controller) and write its status (as its kubelet),
    :data:`SEED_PARALLEL` at a time; a line to ``say`` every 10,000 Pods.

    Raises:
        RuntimeError: a create or status write failed.
    """

    def one(spec: PodSpec) -> None:
        collection = f"/api/v1/namespaces/{spec.namespace}/pods"
        _send(http, "POST", collection, pod_object(spec), agent=CREATOR, expect=201)
        _send(
            http,
            "PATCH",
            f"{spec.path}/status",
            {"status": pod_status(spec)},
            agent=KUBELET,
            expect=200,
        )

    started, done = time.perf_counter(), 0
    with ThreadPoolExecutor(max_workers=SEED_PARALLEL) as pool:
        batch: list[Any] = []
        for spec in pod_specs(scale):
            batch.append(pool.submit(one, spec))
            if len(batch) >= 2000:
                for future in batch:
                    future.result()
                done += len(batch)
                batch = []
                if done % 10_000 == 0:
                    say(f"  {done} Pods created, {time.perf_counter() - started:.0f} s")
        for future in batch:
            future.result()
        done += len(batch)
    say(
        f"  {done} Pods created with their status in {time.perf_counter() - started:.1f} s"
        f" ({SEED_PARALLEL} in parallel)"
    )


# -- measuring --------------------------------------------------------------------------------


@dataclass
class ListFigures:
    """The benchmark's own List of every Pod (pages of 500)."""

    selector: str | None
    pods: int
    wall: float
    api_cpu: float
    bytes: int


def list_pods(api: HttpApi, selector: str | None) -> ListFigures:
    """List the Pods of all namespaces in pages of 500 (``fieldSelector=selector`` when
    given), as the informer does, counting the bytes on the wire."""
    cpu0, wall0 = api.cpu_seconds(), time.perf_counter()
    params: dict[str, Any] = {"limit": 500}
    if selector:
        params["fieldSelector"] = selector
    pods = size = 0
    while True:
        response = api.http.get("/api/v1/pods", params=params)
        response.raise_for_status()
        size += len(response.content)
        body = orjson.loads(response.content)
        pods += len(body["items"])
        token = body["metadata"].get("continue")
        if not token:
            break
        params["continue"] = token
    return ListFigures(selector, pods, time.perf_counter() - wall0, api.cpu_seconds() - cpu0, size)


@dataclass
class Churn:
    """What the churn driver achieved."""

    sent: int
    failed: int
    seconds: float
    late: float
    """Largest lag of a send behind its schedule, seconds."""


def churn(
    api: HttpApi, specs: Sequence[PodSpec], *, rate: float, seconds: float, seed: int
) -> Churn:
    """``rate`` Pod status updates per second for ``seconds`` (module docstring), each of
    a Pod drawn at random from ``specs``, sent on 8 threads at their scheduled times."""
    rng = random.Random(seed)
    flips: dict[int, int] = {}
    lock = threading.Lock()
    failed = [0]

    def one(spec: PodSpec) -> None:
        with lock:
            flips[spec.index] = flips.get(spec.index, 0) + 1
            count = flips[spec.index]
        body = {"status": pod_status(spec, ready=count % 2 == 0, restarts=count // 2)}
        try:
            _send(api.http, "PATCH", f"{spec.path}/status", body, agent=KUBELET, expect=200)
        except (RuntimeError, httpx.HTTPError):
            with lock:
                failed[0] += 1

    total = int(rate * seconds)
    start, late = time.perf_counter(), 0.0
    with ThreadPoolExecutor(max_workers=8) as pool:
        for n in range(total):
            due = start + n / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            else:
                late = max(late, now - due)
            pool.submit(one, specs[rng.randrange(len(specs))])
    return Churn(total, failed[0], time.perf_counter() - start, late)


_LISTED = re.compile(rb'\{[^\n]*"msg":"(listed|controller starting)"[^\n]*\}')


def informer_list(log: Path) -> tuple[int, int, float]:
    """``(Pods read, Pods kept, seconds from "controller starting" to the Pod informer's
    "listed")`` from ``serve``'s log (0s when not found)."""
    start = None
    for match in _LISTED.finditer(log.read_bytes()):
        line = json.loads(match.group(0))
        stamp: float = calendar.timegm(time.strptime(line["time"][:19], "%Y-%m-%dT%H:%M:%S"))
        stamp += int(line["time"][20:23]) / 1000
        if line["msg"] == "controller starting":
            start = stamp
        elif line.get("kind") == "pods" and start is not None:
            return int(line.get("read", 0)), int(line["count"]), stamp - start
    return 0, 0, 0.0


@dataclass
class Run:
    """One ``serve`` process's figures (times in seconds, memory in MiB)."""

    host_port_pods: bool
    ready_after: float
    cpu_ready: float
    pods_read: int
    pods_kept: int
    pods_list_seconds: float
    rss_quiet: float
    hwm: float
    idle_cpu: float
    churn_cpu: float
    churn_api_cpu: float
    rss_after: float
    churn: Churn
    exposed: dict[str, int] = field(default_factory=dict)
    """Per Service: published addresses on a Node where a Pod holds its port."""
    published: dict[str, int] = field(default_factory=dict)


def exposed(api: HttpApi, scale: PodScale) -> tuple[dict[str, int], dict[str, int]]:
    """Per Service: ``(addresses on a Node where a Pod holds its port, addresses)``."""
    node_of: dict[str, int] = {}
    for i in range(scale.nodes):
        for address in make_node(i, scale.node_scale)["status"]["addresses"]:
            node_of[address["address"]] = i
    held, published = {}, {}
    for name, port in SERVICES.items():
        response = api.http.get(f"/api/v1/namespaces/{SERVICE_NAMESPACE}/services/{name}")
        response.raise_for_status()
        ingress = (response.json().get("status") or {}).get("loadBalancer", {}).get("ingress") or []
        ips = [entry.get("ip") for entry in ingress]
        published[name] = len(ips)
        held[name] = sum(
            1
            for ip in ips
            if ip in node_of and scale.holder_kind(node_of[ip]) == HOLDER_OF_PORT[port]
        )
    return held, published


def run_serve(
    api: HttpApi,
    scale: PodScale,
    specs: Sequence[PodSpec],
    *,
    on: bool,
    workdir: Path,
    name: str,
    idle: float,
    rate: float,
    seconds: float,
    seed: int,
) -> Run:
    """One ``serve`` process with ``host-port-pods`` ``on``: its figures (module docstring)."""
    serve: Serve = start_serve(
        kubeconfig=api.kubeconfig,
        workdir=workdir,
        name=name,
        env={"NODE_IPAM_HOST_PORT_PODS": "true" if on else "false"},
    )
    try:
        t0 = serve.process.started
        wait_for("serve /readyz", serve.ready, timeout=900, interval=0.1)
        ready_at = time.monotonic()
        cpu_ready = serve.process.cpu_seconds()
        wait_quiet(serve, timeout=600, settle=2.0)
        rss_quiet, hwm = serve.process.memory_mb("VmRSS"), serve.process.memory_mb("VmHWM")
        cpu0 = serve.process.cpu_seconds()
        time.sleep(idle)
        idle_cpu = serve.process.cpu_seconds() - cpu0
        cpu0, api0 = serve.process.cpu_seconds(), api.cpu_seconds()
        done = churn(api, specs, rate=rate, seconds=seconds, seed=seed)
        time.sleep(1.0)  # the last events reach serve
        churn_cpu = serve.process.cpu_seconds() - cpu0
        churn_api = api.cpu_seconds() - api0
        rss_after = serve.process.memory_mb("VmRSS")
        held, published = exposed(api, scale)
        read, kept, list_seconds = informer_list(serve.process.log)
    finally:
        serve.stop()
    return Run(
        on,
        ready_at - t0,
        cpu_ready,
        read,
        kept,
        list_seconds,
        rss_quiet,
        hwm,
        idle_cpu,
        churn_cpu,
        churn_api,
        rss_after,
        done,
        held,
        published,
    )


def report(runs: Sequence[Run], rate: float, seconds: float, idle: float) -> str:
    """The runs side by side, one column per run."""
    heads = [("on" if r.host_port_pods else "off") for r in runs]
    rows: list[tuple[str, Callable[[Run], str]]] = [
        ("Pods read by the List / kept", lambda r: f"{r.pods_read}/{r.pods_kept}"),
        ("Pod informer List (s, from log)", lambda r: f"{r.pods_list_seconds:.2f}"),
        ("serve ready after (s)", lambda r: f"{r.ready_after:.2f}"),
        ("serve CPU until ready (s)", lambda r: f"{r.cpu_ready:.2f}"),
        ("VmRSS once quiet (MiB)", lambda r: f"{r.rss_quiet:.1f}"),
        ("VmHWM (MiB)", lambda r: f"{r.hwm:.1f}"),
        (f"serve CPU idle {idle:.0f} s (s)", lambda r: f"{r.idle_cpu:.2f}"),
        (f"serve CPU, {rate:g}/s for {seconds:.0f} s (s)", lambda r: f"{r.churn_cpu:.2f}"),
        ("API server CPU over the churn (s)", lambda r: f"{r.churn_api_cpu:.2f}"),
        (
            "updates sent / failed / max late (s)",
            lambda r: f"{r.churn.sent}/{r.churn.failed}/{r.churn.late:.2f}",
        ),
        ("VmRSS after the churn (MiB)", lambda r: f"{r.rss_after:.1f}"),
        *[
            (
                f"{name}: on a holder's Node / published",
                lambda r, n=name: f"{r.exposed.get(n, 0)}/{r.published.get(n, 0)}",
            )
            for name in SERVICES
        ],
    ]
    lines = [f"  {'host-port-pods':38}" + "".join(f" {h:>12}" for h in heads)]
    for label, cell in rows:
        lines.append(f"  {label:38}" + "".join(f" {cell(r):>12}" for r in runs))
    return "\n".join(lines)


def dump_cost(scale: PodScale, fmt: str, workdir: Path) -> str:
    """``node-ipam-lb preview -f cluster.json -f pods.<fmt>`` on the cluster's Pods as
    ``kubectl get pods -A -o <fmt>`` prints them (:func:`as_listed`): the file's size,
    and the preview's wall time, CPU and peak RSS (``getrusage`` of the child). Run one
    format per process: the peak is the largest of every child waited for."""
    import resource
    import subprocess
    import sys

    import yaml

    cluster = workdir / "cluster.json"
    cluster.write_bytes(
        orjson.dumps(
            {"apiVersion": "v1", "kind": "List", "items": base_objects(scale, with_pods=False)}
        )
    )
    pods = workdir / f"pods.{fmt}"
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [as_listed(spec) for spec in pod_specs(scale)],
    }
    if fmt == "json":
        pods.write_bytes(orjson.dumps(listed, option=orjson.OPT_INDENT_2))
    else:
        with pods.open("w") as handle:
            yaml.dump(listed, handle, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    del listed
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from app.cli import main; main()",
            "preview",
            "-f",
            str(cluster),
            "-f",
            str(pods),
            "-o",
            "json",
        ],
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"preview exited {done.returncode}: {done.stderr[-2000:]!r}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return (
        f"  preview -f cluster.json -f {pods.name} ({pods.stat().st_size / 1e6:.0f} MB,"
        f" {scale.pods} Pods): {wall:.1f} s wall, {cpu:.1f} s CPU,"
        f" peak RSS {after.ru_maxrss / 1024:.0f} MiB"
    )


def main(argv: list[str] | None = None) -> None:
    """Seed the cluster, list it, run ``serve`` per setting and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=["real", "fake"], default="real")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000, help="every Pod, holders included")
    parser.add_argument("--runs", type=int, default=2, help="serve runs per setting")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--churn-rate", type=float, default=100.0, help="updates per second")
    parser.add_argument("--churn-seconds", type=float, default=60.0)
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument(
        "--dump",
        choices=["json", "yaml"],
        default=None,
        help="instead: the offline preview of a dump of every Pod in this format",
    )
    args = parser.parse_args(argv)
    scale = PodScale(nodes=args.nodes, pods=args.pods)
    print(f"machine: {machine()}; load {os.getloadavg()}", flush=True)
    if args.dump:
        with tempfile.TemporaryDirectory(prefix="bench-pods-dump-") as tmp:
            print(dump_cost(scale, args.dump, args.workdir or Path(tmp)), flush=True)
        print(f"machine at the end: {machine()}")
        return
    specs = list(pod_specs(scale))
    print(
        f"cluster: {scale.nodes} Nodes, {len(specs)} Pods ({len(scale.holder_nodes)} hold"
        f" node ports), {len(SERVICES)} managed Services",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-pods-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        if args.api == "real":
            api: HttpApi = start_real(scale, lambda text: print(text, flush=True))
        else:
            api = start_fakeapi(objects=base_objects(scale, with_pods=True), workdir=workdir)
        print(f"  {api.label} seeded in {time.perf_counter() - started:.1f} s", flush=True)
        if isinstance(api, RealApi):
            peaks = ", ".join(f"{n} {mb:.0f} MiB" for n, mb in api.peak_rss_mb().items())
            print(f"  peak RSS after seeding: {peaks}", flush=True)
        try:
            for selector in (None, "spec.hostNetwork=true"):
                figures = list_pods(api, selector)
                print(
                    f"  {api.label} alone, List of Pods (pages of 500, fieldSelector"
                    f" {selector or 'none'}): {figures.pods} Pods, {figures.wall:.2f} s wall,"
                    f" {figures.api_cpu:.2f} s API server CPU, {figures.bytes / 1e6:.1f} MB"
                    f" ({figures.bytes / max(1, figures.pods):.0f} bytes per Pod)",
                    flush=True,
                )
            runs = []
            for n in range(args.runs * 2):
                on = n % 2 == 0
                run = run_serve(
                    api,
                    scale,
                    specs,
                    on=on,
                    workdir=workdir,
                    name=f"serve-{'on' if on else 'off'}-{n // 2}",
                    idle=args.idle_seconds,
                    rate=args.churn_rate,
                    seconds=args.churn_seconds,
                    seed=n,
                )
                runs.append(run)
                print(
                    f"  run {n + 1}/{args.runs * 2} (host-port-pods {'on' if on else 'off'})"
                    f" done; machine: {machine()}",
                    flush=True,
                )
            if isinstance(api, RealApi):
                peaks = ", ".join(f"{n} {mb:.0f} MiB" for n, mb in api.peak_rss_mb().items())
                print(f"  peak RSS at the end: {peaks}", flush=True)
        finally:
            api.stop()
    print(report(runs, args.churn_rate, args.churn_seconds, args.idle_seconds))
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
