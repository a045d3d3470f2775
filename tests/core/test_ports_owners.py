"""Port ownership's rules about who serves a node port (docs/design.md §4.9):

- a Service's own backends (hostNetwork or hostPort Pods named by its EndpointSlices) are
  no rivals, unless the Service sends the port to another port of theirs;
- hostPort Pods hold their port on their node (on ``hostIP`` when set);
- per-port incumbency: an address published for a port keeps it against a Service that
  adds that port later, whatever their ages (``status.loadBalancer.ingress[].ports``);
- a Service that publishes an address nowhere claims nothing there.

Every rule is checked against shuffled index orders: the outcome depends on API state only.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from app.core.options import SelectionSettings
from app.core.ports import PortIndex, incumbent, published_ports, with_port_status
from app.core.views import EndpointSliceView, PodView, ServiceView, endpoint_slice_view, pod_view
from tests.core.builders import NOW
from tests.core.ports_support import BOTH, owned_on, svc

SETTINGS = SelectionSettings()


def hostport_pod(
    name: str,
    node_name: str,
    host_port: int,
    *,
    namespace: str = "team-a",
    container_port: int | None = None,
    host_ip: str | None = None,
    protocol: str | None = None,
    host_network: bool = False,
) -> PodView:
    port: dict[str, Any] = {"containerPort": container_port or host_port}
    if not host_network:
        port["hostPort"] = host_port
    if host_ip is not None:
        port["hostIP"] = host_ip
    if protocol is not None:
        port["protocol"] = protocol
    return pod_view(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "hostNetwork": host_network,
                "nodeName": node_name,
                "containers": [{"name": "c", "ports": [port]}],
            },
            "status": {"phase": "Running"},
        }
    )


def slice_of(
    service: ServiceView,
    *pods: str,
    target: int,
    ready: bool = True,
    serving: bool | None = None,
    pod_namespace: str | None = None,
    nodes: tuple[str, ...] = ("n1",),
) -> EndpointSliceView:
    conditions: dict[str, Any] = {"ready": ready}
    if serving is not None:
        conditions["serving"] = serving
    ref_ns = pod_namespace or service.namespace
    return endpoint_slice_view(
        {
            "metadata": {
                "name": f"{service.name}-abcde",
                "namespace": service.namespace,
                "labels": {"kubernetes.io/service-name": service.name},
            },
            "endpoints": [
                {
                    "addresses": ["10.0.0.1"],
                    "nodeName": nodes[i % len(nodes)],
                    "conditions": conditions,
                    "targetRef": {"kind": "Pod", "name": pod, "namespace": ref_ns},
                }
                for i, pod in enumerate(pods)
            ],
            "ports": [{"name": "", "port": target, "protocol": "TCP"}],
        }
    )


def filled(
    *services: ServiceView,
    pods: tuple[PodView, ...] = (),
    slices: tuple[EndpointSliceView, ...] = (),
    order_seed: int | None = None,
) -> PortIndex:
    """A port index of ``services``, ``pods`` and ``slices``, filled in a shuffled order
    when ``order_seed`` is given."""
    items: list[tuple[str, Any]] = [("svc", s) for s in services]
    items += [("pod", p) for p in pods] + [("slice", s) for s in slices]
    if order_seed is not None:
        random.Random(order_seed).shuffle(items)
    index = PortIndex(lambda view: view.load_balancer_class == "io.cilium/node")
    for kind, item in items:
        put = {"svc": index.put_service, "pod": index.put_pod, "slice": index.put_slice}[kind]
        put(f"{item.namespace}/{item.name}", None, item)
    return index


def decided(target: ServiceView, *others: ServiceView, **kw: Any) -> Any:
    """``target``'s Selection after port ownership among ``others`` (keywords: ``pods``,
    ``slices``, ``order_seed`` of :func:`filled`)."""
    index = filled(target, *others, **kw)
    return owned_on(target, index, SETTINGS, slices=kw.get("slices", ()))


def published(target: ServiceView, *others: ServiceView, **kw: Any) -> tuple[str, ...]:
    """The addresses ``target`` publishes among ``others``."""
    result = decided(target, *others, **kw)
    assert result.ingress is not None
    return tuple(e["ip"] for e in result.ingress)


def reason(target: ServiceView, *others: ServiceView, **kw: Any) -> str:
    """The Selection's reason and its verdicts' reasons, in one string."""
    result = decided(target, *others, **kw)
    return " ".join([result.reason, *(v.reason for v in result.nodes)])


# -- 1. a Service's own backends are no rivals -----------------------------------------------


def test_a_host_network_backend_of_the_service_does_not_block_it() -> None:
    edge = svc("edge", 8095, namespace="edge")
    pod = hostport_pod("edge-57tff", "n1", 8095, namespace="edge", host_network=True)
    assert published(edge, pods=(pod,)) == ("10.0.0.2",)  # the Pod blocks n1 without slices
    own = slice_of(edge, "edge-57tff", target=8095)
    for seed in range(5):
        assert published(edge, pods=(pod,), slices=(own,), order_seed=seed) == BOTH


def test_a_host_port_backend_of_the_service_does_not_block_it() -> None:
    web = svc("web", 8091, namespace="team-a")
    pod = hostport_pod("web-1", "n1", 8091, container_port=8080)
    own = slice_of(web, "web-1", target=8080)
    assert published(web, pods=(pod,), slices=(own,)) == BOTH


def test_a_serving_but_not_ready_backend_still_counts_as_its_own() -> None:
    edge = svc("edge", 8095, namespace="edge")
    pod = hostport_pod("edge-1", "n1", 8095, namespace="edge", host_network=True)
    terminating = slice_of(edge, "edge-1", target=8095, ready=False, serving=True)
    assert published(edge, pods=(pod,), slices=(terminating,)) == BOTH
    starting = slice_of(edge, "edge-1", target=8095, ready=False, serving=False)
    assert published(edge, pods=(pod,), slices=(starting,)) == ("10.0.0.2",)


def test_a_backend_the_service_sends_to_another_port_still_blocks_and_says_so() -> None:
    """The Pod listens on 8095 of its node; the Service sends 8095 to its 9000: publishing
    n1 would take nodeIP:8095 away from the Pod's own listener."""
    edge = svc("edge", 8095, namespace="edge")
    pod = hostport_pod("edge-1", "n1", 8095, namespace="edge", host_network=True)
    other_target = slice_of(edge, "edge-1", target=9000)
    assert published(edge, pods=(pod,), slices=(other_target,)) == ("10.0.0.2",)
    text = reason(edge, pods=(pod,), slices=(other_target,))
    assert "hostNetwork Pod edge/edge-1 (a backend of this Service" in text
    assert "not 8095" in text


def test_a_pod_of_another_namespace_named_by_a_slice_still_blocks() -> None:
    """A tenant who may write EndpointSlices in its namespace cannot make another team's
    hostPort Pod its "own" backend."""
    thief = svc("thief", 8091, namespace="team-b")
    pod = hostport_pod("web-1", "n1", 8091, namespace="team-a")
    forged = slice_of(thief, "web-1", target=8091, pod_namespace="team-a")
    assert forged.backends == frozenset()
    assert published(thief, pods=(pod,), slices=(forged,)) == ("10.0.0.2",)


def test_a_pod_of_another_service_blocks() -> None:
    edge = svc("edge", 8095, namespace="edge")
    other = svc("other", 8095, namespace="edge", created=NOW + 60)
    pod = hostport_pod("edge-1", "n1", 8095, namespace="edge", host_network=True)
    own = slice_of(edge, "edge-1", target=8095)
    assert published(other, edge, pods=(pod,), slices=(own,)) == ()  # n1: Pod; n2: edge


# -- 2. hostPort Pods hold their port ----------------------------------------------------------


def test_a_host_port_pod_holds_its_port_on_its_node_only() -> None:
    pod = hostport_pod("web-1", "n1", 8091)
    thief = svc("thief", 8091, namespace="team-b")
    assert published(thief, pods=(pod,)) == ("10.0.0.2",)
    assert "hostPort Pod team-a/web-1" in reason(thief, pods=(pod,))
    assert published(svc("udp", (8091, "UDP"), namespace="team-b"), pods=(pod,)) == BOTH


def test_a_host_port_on_one_host_ip_holds_that_address_only() -> None:
    nodes_two = hostport_pod("web-1", "n1", 8091, host_ip="10.0.0.9")
    thief = svc("thief", 8091, namespace="team-b")
    assert published(thief, pods=(nodes_two,)) == BOTH  # 10.0.0.9 is not a candidate
    on_n1 = hostport_pod("web-1", "n1", 8091, host_ip="10.0.0.1")
    assert published(thief, pods=(on_n1,)) == ("10.0.0.2",)
    anywhere = hostport_pod("web-1", "n1", 8091, host_ip="0.0.0.0")
    assert anywhere.host_ports[0].host_ip is None
    assert published(thief, pods=(anywhere,)) == ("10.0.0.2",)


def test_a_pod_without_host_ports_holds_nothing() -> None:
    plain = pod_view(
        {
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"nodeName": "n1", "containers": [{"ports": [{"containerPort": 80}]}]},
        }
    )
    assert plain.ports == () and not plain.holds_ports
    sidecar = pod_view(
        {
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {
                "nodeName": "n1",
                "initContainers": [
                    {"restartPolicy": "Always", "ports": [{"containerPort": 9, "hostPort": 99}]},
                    {"ports": [{"containerPort": 8, "hostPort": 98}]},
                ],
            },
        }
    )
    assert sidecar.ports == (("TCP", 99),)


# -- 3. per-port incumbency --------------------------------------------------------------------


def stored(service: ServiceView, ips: tuple[str, ...]) -> ServiceView:
    """``service`` as the controller left it: ``ips`` published for its ports."""
    base = [{"ip": ip, "ipMode": "VIP"} for ip in ips]
    return svc_with_ingress(service, list(with_port_status(base, service)))


def svc_with_ingress(service: ServiceView, ingress: list[dict[str, Any]]) -> ServiceView:
    import dataclasses

    return dataclasses.replace(service, ingress=tuple(ingress))


def test_an_older_service_adding_a_younger_ones_port_does_not_take_it() -> None:
    x_before = svc(
        "x", 8093, namespace="team-a", created=NOW - 600, selector="kubernetes.io/hostname=n1"
    )
    y = stored(
        svc("y", 8094, namespace="team-b", selector="kubernetes.io/hostname=n1"), ("10.0.0.1",)
    )
    x_stored = stored(x_before, ("10.0.0.1",))
    x_after = svc_with_ingress(
        svc(
            "x",
            8093,
            8094,
            namespace="team-a",
            created=NOW - 600,
            selector="kubernetes.io/hostname=n1",
        ),
        list(x_stored.ingress or ()),
    )
    assert not incumbent(x_after, "10.0.0.1") and incumbent(y, "10.0.0.1")
    for seed in range(6):
        assert published(y, x_after, order_seed=seed) == ("10.0.0.1",)
        assert published(x_after, y, order_seed=seed) == ()
    assert "owned by Service team-b/y" in reason(x_after, y)


def test_an_entry_without_ports_counts_for_every_port_of_the_service() -> None:
    """Written by Cilium or before ports were recorded: the migrated Service keeps what it
    publishes (one status write then records the ports)."""
    legacy = svc("legacy", 80, 443, ingress=("10.0.0.1",), created=NOW + 60)
    assert published_ports(legacy) == {"10.0.0.1": None}
    assert incumbent(legacy, "10.0.0.1")
    newcomer = svc("newcomer", 443, created=NOW - 60)
    assert published(legacy, newcomer) == ("10.0.0.1",)
    assert published(newcomer, legacy) == ("10.0.0.2",)


def test_the_ports_are_written_into_each_entry() -> None:
    web = svc("web", 80, (53, "UDP"))
    entries = with_port_status([{"ip": "10.0.0.1", "ipMode": "VIP"}], web)
    assert entries == (
        {
            "ip": "10.0.0.1",
            "ipMode": "VIP",
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        },
    )
    assert published_ports(svc_with_ingress(web, list(entries))) == {
        "10.0.0.1": frozenset({("TCP", 80), ("UDP", 53)})
    }


# -- 4. a Service that publishes nowhere claims nothing -------------------------------------


def test_a_service_that_publishes_nothing_holds_no_port() -> None:
    a = svc("a", 8087, created=NOW - 120)
    b = svc("b", 8087, 8088, created=NOW - 60)
    c = svc("c", 8088, created=NOW)
    for seed in range(6):
        assert published(b, a, c, order_seed=seed) == ()
        assert published(c, a, b, order_seed=seed) == BOTH
        assert published(a, b, c, order_seed=seed) == BOTH


def test_a_chain_of_losers_is_decided_by_rank_order() -> None:
    """a owns 1; b (1, 2) loses; c (2, 3) wins 2 since b publishes nothing; d (3) loses to c."""
    a = svc("a", 1001, created=NOW - 300)
    b = svc("b", 1001, 1002, created=NOW - 200)
    c = svc("c", 1002, 1003, created=NOW - 100)
    d = svc("d", 1003, created=NOW)
    everyone = (a, b, c, d)
    expected = {"a": BOTH, "b": (), "c": BOTH, "d": ()}
    for seed in range(4):
        for target in everyone:
            others = tuple(s for s in everyone if s is not target)
            assert published(target, *others, order_seed=seed) == expected[target.name]


def test_the_outcome_is_one_owner_per_port_whatever_the_order() -> None:
    rng = random.Random(35)
    services: list[ServiceView] = []
    for i in range(9):
        ports = tuple(rng.sample([80, 443, 8080, 8443], rng.randint(1, 3)))
        base = svc(
            f"s{i}",
            *ports,
            namespace=rng.choice(("a", "b")),
            created=NOW - rng.choice((0, 60, 120)),
            selector=rng.choice((None, "kubernetes.io/hostname=n1", "kubernetes.io/hostname=n2")),
        )
        ips = tuple(rng.sample(BOTH, rng.randint(0, 1)))
        # some were published for fewer ports than they have now
        recorded = svc(base.name, *ports[:1], namespace=base.namespace, created=NOW)
        entries = [
            dict(e) for e in with_port_status([{"ip": ip, "ipMode": "VIP"} for ip in ips], recorded)
        ]
        services.append(svc_with_ingress(base, entries))
    results = set()
    for seed, order in enumerate(itertools.islice(itertools.permutations(services), 0, 60, 7)):
        results.add(
            tuple(
                published(s, *(o for o in order if o is not s), order_seed=seed) for s in services
            )
        )
    assert len(results) == 1
    (outcome,) = results
    owner: dict[tuple[str, str, int], str] = {}
    for s, ips in zip(services, outcome, strict=True):
        for ip in ips:
            for protocol, port in s.ports:
                assert (ip, protocol, port) not in owner, (s.name, ip, port, owner)
                owner[ip, protocol, port] = s.name
    # Every port is used somewhere: a lost address is lost to a publishing rival only.
    assert owner
