"""Admission port rules (docs/design.md §7, §4.9), pinned on app/core/admission.py.

A managed Service is denied a port reserved for the node (unless granted) and a port that
another Service holds as its allocated nodePort/healthCheckNodePort; an UPDATE that keeps
such a port only warns (ratcheting); a Service in a namespace allowed-namespaces leaves out
is warned about; addresses it would lose to another holder of its port are warned about.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import admission
from app.core.decision import Decider, NotMemoised, selection_key
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.ports import PortIndex
from app.core.views import PodView, endpoint_slice_view, pod_view, service_view
from tests.core.admission.builders import node, review
from tests.core.admission_support import GARBAGE_PORTS, OURS, svc

LBIPAM = SelectionSettings()


NODES = NodeIndex(
    [node("n1", {}, "10.0.0.1"), node("n2", {}, "10.0.0.2"), node("n3", {}, "10.0.0.3")]
)


NOW = 1_800_000_000.0


def index(*objs: dict[str, Any], pods: tuple[PodView, ...] = (), settings_: Any = LBIPAM) -> Any:
    ports = PortIndex(lambda view: is_managed(view, settings_)[0])
    for obj in objs:
        view = service_view(obj)
        ports.put_service(f"{view.namespace}/{view.name}", None, view)
    for pod in pods:
        ports.put_pod(f"{pod.namespace}/{pod.name}", None, pod)
    return ports


def host_pod(name: str, node_name: str, port: int, protocol: str = "TCP") -> PodView:
    return pod_view(
        {
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {
                "hostNetwork": True,
                "nodeName": node_name,
                "containers": [
                    {"name": "c", "ports": [{"containerPort": port, "protocol": protocol}]}
                ],
            },
            "status": {"phase": "Running"},
        }
    )


def snap(
    ports: Any = None, *, memo: Any = None, memo_only: bool = False
) -> admission.ClusterSnapshot:
    return admission.ClusterSnapshot(
        nodes=NODES,
        endpoint_slices=(),
        now=NOW,
        memo=memo,
        memo_only=memo_only,
        ports=ports if ports is not None else index(),
        endpoint_slices_of=lambda namespace, name: (),
    )


def check(
    obj: dict[str, Any] | None,
    *,
    old: dict[str, Any] | None = None,
    settings: SelectionSettings = LBIPAM,
    snapshot: admission.ClusterSnapshot | None = None,
) -> admission.Decision:
    body = review(obj, operation="UPDATE" if old is not None else "CREATE", old=old)
    if obj is not None:
        body["request"]["namespace"] = obj["metadata"]["namespace"]
    request = admission.parse_review(body)
    return admission.validate(request, settings=settings, snapshot=snapshot)


def test_a_reserved_port_is_denied_in_field_error_form() -> None:
    decision = check(svc(ports=((80, "TCP"), (10250, "TCP"))))
    assert not decision.allowed
    assert decision.message == (
        "spec.ports[1].port: Forbidden: 10250/TCP is reserved for the node itself (the kubelet"
        " API); publishing it on node addresses would capture that port of every selected node"
        " (setting reserved-node-ports; an administrator can grant it with"
        " reserved-port-exceptions=default/web:10250)"
    )
    assert decision.verdict == "denied"


@pytest.mark.parametrize(
    ("port", "name"),
    [
        (22, "SSH"),
        (2379, "etcd's client API"),
        (2380, "etcd's peer API"),
        (6443, "the kube-apiserver"),
        (10250, "the kubelet API"),
        (10256, "kube-proxy's health check"),
        (10257, "the kube-controller-manager"),
        (10259, "the kube-scheduler"),
    ],
)
def test_every_default_reserved_port_is_denied_with_its_name(port: int, name: str) -> None:
    decision = check(svc(ports=((port, "TCP"),)))
    assert not decision.allowed
    assert f"{port}/TCP is reserved for the node itself ({name});" in (decision.message or "")


def test_a_reserved_port_of_another_protocol_is_denied_without_a_tcp_name() -> None:
    decision = check(svc(ports=((22, "UDP"),)))
    assert not decision.allowed
    assert "22/UDP is reserved for the node itself; publishing" in (decision.message or "")


def test_a_reserved_port_is_denied_without_any_cluster_state() -> None:
    """The cheap path (verdict) decides it: no snapshot, no port index."""
    decision, subject = admission.verdict(
        admission.parse_review(review(svc(ports=((6443, "TCP"),)))), settings=LBIPAM
    )
    assert not decision.allowed and subject is None


def test_several_reserved_ports_are_one_aggregate_message() -> None:
    decision = check(svc(ports=((22, "TCP"), (80, "TCP"), (6443, "TCP"))))
    message = decision.message or ""
    assert message.startswith("[spec.ports[0].port: Forbidden: 22/TCP")
    assert ", spec.ports[2].port: Forbidden: 6443/TCP" in message and message.endswith("]")


def test_a_service_with_thousands_of_reserved_ports_gets_a_bounded_message() -> None:
    many = tuple((p, "TCP") for p in range(20000, 23000))
    decision = check(svc(ports=many), settings=SelectionSettings(reserved_node_ports="1-65535"))
    assert not decision.allowed
    assert (decision.message or "").endswith(f", and {3000 - admission.MAX_DENIED_PORTS} more]")
    assert len(decision.message or "") < 2000


@pytest.mark.parametrize(
    "exceptions",
    ["default/web:10250", "default/web:10250/TCP", "other/x:1;default/web:10000-10300"],
)
def test_an_exception_grants_a_reserved_port_to_that_service(exceptions: str) -> None:
    settings = SelectionSettings(reserved_port_exceptions=exceptions)
    assert check(svc(ports=((10250, "TCP"),)), settings=settings) == admission.Decision()


@pytest.mark.parametrize(
    "exceptions",
    ["default/other:10250", "team/web:10250", "default/web:10251", "default/web:10250/UDP"],
)
def test_an_exception_for_another_service_or_port_grants_nothing(exceptions: str) -> None:
    settings = SelectionSettings(reserved_port_exceptions=exceptions)
    assert not check(svc(ports=((10250, "TCP"),)), settings=settings).allowed


def test_no_reserved_ports_when_the_setting_is_empty() -> None:
    settings = SelectionSettings(reserved_node_ports="")
    assert check(svc(ports=((22, "TCP"),)), settings=settings).allowed


def test_a_generate_name_service_is_told_to_name_itself_in_the_exception() -> None:
    obj = svc(ports=((22, "TCP"),))
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "web-"
    decision = check(obj)
    assert "reserved-port-exceptions=default/NAME:22)" in (decision.message or "")


@pytest.mark.parametrize(
    "obj",
    [
        svc(type="ClusterIP", cls=None, ports=((22, "TCP"),)),
        svc(type=None, cls=None, ports=((22, "TCP"),)),
        svc(type="NodePort", cls=None, ports=((10250, "TCP"),)),
        svc(cls="metallb", ports=((22, "TCP"),)),
        svc(cls=None, ports=((22, "TCP"),)),  # class-less under lbipam: not ours
    ],
    ids=["ClusterIP", "no type", "NodePort", "another class", "class-less lbipam"],
)
def test_a_service_we_do_not_manage_is_never_denied_a_port(obj: dict[str, Any]) -> None:
    assert check(obj, snapshot=snap(index(svc("np", ports=((22, "TCP", 30022),))))).allowed
    decision = check(
        obj, snapshot=snap(index(svc("x", type="NodePort", cls=None, ports=((80, "TCP", 22),))))
    )
    assert decision == admission.Decision()


def test_a_service_being_deleted_is_never_denied_a_port() -> None:
    obj = svc(ports=((22, "TCP"),))
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check(obj, old=obj).allowed


def test_class_less_service_is_checked_when_default_is_nodeipam() -> None:
    settings = SelectionSettings(default_lb_service_ipam="nodeipam")
    assert not check(svc(cls=None, ports=((22, "TCP"),)), settings=settings).allowed


def test_an_update_keeping_a_reserved_port_is_allowed_with_a_warning() -> None:
    old = svc(ports=((10250, "TCP"),))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"edited": "yes"}
    decision = check(new, old=old)
    assert decision.allowed
    assert decision.warnings == (
        "spec.ports[0].port 10250/TCP is reserved for the node (unchanged): the Service gets no"
        " node address",
    )


def test_an_update_adding_a_reserved_port_is_denied() -> None:
    old = svc(ports=((10250, "TCP"),))
    new = svc(ports=((10250, "TCP"), (22, "TCP")))
    decision = check(new, old=old)
    assert not decision.allowed
    assert (decision.message or "").startswith("spec.ports[1].port: Forbidden: 22/TCP")


def test_an_update_changing_the_protocol_of_a_reserved_port_is_denied() -> None:
    assert not check(svc(ports=((22, "UDP"),)), old=svc(ports=((22, "TCP"),))).allowed


def test_an_update_that_makes_a_service_ours_ratchets_nothing() -> None:
    """A ClusterIP Service never published port 22; switching it to our LoadBalancer would."""
    old = svc(type="ClusterIP", cls=None, ports=((22, "TCP"),))
    assert not check(svc(ports=((22, "TCP"),)), old=old).allowed


def test_finalizing_a_service_with_a_reserved_port_is_allowed() -> None:
    old = svc(ports=((22, "TCP"),))
    new = copy.deepcopy(old)
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check(new, old=old) == admission.Decision()


def test_a_port_that_is_another_services_node_port_is_denied_naming_it() -> None:
    holder = svc("np", namespace="team-a", type="NodePort", cls=None, ports=((8080, "TCP", 30080),))
    decision = check(svc(ports=((443, "TCP"), (30080, "TCP"))), snapshot=snap(index(holder)))
    assert not decision.allowed
    assert decision.message == (
        "spec.ports[1].port: Forbidden: 30080/TCP is allocated as a nodePort"
        " (spec.ports[*].nodePort) of Service team-a/np, which kube-proxy opens on every node"
        " address; publishing it on node addresses would capture that port of every selected node"
    )


def test_a_port_that_is_another_services_health_check_node_port_is_denied() -> None:
    holder = svc("local", namespace="team-b", cls="metallb", health=32000)
    decision = check(svc(ports=((32000, "TCP"),)), snapshot=snap(index(holder)))
    assert not decision.allowed
    assert "32000/TCP is allocated as the healthCheckNodePort (spec.healthCheckNodePort) of" in (
        decision.message or ""
    )
    assert "Service team-b/local" in (decision.message or "")


def test_a_node_port_of_another_protocol_does_not_conflict() -> None:
    holder = svc("np", type="NodePort", cls=None, ports=((53, "UDP", 30053),), health=32000)
    snapshot = snap(index(holder))
    assert check(svc(ports=((30053, "TCP"),)), snapshot=snapshot).allowed
    assert check(svc(ports=((32000, "UDP"),)), snapshot=snapshot).allowed
    assert not check(svc(ports=((30053, "UDP"),)), snapshot=snapshot).allowed


def test_the_services_own_node_port_does_not_conflict() -> None:
    own = svc(ports=((30080, "TCP", 30080),))
    assert check(own, old=own, snapshot=snap(index(own))).allowed


def test_node_port_conflict_is_not_checked_without_a_synced_cache() -> None:
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 30080),))
    assert check(svc(ports=((30080, "TCP"),)), snapshot=None).allowed
    no_index = dataclasses.replace(snap(index(holder)), ports=None)
    assert check(svc(ports=((30080, "TCP"),)), snapshot=no_index).allowed


def test_an_update_keeping_a_node_port_conflict_is_allowed_with_a_warning() -> None:
    holder = svc("np", namespace="team-a", type="NodePort", cls=None, ports=((80, "TCP", 30080),))
    old = svc(ports=((30080, "TCP"),))
    decision = check(old, old=old, snapshot=snap(index(holder)))
    assert decision.allowed
    assert decision.warnings == (
        "spec.ports[0].port 30080/TCP is a nodePort of Service team-a/np (unchanged): the Service"
        " gets no node address",
    )


def test_the_node_port_verdict_is_its_own_cheap_stage() -> None:
    """The node-port rule needs no select: with a memo_only snapshot and an empty memo,
    validate denies without raising NotMemoised (the warnings after it would)."""
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 30080),))
    request = admission.parse_review(review(svc(ports=((30080, "TCP"),))))
    snapshot = snap(index(holder), memo=Decider(LBIPAM), memo_only=True)
    published: list[admission.Decision] = []
    decision = admission.validate(
        request, settings=LBIPAM, snapshot=snapshot, publish=published.append
    )
    assert not decision.allowed and not published


def test_a_verdict_computed_apart_continues_through_validate() -> None:
    """The route's worker process returns verdict() for a large body with the request
    stripped of its objects; validate(prejudged=) runs the rest: the same decision."""
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 30080),))
    for ports in (((30080, "TCP"),), ((8080, "TCP"),)):
        request = admission.parse_review(review(svc(ports=ports)))
        snapshot = snap(index(holder))
        slim = dataclasses.replace(request, object=None, old_object=None)
        apart = admission.validate(
            slim,
            settings=LBIPAM,
            snapshot=snapshot,
            prejudged=admission.verdict(request, settings=LBIPAM),
        )
        assert apart == admission.validate(request, settings=LBIPAM, snapshot=snapshot)


def test_a_service_in_a_namespace_not_allowed_is_admitted_with_a_warning() -> None:
    settings = SelectionSettings(allowed_namespaces="prod,infra")
    decision = check(svc(namespace="dev"), settings=settings, snapshot=snap())
    assert decision.allowed
    assert decision.warnings == (
        "the Service gets no node address: namespace dev is not in the setting allowed-namespaces",
    )


def test_an_allowed_namespace_gets_no_warning() -> None:
    settings = SelectionSettings(allowed_namespaces="prod,infra")
    assert check(svc(namespace="prod"), settings=settings, snapshot=snap()) == admission.Decision()


def test_a_service_that_gets_no_address_is_not_denied_its_ports() -> None:
    """Outside allowed-namespaces nothing is published, so nothing is captured."""
    settings = SelectionSettings(allowed_namespaces="prod")
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 30080),))
    decision = check(
        svc(ports=((22, "TCP"), (30080, "TCP"))), settings=settings, snapshot=snap(index(holder))
    )
    assert decision.allowed
    assert len(decision.warnings) == 1 and "allowed-namespaces" in decision.warnings[0]


def test_the_namespace_warning_is_cut_to_120_characters() -> None:
    settings = SelectionSettings(allowed_namespaces="prod")
    decision = check(svc(namespace="n" * 63), settings=settings)
    (warning,) = decision.warnings
    assert len(warning) <= admission.MAX_WARNING_CHARS and warning.endswith("allowed-namespaces")


def test_a_service_we_do_not_manage_gets_no_namespace_warning() -> None:
    settings = SelectionSettings(allowed_namespaces="prod")
    assert check(svc(namespace="dev", cls="metallb"), settings=settings) == admission.Decision()


ALPHA = svc(
    "alpha",
    namespace="team-a",
    created="2024-01-01T00:00:00Z",
    ingress=("10.0.0.1", "10.0.0.2", "10.0.0.3"),
)


def test_losing_every_address_to_another_managed_service_is_warned_about() -> None:
    decision = check(svc(), snapshot=snap(index(ALPHA)))
    assert decision.allowed
    assert decision.warnings == (
        "TCP/80: loses 3 of 3 node addresses (3 nodes) to Service team-a/alpha (same"
        " class, publishes it first)",
        "no node address left: use another port, or a node selector that avoids the holders",
    )
    assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)


def test_port_warnings_decide_with_the_controllers_health_view() -> None:
    """Admission decides with the leader's health view (docs/design.md §4.11), as the
    reconciler and the REST preview do: a node that fails its health checks is no
    candidate, so the warning does not count it (issue 36)."""
    failing = {"n1": "healthz: connection refused"}
    healthy = check(svc(), snapshot=snap(index(ALPHA)))
    checked = check(svc(), snapshot=dataclasses.replace(snap(index(ALPHA)), unhealthy=failing))
    assert healthy.warnings[0].startswith("TCP/80: loses 3 of 3 node addresses (3 nodes)")
    assert checked.warnings[0].startswith("TCP/80: loses 2 of 2 node addresses (2 nodes)")


def test_another_port_or_protocol_is_no_conflict() -> None:
    assert check(svc(ports=((443, "TCP"),)), snapshot=snap(index(ALPHA))) == admission.Decision()
    assert check(svc(ports=((80, "UDP"),)), snapshot=snap(index(ALPHA))) == admission.Decision()


def test_an_older_service_keeps_what_it_already_publishes() -> None:
    """The reviewed Service is the incumbent: it loses nothing, so no warning."""
    mine = svc(created="2023-01-01T00:00:00Z", ingress=("10.0.0.1", "10.0.0.2", "10.0.0.3"))
    assert check(mine, old=mine, snapshot=snap(index(ALPHA, mine))) == admission.Decision()


def test_another_classes_ingress_takes_its_addresses() -> None:
    metallb = svc("lb", namespace="infra", cls="metallb", ingress=("10.0.0.2",))
    decision = check(svc(), snapshot=snap(index(metallb)))
    assert decision.warnings == (
        "TCP/80: loses 1 of 3 node addresses (1 node) to the load-balancer ingress of Service"
        " infra/lb",
    )


def test_external_ips_of_another_service_take_its_addresses() -> None:
    other = svc("ext", namespace="infra", type="ClusterIP", cls=None, external_ips=("10.0.0.3",))
    decision = check(svc(), snapshot=snap(index(other)))
    assert decision.warnings == (
        "TCP/80: loses 1 of 3 node addresses (1 node) to spec.externalIPs of Service infra/ext",
    )


def test_a_host_network_pod_takes_the_addresses_of_its_node() -> None:
    pods = (host_pod("ingress-nginx", "n2", 80), host_pod("dns", "n1", 80, "UDP"))
    decision = check(svc(), snapshot=snap(index(pods=pods)))
    assert decision.warnings == (
        "TCP/80: loses 1 of 3 node addresses (1 node) to hostNetwork Pod kube-system/ingress-nginx",
    )


def test_conflict_warnings_are_at_most_120_characters_with_long_names() -> None:
    holder = svc("a" * 63, namespace="b" * 63, cls="metallb", ingress=("10.0.0.1",))
    decision = check(svc("c" * 63, namespace="d" * 63), snapshot=snap(index(holder)))
    assert decision.warnings and all(
        len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings
    )
    assert decision.warnings[0].startswith("TCP/80: loses 1 of 3 node addresses (1 node) to")


def test_many_conflicts_give_a_bounded_number_of_warnings() -> None:
    ports = tuple((p, "TCP") for p in range(8000, 8010))
    holders = [
        svc(f"lb{p}", cls="metallb", ports=((p, "TCP"),), ingress=("10.0.0.1",))
        for p in range(8000, 8010)
    ]
    decision = check(svc(ports=ports), snapshot=snap(index(*holders)))
    assert len(decision.warnings) == admission.MAX_CONFLICT_WARNINGS + 1
    assert (
        decision.warnings[-1] == f"and {10 - admission.MAX_CONFLICT_WARNINGS} more port conflict(s)"
    )


def test_a_rival_with_an_unparsable_selector_claims_its_stored_addresses() -> None:
    rival = svc("broken", created="2020-01-01T00:00:00Z", ingress=("10.0.0.1",))
    rival["metadata"]["annotations"] = {"io.cilium.nodeipam/match-node-labels": "a in ("}
    decision = check(svc(), snapshot=snap(index(rival)))
    assert decision.warnings == (
        "TCP/80: loses 1 of 3 node addresses (1 node) to Service default/broken (same"
        " class, publishes it first)",
    )


def test_an_uncontested_port_needs_no_extra_select() -> None:
    memo = Decider(LBIPAM)
    check(svc(ports=((443, "TCP"),)), snapshot=snap(index(ALPHA), memo=memo))
    assert memo.misses == 1  # the selection warnings only


def test_rivals_with_equal_selection_inputs_share_one_select() -> None:
    rivals = [
        svc(f"r{i}", namespace=f"ns{i}", created="2024-01-01T00:00:00Z", ingress=("10.0.0.1",))
        for i in range(50)
    ]
    memo = Decider(LBIPAM)
    decision = check(svc(), snapshot=snap(index(*rivals), memo=memo))
    assert "loses" in decision.warnings[0]
    # one Outcome per distinct selection key: the warnings' and the candidates' are one
    keys = {selection_key(service_view(s)) for s in (svc(), *rivals)}
    assert memo.misses == len(memo) == len(keys) < len(rivals)


def test_memo_only_answers_a_repeat_and_refuses_a_miss() -> None:
    memo = Decider(LBIPAM)
    ports = index(ALPHA)
    with pytest.raises(NotMemoised):
        check(svc(), snapshot=snap(ports, memo=memo, memo_only=True))
    computed = check(svc(), snapshot=snap(ports, memo=memo))
    assert check(svc(), snapshot=snap(ports, memo=memo, memo_only=True)) == computed
    assert computed.warnings


def test_memo_only_refuses_a_port_check_of_too_much_work() -> None:
    """Memoised or not, comparing thousands of addresses is not for the event loop."""
    many = NodeIndex([node(f"n{i}", {}, f"10.1.{i // 256}.{i % 256}") for i in range(1200)])
    memo = Decider(LBIPAM)
    ports = index(svc("alpha", created="2024-01-01T00:00:00Z"))

    def snapshot(memo_only: bool) -> admission.ClusterSnapshot:
        return dataclasses.replace(snap(ports, memo=memo, memo_only=memo_only), nodes=many)

    assert check(svc(), snapshot=snapshot(False)).warnings
    with pytest.raises(NotMemoised, match="port check compares 2400 addresses"):
        check(svc(), snapshot=snapshot(True))


@pytest.mark.parametrize("ports", GARBAGE_PORTS, ids=[repr(p)[:30] for p in GARBAGE_PORTS])
@pytest.mark.parametrize("managed", [True, False])
def test_garbage_ports_get_a_decision_or_a_review_error(ports: Any, managed: bool) -> None:
    obj = svc(ports=ports, cls=OURS if managed else None)
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 22),))
    try:
        decision = check(obj, old=copy.deepcopy(obj), snapshot=snap(index(holder, ALPHA)))
    except admission.ReviewError as err:
        assert str(err).startswith("request.object: spec.")
        return
    assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)


def test_an_integral_float_port_is_the_same_port() -> None:
    assert not check(svc(ports=[{"port": 22.0}])).allowed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


port_entries = st.fixed_dictionaries(
    {},
    optional={
        "port": st.one_of(st.integers(-5, 70000), st.sampled_from([22, 80, 30080]), json_values),
        "protocol": st.one_of(st.sampled_from(["TCP", "UDP", "SCTP", "tcp"]), json_values),
        "nodePort": st.one_of(st.integers(-5, 70000), json_values),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    ports=st.one_of(st.lists(st.one_of(port_entries, json_values), max_size=4), json_values),
    old_ports=st.one_of(st.lists(port_entries, max_size=3), json_values),
    health=st.one_of(st.none(), st.integers(-5, 70000), json_values),
    update=st.booleans(),
)
def test_any_ports_json_is_decided_or_rejected(
    ports: Any, old_ports: Any, health: Any, update: bool
) -> None:
    obj = svc(ports=ports)
    obj["spec"]["healthCheckNodePort"] = health
    old = svc(ports=old_ports) if update else None
    holder = svc("np", type="NodePort", cls=None, ports=((80, "TCP", 22),))
    memo = Decider(LBIPAM)
    try:
        decision = check(obj, old=old, snapshot=snap(index(holder, ALPHA), memo=memo))
    except admission.ReviewError as err:
        assert str(err)
        return
    assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)
    assert decision.allowed or (decision.message or "").startswith(("spec.ports[", "[spec.ports["))


NODE_ONE = "10.0.0.1"


def _published_for(obj: dict[str, Any], ports: list[int]) -> dict[str, Any]:
    """``obj`` with its stored ingress recording ``ports`` (what the controller writes)."""
    for entry in obj["status"]["loadBalancer"]["ingress"]:
        entry["ports"] = [{"port": p, "protocol": "TCP"} for p in ports]
    return obj


def test_adding_a_port_another_service_publishes_is_warned_naming_it() -> None:
    everywhere = ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    older, newer = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
    y = svc("y", namespace="team-b", ports=((8094, "TCP"),), ingress=everywhere, created=newer)
    y = _published_for(y, [8094])
    before = svc("x", namespace="team-a", ports=((8093, "TCP"),), ingress=everywhere,
                 created=older)  # fmt: skip
    before = _published_for(before, [8093])
    after = copy.deepcopy(before)
    after["spec"]["ports"].append({"port": 8094, "protocol": "TCP"})
    decision = check(after, old=before, snapshot=snap(index(y, before)))
    assert decision.allowed
    assert decision.warnings[0].startswith(
        "TCP/8094: loses 3 of 3 node addresses (3 nodes) to Service team-b/y"
    ), decision.warnings


def _pod(host_network: bool, namespace: str = "edge") -> Any:
    port: dict[str, Any] = {"containerPort": 8095}
    if not host_network:
        port["hostPort"] = 8095
    return pod_view(
        {
            "metadata": {"name": "edge-1", "namespace": namespace},
            "spec": {
                "hostNetwork": host_network,
                "nodeName": "n1",
                "containers": [{"name": "c", "ports": [port]}],
            },
            "status": {"phase": "Running"},
        }
    )


def test_a_host_port_pod_is_named_as_such() -> None:
    decision = check(
        svc("thief", namespace="team-b", ports=((8095, "TCP"),)),
        snapshot=snap(index(pods=(_pod(False, "team-a"),))),
    )
    assert any("hostPort Pod team-a/edge-1" in w for w in decision.warnings), decision.warnings


def test_a_services_own_host_network_backend_draws_no_warning() -> None:
    edge = svc("edge", namespace="edge", ports=((8095, "TCP"),))
    lookup = index(pods=(_pod(True),))
    own = endpoint_slice_view(
        {
            "metadata": {
                "name": "edge-abcde",
                "namespace": "edge",
                "labels": {"kubernetes.io/service-name": "edge"},
            },
            "endpoints": [
                {"addresses": [NODE_ONE], "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "name": "edge-1", "namespace": "edge"}}
            ],
            "ports": [{"port": 8095, "protocol": "TCP"}],
        }
    )  # fmt: skip
    assert check(edge, snapshot=snap(lookup)).warnings  # without its slice: warned
    lookup.put_slice("edge/edge-abcde", None, own)
    decision = check(edge, snapshot=snap(lookup))
    assert decision.allowed and decision.warnings == (), decision.warnings
