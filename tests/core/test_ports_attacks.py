"""Port ownership (docs/design.md §4.9) against an untrusted Service author: the findings.

The attacker may create and edit Services, EndpointSlices and Pods in ONE namespace
(``att``; Pod Security "baseline", though some tests give it hostNetwork/hostPort). It
must not make the controller publish a node address that captures traffic meant for
another namespace's Service, another namespace's host-network or hostPort Pod, or the
node itself, with or without the webhook (it fails open); nor make it crash, loop or
spend unbounded work; and the outcome must depend on API state only.

Two parts: **findings** here (F1-F8: each test states the property the contract promises;
see the docstring of each for the attack, why it matters and a suggested fix), and
**refused attacks** in test_ports_refused_attacks.py (attacks the rule already turns away,
kept as regression tests). What both build with: attacks_support.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from app.controller.reconciler import status_patch
from app.core.nodeindex import NodeIndex
from app.core.options import SelectionSettings
from app.core.views import (
    ServiceView,
    service_view,
)
from app.kube.client import ApiError
from tests.core.attacks_support import (
    SETTINGS,
    World,
    captured,
    filled,
    plain_service,
    pod,
    published,
    slice_obj,
    stored,
    svc_obj,
)
from tests.core.builders import NOW, node, rfc3339
from tests.core.ports_support import BOTH, owned_on, svc


def _published_attacker(world: World) -> None:
    """att/s on a port nobody uses (9999): published on both node addresses."""
    world.apply("services", svc_obj("s", 9999, namespace="att", created=NOW - 60))
    world.reconcile("att/s")
    assert world.api.ingress("att/s") == list(BOTH)


def _held_in_deletion(world: World, port: int) -> None:
    """att/s with ``port``, a finalizer of the attacker's and a ``deletionTimestamp``
    (Terminating for as long as the attacker likes), reconciled."""
    terminating = svc_obj("s", port, namespace="att", created=NOW - 60)
    terminating["metadata"]["finalizers"] = ["att.example.com/hold"]
    terminating["metadata"]["deletionTimestamp"] = rfc3339(NOW)
    world.apply("services", terminating)
    world.reconcile("att/s")


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
    _held_in_deletion(world, 10250)
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


def test_f9_a_terminating_service_keeps_no_node_address_at_all() -> None:
    """att/s, published on 9999, gets a finalizer of the attacker's and is deleted, its
    ports unchanged. Kept, its stored ingress would hold 9999 on every node for as long as
    the attacker likes: against a pool created later, a host-network Pod that takes the
    port, and every later Service of ours (it stays an incumbent). The cloud-provider
    service controller clears ``status.loadBalancer`` when a Service needs cleanup
    (``syncLoadBalancerIfNeeded``); so do we, with our condition, in one write."""
    world = World()
    _published_attacker(world)
    _held_in_deletion(world, 9999)
    assert world.api.ingress("att/s") == []
    assert world.api.serving("att/s") is None, "our condition goes with the ingress"
    # A later Service of ours on the port gets every node.
    world.apply("services", svc_obj("web", 9999, namespace="team-v", created=NOW))
    world.reconcile("team-v/web")
    assert world.api.ingress("team-v/web") == list(BOTH)


def test_f10_a_malformed_selector_keeps_no_address_a_host_network_pod_takes() -> None:
    """att/s, published on 9999, gets a selector that does not parse (the webhook fails
    open), its ports unchanged: §4.1 keeps its stored status. Then a host-network Pod of
    kube-system listens on n1's 9999. Port ownership gives that port to the Pod (§4.9),
    and a valid twin of att/s loses n1; the frozen status must not keep it either
    (kube-proxy would DNAT n1:9999 away from the Pod): withdrawn, all of it, as an
    address outside its pool is."""
    world = World()
    _published_attacker(world)
    broken = svc_obj("s", 9999, namespace="att", created=NOW - 60)
    broken["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in (b"}
    world.apply("services", broken)
    world.reconcile("att/s")
    assert world.api.ingress("att/s") == list(BOTH), "§4.1: the stored status stays"
    listener = pod(
        "ingress", "n1", [{"containerPort": 9999}], namespace="kube-system", host_network=True
    )
    world.cache.put("pods", "kube-system/ingress", listener)
    world.reconcile("att/s")
    assert world.api.ingress("att/s") == []
    assert any(
        e.get("reason") == "StaleIngressWithdrawn" and "kube-system/ingress" in e.get("note", "")
        for e in world.api.events
    ), [e.get("note") for e in world.api.events]


def test_f11_addresses_beyond_the_record_limit_claim_no_port() -> None:
    """att/hog has 2,000 ports (``allocateLoadBalancerNodePorts: false``): its status can
    record 4 addresses of 5 (8,192 port records), so the fifth node's is not published.
    It must not block that address either: team-v/late, created later on one of hog's
    ports, gets the fifth node, and only it (the four hog publishes are hog's)."""
    nodes = NodeIndex([node(f"n{i}", internal=[f"10.0.0.{i}"]) for i in range(1, 6)])
    hog = svc("hog", *range(20000, 22000), namespace="att", created=NOW - 60)
    late = svc("late", 20080, namespace="team-v", created=NOW)
    assert published(hog, late, nodes=nodes) == tuple(f"10.0.0.{i}" for i in range(1, 5))
    assert published(late, hog, nodes=nodes) == ("10.0.0.5",)


def test_f12_a_malformed_selector_pins_the_ports_of_a_cilium_era_status() -> None:
    """att/s (a year old, port 80) carries a status Cilium's Node IPAM wrote: entries
    without ``ports``, which count as published for every port of the Service (§4.9, a
    migration keeps what it publishes). Its selector does not parse, so §4.1 keeps that
    status and never decides it again. team-v/web, younger, publishes 443 on both nodes.
    Then att/s adds 443: were the entries still port-less, att/s would be incumbent for
    443 (both are, and the older wins) and take 443 on every node from web, which
    published it first. The first reconcile of att/s records its ports then (80) in the
    kept entries, so 443 is not covered: its ingress is withdrawn and web keeps 443."""
    world = World()
    broken = svc_obj("s", 80, namespace="att", created=NOW - 365 * 86_400)
    broken["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in (b"}
    broken["status"] = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in BOTH]}}
    world.apply("services", broken)
    world.apply("services", svc_obj("web", 443, namespace="team-v", created=NOW))
    world.reconcile("team-v/web", "att/s")
    assert world.api.ingress("team-v/web") == list(BOTH)
    assert world.api.ingress("att/s") == list(BOTH), "§4.1: the stored status stays"
    entries = world.view("att/s").ingress or ()
    assert world.view("att/s").ingress_ports == ((80, "TCP", None),), entries
    # The owner adds 443 (the webhook fails open; the selector still does not parse).
    grown = svc_obj("s", 80, namespace="att", created=NOW - 365 * 86_400)
    grown["metadata"]["annotations"] = broken["metadata"]["annotations"]
    grown["spec"]["ports"].append({"name": "https", "port": 443, "protocol": "TCP"})
    world.apply("services", grown)
    world.reconcile("att/s", "team-v/web")
    assert world.api.ingress("att/s") == []
    assert world.api.ingress("team-v/web") == list(BOTH)
    assert not captured(world.view("att/s"))


def test_f12_the_ports_are_pinned_only_over_the_version_they_were_read_from() -> None:
    """The pinning write carries the Service's ``resourceVersion`` as a precondition: the
    entries come from the cache, so a status changed on the server since (another
    controller's write, an update not yet seen) is never written over; the API server
    answers 409 and the worker retries once the newer version is cached."""
    world = World()
    broken = svc_obj("s", 80, namespace="att", created=NOW - 60)
    broken["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in (b"}
    broken["status"] = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in BOTH]}}
    world.apply("services", broken)
    newer = world.api.get("services", "att/s")
    assert newer is not None
    newer["status"] = {"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "VIP"}]}}
    world.api.apply("services", newer)  # on the server, not yet in the cache
    with pytest.raises(ApiError) as raised:
        world.reconciler.reconcile("att/s")
    assert raised.value.status == 409
    assert world.api.ingress("att/s") == ["10.0.0.1"], "the newer status stays"


def _broken_att(*ports: int) -> dict[str, Any]:
    """att/s, a year old, with ``ports`` and a node selector that does not parse."""
    obj = svc_obj("s", ports[0], namespace="att", created=NOW - 365 * 86_400)
    obj["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in (b"}
    obj["spec"]["ports"] = [{"name": f"p{p}", "port": p, "protocol": "TCP"} for p in ports]
    return obj


def test_f13_a_port_dropped_and_added_back_is_a_newcomers_claim() -> None:
    """(Third review, A1.) att/s (malformed selector, kept Cilium-era status, 80 and 443)
    has both recorded at first sight. Its owner drops 443; team-v/web, younger, then
    publishes 443 on both nodes; the owner adds 443 back. Were 443 still recorded in
    att/s's frozen entries, att/s would be incumbent for it again and, older, take 443
    from web. Dropping the port narrows the record, so adding it back is not covered:
    att/s's ingress is withdrawn and web keeps 443 (as with a valid selector)."""
    world = World()
    cilium = _broken_att(80, 443)
    cilium["status"] = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in BOTH]}}
    world.apply("services", cilium)
    world.apply("services", svc_obj("web", 443, namespace="team-v", created=NOW))
    world.reconcile("att/s", "team-v/web")
    assert world.view("att/s").ingress_ports == ((80, "TCP", None), (443, "TCP", None))
    assert not world.api.ingress("team-v/web"), "att/s publishes 443 first"
    world.apply("services", _broken_att(80))
    world.reconcile("att/s", "team-v/web")
    assert world.view("att/s").ingress_ports == ((80, "TCP", None),)
    assert world.api.ingress("team-v/web") == list(BOTH)
    world.apply("services", _broken_att(80, 443))
    world.reconcile("att/s", "team-v/web", "att/s")
    assert world.api.ingress("att/s") == []
    assert world.api.ingress("team-v/web") == list(BOTH)


def test_f14_ports_that_cannot_be_recorded_withdraw_the_kept_ingress_and_say_why() -> None:
    """(Third review, A3.) att/s (malformed selector) has 4,096 ports and a Cilium-era
    status of three entries, two of them one address spelled twice (Cilium writes
    ``::ffff:10.0.0.1`` beside ``10.0.0.1``): recording the ports would take 12,288
    records, over MAX_PORT_RECORDS. Nothing may be cut silently: the ingress is
    withdrawn, with a StaleIngressWithdrawn Warning naming the limit."""
    world = World()
    hog = _broken_att(*range(20000, 24096))
    hog["spec"]["allocateLoadBalancerNodePorts"] = False
    spelled = ["10.0.0.1", "::ffff:10.0.0.1", "10.0.0.2"]
    hog["status"] = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in spelled]}}
    world.apply("services", hog)
    world.reconcile("att/s")
    assert world.api.ingress("att/s") == []
    assert any(
        e.get("reason") == "StaleIngressWithdrawn"
        and "8192 PortStatus records" in e.get("note", "")
        for e in world.api.events
    ), [e.get("note") for e in world.api.events]
