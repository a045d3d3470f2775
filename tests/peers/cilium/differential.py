"""The differential comparison: each generated cluster (:mod:`tests.peers.cilium.clusters`)
on two real, dual-stack API servers, Cilium's Node IPAM controller on one and
``node-ipam-lb serve`` on the other, both from blank statuses; then, per Service, Cilium's
ingress against ours from ``serve`` and from ``preview`` on a ``kubectl get`` dump of
Cilium's cluster.

Why two API servers: both controllers claim the same Services (the class, and class-less
ones under ``nodeipam``), so they cannot share one; the two planes hold the same objects
and each controller runs long-lived across clusters (one start per mode, not per
cluster). Clusters are created one after another (namespace ``diff-<seed>``), compared,
and deleted.

Every deliberate difference of docs/design.md §4.8 that shows in a status is a named rule
(:data:`RULES`); :func:`classify` names the rule that explains a difference, or ``None``.
Any other difference, or ``preview`` and ``serve`` disagreeing, is unexplained: the
caller shrinks the cluster (:meth:`Differential.shrink`) and fails with the seed.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from app.core.views import canonical_ip
from app.preview.run import run_preview
from tests.controlplane.build import Binaries
from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import ROOT, stop, tls
from tests.peers.cilium.clusters import CLASS, Cluster
from tests.peers.cilium.peer import CiliumNodeIpam, wait_quiet
from tests.support.ports import free_port
from tests.support.waiting import wait_for

IDENTICAL = "identical"
RULES = {
    "canonical-addresses": (
        "docs/design.md §4.8: addresses in canonical text, deduplicated after that"
        " (Cilium writes each Node address as spelled, e.g. FD00::A, ::ffff:10.0.0.7,"
        " 010.000.000.001, and dedups the raw strings)"
    ),
    "family-numeric-order": (
        "docs/design.md §4.8: ordered by family as in spec.ipFamilies, then numerically"
        " (Cilium sorts the raw strings)"
    ),
    "port-ownership": (
        "docs/design.md §4.8, §4.9: an address is published for one owner of each"
        " (address, protocol, port), taken per address in rank order (a Service that loses"
        " an address claims nothing there), never on a reserved node port (Cilium has no"
        " port rule)"
    ),
}
"""The §4.8 differences visible in ``status.loadBalancer.ingress``; the others (the
explicit ``ipMode``, which the server defaults to the same ``VIP`` on Cilium's writes;
PATCH only on change; narrower requeues; Events; admission) do not change what a Service
ends with and are checked by the migration test (:mod:`tests.peers.cilium.test_migration`)."""


def _parse(text: str) -> tuple[str, str, int]:
    parsed = canonical_ip(text)
    if parsed is None:
        raise ValueError(f"not an IP address: {text!r}")
    return parsed


def cilium_ips_our_way(ips: Sequence[str], families: Sequence[str]) -> list[str]:
    """Cilium's ingress IPs in our form (§4.5): canonical (:func:`app.core.views.canonical_ip`),
    deduplicated, by family in the order of ``families`` (``spec.ipFamilies``), then
    numerically. Raises ``ValueError`` for a string that is not an IP to us."""
    order = {family: i for i, family in enumerate(families)}
    unique = {_parse(ip) for ip in ips}
    ordered = sorted(unique, key=lambda p: (order.get(p[1], len(order)), p[2]))
    return [text for text, _, _ in ordered]


def classify(
    cilium: Sequence[str],
    ours: Sequence[str],
    families: Sequence[str],
    lost: Collection[str] = (),
) -> str | None:
    """``"identical"``, the :data:`RULES` name that explains ``cilium`` ≠ ``ours`` (ingress
    IP lists of one Service), or ``None`` (unexplained). ``lost``: the canonical addresses
    port ownership takes from this Service (:func:`port_ownership_losses`); when there are
    any, ``ours`` must be Cilium's list in our form without them (``port-ownership``, which
    wins over the other rules); else ``canonical-addresses`` wins when both apply."""
    if list(cilium) == list(ours) and not lost:
        return IDENTICAL
    try:
        ours_way = cilium_ips_our_way(cilium, families)
    except ValueError:
        return None
    if lost:
        kept = [ip for ip in ours_way if ip not in lost]
        return "port-ownership" if kept == list(ours) else None
    if ours_way != list(ours):
        return None
    raw_sorted_canonical = sorted(set(cilium)) == sorted(ours_way) and all(
        _parse(ip)[0] == ip for ip in cilium
    )
    return "family-numeric-order" if raw_sorted_canonical else "canonical-addresses"


RESERVED_NODE_PORTS = frozenset({22, 2379, 2380, 6443, 10250, 10256, 10257, 10259})
"""docs/design.md §4.9's default ``reserved-node-ports`` of any protocol, restated: the
oracle below does not read ``app/`` (a test pins the two equal)."""
RESERVED_BY_PROTOCOL = frozenset(
    {("TCP", 179), ("TCP", 5001), ("UDP", 4789), ("UDP", 6081), ("UDP", 8472),
     ("UDP", 51820), ("UDP", 51821), ("UDP", 51871)}
)  # fmt: skip
"""The rest of that default: the CNIs' tunnel, WireGuard and BGP ports, one protocol each."""


def _ports(service: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p.get("protocol", "TCP"), p["port"]) for p in service["spec"].get("ports", [])}


def _node_ports(service: dict[str, Any]) -> set[int]:
    spec = service["spec"]
    found = {p["nodePort"] for p in spec.get("ports", []) if p.get("nodePort")}
    return found | ({spec["healthCheckNodePort"]} if spec.get("healthCheckNodePort") else set())


def port_ownership_losses(
    services: Sequence[dict[str, Any]],
    candidates: Mapping[str, Sequence[str]],
    stored: Mapping[str, Collection[str]] | None = None,
) -> dict[str, set[str]]:
    """What port ownership (docs/design.md §4.9) takes from each Service of ``candidates``,
    worked out here from the rule's text, independently of ``app.core.ports``, for the
    inputs the generator draws (:func:`tests.peers.cilium.clusters._port_conflicts`).

    ``services``: every Service of one namespace as the server holds them (ports, allocated
    ``nodePort``/``healthCheckNodePort``, ``creationTimestamp``); ``candidates``: ``{name:
    canonical IPs}`` of the managed ones, what ``select`` gives (Cilium's ingress in our
    form: Cilium has no port rule); ``stored``: ``{name: canonical IPs}`` of their stored
    ingress (``None``: blank statuses, as both controllers start). Returns ``{name: the
    candidate addresses it may not publish}``.

    Covered: a reserved node port (the default setting) or another Service's node port
    blocks every address and claims nothing; otherwise, per address, the claimants are
    taken in order of (address not stored, ``creationTimestamp``, name) and each publishes
    it unless one taken before it that publishes it has one of its ports (rank order: a
    Service that loses an address claims nothing there). Not
    covered (the generator draws none): ``allowed-namespaces``, exceptions, other classes'
    ingress, ``spec.externalIPs``, host-network Pods, other namespaces' ports."""
    by_name = {s["metadata"]["name"]: s for s in services}
    stored = stored or {}
    node_ports = {name: _node_ports(s) for name, s in by_name.items()}
    blocked = set()
    for name in candidates:
        taken = set().union(*(ports for other, ports in node_ports.items() if other != name))
        if any(
            port in RESERVED_NODE_PORTS or (protocol, port) in RESERVED_BY_PROTOCOL or port in taken
            for protocol, port in _ports(by_name[name])
        ):
            blocked.add(name)
    lost: dict[str, set[str]] = {
        name: set(ips) if name in blocked else set() for name, ips in candidates.items()
    }
    claimants: dict[str, list[str]] = {}
    for name, ips in candidates.items():
        if name not in blocked:
            for ip in ips:
                claimants.setdefault(ip, []).append(name)
    for ip, names in claimants.items():
        # One pass per address in rank order: a Service publishes the address unless a
        # Service before it that publishes it has one of its ports (rules 2 and 3).
        taken: set[tuple[str, int]] = set()
        for name in sorted(
            names,
            key=lambda n: (
                ip not in stored.get(n, ()),
                by_name[n]["metadata"]["creationTimestamp"],  # RFC 3339, UTC: sorts as text
                n,
            ),
        ):
            ports = set(_ports(by_name[name]))
            if ports & taken:
                lost[name].add(ip)
            else:
                taken |= ports
    return lost


@dataclasses.dataclass
class Outcome:
    """One Service's results: ``key`` ``namespace/name``, ``families`` its
    ``spec.ipFamilies``; ``cilium`` and ``serve`` the ingress IPs each left from a blank
    status, ``preview`` preview's (``None``: it would not write); ``rule`` from
    :func:`classify` (``None``: unexplained); ``problem`` what else disagreed (preview
    and serve, or an ``ipMode`` other than ``VIP``), empty when nothing did."""

    key: str
    families: list[str]
    cilium: list[str]
    serve: list[str]
    preview: list[str] | None
    rule: str | None
    problem: str = ""


def cilium_manages(service: dict[str, Any], mode: str) -> bool:
    """Cilium's ``isServiceSupported`` (operator/pkg/nodeipam/nodesvclb.go) on a Service
    as created: LoadBalancer, and class ``io.cilium/node``, or unset under ``nodeipam``."""
    spec = service.get("spec", {})
    if spec.get("type") != "LoadBalancer":
        return False
    klass = spec.get("loadBalancerClass")
    return klass == CLASS if klass is not None else mode == "nodeipam"


# -- objects on a plane -------------------------------------------------------------------


class Api:
    """Admin requests to ``plane`` over one pooled HTTP/1.1 client (thread-safe);
    :meth:`ControlPlane.request` makes a TLS context and connection per call, ~10x the
    cost here. Close it (or use ``with``)."""

    def __init__(self, plane: ControlPlane) -> None:
        pki = plane.workdir / "pki"
        context = ssl.create_default_context(cadata=plane.ca_pem.decode())
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self.plane = plane
        self.http = httpx.Client(
            base_url=plane.url,
            verify=context,
            timeout=60,
            limits=httpx.Limits(max_connections=12, max_keepalive_connections=12),
        )

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """``(status, decoded JSON)`` of one request (``body`` sent as JSON). A transport
        error (a read timeout of a loaded server) is retried twice; a retried POST that
        finds its object created (409) counts as created (201)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            try:
                response = self.http.request(method, path, content=data, headers=headers)
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
        if attempt and method == "POST" and response.status_code == 409:
            return 201, {}
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _paths(obj: dict[str, Any]) -> tuple[str, str]:
    kind, meta = obj["kind"], obj["metadata"]
    if kind == "Node":
        return "/api/v1/nodes", f"/api/v1/nodes/{meta['name']}"
    if kind == "Service":
        base = f"/api/v1/namespaces/{meta['namespace']}/services"
    else:
        base = f"/apis/discovery.k8s.io/v1/namespaces/{meta['namespace']}/endpointslices"
    return base, f"{base}/{meta['name']}"


def create(api: Api, cluster: Cluster, pool: ThreadPoolExecutor) -> dict[str, str]:
    """Create ``cluster`` through ``api`` (Nodes, then slices, then Services, the
    :attr:`Cluster.later` ones in a later second; the ``deleting`` Nodes deleted after,
    held by their finalizer); returns what the server
    rejected, ``{"Kind/name": "status message"}`` (those objects do not exist)."""
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": cluster.namespace}})
    rejected: dict[str, str] = {}

    def one(obj: dict[str, Any]) -> None:
        status, body = api.call("POST", _paths(obj)[0], obj)
        if status != 201:
            message = body.get("message", body) if isinstance(body, dict) else body
            rejected[f"{obj['kind']}/{obj['metadata']['name']}"] = f"{status} {message}"

    later = set(cluster.later)
    first = [s for s in cluster.services if s["metadata"]["name"] not in later]
    for group in (cluster.nodes, cluster.slices, first):
        list(pool.map(one, group))
    if later:  # in a later second than all of the first wave: their creationTimestamp is later
        time.sleep(1.05 - time.time() % 1)
        list(pool.map(one, [s for s in cluster.services if s["metadata"]["name"] in later]))
    for name in cluster.deleting:
        if f"Node/{name}" not in rejected:
            api.call("DELETE", f"/api/v1/nodes/{name}")
    return rejected


def delete(api: Api, cluster: Cluster, pool: ThreadPoolExecutor) -> None:
    """Delete ``cluster``'s objects through ``api`` (our finalizer removed first)."""

    def one(obj: dict[str, Any]) -> None:
        path = _paths(obj)[1]
        if obj["metadata"].get("finalizers"):
            patch = {"metadata": {"finalizers": None}}
            api.call("PATCH", path, patch, content_type="application/merge-patch+json")
        api.call("DELETE", path)

    list(pool.map(one, cluster.services + cluster.slices))
    list(pool.map(one, cluster.nodes))


def services(api: Api, namespace: str) -> list[dict[str, Any]]:
    """Every Service of ``namespace`` as the server holds it."""
    status, body = api.call("GET", f"/api/v1/namespaces/{namespace}/services")
    if status != 200:
        raise RuntimeError(f"list services in {namespace}: {status} {body}")
    items: list[dict[str, Any]] = body["items"]
    return items


def ingress_of(held: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """``{name: status.loadBalancer.ingress}`` of the Services ``held``."""
    return {
        item["metadata"]["name"]: item.get("status", {}).get("loadBalancer", {}).get("ingress")
        or []
        for item in held
    }


def families_of(held: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """``{name: spec.ipFamilies}`` of the Services ``held``, as the server set them."""
    return {i["metadata"]["name"]: i["spec"].get("ipFamilies", []) for i in held}


def ingress(api: Api, namespace: str) -> dict[str, list[dict[str, str]]]:
    """``{name: status.loadBalancer.ingress}`` of every Service in ``namespace``."""
    return ingress_of(services(api, namespace))


def families(api: Api, namespace: str) -> dict[str, list[str]]:
    """``{name: spec.ipFamilies}`` as the server set them."""
    return families_of(services(api, namespace))


def cilium_candidates(held: Sequence[dict[str, Any]], mode: str) -> dict[str, list[str]]:
    """``{name: candidates}`` for :func:`port_ownership_losses`: the Services ``held`` (one
    namespace, as the server holds them after Cilium's controller ran) that Cilium manages,
    each with Cilium's ingress in our form (Cilium has no port rule, so that is what
    ``select`` gives; a list that is not all IPs gives none: that Service is unexplained
    anyway)."""
    found: dict[str, list[str]] = {}
    for service in held:
        if cilium_manages(service, mode):
            entries = service.get("status", {}).get("loadBalancer", {}).get("ingress") or []
            try:
                found[service["metadata"]["name"]] = cilium_ips_our_way(
                    [e.get("ip", "") for e in entries], service["spec"].get("ipFamilies", [])
                )
            except ValueError:
                continue
    return found


def preview_dump(plane: ControlPlane, namespace: str, mode: str, workdir: Path) -> dict[str, Any]:
    """``kubectl get nodes,services,endpointslices -A -o json`` of ``plane``, then
    ``preview -f DUMP -o json`` on it (in this process: the CLI's own ``run_preview``);
    returns ``{name: preview item}`` for ``namespace``."""
    dump = workdir / f"{namespace}.json"
    got = plane.kubectl("get", "nodes,services,endpointslices", "-A", "-o", "json")
    dump.write_text(got.stdout)
    out, err = io.StringIO(), io.StringIO()
    code = run_preview(
        paths=[str(dump)],
        output="json",
        settings={"default_lb_service_ipam": mode},
        stdout=out,
        stderr=err,
    )
    assert code in (0, 1), err.getvalue()
    items = json.loads(out.getvalue())["items"]
    return {i["name"]: i for i in items if i["namespace"] == namespace}


# -- serve --------------------------------------------------------------------------------


class Serve:
    """``node-ipam-lb serve`` on ``plane`` (admin kubeconfig, no leader election, loopback
    port); :meth:`wait_quiet` as for Cilium, gated on serve's own cache and queue."""

    def __init__(self, plane: ControlPlane, mode: str, workdir: Path) -> None:
        self.plane, self.mode = plane, mode
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = workdir / f"serve-{mode}-ca.crt"
        self.log = workdir / f"serve-{mode}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.http: httpx.Client | None = None

    def start(self) -> Self:
        """Start ``serve`` and return once ``/readyz`` answers (fails the test otherwise)."""
        self.ca.unlink(missing_ok=True)  # an earlier run's CA would never verify this one
        args = [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--kubeconfig",
            str(self.plane.kubeconfig_path),
            "--no-leader-elect",
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ca-bundle-out",
            str(self.ca),
            "--default-lb-service-ipam",
            self.mode,
            "--health-probe-bind-address",
            "0",  # off: its default is every address's :8081, one per machine
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "TMPDIR": str(self.log.parent)},  # nothing left in /tmp
            )

        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, self.tail()
            if not self.ca.exists():
                return False
            if self.http is None:
                self.http = httpx.Client(verify=tls(self.ca), timeout=10)
            try:
                return self.http.get(f"{self.url}/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("serve answers /readyz", up, timeout=180)  # 4 at once at load 20: > 60 s
        return self

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def _cached(self, namespace: str, count: int) -> bool:
        """serve's cache holds ``count`` Services of ``namespace`` and every key its work
        queue took in has been reconciled (``workqueue_adds_total`` equals the sum of
        ``controller_runtime_reconcile_total``, counted after the status write)."""
        assert self.process is not None and self.process.poll() is None, self.tail()
        assert self.http is not None
        got = self.http.get(f"{self.url}/preview/{namespace}", params={"limit": 500})
        if got.status_code != 200 or len(got.json().get("items", [])) < count:
            return False
        totals = {"workqueue_adds_total{": 0.0, "controller_runtime_reconcile_total{": 0.0}
        for line in self.http.get(f"{self.url}/metrics").text.splitlines():
            for prefix in totals:
                if line.startswith(prefix):
                    totals[prefix] += float(line.rsplit(" ", 1)[1])
        adds, reconciles = totals.values()
        return adds == reconciles

    def wait_quiet(self, namespace: str, count: int, *, timeout: float = 60.0) -> float:
        """Until serve's cache holds ``count`` Services of ``namespace``, everything queued
        is reconciled and the server's services/status requests stopped moving for 1 s."""
        return wait_quiet(self.plane, timeout=timeout, ready=lambda: self._cached(namespace, count))

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.process is not None:
            stop(self.process)
            self.process = None


# -- the comparison -----------------------------------------------------------------------


@dataclasses.dataclass
class ClusterResult:
    """One cluster's outcomes; ``rejected`` what the real server refused to create."""

    seed: int
    mode: str
    outcomes: list[Outcome]
    rejected: dict[str, str]
    seconds: float

    def unexplained(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.rule is None or o.problem]


class Differential:
    """Two dual-stack control planes with Cilium's controller on one and ``serve`` on the
    other, in one ``--default-lb-service-ipam`` mode at a time (:meth:`mode` restarts
    both). A context manager; :meth:`run` compares one cluster."""

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        binaries: Binaries | None = None,
        peer: Path | None = None,
    ) -> None:
        self._tmp = None if workdir else tempfile.mkdtemp(prefix="node-ipam-diff-")
        self.workdir = workdir or Path(self._tmp or ".")
        self.peer = peer
        self.cilium_plane = ControlPlane(binaries, dual_stack=True)
        self.our_plane = ControlPlane(binaries, dual_stack=True)
        self.pool = ThreadPoolExecutor(8)
        self.current: str | None = None
        self.cilium: CiliumNodeIpam | None = None
        self.serve: Serve | None = None
        self.version = ""
        self.cilium_api: Api | None = None
        self.our_api: Api | None = None

    def __enter__(self) -> Self:
        try:  # from this thread: the servers die with the thread that started them
            self.cilium_plane.start()
            self.our_plane.start()
            self.cilium_api, self.our_api = Api(self.cilium_plane), Api(self.our_plane)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop_controllers()
        for api in (self.cilium_api, self.our_api):
            if api is not None:
                api.close()
        self.cilium_plane.stop()
        self.our_plane.stop()
        self.pool.shutdown()
        if self._tmp is not None:
            import shutil

            shutil.rmtree(self._tmp, ignore_errors=True)

    def _stop_controllers(self) -> None:
        if self.cilium is not None:
            self.cilium.stop()
            self.cilium = None
        if self.serve is not None:
            self.serve.stop()
            self.serve = None

    def mode(self, mode: str) -> None:
        """Run both controllers with ``--default-lb-service-ipam mode`` (restarts them if
        another mode runs)."""
        if self.current == mode:
            return
        self._stop_controllers()
        self.cilium = CiliumNodeIpam(
            self.cilium_plane, default_lb_service_ipam=mode, workdir=self.workdir, binary=self.peer
        )
        self.serve = Serve(self.our_plane, mode, self.workdir)
        self.cilium.start()  # from this thread, which it dies with
        self.serve.start()
        self.version = self.cilium.version
        self.current = mode

    def run(self, cluster: Cluster, mode: str) -> ClusterResult:
        """Create ``cluster`` on both planes, wait until both controllers are quiet, compare
        every Service, delete the cluster; returns the outcomes."""
        self.mode(mode)
        assert self.cilium is not None and self.serve is not None
        cilium, serve = self.cilium, self.serve
        assert self.cilium_api is not None and self.our_api is not None
        apis = (self.cilium_api, self.our_api)
        started = time.monotonic()
        creates = [self.pool.submit(create, api, cluster, self.pool) for api in apis]
        rejected, rejected_too = (c.result() for c in creates)
        assert rejected == rejected_too, (rejected, rejected_too)
        try:
            kept = [
                s for s in cluster.services if f"Service/{s['metadata']['name']}" not in rejected
            ]
            expected = [
                f"{cluster.namespace}/{s['metadata']['name']}"
                for s in kept
                if cilium_manages(s, mode)
            ]
            waits = [
                self.pool.submit(cilium.wait_quiet, expected),
                self.pool.submit(serve.wait_quiet, cluster.namespace, len(kept)),
            ]
            for waited in waits:
                waited.result()
            outcomes = self._compare(cluster, mode)
        finally:
            deletes = [self.pool.submit(delete, api, cluster, self.pool) for api in apis]
            for deleted in deletes:
                deleted.result()
        return ClusterResult(cluster.seed, mode, outcomes, rejected, time.monotonic() - started)

    def _compare(self, cluster: Cluster, mode: str) -> list[Outcome]:
        namespace = cluster.namespace
        assert self.cilium_api is not None and self.our_api is not None
        held_by_cilium = services(self.cilium_api, namespace)  # one List per server
        held_by_ours = services(self.our_api, namespace)
        theirs, ours = ingress_of(held_by_cilium), ingress_of(held_by_ours)
        fams = families_of(held_by_cilium)
        # serve started from blank statuses on its own server (its creationTimestamps)
        lost = port_ownership_losses(held_by_ours, cilium_candidates(held_by_cilium, mode))
        previewed = preview_dump(self.cilium_plane, namespace, mode, self.workdir)
        outcomes = []
        for name in sorted(theirs):
            c_ips = [e.get("ip", "") for e in theirs[name]]
            s_ips = [e.get("ip", "") for e in ours.get(name, [])]
            item = previewed.get(name)
            p_entries = None if item is None else item["ingress"]
            p_ips = None if p_entries is None else [e["ip"] for e in p_entries]
            problem = ""
            if (p_ips or []) != s_ips:
                problem = f"preview {p_ips} != serve {s_ips}"
            modes = {e.get("ipMode") for e in theirs[name] + ours.get(name, [])}
            if modes - {"VIP"}:
                problem += f" ipMode {sorted(map(str, modes))}"
            rule = classify(c_ips, s_ips, fams.get(name, []), lost.get(name, ()))
            outcomes.append(
                Outcome(
                    f"{namespace}/{name}", fams.get(name, []), c_ips, s_ips, p_ips, rule, problem
                )
            )
        return outcomes

    def shrink(self, cluster: Cluster, mode: str, key: str, *, budget: float = 60.0) -> Cluster:
        """A smaller cluster in which Service ``key`` still differs unexplained: its slices
        and all Nodes first, then Nodes, slices, endpoints and labels removed one by one
        while the difference stays, for at most ``budget`` seconds."""
        name = key.split("/", 1)[1]
        deadline = time.monotonic() + budget

        def still_differs(candidate: Cluster) -> bool:
            result = self.run(candidate, mode)
            return any(o.key == key and (o.rule is None or o.problem) for o in result.outcomes)

        best = cluster.copy()
        best.services = [s for s in best.services if s["metadata"]["name"] == name]
        best.slices = [
            s for s in best.slices if s["metadata"]["labels"]["kubernetes.io/service-name"] == name
        ]
        if not still_differs(best):
            return cluster
        for edit in _edits(best):
            if time.monotonic() > deadline:
                break
            candidate = edit(best.copy())
            if candidate is not None and still_differs(candidate):
                best = candidate
        return best


def _edits(cluster: Cluster) -> Iterator[Any]:
    """Functions ``Cluster -> Cluster | None``, each removing one thing."""
    for i in reversed(range(len(cluster.nodes))):

        def drop_node(c: Cluster, i: int = i) -> Cluster | None:
            if i >= len(c.nodes):
                return None
            name = c.nodes.pop(i)["metadata"]["name"]
            c.deleting = [n for n in c.deleting if n != name]
            return c

        yield drop_node
    for i in reversed(range(len(cluster.slices))):

        def drop_slice(c: Cluster, i: int = i) -> Cluster | None:
            if i >= len(c.slices):
                return None
            c.slices.pop(i)
            return c

        yield drop_slice
    for i, node in enumerate(cluster.nodes):
        for label in sorted(node["metadata"]["labels"]):

            def drop_label(c: Cluster, i: int = i, label: str = label) -> Cluster | None:
                if i >= len(c.nodes) or label not in c.nodes[i]["metadata"]["labels"]:
                    return None
                del c.nodes[i]["metadata"]["labels"][label]
                return c

            yield drop_label
        for j in reversed(range(len(node["status"]["addresses"]))):

            def drop_address(c: Cluster, i: int = i, j: int = j) -> Cluster | None:
                if i >= len(c.nodes) or j >= len(c.nodes[i]["status"]["addresses"]):
                    return None
                c.nodes[i]["status"]["addresses"].pop(j)
                return c

            yield drop_address


def report(result: ClusterResult, outcome: Outcome, shrunk: Cluster | None = None) -> str:
    """The failure text: seed, mode, the Service, both results, the (shrunk) cluster."""
    text = (
        f"unexplained difference, seed {result.seed}, --default-lb-service-ipam {result.mode}:"
        f" {outcome.key} (ipFamilies {outcome.families})\n  cilium:  {outcome.cilium}\n"
        f"  serve:   {outcome.serve}\n  preview: {outcome.preview}\n  {outcome.problem}\n"
        f"rerun: python -m bench.bench_differential --seeds {result.seed} --mode {result.mode}\n"
    )
    if shrunk is not None:
        objects = shrunk.nodes + shrunk.slices + shrunk.services
        text += "shrunk cluster:\n" + yaml.safe_dump_all(objects, sort_keys=False)
    return text


def counts(results: Sequence[ClusterResult]) -> Counter[str]:
    """Outcomes per rule (``identical`` included; ``unexplained`` for the rest)."""
    tally: Counter[str] = Counter()
    for result in results:
        for outcome in result.outcomes:
            tally[outcome.rule if outcome.rule and not outcome.problem else "unexplained"] += 1
    return tally
