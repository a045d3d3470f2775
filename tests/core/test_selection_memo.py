"""The admission memo (app/core/selection_memo.py) answers repeats exactly as ``select`` would.

Same inputs, same result: an entry is reused only for an identical Service (apart from
``status`` and ``resourceVersion``), the same Node snapshot, equal EndpointSlices, equal
settings, and a ``now`` before the first NotReady grace period runs out. Each case below
changes one input and checks the memo asks ``select`` again and returns its new answer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.core.nodeindex import NodeIndex
from app.core.nodeipam import Selection, select
from app.core.options import SelectionSettings
from app.core.ports import OWNERSHIP_FIELDS
from app.core.selection_memo import MAX_SELECTOR_CHARS, NotMemoised, SelectionMemo
from app.core.views import ServiceView
from tests.core.builders import NOW, endpoint, endpoint_slice, node, service

Summary = tuple[Any, ...]
SETTINGS = SelectionSettings()


class Counting:
    """A derive function that records how often the memo had to call ``select``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, svc: ServiceView, settings: SelectionSettings, selection: Selection
    ) -> Summary:
        self.calls += 1
        return (selection.ingress, selection.warnings, tuple(v.code for v in selection.nodes))


def pool_nodes(pool: str = "edge") -> NodeIndex:
    return NodeIndex(
        [
            node("a", internal=["10.0.0.1"], labels={"pool": pool}),
            node("b", internal=["10.0.0.2"], labels={"pool": "core"}),
        ]
    )


def ask(
    memo: SelectionMemo[Summary],
    derive: Counting,
    svc: ServiceView,
    nodes: NodeIndex,
    *,
    slices: tuple[Any, ...] = (),
    settings: SelectionSettings = SETTINGS,
    now: float = NOW,
) -> Summary:
    return memo.derived(
        service=svc,
        nodes=nodes,
        endpoint_slices=slices,
        settings=settings,
        now=now,
        derive=derive,
    )


def direct(
    svc: ServiceView, nodes: NodeIndex, *, slices: tuple[Any, ...] = (), now: float = NOW,
    settings: SelectionSettings = SETTINGS,
) -> Summary:  # fmt: skip
    selection = select(service=svc, nodes=nodes, endpoint_slices=slices, settings=settings, now=now)
    return Counting()(svc, settings, selection)


def test_identical_admission_request_is_answered_from_the_memo() -> None:
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    svc = service(selector="pool=edge")
    first = ask(memo, derive, svc, nodes)
    again = ask(memo, derive, service(selector="pool=edge"), nodes)
    assert (derive.calls, memo.hits, memo.misses) == (1, 1, 1)
    assert again == first == direct(svc, nodes)


def test_status_and_resource_version_are_not_part_of_the_key() -> None:
    """A GitOps re-apply carries a new resourceVersion and the current status."""
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    ask(memo, derive, service(selector="pool=edge"), nodes)
    reapplied = dataclasses.replace(
        service(selector="pool=edge", ingress=[{"ip": "192.0.2.1"}]), resource_version="99"
    )
    ask(memo, derive, reapplied, nodes)
    assert derive.calls == 1


def test_select_reads_neither_status_nor_resource_version() -> None:
    """Why leaving them out of the key is exact: select gives the same Selection."""
    nodes = pool_nodes()
    plain = service(selector="pool=edge")
    other = dataclasses.replace(
        service(selector="pool=edge", ingress=[{"ip": "192.0.2.1"}]), resource_version="99"
    )
    assert plain.ingress != other.ingress and plain.resource_version != other.resource_version
    assert select(
        service=plain, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW
    ) == select(service=other, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW)


def test_node_change_drops_the_memo() -> None:
    """The selector matched no Node; a Node relabelled into the pool now matches."""
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive = Counting()
    svc = service(selector="pool=gpu")
    before = ask(memo, derive, svc, pool_nodes("edge"))
    after = ask(memo, derive, svc, pool_nodes("gpu"))
    assert derive.calls == 2 and len(memo) == 1
    assert before != after
    assert after == direct(svc, pool_nodes("gpu"))
    assert after[0] == ({"ip": "10.0.0.1", "ipMode": "VIP"},)


def test_endpoint_slice_change_is_a_miss() -> None:
    """eTP=Local: an endpoint becoming ready on node a gives the Service an ingress."""
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    svc = service(etp="Local")
    not_ready = (endpoint_slice("web", [endpoint("a", ready=False)]),)
    ready = (endpoint_slice("web", [endpoint("a", ready=True)]),)
    before = ask(memo, derive, svc, nodes, slices=not_ready)
    after = ask(memo, derive, svc, nodes, slices=ready)
    assert derive.calls == 2
    assert before[0] == () and after[0] == ({"ip": "10.0.0.1", "ipMode": "VIP"},)
    assert after == direct(svc, nodes, slices=ready)


SERVICE_FIELD_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("namespace", {"namespace": "prod"}),
    ("name", {"name": "api"}),
    ("type", {"type": "NodePort"}),
    ("loadBalancerClass", {"load_balancer_class": "example.com/other"}),
    ("deletionTimestamp", {"deleting": True}),
    ("node selector annotation", {"match_node_labels": "pool=core"}),
    ("externalTrafficPolicy", {"external_traffic_policy": "Local"}),
    ("ipFamilies", {"ip_families": ("IPv6",)}),
    ("ipFamilyPolicy", {"ip_family_policy": "RequireDualStack"}),
]


@pytest.mark.parametrize(
    "changes", [c for _, c in SERVICE_FIELD_CHANGES], ids=[i for i, _ in SERVICE_FIELD_CHANGES]
)
def test_change_to_a_field_select_reads_is_a_miss(changes: dict[str, Any]) -> None:
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    svc = service(selector="pool=edge")
    changed = dataclasses.replace(svc, **changes)
    ask(memo, derive, svc, nodes)
    assert ask(memo, derive, changed, nodes) == direct(changed, nodes)
    assert derive.calls == 2


def test_every_field_select_reads_is_covered_above() -> None:
    """A new ServiceView field must be added to the key or shown unread by select."""
    covered = {next(iter(c)) for _, c in SERVICE_FIELD_CHANGES}
    # uid: Events only, compare=False; the port-ownership fields: app.core.ports only.
    unread = {"ingress", "ingress_ports", "resource_version", "uid", *OWNERSHIP_FIELDS}
    assert {f.name for f in dataclasses.fields(ServiceView)} == covered | unread


def test_settings_change_is_a_miss() -> None:
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    svc = service(selector="pool=edge")
    proxy = SelectionSettings(ip_mode="Proxy")
    ask(memo, derive, svc, nodes)
    after = ask(memo, derive, svc, nodes, settings=proxy)
    assert derive.calls == 2 and after[0] == ({"ip": "10.0.0.1", "ipMode": "Proxy"},)


def test_entry_expires_when_a_not_ready_grace_period_runs_out() -> None:
    settings = SelectionSettings(exclude_not_ready_nodes=True, not_ready_grace_seconds=60)
    nodes = NodeIndex(
        [
            node("a", internal=["10.0.0.1"], ready="False", ready_since=NOW - 30),
            node("b", internal=["10.0.0.2"]),
        ]
    )
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, svc = Counting(), service()
    within = ask(memo, derive, svc, nodes, settings=settings)
    ask(memo, derive, svc, nodes, settings=settings, now=NOW + 29)
    assert derive.calls == 1
    beyond = ask(memo, derive, svc, nodes, settings=settings, now=NOW + 31)
    assert derive.calls == 2
    assert len(within[0]) == 2 and beyond[0] == ({"ip": "10.0.0.2", "ipMode": "VIP"},)
    assert beyond == direct(svc, nodes, settings=settings, now=NOW + 31)


def test_least_recently_used_entry_is_dropped_beyond_the_bound() -> None:
    memo: SelectionMemo[Summary] = SelectionMemo(max_entries=2)
    derive, nodes = Counting(), pool_nodes()
    a, b, c = (service(name) for name in ("a", "b", "c"))
    for svc in (a, b, a, c):  # a used again, so b is the oldest when c arrives
        ask(memo, derive, svc, nodes)
    assert derive.calls == 3 and len(memo) == 2
    ask(memo, derive, a, nodes)
    assert derive.calls == 3
    ask(memo, derive, b, nodes)
    assert derive.calls == 4


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        SelectionMemo(max_entries=0)


def test_memo_only_lookup_answers_hits_and_refuses_misses() -> None:
    """The webhook route answers on the event loop only what needs no select()."""
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes, svc = Counting(), pool_nodes(), service(selector="pool=edge")
    with pytest.raises(NotMemoised):
        memo.derived(
            service=svc, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW,
            derive=derive, compute=False,
        )  # fmt: skip
    assert derive.calls == 0 and len(memo) == 0
    computed = ask(memo, derive, svc, nodes)
    assert computed == memo.derived(
        service=svc, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW,
        derive=derive, compute=False,
    )  # fmt: skip
    assert derive.calls == 1


def test_a_long_node_selector_is_computed_but_never_kept() -> None:
    """Issue 14: each key holds the annotation; 1,024 keys of 256 KiB would pin 256 MiB."""
    memo: SelectionMemo[Summary] = SelectionMemo()
    derive, nodes = Counting(), pool_nodes()
    long = ",".join(["pool=edge"] * (MAX_SELECTOR_CHARS // 9 + 1))
    svc = service(selector=long)
    assert ask(memo, derive, svc, nodes) == direct(svc, nodes)
    assert ask(memo, derive, svc, nodes) == direct(svc, nodes)
    assert derive.calls == 2 and len(memo) == 0
    with pytest.raises(NotMemoised):
        memo.derived(
            service=svc, nodes=nodes, endpoint_slices=(), settings=SETTINGS, now=NOW,
            derive=derive, compute=False,
        )  # fmt: skip
