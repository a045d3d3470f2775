"""bench_peer's workload (``python -m bench.bench_peer``, bench/README.md): the shared
settings, kubelet's status reports for the steady state, and the churn plan (changes whose
expected ingress is recomputed with ``select``)."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from app.core.options import MATCH_NODE_LABELS_ANNOTATION
from app.core.selector import SelectorError, parse_cached
from app.core.views import EXCLUDE_FROM_LB_LABEL
from bench.cluster import (
    Cluster,
    Scale,
    expected_ingress,
    is_edge_pool,
    node_name,
    pool_of,
    service_key,
)
from tests.fakeapi.patch import merge_patch

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
    Node, their EndpointSlices and every NodeAddressPool)."""
    wanted = set(keys)
    part = Cluster(
        nodes=cluster.nodes,
        services=[s for s in cluster.services if service_key(s) in wanted],
        endpoint_slices=[s for s in cluster.endpoint_slices if slice_service_key(s) in wanted],
        address_pools=cluster.address_pools,
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
