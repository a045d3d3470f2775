"""The benchmarks' cluster on a real kube-apiserver + etcd (``--api real``), beside the fake.

:func:`start_realapi` starts a :class:`tests.controlplane.plane.ControlPlane` (kube-apiserver
v1.35 and etcd built by ``python3 -m tests.controlplane build``, on loopback, data in a
temporary directory removed at :meth:`RealApi.stop`) with a dual-stack Service CIDR, and
creates the synthetic cluster of :mod:`bench.cluster` in it with parallel creates over one
pooled HTTP/1.1 client (admin client certificate). What a real server needs that the fake
does not (:func:`for_real_server`):

- Services are created without ``clusterIP``/``clusterIPs``/``healthCheckNodePort``: the
  server allocates them (the generated ones repeat at 254/255, and 1,000 Local Services'
  health-check ports would collide); ``ipFamilies``/``ipFamilyPolicy`` stay, so the
  ingress families and the expected ingress are the fake's.
- LoadBalancer Services get ``allocateLoadBalancerNodePorts: false``: 10,500 of them with
  two ports each would need 21,000 node ports, the default range has 2,768. The
  controller reads neither field.
- Nodes are created with their ``status`` (addresses, conditions): the Node strategy keeps
  status on create, as for a kubelet registering itself. Services' ``status`` is dropped
  (the Service strategy drops it on create anyway).

Counters: :meth:`RealApi.requests` reads the server's ``apiserver_request_total`` from
``/metrics`` (verb, resource, subresource; every code and group summed), keyed like the
fake API's (``"patch services/status"``, ``"create events"``, ``"patch events"``), as
differences from the last :meth:`RealApi.reset_requests`. A scrape is ~1.4 MB and ~50 ms
of the server's CPU, so the benchmarks scrape only around a measured window, never in a
polling loop; the moment every status is written comes from :class:`IngressWatch` (one
watch on Services).
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.cluster import service_key
from bench.procs import HttpApi, cpu_seconds, memory_mb, stop_stream, stream_socket
from tests.controlplane.metrics import request_counts
from tests.controlplane.plane import DUAL_STACK_SERVICE_CLUSTER_IP_RANGE, ControlPlane
from tests.support.waiting import wait_for

Obj = dict[str, Any]
SERVICE_CIDRS = DUAL_STACK_SERVICE_CLUSTER_IP_RANGE  # ControlPlane(dual_stack=True)
"""Dual-stack Service CIDRs: a third of the synthetic Services are ``RequireDualStack``."""
SEED_PARALLEL = 16
"""Concurrent creates while seeding (one pooled client, one connection each)."""


def for_real_server(obj: Mapping[str, Any]) -> Obj:
    """``obj`` as a client creates it on a real API server (module docstring): a Service
    without cluster IPs, health-check node port and status, with
    ``allocateLoadBalancerNodePorts: false`` when it is a LoadBalancer; other kinds as they
    are. Returns a new dict; ``obj`` is not changed."""
    if obj["kind"] != "Service":
        return dict(obj)
    spec = {
        key: value
        for key, value in obj["spec"].items()
        if key not in ("clusterIP", "clusterIPs", "healthCheckNodePort")
    }
    if spec.get("type") == "LoadBalancer":
        spec["allocateLoadBalancerNodePorts"] = False
    return {key: value for key, value in obj.items() if key != "status"} | {"spec": spec}


def collection_path(obj: Mapping[str, Any]) -> str:
    """The collection an object is created in (``POST`` path), from ``apiVersion``, ``kind``
    and ``metadata.namespace``.

    Raises:
        ValueError: a kind the synthetic cluster does not hold.
    """
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    plural = {
        "Namespace": "namespaces",
        "Node": "nodes",
        "Service": "services",
        "EndpointSlice": "endpointslices",
        "CustomResourceDefinition": "customresourcedefinitions",
        "NodeAddressPool": "nodeaddresspools",
    }.get(kind)
    if plural is None:
        raise ValueError(f"kind {kind!r}: not part of the synthetic cluster")
    api_version = obj["apiVersion"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


class RealApi(HttpApi):
    """A running :class:`ControlPlane` as the benchmarks' API server (module docstring)."""

    label = "kube-apiserver + etcd"

    def __init__(self, plane: ControlPlane) -> None:
        pki = plane.workdir / "pki"
        context = ssl.create_default_context(cadata=plane.ca_pem.decode())
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self._context = context
        http = httpx.Client(
            base_url=plane.url,
            verify=context,
            timeout=60.0,
            limits=httpx.Limits(
                max_connections=SEED_PARALLEL + 4, max_keepalive_connections=SEED_PARALLEL + 4
            ),
        )
        super().__init__(plane.url, plane.kubeconfig_path, http)
        self.plane = plane
        self._pids = plane.pids()
        self._baseline: Counter[str] = Counter()

    def client(self, *, timeout: float | None) -> httpx.Client:
        """A new client to the server as admin (for a watch, which holds its connection)."""
        return httpx.Client(base_url=self.url, verify=self._context, timeout=timeout)

    def _totals(self) -> Counter[str]:
        response = self.http.get("/metrics")
        response.raise_for_status()
        return request_counts(response.text)

    def requests(self) -> dict[str, int]:
        """``apiserver_request_total`` by verb and resource since :meth:`reset_requests`
        (one ``/metrics`` scrape)."""
        totals = self._totals()
        totals.subtract(self._baseline)
        return {key: value for key, value in totals.items() if value}

    def reset_requests(self) -> None:
        """Take the current totals as zero (one ``/metrics`` scrape)."""
        self._baseline = self._totals()

    def cpu_by_process(self) -> dict[str, float]:
        """CPU time of ``kube-apiserver`` and ``etcd`` so far, in seconds."""
        return {name: cpu_seconds(pid) for name, pid in self._pids.items()}

    def cpu_seconds(self) -> float:
        """CPU time of kube-apiserver plus etcd so far, in seconds."""
        return sum(self.cpu_by_process().values())

    def peak_rss_mb(self) -> dict[str, float]:
        """``VmHWM`` of each server process, in MiB."""
        return {name: memory_mb(pid) for name, pid in self._pids.items()}

    def create(self, obj: Mapping[str, Any]) -> None:
        """Create one object (:func:`for_real_server` applied).

        Raises:
            RuntimeError: the server did not answer 201, with its message.
        """
        body = json.dumps(for_real_server(obj)).encode()
        response = self.http.post(
            collection_path(obj), content=body, headers={"Content-Type": "application/json"}
        )
        if response.status_code != 201:
            name = obj["metadata"].get("name")
            raise RuntimeError(
                f"create {obj['kind']} {name}: {response.status_code} {response.text[:500]}"
            )

    def seed(self, objects: list[Obj], *, parallel: int = SEED_PARALLEL) -> int:
        """Create ``objects``: Namespaces first, then the rest, ``parallel`` at a time;
        returns how many were created.

        Raises:
            RuntimeError: a create failed (the first failure's message).
        """
        namespaces = [o for o in objects if o["kind"] == "Namespace"]
        rest = [o for o in objects if o["kind"] != "Namespace"]
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for batch in (namespaces, rest):
                for future in [pool.submit(self.create, obj) for obj in batch]:
                    future.result()
        return len(objects)

    def install_crd(self, crd: Mapping[str, Any], *, timeout: float = 60.0) -> float:
        """Create the CustomResourceDefinition ``crd`` and wait until its ``Established``
        condition is ``True`` and a List of its resource answers 200 (what a controller
        started next needs: its informer's first List); returns the seconds it took.

        Raises:
            RuntimeError: the create failed. TimeoutError: not served within ``timeout``.
        """
        started = time.perf_counter()
        self.create(crd)
        name, spec = crd["metadata"]["name"], crd["spec"]
        served = next(v["name"] for v in spec["versions"] if v.get("served"))
        collection = f"/apis/{spec['group']}/{served}/{spec['names']['plural']}"

        def ready() -> bool:
            found = self.http.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (found.json().get("status") or {}).get("conditions") or []
            established = any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )
            return established and self.http.get(collection).status_code == 200

        wait_for(f"CustomResourceDefinition {name} Established and served", ready, timeout=timeout)
        return time.perf_counter() - started

    def replace_all(self, collection: str, objects: list[Obj]) -> None:
        """Make ``objects`` the only objects of the cluster-scoped ``collection``: a
        ``deletecollection``, a List until it is empty, then a create of each.

        Raises:
            httpx.HTTPStatusError: the delete failed. RuntimeError: a create failed.
            TimeoutError: the collection was not empty within 60 s.
        """
        self.http.delete(collection).raise_for_status()
        wait_for(f"{collection} empty", lambda: not self.list_all(collection)[0], timeout=60.0)
        for obj in objects:
            self.create(obj)

    def stop(self) -> None:
        """Close the client, stop kube-apiserver and etcd, remove their data."""
        self.http.close()
        self.plane.stop()


def start_realapi(
    *, objects: list[Obj], say: Callable[[str], None] = lambda _text: None
) -> RealApi:
    """Start a control plane (dual-stack Service CIDRs) and create ``objects`` in it;
    ``say`` gets one line with the start and seeding times.

    Raises:
        tests.controlplane.build.ControlPlaneUnavailable: the binaries are not cached and
            cannot be built.
        tests.controlplane.plane.ControlPlaneStartError: a server did not start.
        RuntimeError: a create failed.
    """
    started = time.perf_counter()
    plane = ControlPlane(dual_stack=True)
    plane.start()
    try:
        api = RealApi(plane)
        up = time.perf_counter() - started
        seeded_at = time.perf_counter()
        created = api.seed(objects)
        say(
            f"  kube-apiserver + etcd up in {up:.1f} s; {created} objects created in"
            f" {time.perf_counter() - seeded_at:.1f} s ({SEED_PARALLEL} in parallel)"
        )
    except BaseException:
        plane.stop()
        raise
    return api


class IngressWatch:
    """A watch on every Service that tells when each managed Service holds its expected
    ingress: :meth:`wait` returns the monotonic time the last one arrived.

    Started from a List (its ``resourceVersion``), so a status written before the watch
    began still counts. Services with an empty expected ingress count as done when their
    ingress is empty or absent (as :func:`bench.bench_cold_start.check_statuses`).
    """

    def __init__(
        self, api: RealApi, expected: Mapping[str, list[dict[str, str]]], *, timeout: float
    ) -> None:
        self._expected = expected
        items, version = api.list_all("/api/v1/services")
        self._pending = {key for key in expected if expected[key]}
        for obj in items:
            self._observe(obj)
        self._done_at: float | None = time.monotonic() if not self._pending else None
        self._error: BaseException | None = None
        self._finished = threading.Event()
        self._client = api.client(timeout=None)
        self._socket: socket.socket | None = None
        self._closing = False
        self._params = {
            "watch": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(int(timeout) + 60),
        }
        self._thread = threading.Thread(target=self._run, name="ingress-watch", daemon=True)
        if self._done_at is None:
            self._thread.start()
        else:
            self._finished.set()

    def _observe(self, obj: Mapping[str, Any]) -> None:
        key = service_key(obj)
        if key not in self._expected:
            return
        ingress = (obj.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
        if ingress == self._expected[key]:
            self._pending.discard(key)
        elif self._expected[key]:
            self._pending.add(key)

    def _run(self) -> None:
        try:
            with self._client.stream("GET", "/api/v1/services", params=self._params) as stream:
                self._socket = stream_socket(stream)
                if self._closing:  # close() came before the answer's head: it saw no socket
                    return
                stream.raise_for_status()
                for line in stream.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch ended with {event['object']}")
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._observe(event["object"])
                        if not self._pending:
                            self._done_at = time.monotonic()
                            return
            raise RuntimeError("watch on Services closed before every status was written")
        except BaseException as err:  # handed to wait()
            self._error = err
        finally:
            self._finished.set()
            self._client.close()

    def close(self) -> None:
        """End the watch and its thread (:func:`bench.procs.stop_stream`; the thread's
        error, a closed stream, is kept, not raised)."""
        self._closing = True  # before reading _socket: see _run
        stop_stream(self._socket, self._thread, self._client)

    def wait(self, timeout: float) -> float:
        """Monotonic time the last managed Service got its expected ingress.

        Raises:
            TimeoutError: not every Service within ``timeout`` seconds.
            RuntimeError: the watch failed (the server's message).
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for every managed Service's expected"
                f" ingress ({len(self._pending)} still pending)"
            )
        if self._done_at is None:
            raise RuntimeError(f"watch on Services failed: {self._error}") from self._error
        return self._done_at
