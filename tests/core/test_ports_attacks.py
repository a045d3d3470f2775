"""Port ownership (docs/design.md §4.9) against an untrusted Service author.

The attacker may create and edit Services, EndpointSlices and Pods in ONE namespace
(``att``; Pod Security "baseline", though some tests give it hostNetwork/hostPort). It
must not make the controller publish a node address that captures traffic meant for
another namespace's Service, another namespace's host-network or hostPort Pod, or the
node itself, with or without the webhook (it fails open); nor make it crash, loop or
spend unbounded work; and the outcome must depend on API state only.

Two parts:

- **Findings**: each test states the property the contract promises and fails today
  (see the docstring of each for the attack, why it matters and a suggested fix).
- **Refused attacks**: attacks the rule already turns away, kept as regression tests.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from app.controller.cache import ClusterCache
from app.controller.events import EventRecorder
from app.controller.informer import object_key
from app.controller.reconciler import Reconciler, status_patch
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.ports import (
    PortIndex,
    decide,
    incumbent,
    published_ports,
    stored_vip_ips,
    with_port_status,
)
from app.core.views import (
    EndpointSliceView,
    PodView,
    ServiceView,
    endpoint_slice_view,
    node_view,
    pod_view,
    service_view,
)
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import node as node_obj
from tests.controller.support import service as service_obj
from tests.core.builders import NOW, node, rfc3339
from tests.core.ports_support import BOTH, NODES, owned_on, svc

SETTINGS = SelectionSettings()


# -- helpers ----------------------------------------------------------------------------------


def filled(
    *services: ServiceView,
    pods: Sequence[PodView] = (),
    slices: Sequence[EndpointSliceView] = (),
    order_seed: int | None = None,
    settings: SelectionSettings = SETTINGS,
) -> PortIndex:
    """A port index of ``services``, ``pods`` and ``slices`` (shuffled with ``order_seed``)."""
    items: list[tuple[str, Any]] = [("svc", s) for s in services]
    items += [("pod", p) for p in pods] + [("slice", s) for s in slices]
    if order_seed is not None:
        random.Random(order_seed).shuffle(items)
    index = PortIndex(lambda view: is_managed(view, settings)[0])
    for kind, item in items:
        puts: dict[str, Callable[[str, Any, Any], None]] = {
            "svc": index.put_service,
            "pod": index.put_pod,
            "slice": index.put_slice,
        }
        put = puts[kind]
        put(f"{item.namespace}/{item.name}", None, item)
    return index


def decided(
    target: ServiceView,
    *others: ServiceView,
    pods: Sequence[PodView] = (),
    slices: Sequence[EndpointSliceView] = (),
    order_seed: int | None = None,
    settings: SelectionSettings = SETTINGS,
    nodes: NodeIndex = NODES,
) -> Any:
    """``target``'s Selection after port ownership among ``others``, as preview runs it."""
    index = filled(
        target, *others, pods=pods, slices=slices, order_seed=order_seed, settings=settings
    )
    return owned_on(target, index, settings, nodes=nodes, slices=slices)


def published(target: ServiceView, *others: ServiceView, **kw: Any) -> tuple[str, ...]:
    result = decided(target, *others, **kw)
    return tuple(e["ip"] for e in result.ingress or ())


def reason(target: ServiceView, *others: ServiceView, **kw: Any) -> str:
    result = decided(target, *others, **kw)
    return " ".join([result.reason, *(v.reason for v in result.nodes)])


def stored(
    service: ServiceView,
    ips: Sequence[str],
    *,
    recorded: ServiceView | None = None,
    mode: str = "VIP",
) -> ServiceView:
    """``service`` as the controller left it: ``ips`` published (``ipMode`` ``mode``) with
    the ports of ``recorded`` (default: its own) in each entry."""
    base = [{"ip": ip, "ipMode": mode} for ip in ips]
    entries = [dict(e) for e in with_port_status(base, recorded or service)]
    return dataclasses.replace(service, ingress=tuple(entries))


def with_ingress(service: ServiceView, entries: list[dict[str, Any]]) -> ServiceView:
    return dataclasses.replace(service, ingress=tuple(entries))


def plain_service(
    name: str,
    *ports: int,
    namespace: str = "att",
    type_: str = "ClusterIP",
    external_ips: Sequence[str] = (),
) -> ServiceView:
    """A Service that is not ours (``type_``, no class)."""
    return service_view(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": rfc3339(NOW),
            },
            "spec": {
                "type": type_,
                "ports": [{"port": p, "protocol": "TCP"} for p in ports],
                "externalIPs": list(external_ips),
            },
        }
    )


def pod(
    name: str,
    node_name: str | None,
    ports: list[dict[str, Any]],
    *,
    namespace: str = "team-a",
    host_network: bool = False,
    phase: str | None = "Running",
    init_ports: list[dict[str, Any]] | None = None,
    init_restart: str | None = None,
) -> PodView:
    spec: dict[str, Any] = {
        "hostNetwork": host_network,
        "containers": [{"name": "c", "ports": ports}],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if init_ports is not None:
        init: dict[str, Any] = {"name": "i", "ports": init_ports}
        if init_restart is not None:
            init["restartPolicy"] = init_restart
        spec["initContainers"] = [init]
    status = {"phase": phase} if phase is not None else {}
    return pod_view(
        {"metadata": {"name": name, "namespace": namespace}, "spec": spec, "status": status}
    )


def slice_obj(
    namespace: str,
    service_name: str,
    refs: list[dict[str, Any] | None],
    *,
    ports: list[dict[str, Any]],
    name: str | None = None,
    node_name: str = "n1",
) -> EndpointSliceView:
    """An EndpointSlice in ``namespace`` labelled for ``service_name``, one ready endpoint
    per ``refs`` entry (its ``targetRef`` as given, ``None``: none)."""
    endpoints = []
    for ref in refs:
        endpoint: dict[str, Any] = {
            "addresses": ["10.244.0.9"],
            "nodeName": node_name,
            "conditions": {"ready": True},
        }
        if ref is not None:
            endpoint["targetRef"] = ref
        endpoints.append(endpoint)
    return endpoint_slice_view(
        {
            "metadata": {
                "name": name or f"{service_name}-x1y2z",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service_name},
            },
            "endpoints": endpoints,
            "ports": ports,
        }
    )


def captured(service: ServiceView) -> set[tuple[str, str, int]]:
    """What kube-proxy captures for ``service`` (docs/reference/node-addresses-in-the-datapath.md):
    every VIP (or no ``ipMode``) ingress address x every ``spec.ports`` pair, whatever the
    Service's type or class (``serviceport.go`` reads the ingress of any Service)."""
    return {(ip, proto, port) for ip in stored_vip_ips(service) for proto, port in service.ports}


VIEWS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "nodes": node_view,
    "services": service_view,
    "endpointslices": endpoint_slice_view,
}


class World:
    """MemoryAPI + a cache kept equal to it by hand + one Reconciler (no threads), as in
    tests/controller/test_reconciler.py. ``apply`` of a Service without ``status`` keeps
    the stored status, as the API server does (``PrepareForUpdate`` copies it)."""

    def __init__(self, settings: SelectionSettings = SETTINGS) -> None:
        self.api = MemoryAPI()
        self.cache = ClusterCache(settings)
        self.recorder = EventRecorder(api=self.api, identity="pod-a", clock=lambda: 1e9)
        self.reconciler = Reconciler(
            cache=self.cache,
            api=self.api,
            recorder=self.recorder,
            settings=settings,
            is_leader=lambda: True,
            wall_clock=lambda: NOW,
        )
        self.apply("nodes", node_obj("n1", internal=["10.0.0.1"]))
        self.apply("nodes", node_obj("n2", internal=["10.0.0.2"]))

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        stored_obj = self.api.apply(kind, obj)
        self.cache.put(kind, object_key(stored_obj), VIEWS[kind](stored_obj))  # type: ignore[arg-type]

    def reconcile(self, *keys: str) -> None:
        for key in keys:
            self.reconciler.reconcile(key)
            self.recorder.flush()
            found = self.api.get("services", key)
            if found is not None:
                self.cache.put("services", key, service_view(found))

    def view(self, key: str) -> ServiceView:
        found = self.api.get("services", key)
        assert found is not None
        return service_view(found)


def svc_obj(name: str, port: int, *, namespace: str, created: float) -> dict[str, Any]:
    obj = service_obj(name, namespace=namespace, port=port)
    obj["metadata"]["creationTimestamp"] = rfc3339(created)
    del obj["status"]  # an update keeps the stored status (MemoryAPI.apply, API server)
    return obj


# =============================================================================================
# Findings: each fails today.
# =============================================================================================


# -- F1: the status we wrote outlives our management ------------------------------------------


def _published_attacker(world: World) -> None:
    """att/s on a port nobody uses (9999): published on both node addresses."""
    world.apply("services", svc_obj("s", 9999, namespace="att", created=NOW - 60))
    world.reconcile("att/s")
    assert world.api.ingress("att/s") == list(BOTH)


def test_f1a_a_service_switched_away_from_loadbalancer_keeps_no_node_address() -> None:
    """The attacker gets att/s published on a free port, then in ONE update switches it to
    ``type: ClusterIP`` (the API server drops ``loadBalancerClass`` with the type) and sets
    ``ports`` to the kubelet's 10250 and another team's 80. The API server keeps the
    status; kube-proxy reads ``status.loadBalancer.ingress`` of any Service whatever its
    type (``serviceport.go`` ``newBaseServiceInfo``), so node:10250 and node:80 on every
    node are now DNATed to the attacker's Pods. The controller no longer manages att/s,
    so it never writes it again (§3), and worse, it counts the stale entries as "another
    controller's ingress" and withdraws the incumbent team-v/web from every address.
    The webhook says nothing either: the update makes the Service not ours.

    Fix: when a Service we wrote stops being ours because its ``type`` left LoadBalancer
    (no load-balancer controller can own the status of a non-LoadBalancer Service), clear
    the entries we wrote (node addresses; ours carry ``ports``); §3's "never written" is
    right only while another load-balancer controller could own the status. Counting the
    stale entries as a holder is then correct (they do capture) but should not be needed."""
    world = World()
    world.apply("services", svc_obj("web", 80, namespace="team-v", created=NOW - 600))
    world.reconcile("team-v/web")
    assert world.api.ingress("team-v/web") == list(BOTH)
    _published_attacker(world)
    demoted = svc_obj("s", 80, namespace="att", created=NOW - 60)
    demoted["spec"]["type"] = "ClusterIP"
    demoted["spec"].pop("loadBalancerClass")
    demoted["spec"]["ports"] = [{"port": 10250, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]
    world.apply("services", demoted)
    world.reconcile("att/s", "team-v/web")  # its change enqueues it and the sharers of 80
    attacker = world.view("att/s")
    assert not {c for c in captured(attacker) if c[0] in BOTH}, (
        "a Service that left the class still captures node ports through the status we"
        f" wrote: {sorted(captured(attacker))}"
    )
    assert world.api.ingress("team-v/web") == list(BOTH)


def test_f1b_a_terminating_service_keeps_no_node_address_for_ports_it_never_owned() -> None:
    """att/s, published on 9999, gets a finalizer of the attacker's and is deleted: it
    stays Terminating as long as the attacker likes. Its spec can still be updated, and
    the webhook admits any update of a Service being deleted "without a word" (§7); the
    controller skips it (§3: ``deletionTimestamp``). The attacker sets ``ports: [10250]``:
    kube-proxy (which does not look at ``deletionTimestamp``) DNATs node:10250 (the
    kubelet: ``kubectl exec``/``logs`` streams) on every node to the attacker's Pods.

    Fix: a Service of our class with a ``deletionTimestamp`` whose stored ingress holds
    node addresses we wrote should get them cleared (or at least the entries whose
    recorded ``ports`` do not cover its current ports, and any reserved port)."""
    world = World()
    _published_attacker(world)
    terminating = svc_obj("s", 10250, namespace="att", created=NOW - 60)
    terminating["metadata"]["finalizers"] = ["att.example.com/hold"]
    terminating["metadata"]["deletionTimestamp"] = rfc3339(NOW)
    world.apply("services", terminating)
    world.reconcile("att/s")
    attacker = world.view("att/s")
    assert ("10.0.0.1", "TCP", 10250) not in captured(attacker), (
        "a Terminating Service captures the kubelet port through the status we wrote"
    )


def test_f1c_a_service_whose_selector_breaks_keeps_no_address_for_new_ports() -> None:
    """att/s, published on 9999, in one update gets a selector that does not parse and
    ``ports: [80, 10250]``. A malformed selector "leaves the stored status as it is"
    (§4.1), so the addresses written for 9999 now capture 80 (another team's incumbent
    Service: kube-proxy splits its traffic at random) and 10250 (the kubelet). The
    webhook denies a malformed selector, but it fails open, and it ratchets (an UPDATE
    that keeps an already-malformed value is admitted), so once the selector is broken
    the ports can be changed at will.

    Fix: keep a malformed-selector Service's stored addresses only for the ports its
    entries record (rewrite, or clear, the entries whose ``ports`` do not cover the
    current ports) and apply the tier-1 blocks (reserved ports) to them as well."""
    world = World()
    world.apply("services", svc_obj("web", 80, namespace="team-v", created=NOW - 600))
    world.reconcile("team-v/web")
    _published_attacker(world)
    broken = svc_obj("s", 80, namespace="att", created=NOW - 60)
    broken["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in (b"}
    broken["spec"]["ports"].append({"port": 10250, "protocol": "TCP"})
    world.apply("services", broken)
    world.reconcile("att/s", "team-v/web")
    attacker, victim = world.view("att/s"), world.view("team-v/web")
    assert ("10.0.0.1", "TCP", 10250) not in captured(attacker), "the kubelet port is captured"
    shared = captured(attacker) & captured(victim)
    assert not shared, f"two Services capture {sorted(shared)} (kube-proxy picks at random)"


# -- F2: the default reserved ports leave the node's tunnel ports open --------------------------


@pytest.mark.parametrize(
    ("port", "protocol", "what"),
    [
        (8472, "UDP", "VXLAN of flannel (k3s' default backend) and Cilium"),
        (4789, "UDP", "VXLAN, IANA port (Calico, Antrea, OVN)"),
        (6081, "UDP", "Geneve (Cilium, Antrea, OVN)"),
        (51820, "UDP", "WireGuard: flannel/k3s wireguard-native IPv4, Calico"),
        (51821, "UDP", "WireGuard: flannel/k3s wireguard-native IPv6"),
        (179, "TCP", "BGP (Calico's BIRD, kube-router, MetalLB FRR)"),
    ],
)
def test_f2_default_reserved_ports_cover_the_node_tunnel_ports(
    port: int, protocol: str, what: str
) -> None:
    """With the default settings any tenant can publish UDP/8472 on every node address.
    kube-proxy then DNATs ``nodeIP:8472/UDP`` (PREROUTING and OUTPUT, and it flushes the
    UDP conntrack entries of a new load-balancer IP) to the tenant's Pod: the overlay
    packets of every other tenant's Pods arrive at the attacker (encapsulated, usually
    unencrypted) and cross-node Pod networking breaks. The kernel's tunnel sockets are
    declared by no Pod, so only ``reserved-node-ports`` can protect them, and its default
    claims to be "what a kubeadm or k3s node serves on its own addresses" (§4.9, and the
    module docstring cites k3s' "Inbound Rules", which list 8472/UDP, 51820/UDP and
    51821/UDP).

    Fix: add the tunnel and routing ports of the common CNIs to
    ``DEFAULT_RESERVED_NODE_PORTS`` (at least ``8472/UDP``, ``4789/UDP``, ``6081/UDP``,
    ``51820-51821/UDP``, ``51871/UDP``, ``179/TCP``; k3s also serves 5001/TCP), and say in
    deploy/README.md "Security" that the list must match the cluster's CNI."""
    tenant = svc("tunnel", (port, protocol), namespace="att")
    assert published(tenant) == (), f"{protocol}/{port} ({what}) is published by default"


# -- F3: MAX_CHAIN can give one port two owners ------------------------------------------------


def _chain_attack() -> tuple[ServiceView, ServiceView, list[ServiceView]]:
    """69 Services: 68 of the attacker's, and team-n/web (TCP/443), created last.

    Rank order (oldest first) q, zf, y, w, c62 .. c02, zc, c01, v, web. The truth (the
    greedy rule of §4.9): q publishes; zf loses to q; y publishes; w loses to y; zc
    publishes; c01 loses to zc; so v (older than web) owns 443 and web must lose it.

    web's decision walks c01's link chain first (c01 is its first 443 rival) and reaches
    w at depth 63, y at 64 and zf at 65, past MAX_CHAIN: zf "counts as publishing", so y
    counts as losing, w as publishing, and v (whose other port w holds) as losing, so web
    takes 443. v's own decision meets w at depth 1 and gets it right: v publishes 443
    too. The cut-off is not "the safe side": it flips every value above it, and the memo
    (per Service and address, not per depth) carries the flipped value to a shallow
    question. Two decisions on one snapshot disagree, so both are written.

    Once the winners are written (incumbents rank first) the chain collapses, so this
    bites while many claimants are newcomers together: a fresh install, a node address
    that changes (every Service is a newcomer there), Services created in one burst, or
    the 4 workers deciding on the same cache state. When both are decided on one state
    both are written, and as a write that only adds addresses requeues nothing (§4.9
    rule 6), both stay published until an unrelated event requeues one of them; otherwise
    which of the two keeps 443 depends on which write lands first (order, not state)."""
    when = [NOW - 100_000]

    def make(name: str, *ports: int, namespace: str = "att") -> ServiceView:
        when[0] += 10
        return svc(name, *ports, namespace=namespace, created=when[0])

    q = make("q", 5000)
    zf = make("zf", 5000, 5001)
    y = make("y", 5001, 5002)
    w = make("w", 5002, 5003, 6062)
    chain = [make(f"c{k:02d}", 6000 + k, 6000 + k - 1) for k in range(62, 1, -1)]
    zc = make("zc", 5004)
    c01 = make("c01", 443, 6001, 5004)
    v = make("v", 5003, 443)
    web = make("web", 443, namespace="team-n")
    return v, web, [q, zf, y, w, *chain, zc, c01, v, web]


def test_f3_a_chain_longer_than_max_chain_never_gives_one_port_two_owners() -> None:
    """Fix: decide each address once, in rank order, by the iterative greedy (take the
    claimants lowest rank first; each publishes unless one of its ports is already taken
    there), which is the rule itself, linear, and needs no depth cap; or make the cap
    answer the same for every Service (e.g. memoise per depth, or cap on the component
    size and then let every member of an over-long component lose)."""
    v, web, everyone = _chain_attack()
    assert len(everyone) == 69
    outcome = {}
    for target in (v, web):
        others = [o for o in everyone if o is not target]
        outcome[target.name] = set(published(target, *others))
    both = outcome["v"] & outcome["web"]
    assert not both, f"att/v and team-n/web both publish TCP/443 on {sorted(both)}"


# -- F4: quadratic work per decision -----------------------------------------------------------


def _calls_in_ports(run: Callable[[], Any]) -> int:
    """Python calls made in app/core/ports.py while ``run`` runs."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" and frame.f_code.co_filename.endswith("app/core/ports.py"):
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def test_f4_work_per_decision_stays_linear_in_the_rivals() -> None:
    """att/b owns 7000 (published, incumbent); s0000..s0199 each have [80, 7000], in that
    order, all lose to b and stay newcomers for ever; nobody publishes 80. Every question
    "does s_j publish?" first scans all of s_0..s_{j-1} on 80 (memo hits, none publishes)
    before it reaches 7000, so one decision of the youngest costs O(n²) per address, and
    the n decisions of a round O(n³): any edit of one of them requeues all n (they share
    80 and 7000), as does a victim's Service that adds 80. This is the steady state, not
    a transient one. 200 Services on 2 nodes: ~135,000 calls against ~6,000 when the
    second ports differ; 400 Services on 50 nodes take seconds per decision.

    Fix: the iterative greedy of F3 (one pass per address over the claimants in rank
    order, keeping the set of taken ports: O(claimants x ports)), memoised for the
    snapshot (port index version + the claimants' views) so the n decisions of a round
    share it."""
    n = 200
    b = stored(svc("b", 7000, namespace="att", created=NOW - 10**6), BOTH)

    def cost(second_port: Callable[[int], int]) -> int:
        losers = [
            svc(f"s{i:04d}", 80, second_port(i), namespace="att", created=NOW - 10**5 + i)
            for i in range(n)
        ]
        youngest = losers[-1]
        index = filled(b, *losers)
        return _calls_in_ports(lambda: owned_on(youngest, index, SETTINGS))

    adversarial = cost(lambda i: 7000)
    benign = cost(lambda i: 7001 + i)  # same size, each second port its own
    assert adversarial <= 4 * benign, (adversarial, benign)


def test_f4b_the_inline_admission_port_check_does_the_work_it_budgets_for() -> None:
    """The same cluster seen by the webhook: the attacker UPDATEs its own att/v (80) over
    and over. With every rival's selection memoised, the port check runs with
    ``memo_only`` ON THE EVENT LOOP whenever its estimate, candidates plus every rival's
    candidates, is at most ``INLINE_OWNERSHIP_WORK`` (2,000, "about 1 ms"). The estimate
    is linear, the contest is not: 150 rivals on 3 nodes (estimate 456) cost ~116,000
    calls (~120 ms); 300 rivals (906) ~490 ms; ~660 rivals (just under 2,000) take
    seconds, every review on the loop waits behind it, they miss the 2 s deadline and the
    API server admits them unchecked (``failurePolicy: Ignore``), which is what F1c needs.

    Fix: F4's linear contest; until then count the contest's work (claimants ranked
    before the Service x their ports, per address) in the estimate."""
    from app.core import admission
    from app.core.decision import Decider
    from tests.core.admission.builders import node as admission_node
    from tests.core.admission.builders import review

    def raw(name: str, *ports: int, created: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "att", "creationTimestamp": created},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": p, "protocol": "TCP"} for p in ports],
            },
            "status": {"loadBalancer": {}},
        }

    n = 150
    objs = [raw("b", 7000, created="2020-01-01T00:00:00Z")]
    objs += [
        raw(f"s{i:04d}", 80, 7000, created=f"2021-01-01T00:{i // 60:02d}:{i % 60:02d}Z")
        for i in range(n)
    ]
    me = raw("v", 80, created="2022-01-01T00:00:00Z")
    index = filled(*(service_view(o) for o in (*objs, me)))
    nodes = NodeIndex([admission_node(f"n{i}", {}, f"10.0.0.{i}") for i in (1, 2, 3)])
    memo = Decider(SETTINGS)

    def validate(memo_only: bool) -> admission.Decision:
        body = review(me, operation="UPDATE", old=me)
        body["request"]["namespace"] = "att"
        snapshot = admission.ClusterSnapshot(
            nodes=nodes,
            endpoint_slices=(),
            now=NOW,
            memo=memo,
            memo_only=memo_only,
            ports=index,
            endpoint_slices_of=lambda namespace, name: (),
        )
        return admission.validate(
            admission.parse_review(body), settings=SETTINGS, snapshot=snapshot
        )

    validate(False)  # the memo now holds every selection: the next review runs inline
    estimate = len(nodes) * (n + 2)  # what _ownership_warnings compares with the budget
    assert estimate <= admission.INLINE_OWNERSHIP_WORK
    calls = _calls_in_ports(lambda: validate(True))
    assert calls <= 50 * estimate, (calls, estimate)


# -- F5: the recorded ports multiply by the addresses --------------------------------------------


def test_f5_one_service_cannot_make_a_status_beyond_what_the_api_server_stores() -> None:
    """A tenant's Service with 1,000 ports (``allocateLoadBalancerNodePorts: false``, a
    ~40 KB spec) on 64 nodes: every entry records every port, 64,000 PortStatus dicts
    (each a new dict: ``with_port_status`` copies the list per entry), a PATCH body of
    ~2 MB, beyond etcd's default 1.5 MiB request limit. The write fails on every retry
    (backoff up to 1,000 s), and each retry rebuilds the entries.

    Fix: cap the ports a Service may have to get node addresses (a verdict such as
    ``TooManyPorts`` and an admission denial), or cap ports x addresses; share one
    read-only ports list between the entries of a Service (serialise without YAML
    aliases instead of copying)."""
    nodes = NodeIndex([node(f"n{i}", internal=[f"10.0.1.{i}"]) for i in range(64)])
    many = svc("many", *range(20000, 21000), namespace="att")
    result = owned_on(many, filled(many), SETTINGS, nodes=nodes)
    body = json.dumps(status_patch(tuple(result.ingress or ())), separators=(",", ":"))
    assert len(body) <= 1_000_000, f"{len(result.ingress or ())} entries, {len(body)} bytes"


# -- F6: no incumbency with ip_mode Proxy ---------------------------------------------------------


def test_f6_incumbency_holds_with_ip_mode_proxy() -> None:
    """With ``ip-mode: Proxy`` every entry we write is ``ipMode: Proxy``, and
    ``published_ports`` reads VIP entries only, so no Service is ever an incumbent: an
    older Service that adds a younger one's port takes its addresses (the node proxy /
    external-dns that reads the ingress then sends team-v's clients to the attacker),
    contrary to "a Service that already publishes an address for a port keeps it against
    any Service that adds that port later". Switching the setting VIP -> Proxy also drops
    every incumbency at once.

    Fix: read incumbency from our own entries whatever their ``ipMode`` (``Proxy`` only
    matters for what a *foreign* Service captures, :func:`stored_vip_ips`)."""
    proxy = SelectionSettings(ip_mode="Proxy")
    web = stored(svc("web", 8443, namespace="team-v", created=NOW), BOTH, mode="Proxy")
    grab = stored(
        svc("grab", 9000, 8443, namespace="att", created=NOW - 3600),
        BOTH,
        recorded=svc("grab", 9000, namespace="att", created=NOW - 3600),
        mode="Proxy",
    )
    assert published(web, grab, settings=proxy) == BOTH
    assert published(grab, web, settings=proxy) == ()


# -- F7: a transient block hands an incumbent's address to an older rival ----------------------


@pytest.mark.xfail(
    strict=True,
    reason="known limit, docs/design.md §4.9: incumbency is read from the stored ingress, so a"
    " block that withdraws an address ends it (turn on DenyServiceExternalIPs)",
)
def test_f7_a_transient_block_does_not_hand_an_incumbent_address_to_an_older_rival() -> None:
    """team-v/web owns TCP/80 on both addresses. The attacker keeps att/grab (80) around,
    created long before web and never published. It then names the node addresses in
    ``spec.externalIPs`` of an ExternalName Service for a moment (any namespace may,
    unless the DenyServiceExternalIPs admission plugin is on; kube-proxy skips
    ExternalName Services, so this captures nothing and nobody notices; a
    ``nodePort``/``healthCheckNodePort`` equal to web's port, or a hostPort Pod in a
    namespace allowed them, work as well): tier 1 takes both addresses from web, even
    though web is the incumbent, and the status write that follows ends its incumbency.
    When the attacker removes the externalIPs, web and grab are newcomers and the older
    grab wins: a moment's block becomes a permanent, legitimate-looking takeover, which
    survives the administrator removing the externalIPs.

    Fix (design; needs a decision): once web's entry is gone, API state no longer says it
    was first, so either keep that fact (e.g. rank a newcomer by when its current port
    set was first claimed, which a rival cannot prepare in advance, instead of by
    ``creationTimestamp``), or do not let a tier-1 block that a tenant can create
    (``spec.externalIPs``, above all of a Service kube-proxy skips; a nodePort) end another
    Service's incumbency; at least document this takeover next to "the first to publish
    an address for a port keeps it"."""
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    grab = svc("grab", 80, namespace="att", created=NOW - 86_400)
    assert published(web, grab) == BOTH and published(grab, web) == ()
    blocker = plain_service("blk", 80, type_="ExternalName", external_ips=BOTH)
    assert published(web, grab, blocker) == ()
    web_after = stored(svc("web", 80, namespace="team-v", created=NOW), ())
    assert published(web_after, grab) == BOTH, "the older rival took web's addresses"


# -- F8: the own-backend rule does not look at which port goes where ----------------------------


@pytest.mark.xfail(
    strict=True,
    reason="known limit, docs/design.md §4.9: the own-backend rule matches the Pod's port"
    " among the Service's target ports, not port by port (same namespace only)",
)
def test_f8_a_backend_whose_ports_the_service_swaps_still_blocks() -> None:
    """Low (same namespace only). edge/edge-1 listens on the node's 80 and 8080; edge/edge
    sends 80 to targetPort 8080 and 8080 to targetPort 80. The slice's target ports are
    {80, 8080}, so both node ports count as "the very listener the node port reaches",
    and n1 is published: nodeIP:80 now goes to the Pod's 8080, taking nodeIP:80 from the
    Pod's own listener, which §4.9 says must block ("When the Service targets another
    port of its backend ... the Pod still blocks its node").

    Fix: pair each Service port with its slice port by name (EndpointSlice ``ports[].name``
    is the Service port's name) and check that the Service port's own target equals the
    Pod's listening port."""
    edge = svc("edge", 80, 8080, namespace="edge")
    listener = pod(
        "edge-1",
        "n1",
        [{"containerPort": 80}, {"containerPort": 8080}],
        namespace="edge",
        host_network=True,
    )
    swapped = slice_obj(
        "edge",
        "edge",
        [{"kind": "Pod", "name": "edge-1", "namespace": "edge"}],
        ports=[
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "alt", "port": 80, "protocol": "TCP"},
        ],
    )
    assert published(edge, pods=(listener,), slices=(swapped,)) == ("10.0.0.2",)


# =============================================================================================
# Refused attacks: regression tests (they pass).
# =============================================================================================


VICTIM_POD = pod("web-1", "n1", [{"containerPort": 8080, "hostPort": 8091}], namespace="team-a")


@pytest.mark.parametrize(
    "ref",
    [
        {"kind": "Pod", "name": "web-1", "namespace": "team-a"},  # another namespace
        {"kind": "Pod", "name": "web-1"},  # no namespace: the slice's own, no such Pod
        {"kind": "Pod", "name": "web-1", "namespace": ""},
        {"kind": "pod", "name": "web-1", "namespace": "att"},  # kind in another case
        {"kind": "Node", "name": "n1"},
        {"kind": "Service", "name": "web", "namespace": "team-a"},
        {"kind": "Pod", "namespace": "team-a"},  # no name
        {"kind": "Pod", "name": ["web-1"], "namespace": "team-a"},  # garbage name
        "Pod/team-a/web-1",  # not a mapping
        None,
    ],
)
def test_a_forged_slice_never_makes_another_namespaces_pod_an_own_backend(ref: Any) -> None:
    thief = svc("thief", 8091, namespace="att")
    forged = slice_obj(
        "att", "thief", [ref], ports=[{"port": 8080, "protocol": "TCP"}, {"port": 8091}]
    )
    # a name without a namespace names a Pod of the slice's own namespace (att/web-1,
    # which is not team-a's), anything else names no backend at all
    assert forged.backends <= {"web-1"}
    for seed in range(3):
        assert published(thief, pods=(VICTIM_POD,), slices=(forged,), order_seed=seed) == (
            "10.0.0.2",
        )


def test_a_slice_labelled_for_another_namespaces_service_changes_nothing_there() -> None:
    """The label names a Service of the slice's own namespace only: a slice in ``att``
    labelled ``kubernetes.io/service-name: web`` is filed under att/web, never under
    team-a/web, so it can neither exempt team-a/web nor be read by its decision."""
    web = svc("web", 8091, namespace="team-a")
    forged = slice_obj(
        "att", "web", [{"kind": "Pod", "name": "web-1", "namespace": "team-a"}], ports=[]
    )
    index = filled(web, pods=(VICTIM_POD,), slices=(forged,))
    assert index.endpoint_slices("team-a", "web") == []
    assert index.endpoint_slices("att", "web") == [forged]
    # team-a/web has no slice of its own: its hostPort Pod is not its backend, so it blocks n1
    assert published(web, pods=(VICTIM_POD,), slices=(forged,)) == ("10.0.0.2",)


def test_a_pod_of_the_attackers_own_namespace_with_the_victims_pod_name_exempts_nothing() -> None:
    """A Pod of ``att`` named like the victim's Pod: the exemption is by (namespace, name),
    so only the attacker's own Pod is exempt, never team-a/web-1."""
    own = pod("web-1", "n2", [{"containerPort": 8080, "hostPort": 8091}], namespace="att")
    thief = svc("thief", 8091, namespace="att")
    mine = slice_obj("att", "thief", [{"kind": "Pod", "name": "web-1"}], ports=[{"port": 8080}])
    assert mine.backends == frozenset({"web-1"})
    assert published(thief, pods=(VICTIM_POD, own), slices=(mine,)) == ("10.0.0.2",)


@pytest.mark.parametrize(
    "host_ip", ["0.0.0.0", "::", "::ffff:0.0.0.0", "0:0:0:0:0:0:0:0", "000.000.000.000", "x", ""]
)
def test_a_host_ip_meaning_every_address_or_garbage_blocks_every_address(host_ip: str) -> None:
    holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
    assert holder.host_ports[0].host_ip is None
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == ("10.0.0.2",)


@pytest.mark.parametrize("host_ip", ["10.0.0.1", "::ffff:10.0.0.1", "010.000.000.001"])
def test_a_host_ip_in_another_spelling_still_blocks_that_address(host_ip: str) -> None:
    holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == ("10.0.0.2",)


def test_a_host_ip_of_another_family_or_loopback_blocks_nothing_here() -> None:
    for host_ip in ("fd00::1", "127.0.0.1"):
        holder = pod("web-1", "n1", [{"containerPort": 80, "hostPort": 8091, "hostIP": host_ip}])
        assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == BOTH


@pytest.mark.parametrize(
    ("phase", "node_name", "holds"),
    [
        ("Running", "n1", True),
        ("Pending", "n1", True),  # bound, starting: the port is about to be taken
        ("Unknown", "n1", True),
        (None, "n1", True),
        ("Succeeded", "n1", False),
        ("Failed", "n1", False),
        ("Pending", None, False),  # not bound: no node yet (its binding requeues)
    ],
)
def test_which_pods_hold_their_port(phase: str | None, node_name: str | None, holds: bool) -> None:
    holder = pod("web-1", node_name, [{"containerPort": 80, "hostPort": 8091}], phase=phase)
    expected = ("10.0.0.2",) if holds else BOTH
    assert published(svc("thief", 8091, namespace="att"), pods=(holder,)) == expected


def test_init_containers_hold_their_host_port_only_when_they_are_sidecars() -> None:
    sidecar = pod(
        "p", "n1", [], init_ports=[{"containerPort": 9, "hostPort": 8091}], init_restart="Always"
    )
    one_shot = pod("p", "n1", [], init_ports=[{"containerPort": 9, "hostPort": 8091}])
    thief = svc("thief", 8091, namespace="att")
    assert published(thief, pods=(sidecar,)) == ("10.0.0.2",)
    assert published(thief, pods=(one_shot,)) == BOTH


def test_host_network_pod_ports_are_held_whatever_their_host_port_says() -> None:
    listener = pod(
        "node-exporter",
        "n1",
        [{"containerPort": 9100, "hostPort": 9100}, {"containerPort": 53, "protocol": "UDP"}],
        namespace="monitoring",
        host_network=True,
    )
    assert published(svc("a", 9100, namespace="att"), pods=(listener,)) == ("10.0.0.2",)
    assert published(svc("b", (53, "UDP"), namespace="att"), pods=(listener,)) == ("10.0.0.2",)
    assert published(svc("c", 53, namespace="att"), pods=(listener,)) == BOTH  # TCP/53: free


@pytest.mark.parametrize("protocol", ["TCP", "UDP", "SCTP", "tcp", "Tcp", "bogus"])
def test_reserved_ports_hold_whatever_the_protocol_spelling(protocol: str) -> None:
    """The default ranges have no protocol: any spelling, even one the API server refuses,
    is reserved."""
    kubelet = svc("k", (10250, protocol), namespace="att")
    assert published(kubelet) == ()
    ssh = svc("s", (22, protocol), 80, namespace="att")
    assert published(ssh) == ()


def test_a_port_equal_to_another_services_node_port_is_never_published() -> None:
    holder = svc("np", 80, namespace="team-a", node_ports=(30080,), cls=None)
    health = svc("hc", 81, namespace="team-a", health=30081, cls=None)
    assert published(svc("a", 30080, namespace="att"), holder) == ()
    assert published(svc("b", 30081, namespace="att"), health) == ()
    assert published(svc("c", (30080, "UDP"), namespace="att"), holder) == BOTH


@pytest.mark.parametrize(
    "spelling", ["10.0.0.1", "::ffff:10.0.0.1", "010.000.000.001", "::FFFF:10.0.0.1"]
)
def test_another_classs_ingress_and_external_ips_block_in_any_spelling(spelling: str) -> None:
    foreign = svc("lb", 8443, namespace="team-a", cls="example.com/other", ingress=(spelling,))
    external = plain_service("ext", 8443, namespace="team-a", external_ips=(spelling,))
    thief = svc("thief", 8443, namespace="att")
    assert published(thief, foreign) == ("10.0.0.2",)
    assert published(thief, external) == ("10.0.0.2",)


def test_a_foreign_proxy_entry_blocks_nothing() -> None:
    foreign = svc("lb", 8443, namespace="team-a", cls="example.com/other", ingress=BOTH, proxy=True)
    assert published(svc("thief", 8443, namespace="att"), foreign) == BOTH


def test_an_older_newcomer_never_takes_an_incumbents_port() -> None:
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    for created in (NOW - 10**6, NOW, NOW + 1):
        grab = svc("grab", 80, 443, namespace="att", created=created)
        for seed in range(3):
            assert published(web, grab, order_seed=seed) == BOTH
            assert published(grab, web, order_seed=seed) == ()


def test_swapping_ports_under_a_published_entry_makes_no_incumbent() -> None:
    """att/grab was published for 9999; it now has 80 only (or 9999 and 80): its entries
    record 9999, so it is no incumbent for 80 and the younger incumbent keeps it."""
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    was = svc("grab", 9999, namespace="att", created=NOW - 3600)
    for now_ports in ((80,), (9999, 80), (80, 9999)):
        grab = stored(
            svc("grab", *now_ports, namespace="att", created=NOW - 3600), BOTH, recorded=was
        )
        assert not incumbent(grab, "10.0.0.1")
        assert published(web, grab) == BOTH
        assert published(grab, web) == ()
    # and a protocol switch is no incumbency either
    udp = stored(
        svc("grab", (9999, "UDP"), namespace="att", created=NOW - 3600), BOTH, recorded=was
    )
    assert not incumbent(udp, "10.0.0.1")


def test_dropping_ports_keeps_incumbency_and_gains_nothing() -> None:
    """Recorded ports that are a superset of the current ones still make an incumbent
    (the Service published all of them there); it holds only its current ports."""
    was = svc("grab", 80, 443, namespace="att", created=NOW)
    grab = stored(svc("grab", 443, namespace="att", created=NOW), BOTH, recorded=was)
    assert incumbent(grab, "10.0.0.1")
    newcomer = svc("web", 80, namespace="team-v", created=NOW - 10**6)
    assert published(newcomer, grab) == BOTH


@pytest.mark.parametrize(
    "ports",
    [
        [{"port": True, "protocol": "TCP"}],
        [{"port": "80", "protocol": "TCP"}],
        [{"port": 80.0}],
        [{"port": None}],
        [{}],
        [None, 5, "x", [80]],
        [{"port": 80, "protocol": 7}],
        [{"port": 80, "protocol": {"x": 1}}],
        [{"port": 10**30, "protocol": "TCP"}],
    ],
)
def test_odd_recorded_ports_never_crash_and_never_make_a_newcomer_incumbent(ports: Any) -> None:
    """Only a status writer can put these there (``services/status`` is not in the ``edit``
    role); still, no content may raise, and none of them records ``TCP/80``."""
    entries = [{"ip": ip, "ipMode": "VIP", "ports": ports} for ip in BOTH]
    grab = with_ingress(svc("grab", 80, namespace="att", created=NOW - 3600), entries)
    published_ports(grab)
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    assert not incumbent(grab, "10.0.0.1")
    assert published(web, grab) == BOTH
    assert published(grab, web) == ()


@pytest.mark.parametrize(
    "entry",
    [
        {"ip": "10.0.0.1", "ipMode": "vip"},
        {"ip": "not-an-ip"},
        {"ip": 167772161},
        {"hostname": "10.0.0.1"},
        {"ip": "10.0.0.1%eth0"},
        {"ip": "fe80::1%eth0"},
    ],
)
def test_stored_entries_kube_proxy_skips_make_no_incumbent(entry: dict[str, Any]) -> None:
    grab = with_ingress(svc("grab", 80, namespace="att", created=NOW - 3600), [entry])
    assert "10.0.0.1" not in published_ports(grab)
    web = stored(svc("web", 80, namespace="team-v", created=NOW), BOTH)
    assert published(web, grab) == BOTH


def test_garbage_stored_ingress_never_crashes_a_decision() -> None:
    for ingress in ([None, "x", 5, ["10.0.0.1"]], [{"ip": None, "ports": "80"}], []):
        obj: dict[str, Any] = {
            "metadata": {"name": "g", "namespace": "att", "creationTimestamp": rfc3339(NOW)},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": 80}],
            },
            "status": {"loadBalancer": {"ingress": ingress}},
        }
        garbage = service_view(obj)
        web = svc("web", 80, namespace="team-v", created=NOW)
        published(garbage, web)
        published(web, garbage)


def test_the_rank_order_cannot_be_forged_from_the_spec() -> None:
    """Only ``metadata.creationTimestamp`` (set by the API server) and the stored status
    rank a claimant; a manifest without a timestamp ranks last, never first."""
    web = svc("web", 80, namespace="team-v", created=NOW)
    raw = service_view(
        {
            "metadata": {"name": "aaa", "namespace": "aaa"},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": 80}],
            },
        }
    )
    assert raw.created is None
    assert published(web, raw) == BOTH
    assert published(raw, web) == ()


def test_a_linear_chain_past_max_chain_errs_on_the_safe_side_and_alike_everywhere() -> None:
    """A plain chain (each Service shares one port with the next older one): past
    MAX_CHAIN the one under decision may lose an address it would own, never gain one
    its neighbour owns, and every Service decides alike under shuffled index orders."""
    chain = [
        svc(f"r{i:03d}", 1000 + i, 1001 + i, namespace="att", created=NOW - 10_000 + i)
        for i in range(72)
    ]
    outcomes = []
    for seed in range(2):
        outcome = {}
        for target in chain[-8:]:
            others = [o for o in chain if o is not target]
            outcome[target.name] = published(target, *others, order_seed=seed)
        outcomes.append(outcome)
    assert outcomes[0] == outcomes[1]
    names = [s.name for s in chain[-8:]]
    for left, right in itertools.pairwise(names):
        assert not (outcomes[0][left] and outcomes[0][right]), (left, right)


def test_an_address_is_decided_alike_whatever_the_index_order() -> None:
    """A mixed cluster (incumbents, newcomers, a hostNetwork backend, a foreign hostPort
    Pod, externalIPs) decided from shuffled index orders: one outcome, one owner per
    (address, protocol, port)."""
    edge = svc("edge", 80, 443, namespace="edge", created=NOW - 900)
    edge_pod = pod(
        "edge-1",
        "n1",
        [{"containerPort": 80}, {"containerPort": 443}],
        namespace="edge",
        host_network=True,
    )
    edge_slice = slice_obj(
        "edge",
        "edge",
        [{"kind": "Pod", "name": "edge-1"}],
        ports=[{"port": 80}, {"port": 443}],
    )
    web = stored(svc("web", 8080, namespace="team-v", created=NOW), ("10.0.0.2",))
    grab = svc("grab", 8080, 443, namespace="att", created=NOW - 10**6)
    other = svc("other", 9000, namespace="att", created=NOW - 10)
    foreign = pod("hp", "n2", [{"containerPort": 1, "hostPort": 9000}], namespace="team-b")
    ext = plain_service("ext", 8080, namespace="team-c", external_ips=("10.0.0.1",))
    everyone = (edge, web, grab, other, ext)
    results = set()
    for seed in range(8):
        results.add(
            tuple(
                published(
                    s,
                    *(o for o in everyone if o is not s),
                    pods=(edge_pod, foreign),
                    slices=(edge_slice,),
                    order_seed=seed,
                )
                for s in everyone
            )
        )
    assert len(results) == 1
    (outcome,) = results
    owner: dict[tuple[str, str, int], str] = {}
    for s, ips in zip(everyone, outcome, strict=True):
        if s is ext:
            continue
        for ip in ips:
            for key in s.ports:
                assert (ip, *key) not in owner, (s.name, ip, key, owner)
                owner[ip, *key] = s.name
    assert outcome[0] == BOTH  # edge: its own backend on n1 is no rival
    assert outcome[1] == ("10.0.0.2",)  # web keeps n2; n1 is ext's
    assert outcome[2] == ()  # grab: 8080 is web's on n2, ext's on n1; 443 edge's
    assert outcome[3] == ("10.0.0.1",)  # other: the hostPort Pod holds n2's 9000


def test_decide_never_raises_on_addresses_no_node_has() -> None:
    web = svc("web", 80, namespace="team-v")
    index = filled(web, pods=(VICTIM_POD,))
    ownership = decide(
        web,
        ["10.9.9.9", "not-an-ip", "::ffff:10.0.0.1"],
        ports=index,
        claims_of=lambda other: frozenset(),
        node_of=NODES.node_of,
        policy=SETTINGS.ports,
    )
    assert ownership.code in (None, "PortInUse")
