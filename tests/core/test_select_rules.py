"""docs/design.md §4, rule by rule: one table row per behaviour an operator would recognise."""

from __future__ import annotations

import pytest

from app.core.nodeipam import NodeVerdict
from tests.core.builders import NOW, ips, node, run, service
from tests.core.select_cases import CASES, EXCLUDE, W1, W2, Case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_selection_rule(case: Case) -> None:
    result = run(case.svc, case.nodes, case.slices, unhealthy=case.unhealthy, **case.settings)
    assert result.managed
    assert result.error is None
    assert ips(result) == case.ips
    got = {v.name: v.code for v in result.nodes}
    assert [v.name for v in result.nodes] == [n.name for n in case.nodes]
    for name, code in case.codes.items():
        assert got[name] == code, result.nodes
    for verdict in result.nodes:
        assert verdict.selected == (verdict.code == "Selected")
    if case.warning is not None:
        assert any(case.warning in w for w in result.warnings), result.warnings
    if not case.ips:
        assert result.reason and "address(es)" not in result.reason


def test_entries_carry_ip_mode_vip_by_default_and_proxy_on_request() -> None:
    nodes = [W1]
    assert run(service(), nodes).ingress == ({"ip": "10.0.0.1", "ipMode": "VIP"},)
    assert run(service(), nodes, ip_mode="Proxy").ingress == (
        {"ip": "10.0.0.1", "ipMode": "Proxy"},
    )


def test_not_ready_grace_period_sets_recheck_time() -> None:
    flapping = node("flapping", internal=["10.0.0.9"], ready="False", ready_since=NOW - 30)
    result = run(service(), [flapping, W1], exclude_not_ready_nodes=True)
    assert result.recheck_at == NOW - 30 + 60
    later = run(service(), [flapping, W1], exclude_not_ready_nodes=True, now=NOW + 31)
    assert ips(later) == ["10.0.0.1"]
    assert later.recheck_at is None


def test_recheck_time_is_none_without_the_option() -> None:
    flapping = node("flapping", internal=["10.0.0.9"], ready="False", ready_since=NOW - 30)
    assert run(service(), [flapping]).recheck_at is None


@pytest.mark.parametrize(
    "text",
    ["this is completely/bad=!;lf", "a=b,", "key in (a", "x>1.5"],
)
def test_malformed_selector_gives_an_error_and_no_ingress(text: str) -> None:
    result = run(service(selector=text), [W1])
    assert result.managed is True
    assert result.ingress is None
    assert result.error is not None
    assert result.error.startswith(
        "metadata.annotations[io.cilium.nodeipam/match-node-labels]: Invalid value: "
    )
    assert result.to_dict()["ingress"] is None


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no nodes", "no Nodes in the cluster"),
        ("selector", "no Node matches the node selector pool=gpu"),
        ("excluded", "every matching Node is excluded"),
        ("local", "externalTrafficPolicy is Local and no eligible Node has a ready endpoint"),
        ("family", "no eligible Node has an ExternalIP or InternalIP of family IPv6"),
    ],
)
def test_reason_names_the_step_that_emptied_the_list(case: str, reason: str) -> None:
    excluded = node("cp", internal=["10.0.0.9"], labels={EXCLUDE: ""})
    inputs = {
        "no nodes": (service(), []),
        "selector": (service(selector="pool=gpu"), [W1]),
        "excluded": (service(), [excluded]),
        "local": (service(etp="Local"), [W1]),
        "family": (service(families=("IPv6",)), [W1]),
    }
    svc, nodes = inputs[case]
    assert run(svc, nodes).reason.startswith(reason)


def test_verdicts_are_shared_between_calls() -> None:
    nodes = [node(f"n{i}", internal=[f"10.0.1.{i}"]) for i in range(5)]
    first = run(service(), nodes)
    second = run(service(), nodes)
    assert all(a is b for a, b in zip(first.nodes, second.nodes, strict=True))
    assert isinstance(first.nodes[0], NodeVerdict)
    assert first.nodes[0].reason == "advertised: InternalIP 10.0.1.0"


def test_nodes_may_be_any_iterable() -> None:
    assert ips(run(service(), iter([W2, W1]))) == ["10.0.0.1", "10.0.0.2"]  # type: ignore[arg-type]


def test_the_unhealthy_verdict_says_why_and_what_would_bring_the_node_back() -> None:
    why = (
        "failed 3 kube-proxy health checks in a row"
        " (the last: GET http://10.0.0.2:10256/healthz: HTTP 503)"
    )
    result = run(service(), [W1, W2], unhealthy={"w2": why})
    (verdict,) = [v for v in result.nodes if v.name == "w2"]
    assert verdict.reason.startswith(why)
    assert "not advertised while healthy nodes are" in verdict.reason
