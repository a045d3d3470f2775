"""Cilium's controller beside ours on one real API server: ``python -m bench.bench_peer``.

At each size (``--sizes``, Nodes; two managed Services per Node and ``--unmanaged-fraction``
of the Node count unmanaged ones: :func:`bench.cluster.make_cluster`) ONE kube-apiserver
v1.35 + etcd (:func:`bench.realapi.start_realapi`) is seeded once; then Cilium v1.20.2's
Node IPAM controller (:class:`tests.peers.cilium.peer.CiliumNodeIpam`, started as
cilium-operator runs it: ``--default-lb-service-ipam lbipam``, client QPS 100 / burst 200)
runs every phase below, then ours (``node-ipam-lb serve``, :func:`bench.procs.start_serve`)
does, each from blank statuses: between the two every managed Service's
``status.loadBalancer`` is cleared (parallel merge PATCHes of ``services/status``) and a
List checks it. Per controller:

1. cold start: wall time from the process start until every managed Service holds its
   expected ingress (a watch on Services started before the controller, a subclass of
   :class:`bench.realapi.IngressWatch`) and until quiet (ours:
   :func:`bench.bench_cold_start.wait_quiet` on serve's ``/metrics``; Cilium:
   :meth:`CiliumNodeIpam.wait_quiet`: its services/status requests still for 1 s); the
   controller's CPU (``utime + stime``) at both moments, its peak RSS (``VmHWM``), the API
   server's requests by verb and resource (``apiserver_request_total``, scraped before and
   after, never polled) and the CPU of kube-apiserver and etcd;
2. restart on the synced cluster: a new process, the same figures (ours: 0 status writes);
3. steady state for ``--steady-seconds``: each Node's status PATCHed as kubelet reports it
   (``nodeStatusReportFrequency`` 5 min, spread evenly over the window; a shorter window
   sends the share of the Nodes that keeps kubelet's per-Node rate, a longer one sends each
   Node more than once), bumping every condition's ``lastHeartbeatTime``; 1% of the
   reports (at least one) also toggle ``MemoryPressure`` or ``DiskPressure``, which neither
   controller reads (docs/design.md §4.2, §5 "Triggers"; Cilium's predicates,
   docs/reference/cilium-node-ipam.md §5). Status writes, controller CPU, API server CPU;
4. churn, ``--churn`` changes of each kind, one at a time, each written once the previous
   one converged: (a) the exclusion label on, then off, a Node; (b) a Node's IPv4
   InternalIP; (c) a ready endpoint added to, then removed from, a Local Service's
   EndpointSlice; (d) a rollout: a Local Service's endpoints replaced by endpoints on other
   Nodes. The expected ingress is recomputed on an in-memory copy of the cluster kept in
   step with the server (:func:`plan_churn`); the time runs from the PATCH until the watch
   sees every affected Service hold its new ingress. Per kind: p50/p99 and the status
   writes between one change and the next;
5. admission (ours only): AdmissionReviews (:func:`bench.bench_admission.admission_review`)
   POSTed to serve's ``/validate`` over TLS at ``--admission-rate`` per second from a
   separate process, during the cold start (latency from the first answer; connections
   refused before the listener is up are counted apart) and during the churn.

Every phase ends with a List checking every managed status and counting unmanaged
Services with an ingress, for both controllers. Ours must hold exactly
:func:`bench.cluster.expected_ingress`; Cilium's own value is what it writes where that
differs from ours only as docs/design.md §4.8 explains
(:func:`tests.peers.cilium.differential.classify`: ``family-numeric-order``,
``canonical-addresses``), counted per rule; anything else is unexplained, printed, and
makes the exit status 1 (as does a phase that did not converge within ``--cap``, whose
controller's later phases at that size are then skipped).

Requests "made by the controller": every ``apiserver_request_total`` increment between
the scrape just before the controller starts and the scrape just after the last expected
status arrived. The bench's own requests are kept out of that window, not subtracted: its
List and watch on Services start before the first scrape and the watch stays open past
the second (the server counts a request when it ends), and it sends nothing else
meanwhile. The API server's own loopback requests are not the controller's but are left
in (idle, 30 s held 3 each of ``update leases``, ``get endpoints``, ``create endpoints``:
0.3 per second); the breakdown by verb and resource shows them. The controller's watches, still
open, are not counted yet: ours has three; Cilium's client (client-go v0.36,
``WatchListClient`` on by default) streams even its initial lists as watches, so its
figure holds no ``list`` at all.

Targets (printed beside the figures, not asserted): 1,000 Nodes: ours every status written
≤ 6 s after start; ours/Cilium cold-start CPU ≤ 0.1 and wall ≤ 0.1; ours steady-state
status writes 0; ours churn p99 ≤ 1 s. 5,000 Nodes: ours written ≤ 20 s, serve CPU until
quiet ≤ 8 s, API requests by the controller before the last status is written ≤ 1.1 per
managed Service. Admission p99 ≤ 50 ms over TLS.

A default run (``--sizes 1000,5000``, 300 s steady, 20 changes of each kind) takes about
1.5 hours on 2 cores: seeding 5,000 Nodes takes 4-7 minutes, and most of the rest is
Cilium at 5,000 Nodes, whose every Node change requeues all 10,000 Services at 100
requests/s. ``--plot FILE.png`` draws both controllers' cold start (wall time until
written, CPU until quiet) against Nodes; ``--profile`` runs py-spy on serve during its
cold start; ``--workdir DIR`` keeps every log.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from app.core.options import MATCH_NODE_LABELS_ANNOTATION
from app.core.selector import SelectorError, parse_cached
from app.core.views import EXCLUDE_FROM_LB_LABEL
from bench.bench_admission import admission_review
from bench.bench_cold_start import SERVICES, columns, status_ingress, wait_quiet
from bench.cluster import (
    Cluster,
    Scale,
    expected_ingress,
    is_edge_pool,
    make_cluster,
    node_name,
    pool_of,
    service_key,
)
from bench.procs import (
    Process,
    Serve,
    cpu_seconds,
    machine,
    memory_mb,
    python,
    start_serve,
    trusting,
)
from bench.profile import PySpy, summary
from bench.realapi import SEED_PARALLEL, IngressWatch, RealApi, start_realapi
from tests.fakeapi.patch import merge_patch
from tests.peers.cilium.differential import IDENTICAL, cilium_manages, classify
from tests.peers.cilium.peer import CiliumNodeIpam, PeerError
from tests.support.waiting import wait_for

Obj = dict[str, Any]
Entry = dict[str, str]
Judge = Callable[
    [Sequence[Mapping[str, str]], Sequence[Mapping[str, str]], Sequence[str]], str | None
]
"""``(stored entries, our expected entries, spec.ipFamilies) -> rule or None``: the name
of what makes a stored status right (``"identical"`` or a docs/design.md §4.8 rule), or
``None`` when it is wrong."""

CONTROLLERS = ("cilium", "ours")
"""``--controllers`` values, in the order they run."""
CILIUM_MODE = "lbipam"
"""``--default-lb-service-ipam`` of Cilium's controller (cilium-operator's default)."""
WRITE_KEYS = ("update services/status", "patch services/status")
"""Status writes: Cilium sends ``Status().Update`` (PUT), ours a merge PATCH."""
REPORT_FREQUENCY = 300.0
"""kubelet's ``nodeStatusReportFrequency`` (5 min): how often a Node's status is PATCHed
when nothing changes."""
CHANGED_FRACTION = 0.01
"""Share of the steady-state reports that also change a condition."""
PRESSURE = {
    "MemoryPressure": ("KubeletHasSufficientMemory", "KubeletHasInsufficientMemory"),
    "DiskPressure": ("KubeletHasNoDiskPressure", "KubeletHasDiskPressure"),
}
"""The conditions the steady state toggles (reason when ``False``, when ``True``): no
controller's selection reads them."""
KINDS = {
    "exclusion": "(a) exclusion label on/off",
    "internal-ip": "(b) InternalIP changed",
    "scale": "(c) Local endpoint added/removed",
    "rollout": "(d) Local rollout",
}
"""Churn kinds, in the order they run, with their printed names."""
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
PROBE_COMMAND = "probe-admission"
"""First argument that makes ``main`` the admission prober (the separate process)."""
ADMISSION_RATE = 20.0
"""Default AdmissionReviews per second."""
UNSET = float("nan")
"""A figure that was not taken (printed ``nan``)."""


def say(text: str) -> None:
    """Print one line at once (progress of a long run)."""
    print(text, flush=True)


# -- pure helpers -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0 < ``q`` ≤ 100) of ``values`` by nearest rank (the
    smallest value with at least ``q``% of the values at or below it).

    Raises:
        ValueError: ``values`` is empty or ``q`` is out of range.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q}: expected 0 < q <= 100")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class Report(NamedTuple):
    """One Node status report of the steady state: ``offset`` seconds into the window,
    Node ``node`` (its index), ``toggle`` the condition it also flips (``None``: only the
    heartbeat)."""

    offset: float
    node: int
    toggle: str | None


def report_count(nodes: int, seconds: float, *, frequency: float = REPORT_FREQUENCY) -> int:
    """How many Node status reports a window of ``seconds`` holds at kubelet's rate (each
    of ``nodes`` Nodes once per ``frequency`` seconds), rounded up, at least one."""
    return max(1, math.ceil(nodes * seconds / frequency - 1e-9))


def report_schedule(
    nodes: int,
    seconds: float,
    *,
    frequency: float = REPORT_FREQUENCY,
    fraction: float = CHANGED_FRACTION,
) -> list[Report]:
    """The steady state's reports, evenly spread over ``seconds`` (offsets ``i * seconds /
    count``, :func:`report_count` of them). A window shorter than ``frequency`` sends the
    share of the Nodes that keeps kubelet's per-Node rate, spread over the cluster (a 60 s
    window: every fifth Node); a longer one sends every Node in turn, each again
    ``frequency`` seconds later. ``fraction`` of the reports (rounded, at least one) also
    toggle a condition, evenly spaced, alternating the keys of :data:`PRESSURE`.

    Raises:
        ValueError: ``nodes`` < 1 or ``seconds`` ≤ 0.
    """
    if nodes < 1 or seconds <= 0:
        raise ValueError(f"no reports for {nodes} Nodes over {seconds} s")
    count = report_count(nodes, seconds, frequency=frequency)
    changed = min(count, max(1, round(count * fraction)))
    kinds = list(PRESSURE)
    reports = []
    for i in range(count):
        node = int((i + 0.5) * nodes / count) if count <= nodes else i % nodes
        flips = (i + 1) * changed // count - i * changed // count
        toggle = kinds[(i * changed // count) % len(kinds)] if flips else None
        reports.append(Report(offset=i * seconds / count, node=node, toggle=toggle))
    return reports


def report_body(node: Mapping[str, Any], beat: str, toggle: str | None = None) -> Obj:
    """The merge patch of Node ``node``'s status that kubelet's report sends: every
    condition as stored with ``lastHeartbeatTime`` ``beat``; ``toggle`` (a key of
    :data:`PRESSURE`) also flips that condition's status, reason and message, with
    ``lastTransitionTime`` ``beat``.

    Raises:
        KeyError: ``toggle`` is not a key of :data:`PRESSURE`.
    """
    reasons = PRESSURE[toggle] if toggle is not None else None
    conditions = []
    for condition in node["status"]["conditions"]:
        updated = {**condition, "lastHeartbeatTime": beat}
        if reasons is not None and condition["type"] == toggle:
            status = "False" if condition["status"] == "True" else "True"
            reason = reasons[status == "True"]
            updated |= {
                "status": status,
                "reason": reason,
                "message": f"kubelet: {reason}",
                "lastTransitionTime": beat,
            }
        conditions.append(updated)
    return {"status": {"conditions": conditions}}


# -- the churn plan -----------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One churn change: ``kind`` (a key of :data:`KINDS`), ``what`` for the log, the
    merge patch ``body`` sent to ``path``, the in-memory object it patches (``target``:
    ``("nodes" | "endpoint_slices", index)``) and ``updates``, the new expected ingress
    of every Service whose expected ingress it changes."""

    kind: str
    what: str
    path: str
    body: Obj
    target: tuple[str, int]
    updates: dict[str, list[Entry]]


def apply_change(cluster: Cluster, target: tuple[str, int], body: Obj) -> None:
    """Apply the JSON merge patch ``body`` to the in-memory object ``target`` of
    ``cluster`` (``("nodes" | "endpoint_slices", index)``), as the server applies it
    (:func:`tests.fakeapi.patch.merge_patch`)."""
    objects: list[Obj] = getattr(cluster, target[0])
    objects[target[1]] = merge_patch(objects[target[1]], body)


def slice_service_key(endpoint_slice: Mapping[str, Any]) -> str:
    """``namespace/<kubernetes.io/service-name>`` of an EndpointSlice."""
    meta = endpoint_slice["metadata"]
    return f"{meta['namespace']}/{meta['labels'][SERVICE_NAME_LABEL]}"


def node_candidates(
    cluster: Cluster, name: str, label_sets: Iterable[Mapping[str, str]], managed: Iterable[str]
) -> set[str]:
    """The ``managed`` Services whose ingress a change of Node ``name`` can alter, a
    superset decided here (not by the controller's trigger code): the non-Local ones whose
    selector matches one of ``label_sets`` (the Node's labels before and after; no
    annotation or one that does not parse counts as a match), and the Local ones with an
    endpoint on that Node."""
    wanted = set(managed)
    labels = list(label_sets)
    keys = set()
    for service in cluster.services:
        key = service_key(service)
        if key not in wanted or service["spec"].get("externalTrafficPolicy") == "Local":
            continue
        text = (service["metadata"].get("annotations") or {}).get(MATCH_NODE_LABELS_ANNOTATION)
        try:
            matches = text is None or any(parse_cached(text).matches(one) for one in labels)
        except SelectorError:
            matches = True
        if matches:
            keys.add(key)
    for endpoint_slice in cluster.endpoint_slices:
        key = slice_service_key(endpoint_slice)
        if key in wanted and any(e.get("nodeName") == name for e in endpoint_slice["endpoints"]):
            keys.add(key)
    return keys


def recompute(cluster: Cluster, keys: Iterable[str]) -> dict[str, list[Entry]]:
    """:func:`bench.cluster.expected_ingress` of the Services ``keys`` only (with every
    Node and their EndpointSlices)."""
    wanted = set(keys)
    part = Cluster(
        nodes=cluster.nodes,
        services=[s for s in cluster.services if service_key(s) in wanted],
        endpoint_slices=[s for s in cluster.endpoint_slices if slice_service_key(s) in wanted],
    )
    return expected_ingress(part)


TRIES = 12
"""Candidate changes tried for one churn change before one that moves no Service's
ingress is taken anyway (e.g. a Node added to a Local Service whose Nodes' ExternalIPs
hide its InternalIPs, docs/design.md §4.4)."""


class _Proposal(NamedTuple):
    what: str
    path: str
    body: Obj
    target: tuple[str, int]
    candidates: set[str]
    accepted: Callable[[], None]


class _Planner:
    """Makes the churn changes on ``work`` (a copy of the cluster), one at a time: each
    kind's method yields candidate changes, :meth:`accept` takes the first that moves
    some Service's expected ingress."""

    def __init__(self, work: Cluster, scale: Scale, expected: Mapping[str, list[Entry]]) -> None:
        self.work, self.scale = work, scale
        self.current = dict(expected)
        self.used: dict[str, set[int]] = {kind: set() for kind in KINDS}
        self.excluded: int | None = None
        self.added: tuple[int, str] | None = None
        self.ips = {
            a["address"]
            for node in work.nodes
            for a in node["status"]["addresses"]
            if a["type"] == "InternalIP"
        }
        self.ip_counter = 0
        self.locals = sorted(
            i for i, s in enumerate(work.endpoint_slices) if slice_service_key(s) in self.current
        )

    def edge(self, index: int) -> bool:
        """Node ``index`` is in an edge pool (it has ExternalIPs)."""
        return is_edge_pool(pool_of(index, self.scale), self.scale)

    def nodes(self, kind: str, skip: Iterable[int] = (), *, edge: bool = False) -> list[int]:
        """Eligible Nodes (no exclusion label, no taint) not in ``skip``, in
        :func:`bench.cluster.pick_node`'s order, those of non-edge pools first (``edge``:
        last) and the ones ``kind`` changed already after all others."""
        skipped, used, n = set(skip), self.used[kind], self.scale.nodes
        eligible = [
            i
            for i in [*range(n // 2, n), *range(n // 2)]
            if i not in skipped
            and EXCLUDE_FROM_LB_LABEL not in self.work.nodes[i]["metadata"]["labels"]
            and "taints" not in self.work.nodes[i]["spec"]
        ]
        return sorted(eligible, key=lambda i: (i in used, self.edge(i) != edge))

    def node_change(
        self, index: int, path: str, body: Obj, what: str, accepted: Callable[[], None]
    ) -> _Proposal:
        before = self.work.nodes[index]["metadata"]["labels"]
        after = merge_patch(self.work.nodes[index], body)["metadata"]["labels"]
        keys = node_candidates(self.work, node_name(index), [before, after], self.current)
        return _Proposal(what, path, body, ("nodes", index), keys, accepted)

    def exclusion(self, j: int) -> Iterator[_Proposal]:
        def on(index: int) -> None:
            self.excluded = index
            self.used["exclusion"].add(index)

        def off() -> None:
            self.excluded = None

        if j % 2 == 1 and self.excluded is not None:
            index = self.excluded
            body: Obj = {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: None}}}
            what = f"{node_name(index)} exclusion label off"
            yield self.node_change(index, f"/api/v1/nodes/{node_name(index)}", body, what, off)
            return
        for index in self.nodes("exclusion"):
            body = {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}}
            what = f"{node_name(index)} exclusion label on"
            path = f"/api/v1/nodes/{node_name(index)}"
            yield self.node_change(index, path, body, what, partial(on, index))

    def new_ip(self) -> str:
        """An IPv4 address no Node has had (10.200.0.0/16 upwards)."""
        while True:
            self.ip_counter += 1
            n = self.ip_counter
            ip = f"10.{200 + n // 64516}.{n // 254 % 254 + 1}.{n % 254 + 1}"
            if ip not in self.ips:
                return ip

    def internal_ip(self, _j: int) -> Iterator[_Proposal]:
        def moved(index: int, ip: str) -> None:
            self.ips.add(ip)
            self.used["internal-ip"].add(index)

        for index in self.nodes("internal-ip"):
            ip = self.new_ip()
            addresses = [
                {**a, "address": ip} if a["type"] == "InternalIP" and ":" not in a["address"] else a
                for a in self.work.nodes[index]["status"]["addresses"]
            ]
            name = node_name(index)
            body = {"status": {"addresses": addresses}}
            path = f"/api/v1/nodes/{name}/status"
            yield self.node_change(
                index, path, body, f"{name} IPv4 {ip}", partial(moved, index, ip)
            )

    def slice_change(
        self, position: int, endpoints: list[Obj], what: str, accepted: Callable[[], None]
    ) -> _Proposal:
        meta = self.work.endpoint_slices[position]["metadata"]
        path = (
            f"/apis/discovery.k8s.io/v1/namespaces/{meta['namespace']}"
            f"/endpointslices/{meta['name']}"
        )
        key = slice_service_key(self.work.endpoint_slices[position])
        body = {"endpoints": endpoints}
        target = ("endpoint_slices", position)
        return _Proposal(f"{key}: {what}", path, body, target, {key}, accepted)

    def hosts(self, position: int) -> set[int]:
        """Indexes of the Nodes the EndpointSlice at ``position`` has endpoints on."""
        return {
            int(e["nodeName"].rsplit("-", 1)[1])
            for e in self.work.endpoint_slices[position]["endpoints"]
        }

    def scale_endpoints(self, j: int) -> Iterator[_Proposal]:
        def removed() -> None:
            self.added = None

        def added(position: int, index: int, pod: str) -> None:
            self.added = (position, pod)
            self.used["scale"].add(index)

        if j % 2 == 1 and self.added is not None:
            position, pod = self.added
            endpoints = self.work.endpoint_slices[position]["endpoints"]
            kept = [e for e in endpoints if e["targetRef"]["name"] != pod]
            yield self.slice_change(position, kept, f"ready endpoint {pod} removed", removed)
            return
        position = self.locals[(j // 2) % len(self.locals)]
        endpoints = self.work.endpoint_slices[position]["endpoints"]
        template = next((e for e in endpoints if e["conditions"].get("ready")), endpoints[0])
        pod = f"{template['targetRef']['name']}-s{j}"
        # A ready endpoint on a Node with ExternalIPs hides every InternalIP (§4.4): add on
        # such a Node then, or the Service's ingress would not move.
        ready = [e for e in endpoints if e["conditions"].get("ready") is not False]
        edge = any(self.edge(int(e["nodeName"].rsplit("-", 1)[1])) for e in ready)
        for index in self.nodes("scale", skip=self.hosts(position), edge=edge):
            grown = [*endpoints, moved_endpoint(template, index, pod, ready=True)]
            what = f"ready endpoint {pod} on {node_name(index)} added"
            yield self.slice_change(position, grown, what, partial(added, position, index, pod))

    def rollout(self, j: int) -> Iterator[_Proposal]:
        def moved(indexes: list[int]) -> None:
            self.used["rollout"].update(indexes)

        position = self.locals[len(self.locals) - 1 - j % len(self.locals)]
        endpoints = self.work.endpoint_slices[position]["endpoints"]
        choices = self.nodes("rollout", skip=self.hosts(position))
        for first in range(0, len(choices) - len(endpoints) + 1, len(endpoints)):
            indexes = choices[first : first + len(endpoints)]
            replaced = [
                moved_endpoint(e, index, f"{e['targetRef']['name'].rsplit('-', 1)[0]}-r{j}x{i}")
                for i, (e, index) in enumerate(zip(endpoints, indexes, strict=True))
            ]
            what = f"rollout {j}: endpoints moved to {', '.join(map(node_name, indexes))}"
            yield self.slice_change(position, replaced, what, partial(moved, indexes))

    def effect(self, proposal: _Proposal) -> dict[str, list[Entry]]:
        """The expected ingress ``proposal`` would change (tried on the copy, undone)."""
        objects: list[Obj] = getattr(self.work, proposal.target[0])
        saved = objects[proposal.target[1]]
        apply_change(self.work, proposal.target, proposal.body)
        try:
            fresh = recompute(self.work, proposal.candidates)
        finally:
            objects[proposal.target[1]] = saved
        return {k: v for k, v in fresh.items() if self.current.get(k) != v}

    def accept(self, kind: str, proposals: Iterable[_Proposal]) -> Change:
        """The first of ``proposals`` (at most :data:`TRIES`) that moves some Service's
        expected ingress, else the first one; applied to the copy.

        Raises:
            ValueError: no proposal at all (no eligible Node).
        """
        chosen: tuple[_Proposal, dict[str, list[Entry]]] | None = None
        for proposal in itertools.islice(proposals, TRIES):
            updates = self.effect(proposal)
            if chosen is None or (updates and not chosen[1]):
                chosen = (proposal, updates)
            if updates:
                break
        if chosen is None:
            raise ValueError(f"no {kind} change to make: no eligible Node")
        proposal, updates = chosen
        apply_change(self.work, proposal.target, proposal.body)
        self.current.update(updates)
        proposal.accepted()
        return Change(kind, proposal.what, proposal.path, proposal.body, proposal.target, updates)


def moved_endpoint(
    endpoint: Mapping[str, Any], node: int, pod: str, *, ready: bool | None = None
) -> Obj:
    """``endpoint`` (an EndpointSlice endpoint) as Pod ``pod`` on Node ``node`` (its index):
    its address, ``nodeName``, ``zone`` and ``targetRef.name`` replaced; ``ready`` sets
    ``conditions.ready`` (``None``: kept)."""
    conditions = dict(endpoint["conditions"])
    if ready is not None:
        conditions["ready"] = ready
    return {
        **endpoint,
        "addresses": [f"10.245.{node // 256 % 256}.{node % 256}"],
        "conditions": conditions,
        "nodeName": node_name(node),
        "zone": f"zone-{node % 10}",
        "targetRef": {**endpoint["targetRef"], "name": pod},
    }


def plan_churn(
    cluster: Cluster, expected: Mapping[str, list[Entry]], scale: Scale, count: int
) -> list[Change]:
    """``count`` changes of each kind of :data:`KINDS` (in that order) starting from
    ``cluster`` (not changed: the plan is made on a copy), whose expected ingress is
    ``expected``. Each change's ``updates`` come from :func:`recompute` of the Services it
    can affect on the copy with the changes before it applied, so applying the changes in
    order to ``cluster`` (:func:`apply_change`) keeps ``expected`` + ``updates`` equal to
    :func:`bench.cluster.expected_ingress`. Node changes pick eligible Nodes, those of
    non-edge pools first; endpoint changes go to the Local Services; of the candidates for
    one change the first that moves some Service's ingress is taken (:data:`TRIES`).

    Raises:
        ValueError: the cluster has no eligible Node, or no Local Service while
            ``count`` > 0.
    """
    planner = _Planner(copy.deepcopy(cluster), scale, expected)
    if count > 0 and not planner.locals:
        raise ValueError("no Local Service with an EndpointSlice to churn")
    makers: dict[str, Callable[[int], Iterator[_Proposal]]] = {
        "exclusion": planner.exclusion,
        "internal-ip": planner.internal_ip,
        "scale": planner.scale_endpoints,
        "rollout": planner.rollout,
    }
    return [planner.accept(kind, makers[kind](j)) for kind in KINDS for j in range(count)]


# -- judging statuses ---------------------------------------------------------------------


def judge_ours(
    stored: Sequence[Mapping[str, str]],
    expected: Sequence[Mapping[str, str]],
    _families: Sequence[str] = (),
) -> str | None:
    """``"identical"`` when ``stored`` is exactly ``expected`` (ours writes
    :func:`bench.cluster.expected_ingress`, ``ipMode`` included), else ``None``."""
    return IDENTICAL if list(stored) == list(expected) else None


def judge_cilium(
    stored: Sequence[Mapping[str, str]],
    expected: Sequence[Mapping[str, str]],
    families: Sequence[str] = (),
) -> str | None:
    """What makes Cilium's ``stored`` entries right against our ``expected`` ones:
    :func:`tests.peers.cilium.differential.classify` of the IPs (``"identical"`` or the
    docs/design.md §4.8 rule that explains the difference) when every stored entry has
    ``ipMode: VIP`` (the API server's default; Cilium writes none), else ``None``."""
    if any(entry.get("ipMode") != "VIP" for entry in stored):
        return None
    return classify(
        [entry.get("ip", "") for entry in stored],
        [entry["ip"] for entry in expected],
        families,
    )


@dataclass
class Verification:
    """One List of every Service judged: ``rules`` counts the managed Services by what
    made them right, ``wrong`` the managed keys that are not (nor explained), and
    ``unmanaged_written`` the other Services holding an ingress."""

    managed: int
    rules: Counter[str]
    wrong: list[str]
    unmanaged_written: int

    @property
    def right(self) -> int:
        """Managed Services whose status is right."""
        return self.managed - len(self.wrong)

    @property
    def ok(self) -> bool:
        """Every managed status right and no unmanaged Service written."""
        return not self.wrong and self.unmanaged_written == 0

    def text(self, *, converged: bool = True) -> str:
        """One line: right of managed, per rule, unmanaged with an ingress, the first wrong
        keys (``converged`` False: named as not right yet, not as unexplained)."""
        rules = ", ".join(f"{rule} {n}" for rule, n in sorted(self.rules.items()))
        line = (
            f"{self.right}/{self.managed} managed statuses right ({rules or 'none'});"
            f" {self.unmanaged_written} unmanaged Services with an ingress"
        )
        if self.wrong:
            what = "WRONG (unexplained)" if converged else "not right yet"
            line += f"; {what}: {self.wrong[:5]}"
        return line


def verify(
    api: RealApi,
    expected: Mapping[str, list[Entry]],
    families: Mapping[str, Sequence[str]],
    judge: Judge,
) -> Verification:
    """List every Service (pages of 500) and judge each managed one's stored ingress
    against ``expected`` with ``judge``; count the unmanaged ones holding an ingress."""
    items, _ = api.list_all(SERVICES)
    stored = {service_key(obj): status_ingress(obj) or [] for obj in items}
    rules: Counter[str] = Counter()
    wrong = []
    for key, want in expected.items():
        rule = judge(stored[key], want, families.get(key, ())) if key in stored else None
        if rule is None:
            wrong.append(key)
        else:
            rules[rule] += 1
    unmanaged = sum(1 for key, got in stored.items() if got and key not in expected)
    return Verification(len(expected), rules, wrong, unmanaged)


def status_path(key: str) -> str:
    """``/api/v1/namespaces/<ns>/services/<name>/status`` of Service ``namespace/name``."""
    namespace, name = key.split("/", 1)
    return f"/api/v1/namespaces/{namespace}/services/{name}/status"


CLEAR = {"status": {"loadBalancer": {"ingress": None}}}
"""The merge patch that clears a status: ``{"loadBalancer": {}}`` would merge nothing
(RFC 7396), ``"ingress": null`` removes the list."""


def clear_statuses(api: RealApi, keys: Iterable[str], *, parallel: int = SEED_PARALLEL) -> int:
    """Merge-PATCH :data:`CLEAR` onto the status of every Service in ``keys``,
    ``parallel`` at a time (as :meth:`RealApi.seed`); returns how many were patched.

    Raises:
        httpx.HTTPStatusError: a PATCH failed.
    """
    paths = [status_path(key) for key in keys]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(api.patch, path, CLEAR) for path in paths]:
            future.result()
    return len(paths)


def blank_statuses(api: RealApi, managed: Iterable[str]) -> str:
    """Make every ``managed`` Service's status blank: a List; if any holds an ingress,
    clear them all (:func:`clear_statuses`) and List again. Returns what was done.

    Raises:
        RuntimeError: a Service still holds an ingress after the clearing.
    """
    keys = set(managed)

    def holding() -> list[str]:
        items, _ = api.list_all(SERVICES)
        return [service_key(o) for o in items if status_ingress(o) and service_key(o) in keys]

    if not holding():
        return "every managed status blank (checked by a List)"
    started = time.perf_counter()
    cleared = clear_statuses(api, sorted(keys))
    left = holding()
    if left:
        raise RuntimeError(f"{len(left)} statuses still hold an ingress after clearing: {left[:5]}")
    return (
        f"{cleared} managed statuses cleared in {time.perf_counter() - started:.1f} s"
        " (checked by a List)"
    )


# -- the watch ----------------------------------------------------------------------------


class StatusWatch(IngressWatch):
    """:class:`bench.realapi.IngressWatch` extended: one watch on every Service (from a
    List, so what was written before it started counts) that follows them until
    :meth:`close`, judges each managed one with a controller's :data:`Judge`, and waits
    for one target after another: every managed Service at first, then each churn
    change's affected ones (:meth:`target`).

    The parent's List and stream loop are used as they are; ``_observe`` (called for each
    listed Service and each ADDED/MODIFIED event) is overridden to keep every Service's
    ingress and when it last changed. The parent is handed one marker key that never
    appears, so its loop, which ends once nothing is pending, follows until the stream
    ends (``timeout`` + 60 s) or :meth:`close`.
    """

    _MARKER = "\x00following"

    def __init__(
        self,
        api: RealApi,
        expected: Mapping[str, list[Entry]],
        families: Mapping[str, Sequence[str]],
        judge: Judge,
        *,
        timeout: float,
    ) -> None:
        self.expected = dict(expected)
        self._families = families
        self._judge = judge
        self._cond = threading.Condition()
        self._stored: dict[str, list[Entry]] = {}
        self._changed_at: dict[str, float] = {}
        self._targets: set[str] = set()
        self._wrong: set[str] = set()
        self._met_at: float | None = None
        super().__init__(api, {self._MARKER: [{"ip": ""}]}, timeout=timeout)
        self.target(self.expected)

    def _right(self, key: str) -> bool:
        stored = self._stored.get(key, [])
        return self._judge(stored, self.expected[key], self._families.get(key, ())) is not None

    def _observe(self, obj: Mapping[str, Any]) -> None:
        key, now = service_key(obj), time.monotonic()
        ingress = status_ingress(obj) or []
        with self._cond:
            if self._stored.get(key) != ingress:
                self._stored[key] = ingress
                self._changed_at[key] = now
            if key not in self._targets:
                return
            if self._right(key):
                if key in self._wrong:
                    self._wrong.discard(key)
                    if not self._wrong:
                        self._met_at = now
                        self._cond.notify_all()
            else:
                self._wrong.add(key)
                self._met_at = None

    def target(self, updates: Mapping[str, list[Entry]]) -> None:
        """Wait for ``updates`` next: their expected ingress replaces the old one, and
        :meth:`wait` returns once each of them holds it (at once if they all do)."""
        with self._cond:
            self.expected.update(updates)
            self._targets = set(updates)
            self._wrong = {key for key in self._targets if not self._right(key)}
            self._met_at = None if self._wrong else time.monotonic()

    def wait(self, timeout: float, *, alive: Callable[[], None] = lambda: None) -> float:
        """Monotonic time the last Service of the current target became right (the watch
        event's arrival). ``alive`` is called about once a second (it raises when the
        controller died).

        Raises:
            TimeoutError: not every target right within ``timeout`` seconds.
            RuntimeError: the watch ended (the server's message).
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if self._met_at is not None and not self._wrong:
                    return self._met_at
                if self._finished.is_set():
                    raise RuntimeError(f"watch on Services ended: {self._error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    right, of = self.progress()
                    raise TimeoutError(f"{right} of {of} statuses right after {timeout:.0f} s")
                self._cond.wait(min(left, 1.0))
            alive()

    def progress(self) -> tuple[int, int]:
        """``(target Services right now, target Services)``."""
        with self._cond:
            return len(self._targets) - len(self._wrong), len(self._targets)

    def changed_since(self, since: float) -> set[str]:
        """Keys of the Services whose ingress changed at or after monotonic ``since``."""
        with self._cond:
            return {key for key, at in self._changed_at.items() if at >= since}


# -- admission prober (the separate process) ----------------------------------------------


def probe_admission(aim: Path, rate: float, out: Path, *, wait: float = 3600.0) -> None:
    """Wait (up to ``wait`` s) for the file ``aim`` (JSON ``{"url", "ca"}``, written by
    :meth:`Prober.aim`), then POST :func:`bench.bench_admission.admission_review` to
    ``url`` ``rate`` times per second (one kept-alive TLS connection trusting ``ca``; no
    burst to catch up) until killed; one JSON line per request to ``out`` (flushed):
    ``t`` (monotonic start, s), ``ms`` (latency, ``null`` without an answer) and
    ``outcome`` (``allowed``, ``denied``, ``http-<status>``, ``refused``: connection
    refused, ``error:<type>``). ``out`` is created first, once the imports are done: the
    bench starts ``serve`` after that and then aims it, so the prober's own start-up
    (~1 s of CPU) is not in ``serve``'s cold start.

    Raises:
        TimeoutError: ``aim`` did not appear in time.
    """
    out.touch()  # started: the bench waits for this before it starts serve
    wait_for(str(aim), aim.exists, timeout=wait, interval=0.01)
    target = json.loads(aim.read_text())
    url, ca = target["url"], Path(target["ca"])
    body = json.dumps(admission_review(), separators=(",", ":")).encode()
    uid = admission_review()["request"]["uid"]
    headers = {"Content-Type": "application/json"}
    period, next_at = 1.0 / rate, time.monotonic()
    # TCP_NODELAY, as Go's net/http (kube-apiserver's webhook client) sets it.
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.HTTPTransport(verify=trusting(ca), socket_options=nodelay)
    with (
        httpx.Client(transport=transport, timeout=10.0) as client,
        out.open("a", buffering=1) as log,
    ):
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            started = time.monotonic()
            ms: float | None = None
            try:
                response = client.post(url, content=body, headers=headers)
                ms = (time.monotonic() - started) * 1000
                outcome = f"http-{response.status_code}"
                if response.status_code == 200:
                    answer = response.json().get("response") or {}
                    allowed = answer.get("uid") == uid and answer.get("allowed") is True
                    outcome = "allowed" if allowed else "denied"
            except httpx.ConnectError:
                outcome = "refused"
            except (httpx.HTTPError, ValueError) as err:
                outcome = f"error:{type(err).__name__}"
            log.write(json.dumps({"t": started, "ms": ms, "outcome": outcome}) + "\n")
            next_at = max(next_at + period, time.monotonic())


@dataclass
class AdmissionWindow:
    """The prober's requests in one window: ``latencies_ms`` of the answers (from the
    first answer on), ``outcomes`` counted, ``refused`` connections refused before the
    first answer (the listener not up yet), ``first_answer`` monotonic time of it."""

    latencies_ms: list[float]
    outcomes: Counter[str]
    refused: int
    first_answer: float | None

    @property
    def answered(self) -> int:
        """Requests that got an HTTP answer."""
        return len(self.latencies_ms)

    @property
    def allowed(self) -> int:
        """Answers that allowed the review (echoing its uid)."""
        return self.outcomes.get("allowed", 0)

    def text(self) -> str:
        """One line: count, p50/p99/max, outcomes, refused before the first answer."""
        if not self.latencies_ms:
            return f"no answer ({dict(self.outcomes)}; {self.refused} refused)"
        lat = self.latencies_ms
        return (
            f"{self.answered} answered: p50 {percentile(lat, 50):.1f} ms, p99"
            f" {percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms (target p99 <= 50 ms);"
            f" {dict(sorted(self.outcomes.items()))}; {self.refused} refused before the"
            " listener was up"
        )


def read_probes(path: Path) -> AdmissionWindow:
    """The prober's output file as an :class:`AdmissionWindow` (a torn last line is
    skipped)."""
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    first = min((r["t"] for r in records if r["ms"] is not None), default=None)
    window = AdmissionWindow([], Counter(), 0, first)
    for record in records:
        before = first is None or record["t"] < first
        if before and record["outcome"] == "refused":
            window.refused += 1
            continue
        window.outcomes[record["outcome"]] += 1
        if record["ms"] is not None:
            window.latencies_ms.append(record["ms"])
    return window


class Prober(NamedTuple):
    """A running prober process, the file it waits for and the file it writes."""

    process: Process
    aim_file: Path
    out: Path

    def aim(self, serve: Serve, ca: Path) -> None:
        """Point it at ``serve``'s ``/validate``, trusting ``ca`` (written atomically)."""
        staged = self.aim_file.with_suffix(".tmp")
        staged.write_text(json.dumps({"url": f"{serve.url}/validate", "ca": str(ca)}))
        staged.replace(self.aim_file)


def start_prober(rate: float, out: Path) -> Prober:
    """The prober (:func:`probe_admission`) in its own process
    (``python -m bench.bench_peer probe-admission AIM RATE OUT``), returned once it is
    up and waits for :meth:`Prober.aim`; it writes to ``out`` (its log beside it). Stop
    it with ``.process.stop()``.

    Raises:
        RuntimeError: it exited or was not up within 60 s (its log tail).
    """
    aim = out.with_suffix(".aim")
    aim.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    argv = python("-m", "bench.bench_peer", PROBE_COMMAND, str(aim), str(rate), str(out))
    process = Process(name="admission-probe", argv=argv, log=out.with_suffix(".log"), env={})

    def up() -> bool:
        if not process.alive():
            raise RuntimeError(f"the admission prober exited:\n{process.tail()}")
        return out.exists()

    try:
        wait_for("the admission prober", up, timeout=60, interval=0.02)
    except BaseException as err:
        process.stop()
        raise RuntimeError(f"the admission prober did not start: {err}") from err
    return Prober(process, aim, out)


# -- the controllers ----------------------------------------------------------------------


class Controller:
    """One controller's process on the API server, restartable: a base for
    :class:`CiliumController` and :class:`OursController`. ``started`` is the monotonic
    time its current process started."""

    name = ""

    def __init__(self, api: RealApi, judge: Judge) -> None:
        self.api = api
        self.judge = judge
        self.started = 0.0

    def start(self, workdir: Path, *, timeout: float) -> None:
        """Start a new process (logs in ``workdir``, created)."""
        raise NotImplementedError

    def pid(self) -> int:
        """The current process's id."""
        raise NotImplementedError

    def wait_ready(self, timeout: float) -> float:
        """Monotonic time its caches were synced."""
        raise NotImplementedError

    def wait_quiet(self, timeout: float) -> float:
        """Monotonic time it last did anything, once it has been quiet for ~1 s.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        raise NotImplementedError

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` when the process has exited."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the current process (nothing when none runs)."""
        raise NotImplementedError

    def cpu(self) -> float:
        """CPU time (``utime + stime``) of the current process so far, in seconds."""
        return cpu_seconds(self.pid())

    def rss_mb(self) -> float:
        """Peak RSS (``VmHWM``) of the current process, in MiB."""
        return memory_mb(self.pid())


class CiliumController(Controller):
    """Cilium's controller (:class:`CiliumNodeIpam`, ``lbipam``) on the API server's
    plane; quiet is its services/status requests still for 1 s once every managed Service
    has been reconciled by this process (scraped every 0.5 s by
    :meth:`CiliumNodeIpam.wait_quiet`)."""

    name = "cilium"

    def __init__(self, api: RealApi, managed: Iterable[str], binary: Path | None) -> None:
        super().__init__(api, judge_cilium)
        self.managed = sorted(managed)
        self.binary = binary
        self.peer: CiliumNodeIpam | None = None
        self._ready_at = 0.0

    def start(self, workdir: Path, *, timeout: float) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        peer = CiliumNodeIpam(
            self.api.plane, default_lb_service_ipam=CILIUM_MODE, binary=self.binary, workdir=workdir
        )
        self.started = time.monotonic()
        self.peer = peer.start(timeout=timeout)
        self._ready_at = time.monotonic()

    def _peer(self) -> CiliumNodeIpam:
        if self.peer is None or self.peer.proc is None:
            raise RuntimeError("Cilium's controller is not running")
        return self.peer

    def pid(self) -> int:
        proc = self._peer().proc
        assert proc is not None
        return proc.pid

    def wait_ready(self, timeout: float) -> float:
        """When ``start`` saw "Starting workers" in its log."""
        return self._ready_at

    def wait_quiet(self, timeout: float) -> float:
        quiet = 1.0
        self._peer().wait_quiet(self.managed, quiet=quiet, timeout=timeout)
        return time.monotonic() - quiet

    def check_alive(self) -> None:
        self._peer().check_alive()

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.stop()
            self.peer = None


class OursController(Controller):
    """``serve`` (:func:`bench.procs.start_serve`); quiet is
    :func:`bench.bench_cold_start.wait_quiet` (no reconcile for 1 s, empty queue)."""

    name = "ours"

    def __init__(self, api: RealApi) -> None:
        super().__init__(api, judge_ours)
        self.serve: Serve | None = None
        self.ca = Path()

    def start(self, workdir: Path, *, timeout: float) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.serve = start_serve(kubeconfig=self.api.kubeconfig, workdir=workdir)
        self.ca = workdir / "certs" / "ca.crt"  # bench.procs.tls_files
        self.started = self.serve.process.started

    def _serve(self) -> Serve:
        if self.serve is None:
            raise RuntimeError("serve is not running")
        return self.serve

    def pid(self) -> int:
        return self._serve().process.pid

    def wait_ready(self, timeout: float) -> float:
        wait_for("serve /readyz", self._serve().ready, timeout=timeout, interval=0.05)
        return time.monotonic()

    def wait_quiet(self, timeout: float) -> float:
        return wait_quiet(self._serve(), timeout=timeout)[0]

    def check_alive(self) -> None:
        serve = self._serve()
        if not serve.process.alive():
            raise RuntimeError(f"serve exited:\n{serve.process.tail()}")

    def events_sent(self, *, settle: float = 1.0, timeout: float = 60.0) -> None:
        """Wait until serve's ``node_ipam_lb_events_total`` (its own ``/metrics``, not the
        API server's) stays still for ``settle`` s: its recorder sends Events after the
        reconciles, and a stop drops what it still holds."""
        serve = self._serve()
        last, since = -1.0, time.monotonic()
        deadline = since + timeout
        while time.monotonic() - since < settle and time.monotonic() < deadline:
            sent = serve.metrics().get("node_ipam_lb_events_total", 0.0)
            if sent != last:
                last, since = sent, time.monotonic()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.serve is not None:
            self.serve.stop()
            self.serve = None


# -- phases -------------------------------------------------------------------------------


@dataclass
class Phase:
    """Figures of one phase of one controller; times in seconds from the process start
    (``ready_after``, ``written_after``, ``quiet_after``); CPU in seconds (``cpu_*``: of
    the process since its start; steady and churn: over the phase); ``requests`` by
    ``"verb resource[/subresource]"`` over the phase (cold start: until quiet;
    ``requests_written``: until written); ``api_cpu`` of kube-apiserver and etcd over
    the same window; ``changed`` Services whose ingress changed (restart, steady)."""

    name: str
    converged: bool = True
    note: str = ""
    ready_after: float | None = None
    written_after: float | None = None
    quiet_after: float | None = None
    cpu_written: float | None = None
    cpu_quiet: float | None = None
    rss_mb: float | None = None
    requests_written: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    api_cpu: dict[str, float] = field(default_factory=dict)
    changed: int | None = None
    verification: Verification | None = None
    admission: AdmissionWindow | None = None
    gave_up_after: float | None = None  # not converged: seconds until it was given up

    @property
    def status_writes(self) -> int:
        """``update`` plus ``patch`` of ``services/status`` in :attr:`requests`."""
        return status_writes(self.requests)


def status_writes(requests: Mapping[str, int]) -> int:
    """Status writes (:data:`WRITE_KEYS`) in a request count."""
    return sum(requests.get(key, 0) for key in WRITE_KEYS)


@dataclass
class ChangeResult:
    """One churn change: ``affected`` Services, ``seconds`` from its PATCH until each held
    its new ingress (``None``: none affected, or not converged), status ``writes``
    between the previous change's convergence (this PATCH follows at once) and its own
    (so the tail of a controller that keeps writing after the affected Services are
    right counts for the next change), ``unexpected`` Services whose ingress changed
    though it does not affect them."""

    kind: str
    what: str
    affected: int
    seconds: float | None
    writes: int
    unexpected: int
    converged: bool = True


@dataclass
class ControllerRun:
    """Everything one controller did at one size: ``managed`` Services, ``with_ingress``
    of them with a non-empty expected ingress at its cold start, its phases by name, the
    churn changes,
    the phases skipped (with why) and the failures (unexplained statuses, non-convergence,
    unmanaged Services written, admission answers that did not allow)."""

    controller: str
    managed: int
    with_ingress: int
    phases: dict[str, Phase] = field(default_factory=dict)
    churn: list[ChangeResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def churn_seconds(self, kind: str | None = None) -> list[float]:
        """Convergence times of the churn changes of ``kind`` (every kind: ``None``)."""
        return [
            c.seconds
            for c in self.churn
            if c.seconds is not None and (kind is None or c.kind == kind)
        ]


PHASES = ("cold start", "restart", "steady", "churn")


@dataclass
class Options:
    """The run's settings (the command's flags): ``cap`` and ``steady_seconds`` in
    seconds, ``admission_rate`` reviews per second (0: none), ``peer`` the Cilium peer's
    binary (``None``: the cached build)."""

    sizes: list[int] = field(default_factory=lambda: [1000, 5000])
    unmanaged_fraction: float = 0.1
    conflicting: int = 0
    steady_seconds: float = 300.0
    churn: int = 20
    cap: float = 900.0
    controllers: list[str] = field(default_factory=lambda: list(CONTROLLERS))
    plot: Path | None = None
    workdir: Path | None = None
    save: Path | None = None
    profile: bool = False
    admission_rate: float = ADMISSION_RATE
    peer: Path | None = None


@dataclass
class Context:
    """What the phases of one controller share."""

    api: RealApi
    cluster: Cluster
    scale: Scale
    options: Options
    workdir: Path
    families: dict[str, list[str]]
    log: Callable[[str], None]
    probers: list[Process] = field(default_factory=list)
    """Every prober started, stopped (again) when the controller's phases end."""


def _verify(ctx: Context, ctl: Controller, watch: StatusWatch, phase: Phase) -> None:
    phase.verification = verify(ctx.api, watch.expected, ctx.families, ctl.judge)
    ctx.log(f"    {phase.name}: {phase.verification.text(converged=phase.converged)}")


def _prober(ctx: Context, ctl: Controller, name: str) -> Prober | None:
    if not isinstance(ctl, OursController) or ctx.options.admission_rate <= 0:
        return None
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    prober = start_prober(ctx.options.admission_rate, ctx.workdir / f"admission-{name}.jsonl")
    ctx.probers.append(prober.process)
    return prober


def _aim(prober: Prober | None, ctl: Controller) -> None:
    if prober is not None and isinstance(ctl, OursController) and ctl.serve is not None:
        prober.aim(ctl.serve, ctl.ca)


def _prober_done(prober: Prober | None, phase: Phase, ctx: Context) -> None:
    if prober is None:
        return
    prober.process.stop()
    phase.admission = read_probes(prober.out)
    ctx.log(f"    {phase.name}: admission {phase.admission.text()}")


def _not_converged(phase: Phase, watch: StatusWatch, cap: float, *, what: str, detail: str) -> int:
    """Mark ``phase`` not converged within ``cap`` s, saying how far ``watch``'s target
    got ("not converged after 900 s: N of M statuses right (detail)"); returns M."""
    right, of = watch.progress()
    phase.converged = False
    phase.note = f"not converged after {cap:.0f} s: {right} of {of} {what} right ({detail})"
    return of


def _deltas(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def cold_start(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 1 (module docstring): start ``ctl`` on blank statuses, wait for every managed
    Service (``watch``'s first target) and for quiet, within ``--cap`` seconds."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("cold start")
    prober = _prober(ctx, ctl, "cold")  # up before serve starts (probe_admission)
    api_cpu0 = api.cpu_by_process()
    api.reset_requests()
    ctl.start(ctx.workdir / "cold", timeout=cap)
    _aim(prober, ctl)
    spy = None
    if ctx.options.profile and isinstance(ctl, OursController):
        spy = PySpy(pid=ctl.pid(), out=ctx.workdir / "serve-cold.raw")
    waiting = "its caches to sync"
    try:
        phase.ready_after = ctl.wait_ready(cap) - ctl.started
        left = cap - (time.monotonic() - ctl.started)
        waiting = "every managed status"
        written_at = watch.wait(max(left, 0.0), alive=ctl.check_alive)
        phase.written_after = written_at - ctl.started
        phase.cpu_written = ctl.cpu()
        phase.requests_written = api.requests()
        if spy is not None:
            spy.stop()
            ctx.log(summary(spy.out))
            spy = None
        left = cap - (time.monotonic() - ctl.started)
        waiting = "quiet"
        phase.quiet_after = ctl.wait_quiet(max(left, 1.0)) - ctl.started
    except TimeoutError:
        _not_converged(phase, watch, cap, what="statuses", detail=f"waiting for {waiting}")
    finally:
        if spy is not None:
            spy.stop()
    phase.cpu_quiet = ctl.cpu()
    phase.rss_mb = ctl.rss_mb()
    phase.requests = api.requests()
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    if isinstance(ctl, OursController) and phase.converged:
        ctl.events_sent()
    _prober_done(prober, phase, ctx)
    _verify(ctx, ctl, watch, phase)
    return phase


def restart(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 2: stop ``ctl``'s process and start a new one on the synced cluster; until
    quiet, within ``--cap``."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("restart")
    ctl.stop()
    api_cpu0 = api.cpu_by_process()
    api.reset_requests()
    mark = time.monotonic()
    ctl.start(ctx.workdir / "restart", timeout=cap)
    try:
        phase.ready_after = ctl.wait_ready(cap) - ctl.started
        phase.quiet_after = ctl.wait_quiet(cap) - ctl.started
    except TimeoutError as err:
        phase.converged, phase.note = False, f"not quiet after {cap:.0f} s ({err})"
    phase.cpu_quiet = ctl.cpu()
    phase.rss_mb = ctl.rss_mb()
    phase.requests = api.requests()
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.changed = len(watch.changed_since(mark))
    _verify(ctx, ctl, watch, phase)
    return phase


def steady_note(nodes: int, seconds: float) -> str:
    """How the steady state's reports relate to kubelet's cadence (printed)."""
    count = report_count(nodes, seconds)
    if math.isclose(seconds, REPORT_FREQUENCY):
        return f"{count} reports: every Node once (nodeStatusReportFrequency 300 s)"
    share = "shorter" if seconds < REPORT_FREQUENCY else "longer"
    return (
        f"{count} reports in {seconds:g} s, {share} than kubelet's 300 s nodeStatusReport"
        f"Frequency: scaled to keep its per-Node rate ({count / nodes:.2f} reports per Node)"
    )


def steady(ctx: Context, ctl: Controller, watch: StatusWatch) -> Phase:
    """Phase 3: Node status reports at kubelet's cadence for ``--steady-seconds`` (status
    writes, controller and API server CPU over the window), then quiet and a List."""
    api, seconds, phase = ctx.api, ctx.options.steady_seconds, Phase("steady")
    schedule = report_schedule(len(ctx.cluster.nodes), seconds)
    phase.note = steady_note(len(ctx.cluster.nodes), seconds) + (
        f", {sum(1 for r in schedule if r.toggle)} of them toggling MemoryPressure/DiskPressure"
    )
    ctx.log(f"    steady: {phase.note}")
    cpu0, api_cpu0 = ctl.cpu(), api.cpu_by_process()
    api.reset_requests()
    mark = time.monotonic()
    for report in schedule:
        time.sleep(max(0.0, mark + report.offset - time.monotonic()))
        beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = report_body(ctx.cluster.nodes[report.node], beat, report.toggle)
        api.patch(f"/api/v1/nodes/{node_name(report.node)}/status", body)
        apply_change(ctx.cluster, ("nodes", report.node), body)
    time.sleep(max(0.0, mark + seconds - time.monotonic()))
    phase.requests = api.requests()
    phase.cpu_quiet = ctl.cpu() - cpu0
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.changed = len(watch.changed_since(mark))
    try:
        phase.quiet_after = ctl.wait_quiet(ctx.options.cap) - ctl.started
    except TimeoutError as err:
        phase.converged, phase.note = False, f"not quiet after {ctx.options.cap:.0f} s ({err})"
    phase.rss_mb = ctl.rss_mb()
    _verify(ctx, ctl, watch, phase)
    return phase


def churn(ctx: Context, ctl: Controller, watch: StatusWatch, run: ControllerRun) -> Phase:
    """Phase 4: :func:`plan_churn` (made before the first change, on a copy), then each
    change written once the one before converged (or ``--cap`` ran out: the rest is not
    written); per change into ``run.churn``."""
    api, cap, phase = ctx.api, ctx.options.cap, Phase("churn")
    plan = plan_churn(ctx.cluster, watch.expected, ctx.scale, ctx.options.churn)
    prober = _prober(ctx, ctl, "churn")
    _aim(prober, ctl)
    cpu0, api_cpu0 = ctl.cpu(), api.cpu_by_process()
    api.reset_requests()
    written = 0
    for change in plan:
        watch.target(change.updates)
        sent = time.monotonic()
        api.patch(change.path, change.body)
        apply_change(ctx.cluster, change.target, change.body)
        try:
            done = watch.wait(cap, alive=ctl.check_alive)
        except TimeoutError:
            of = _not_converged(phase, watch, cap, what="affected statuses", detail=change.what)
            run.churn.append(ChangeResult(change.kind, change.what, of, None, 0, 0, False))
            ctx.log(f"    churn: {phase.note}")
            break
        counts = api.requests()
        writes, written = status_writes(counts) - written, status_writes(counts)
        unexpected = len(watch.changed_since(sent) - set(change.updates))
        seconds = done - sent if change.updates else None
        run.churn.append(
            ChangeResult(change.kind, change.what, len(change.updates), seconds, writes, unexpected)
        )
    if phase.converged:
        try:
            phase.quiet_after = ctl.wait_quiet(cap) - ctl.started
        except TimeoutError as err:
            phase.converged, phase.note = False, f"not quiet after {cap:.0f} s ({err})"
    phase.requests = api.requests()
    phase.cpu_quiet = ctl.cpu() - cpu0
    phase.api_cpu = _deltas(api.cpu_by_process(), api_cpu0)
    phase.rss_mb = ctl.rss_mb()
    _prober_done(prober, phase, ctx)
    _verify(ctx, ctl, watch, phase)
    return phase


def run_controller(ctx: Context, name: str) -> ControllerRun:
    """Every phase of controller ``name`` (``cilium`` or ``ours``) on blank statuses of
    ``ctx``'s API server, in order; a phase that does not converge skips the rest."""
    api, cluster = ctx.api, ctx.cluster
    expected = expected_ingress(cluster)
    run = ControllerRun(name, len(expected), sum(1 for ingress in expected.values() if ingress))
    cilium_set = {service_key(s) for s in cluster.services if cilium_manages(s, CILIUM_MODE)}
    if cilium_set != set(expected):
        run.failures.append(
            f"Cilium manages {len(cilium_set)} Services, ours {len(expected)}: the sets differ"
        )
    ctl: Controller = (
        CiliumController(api, expected, ctx.options.peer)
        if name == "cilium"
        else OursController(api)
    )
    ctx.log(f"  {name}: {blank_statuses(api, expected)}")
    changes = len(KINDS) * ctx.options.churn + 4
    budget = ctx.options.cap * changes + ctx.options.steady_seconds
    watch = StatusWatch(api, expected, ctx.families, ctl.judge, timeout=budget)
    steps: dict[str, Callable[[], Phase]] = {
        "cold start": lambda: cold_start(ctx, ctl, watch),
        "restart": lambda: restart(ctx, ctl, watch),
        "steady": lambda: steady(ctx, ctl, watch),
        "churn": lambda: churn(ctx, ctl, watch, run),
    }
    why = ""
    try:
        for phase_name in PHASES:
            if why:
                run.skipped[phase_name] = why
                continue
            ctx.log(f"  {name}: {phase_name} ...")
            began = time.monotonic()
            try:
                phase = steps[phase_name]()
            except PeerError as err:  # Cilium did not start (e.g. its caches never synced)
                first = str(err).splitlines()[0]
                phase = Phase(
                    phase_name,
                    converged=False,
                    note=f"did not start: {first}",
                    gave_up_after=time.monotonic() - began,
                )
                ctx.log(f"    {phase_name}: {phase.note}")
            run.phases[phase_name] = phase
            check_phase(run, phase)
            if not phase.converged:
                why = f"{phase_name} did not converge: the state is not settled"
            elif phase.verification is not None and not phase.verification.ok:
                why = f"{phase_name} ended with wrong statuses: the state is not settled"
        for phase_name, reason in run.skipped.items():
            ctx.log(f"  {name}: {phase_name} skipped ({reason})")
    finally:
        for prober in ctx.probers:
            prober.stop()
        ctl.stop()
        watch.close()
    return run


def check_phase(run: ControllerRun, phase: Phase) -> None:
    """Add ``phase``'s failures to ``run.failures``: not converged (its statuses still
    wrong are part of that), statuses wrong (unexplained) after it converged or
    unmanaged Services written in its closing List, admission answers that did not allow
    the review."""
    where = f"{run.controller} {phase.name}"
    if not phase.converged:
        run.failures.append(f"{where}: {phase.note}")
    check = phase.verification
    if check is not None and check.wrong and phase.converged:
        run.failures.append(f"{where}: {len(check.wrong)} statuses wrong: {check.wrong[:5]}")
    if check is not None and check.unmanaged_written:
        run.failures.append(f"{where}: {check.unmanaged_written} unmanaged Services written")
    window = phase.admission
    if window is not None and window.allowed != window.answered:
        run.failures.append(f"{where}: admission answers {dict(window.outcomes)}")


@dataclass
class SizeResult:
    """One size: its scale, the seeding line and each controller's run (in run order)."""

    scale: Scale
    seeded: str
    runs: list[ControllerRun]

    def run(self, controller: str) -> ControllerRun | None:
        """The run of ``controller``, or ``None`` when it did not run."""
        return next((r for r in self.runs if r.controller == controller), None)


def run_size(
    nodes: int, options: Options, workdir: Path, log: Callable[[str], None] = say
) -> SizeResult:
    """Seed one API server with the synthetic cluster of ``nodes`` Nodes and run each
    controller of ``options.controllers`` on it (logs under ``workdir``).

    Raises:
        tests.controlplane.build.ControlPlaneUnavailable: no kube-apiserver/etcd binaries.
        (A controller that does not start is a phase that did not converge, not an error.)
        RuntimeError: seeding or clearing the statuses failed, or serve exited.
    """
    unmanaged = round(nodes * options.unmanaged_fraction)
    scale = Scale(
        nodes=nodes, managed=2 * nodes, unmanaged=unmanaged, conflicting=options.conflicting
    )
    cluster = make_cluster(scale)
    log(
        f"size {nodes} Nodes: {scale.managed} managed Services"
        f" ({len(cluster.endpoint_slices)} Local with an EndpointSlice), {unmanaged} unmanaged,"
        f" {scale.conflicting} conflicting (a twin's ports: pending by port ownership)"
    )
    lines: list[str] = []
    api = start_realapi(objects=cluster.objects(), say=lines.append)
    for line in lines:
        log(line)
    try:
        families = {service_key(s): list(s["spec"].get("ipFamilies", [])) for s in cluster.services}
        runs = []
        for name in options.controllers:
            where = workdir / str(nodes) / name
            where.mkdir(parents=True, exist_ok=True)
            ctx = Context(api, cluster, scale, options, where, families, log)
            runs.append(run_controller(ctx, name))
    finally:
        api.stop()
    return SizeResult(scale, "\n".join(lines), runs)


# -- output -------------------------------------------------------------------------------


def _get(
    run: ControllerRun | None, phase: str, read: Callable[[Phase], float | int | None]
) -> float | int:
    found = None if run is None else run.phases.get(phase)
    value = None if found is None else read(found)
    return UNSET if value is None else value


def _per_service(run: ControllerRun, phase: Phase) -> float:
    return sum(phase.requests_written.values()) / run.managed if run.managed else UNSET


def _churn_figure(run: ControllerRun | None, kind: str, what: str) -> float:
    if run is None:
        return UNSET
    seconds = run.churn_seconds(kind)
    changes = [c for c in run.churn if c.kind == kind]
    if what == "writes":
        return sum(c.writes for c in changes) / len(changes) if changes else UNSET
    if not seconds:
        return UNSET
    return percentile(seconds, 50 if what == "p50" else 99)


def size_table(result: SizeResult) -> str:
    """The size's figures, one column per controller that ran
    (:func:`bench.bench_cold_start.columns`; ``nan``: not taken or skipped)."""
    runs = result.runs

    def row(
        label: str, phase: str, read: Callable[[Phase], float | int | None]
    ) -> tuple[str, list[float]]:
        return label, [_get(run, phase, read) for run in runs]

    rows = [
        row("cold: ready (s)", "cold start", lambda p: p.ready_after),
        row("cold: every status written (s)", "cold start", lambda p: p.written_after),
        row("cold: quiet (s)", "cold start", lambda p: p.quiet_after),
        row("cold: CPU until written (s)", "cold start", lambda p: p.cpu_written),
        row("cold: CPU until quiet (s)", "cold start", lambda p: p.cpu_quiet),
        row("cold: peak RSS (MB)", "cold start", lambda p: p.rss_mb),
        row("cold: status writes until quiet", "cold start", lambda p: p.status_writes),
        row(
            "cold: requests until written", "cold start", lambda p: sum(p.requests_written.values())
        ),
        (
            "cold: requests/managed Service",
            [
                _per_service(run, run.phases["cold start"]) if "cold start" in run.phases else UNSET
                for run in runs
            ],
        ),
        row("cold: apiserver+etcd CPU (s)", "cold start", lambda p: sum(p.api_cpu.values())),
        row("restart: ready (s)", "restart", lambda p: p.ready_after),
        row("restart: quiet (s)", "restart", lambda p: p.quiet_after),
        row("restart: CPU until quiet (s)", "restart", lambda p: p.cpu_quiet),
        row("restart: status writes", "restart", lambda p: p.status_writes),
        row("restart: ingress changes", "restart", lambda p: p.changed),
        row("restart: apiserver+etcd CPU (s)", "restart", lambda p: sum(p.api_cpu.values())),
        row("steady: status writes", "steady", lambda p: p.status_writes),
        row("steady: controller CPU (s)", "steady", lambda p: p.cpu_quiet),
        row("steady: apiserver+etcd CPU (s)", "steady", lambda p: sum(p.api_cpu.values())),
    ]
    for kind in KINDS:
        for what in ("p50", "p99", "writes"):
            unit = "writes/change" if what == "writes" else f"{what} (s)"
            rows.append((f"churn {kind}: {unit}", [_churn_figure(run, kind, what) for run in runs]))
    rows.append(row("churn: controller CPU (s)", "churn", lambda p: p.cpu_quiet))
    last = [
        next((run.phases[p] for p in reversed(PHASES) if p in run.phases), None) for run in runs
    ]
    rows.append(
        (
            "statuses right, last List",
            [UNSET if p is None or p.verification is None else p.verification.right for p in last],
        )
    )
    heads = [run.controller for run in runs]
    return columns(f"{result.scale.nodes} Nodes", heads, rows)


def ratio(ours: float | int, theirs: float | int) -> float:
    """``ours / theirs`` (``nan`` when either is missing or ``theirs`` is 0)."""
    if math.isnan(ours) or math.isnan(theirs) or not theirs:
        return UNSET
    return ours / theirs


def ratio_lines(result: SizeResult) -> list[str]:
    """ours/Cilium for the cold start's CPU (until written, until quiet) and wall time
    (until written), with the 1,000-Node target; empty unless both ran."""
    ours, cilium = result.run("ours"), result.run("cilium")
    if ours is None or cilium is None:
        return []
    figures = [
        ("CPU until written", lambda p: p.cpu_written),
        ("CPU until quiet", lambda p: p.cpu_quiet),
        ("wall until written", lambda p: p.written_after),
    ]
    parts = [
        f"{label} {ratio(_get(ours, 'cold start', read), _get(cilium, 'cold start', read)):.3f}"
        for label, read in figures
    ]
    return [f"  ratio ours/Cilium, cold start: {', '.join(parts)} (target <= 0.1 at 1,000 Nodes)"]


def _met(value: float, limit: float) -> str:
    if math.isnan(value):
        return "not measured"
    return "met" if value <= limit else "MISSED"


def target_lines(result: SizeResult) -> list[str]:
    """The targets of this size (1,000 and 5,000 Nodes; admission at every size), each
    with the figure and met / MISSED (nothing is asserted)."""
    ours, cilium = result.run("ours"), result.run("cilium")
    nodes, lines = result.scale.nodes, []

    def add(text: str, value: float, limit: float) -> None:
        lines.append(f"  target {text}: {value:.3f} ({_met(value, limit)})")

    if ours is not None and nodes == 1000:
        add(
            "ours every status written <= 6 s",
            _get(ours, "cold start", lambda p: p.written_after),
            6,
        )
        if cilium is not None:
            for label, read in (
                ("CPU", lambda p: p.cpu_quiet),
                ("wall", lambda p: p.written_after),
            ):
                value = ratio(_get(ours, "cold start", read), _get(cilium, "cold start", read))
                add(f"ours/Cilium cold-start {label} <= 0.1", value, 0.1)
        add(
            "ours steady-state status writes = 0",
            _get(ours, "steady", lambda p: p.status_writes),
            0,
        )
        seconds = ours.churn_seconds()
        add("ours churn p99 <= 1 s", percentile(seconds, 99) if seconds else UNSET, 1)
    if ours is not None and nodes == 5000:
        add(
            "ours every status written <= 20 s",
            _get(ours, "cold start", lambda p: p.written_after),
            20,
        )
        add("serve CPU until quiet <= 8 s", _get(ours, "cold start", lambda p: p.cpu_quiet), 8)
        cold = ours.phases.get("cold start")
        per = _per_service(ours, cold) if cold is not None else UNSET
        add("requests until written per managed Service <= 1.1", per, 1.1)
    if nodes not in (1000, 5000):
        lines.append("  (the size targets are set for 1,000 and 5,000 Nodes)")
    for phase in () if ours is None else ours.phases.values():
        window = phase.admission
        if window is not None:
            p99 = percentile(window.latencies_ms, 99) if window.latencies_ms else UNSET
            add(f"admission p99 <= 50 ms during ours' {phase.name} (ms)", p99, 50)
    return lines


def summary_line(result: SizeResult, run: ControllerRun) -> str:
    """One line per size and controller: the cold start, restart, steady and churn
    figures, the last check, the skipped phases and the failure count."""
    cold, rst, std = (run.phases.get(p) for p in ("cold start", "restart", "steady"))
    parts = []
    if cold is not None:
        parts.append(
            f"cold written {_fmt(cold.written_after)} s quiet {_fmt(cold.quiet_after)} s"
            f" CPU {_fmt(cold.cpu_written)}/{_fmt(cold.cpu_quiet)} s"
            f" RSS {_fmt(cold.rss_mb)} MB writes {cold.status_writes}"
        )
    if rst is not None:
        parts.append(f"restart writes {rst.status_writes} CPU {_fmt(rst.cpu_quiet)} s")
    if std is not None:
        parts.append(f"steady writes {std.status_writes} CPU {_fmt(std.cpu_quiet)} s")
    seconds = run.churn_seconds()
    if run.churn:
        p99 = _fmt(percentile(seconds, 99) if seconds else None)
        parts.append(f"churn {len(run.churn)} changes p99 {p99} s")
    last = next((run.phases[p] for p in reversed(PHASES) if p in run.phases), None)
    if last is not None and last.verification is not None:
        check = last.verification
        explained = {r: n for r, n in check.rules.items() if r != IDENTICAL}
        rules = ", ".join(f"{r} {n}" for r, n in sorted(explained.items()))
        parts.append(
            f"statuses {check.right}/{check.managed}" + (f" (explained: {rules})" if rules else "")
        )
    if run.skipped:
        parts.append(f"skipped: {', '.join(run.skipped)}")
    parts.append(f"failures {len(run.failures)}")
    return f"summary {result.scale.nodes} Nodes {run.controller}: " + "; ".join(parts)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


def detail_lines(result: SizeResult) -> list[str]:
    """Per controller: the cold start's requests by verb and resource, the churn by kind,
    the notes of each phase and the rules that explained Cilium's statuses."""
    lines = []
    for run in result.runs:
        cold = run.phases.get("cold start")
        windows = [] if cold is None else [("written", cold.requests_written)]
        windows += [] if cold is None else [("quiet", cold.requests)]
        for when, counts in windows:
            top = sorted(counts.items(), key=lambda kv: -kv[1])
            lines.append(
                f"  {run.controller} cold start requests until {when} ({sum(counts.values())}): "
                + ", ".join(f"{key} {n}" for key, n in top)
            )
        for kind, label in KINDS.items():
            changes = [c for c in run.churn if c.kind == kind]
            if not changes:
                continue
            seconds = run.churn_seconds(kind)
            timing = (
                f"p50 {percentile(seconds, 50):.3f} s p99 {percentile(seconds, 99):.3f} s"
                if seconds
                else "no timing"
            )
            lines.append(
                f"  {run.controller} churn {label}: {len(changes)} changes,"
                f" {sum(c.affected for c in changes)} Services affected, {timing},"
                f" {sum(c.writes for c in changes) / len(changes):.1f} status writes per change,"
                f" {sum(c.unexpected for c in changes)} unaffected Services changed"
            )
        for name, phase in run.phases.items():
            if phase.note:
                lines.append(f"  {run.controller} {name}: {phase.note}")
        rules = Counter[str]()
        for phase in run.phases.values():
            if phase.verification is not None:
                rules.update(phase.verification.rules)
        explained = {r: n for r, n in rules.items() if r != IDENTICAL}
        if explained:
            lines.append(
                f"  {run.controller}: explained by docs/design.md §4.8 over every check: "
                + ", ".join(f"{r} {n}" for r, n in sorted(explained.items()))
            )
    return lines


def report(result: SizeResult) -> str:
    """The size's printed block: table, ratios, targets, details, summary lines."""
    lines = [size_table(result), *ratio_lines(result), *target_lines(result), *detail_lines(result)]
    lines += [summary_line(result, run) for run in result.runs]
    return "\n".join(lines)


def cold_start_points(results: Sequence[SizeResult], cap: float) -> list[dict[str, Any]]:
    """The plotted figures, one dict per size and controller: ``nodes``, ``controller``,
    ``written_after`` (s after start until every status was written) and ``cpu_quiet``
    (CPU s until quiet), each ``None`` when not measured, and ``converged`` (False: the
    cold start hit the ``cap`` of seconds, and the figures are lower bounds: the cap for
    the wall time, the CPU spent until then). ``--save`` writes these as JSON."""
    points = []
    for result in results:
        for run in result.runs:
            phase = run.phases.get("cold start")
            if phase is None:
                continue
            points.append(
                {
                    "nodes": result.scale.nodes,
                    "controller": run.controller,
                    "written_after": (
                        phase.written_after if phase.converged else phase.gave_up_after or cap
                    ),
                    "cpu_quiet": phase.cpu_quiet if phase.cpu_quiet is not None else None,
                    "converged": phase.converged,
                }
            )
    return points


def saved_points(path: Path) -> list[dict[str, Any]]:
    """The :func:`cold_start_points` that ``--save`` wrote to ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not JSON, or not a list of such points (``nodes`` a positive
            integer, ``controller`` one of :data:`CONTROLLERS`, ``written_after`` and
            ``cpu_quiet`` numbers or null, ``converged`` a boolean); the message names the
            file, the point and the field.
    """
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, list):
        raise ValueError(
            f"{path}: expected a list of points (bench_peer --save), got {type(data).__name__}"
        )
    for index, point in enumerate(data):
        where = f"{path}: point {index}"
        if not isinstance(point, dict):
            raise ValueError(f"{where}: expected an object, got {type(point).__name__}")
        nodes = point.get("nodes")
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 0:
            raise ValueError(f"{where}: 'nodes' must be a positive integer, got {nodes!r}")
        if point.get("controller") not in CONTROLLERS:
            raise ValueError(f"{where}: 'controller' must be one of {', '.join(CONTROLLERS)}")
        for name in ("written_after", "cpu_quiet"):
            value = point.get(name)
            if value is not None and (
                not isinstance(value, (int, float)) or isinstance(value, bool)
            ):
                raise ValueError(f"{where}: '{name}' must be a number or null, got {value!r}")
        if not isinstance(point.get("converged", True), bool):
            raise ValueError(f"{where}: 'converged' must be true or false")
    return data


def plot_points(points: Sequence[Mapping[str, Any]], out: Path) -> None:
    """Both controllers' cold start against Nodes as a PNG at ``out`` (matplotlib, Agg),
    from :func:`cold_start_points` dicts (of one run or several: ``bench_peer plot``):
    wall time until every status was written, CPU until quiet; a figure of a cold start
    that hit the cap is drawn hollow and labelled as a lower bound; a log y axis when the
    figures span more than a factor of 10."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("cold start: every status written", "seconds after start", "written_after"),
        ("cold start: controller CPU until quiet", "CPU seconds", "cpu_quiet"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(10, 4))
    for ax, (title, unit, key) in zip(axes, panels, strict=True):
        shown: list[float] = []
        for controller in CONTROLLERS:
            mine = sorted(
                (p for p in points if p["controller"] == controller and p.get(key) is not None),
                key=lambda p: p["nodes"],
            )
            if not mine:
                continue
            ys = [float(p[key]) for p in mine]
            # The line joins converged figures only: a lower bound is no point of a trend.
            trend = [
                (p["nodes"], y) for p, y in zip(mine, ys, strict=True) if p.get("converged", True)
            ]
            (line,) = ax.plot([x for x, _ in trend], [y for _, y in trend], "-", label=controller)
            for p, y in zip(mine, ys, strict=True):
                hollow = not p.get("converged", True)
                ax.plot(
                    [p["nodes"]],
                    [y],
                    "o",
                    color=line.get_color(),
                    markerfacecolor="none" if hollow else line.get_color(),
                )
                if hollow:
                    ax.annotate(
                        "not converged (≥)",
                        (p["nodes"], y),
                        xytext=(-6, -12),
                        textcoords="offset points",
                        ha="right",
                        fontsize=7,
                    )
            shown += ys
        positive = [v for v in shown if v > 0]
        if positive and max(positive) > 10 * min(positive):
            ax.set_yscale("log")
        ax.set(title=title, xlabel="Nodes (two managed Services each)", ylabel=unit)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot(results: Sequence[SizeResult], out: Path, cap: float = 900.0) -> None:
    """:func:`plot_points` of this run's :func:`cold_start_points`."""
    plot_points(cold_start_points(results, cap), out)


def failures(results: Iterable[SizeResult]) -> list[str]:
    """Every run's failures, prefixed with the size."""
    return [f"{r.scale.nodes} Nodes: {f}" for r in results for run in r.runs for f in run.failures]


def run_bench(
    options: Options, workdir: Path, log: Callable[[str], None] = say
) -> list[SizeResult]:
    """Every size of ``options`` (logs under ``workdir``), each printed as it ends; the
    plot drawn when asked for."""
    results = []
    for nodes in options.sizes:
        result = run_size(nodes, options, workdir, log)
        log(report(result))
        log(f"machine: {machine()}")
        results.append(result)
    if options.plot is not None:
        plot(results, options.plot, options.cap)
        log(f"plot: {options.plot}")
    if options.save is not None:
        options.save.write_text(json.dumps(cold_start_points(results, options.cap), indent=1))
        log(f"cold-start figures: {options.save}")
    return results


def parse_args(argv: Sequence[str]) -> Options:
    """The command's flags as :class:`Options`.

    Raises:
        SystemExit: a bad flag (argparse's message, status 2).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="Node counts, comma-separated")
    parser.add_argument("--unmanaged-fraction", type=float, default=0.1, help="unmanaged per Node")
    parser.add_argument(
        "--conflicting",
        type=int,
        default=0,
        help="extra managed Services sharing a twin's ports (docs/design.md §4.9); Cilium"
        " publishes them, so its statuses are wrong by our oracle: use --controllers ours",
    )
    parser.add_argument("--steady-seconds", type=float, default=300.0)
    parser.add_argument("--churn", type=int, default=20, help="changes of each kind")
    parser.add_argument("--cap", type=float, default=900.0, help="convergence cap per phase (s)")
    parser.add_argument("--controllers", default=",".join(CONTROLLERS), help="cilium,ours")
    parser.add_argument("--plot", type=Path, default=None, help="PNG of the cold start growth")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument("--save", type=Path, default=None, help="JSON of the plotted figures")
    parser.add_argument("--profile", action="store_true", help="py-spy on serve's cold start")
    parser.add_argument("--admission-rate", type=float, default=ADMISSION_RATE, help="per second")
    parser.add_argument("--peer", type=Path, default=None, help="the Cilium peer's binary")
    args = parser.parse_args(argv)
    controllers = [c.strip() for c in args.controllers.split(",") if c.strip()]
    if not controllers or set(controllers) - set(CONTROLLERS):
        parser.error(f"--controllers: expected cilium, ours or both, not {args.controllers!r}")
    if args.steady_seconds <= 0 or args.churn < 0 or args.cap <= 0:
        parser.error("--steady-seconds and --cap must be positive, --churn not negative")
    return Options(
        sizes=[int(n) for n in args.sizes.split(",") if n.strip()],
        unmanaged_fraction=args.unmanaged_fraction,
        conflicting=args.conflicting,
        steady_seconds=args.steady_seconds,
        churn=args.churn,
        cap=args.cap,
        controllers=[c for c in CONTROLLERS if c in controllers],
        plot=args.plot,
        workdir=args.workdir,
        save=args.save,
        profile=args.profile,
        admission_rate=args.admission_rate,
        peer=args.peer,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (module docstring); returns the exit status: 0, or 1 when a
    status was wrong or unexplained, an unmanaged Service was written, a phase did not
    converge or an admission answer did not allow. ``probe-admission AIM RATE OUT`` as the
    first arguments runs the prober instead (:func:`probe_admission`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["plot"]:
        if len(args) < 3:
            say("usage: python -m bench.bench_peer plot OUT.png SAVED.json [SAVED.json ...]")
            return 2
        try:
            points = [p for path in args[2:] for p in saved_points(Path(path))]
        except (OSError, ValueError) as err:
            say(f"bench_peer plot: {err}")
            return 2
        plot_points(points, Path(args[1]))
        say(f"plot: {args[1]} ({len(points)} figures from {len(args) - 2} files)")
        return 0
    if args[:1] == [PROBE_COMMAND]:
        aim, rate, out = args[1:4]
        probe_admission(Path(aim), float(rate), Path(out))
        return 0
    options = parse_args(args)
    say(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        workdir = options.workdir or Path(tmp)
        results = run_bench(options, workdir)
    say(f"machine at the end: {machine()}")
    found = failures(results)
    for line in found:
        say(f"FAILURE {line}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
