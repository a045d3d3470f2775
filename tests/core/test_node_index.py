"""``select`` gives the same Selection for a plain node list and for a shared NodeIndex.

The reconciler passes ``ClusterCache.node_index()`` (selector matches memoised per Node
snapshot); preview and admission pass lists. docs/design.md §1: one implementation of node
selection, so the two forms must never disagree, in ingress, verdicts, counts or reasons.
"""

from __future__ import annotations

import pytest

from app.core import nodeindex
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import select
from app.core.options import SelectionSettings
from app.core.selector import parse
from tests.core.builders import NOW, node, run, service
from tests.core.select_cases import CASES, Case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_node_index_and_node_list_give_equal_selections(case: Case) -> None:
    index = NodeIndex(case.nodes)
    from_list = run(case.svc, case.nodes, case.slices, **case.settings)
    for attempt in ("first use of the index", "memoised"):
        from_index = select(
            service=case.svc,
            nodes=index,
            endpoint_slices=case.slices,
            settings=SelectionSettings(**case.settings),
            now=NOW,
        )
        assert from_index == from_list, attempt


def test_reason_counts_every_node_not_only_the_matching_ones() -> None:
    """The bug an operator saw: serve logged "from 1 of 1 node(s)", preview "from 1 of 4"."""
    nodes = [node(f"w{i}", internal=[f"10.0.0.{i}"]) for i in range(4)]
    svc = service(selector="kubernetes.io/hostname=w2")
    result = run(svc, NodeIndex(nodes))  # type: ignore[arg-type]
    assert "from 1 of 4 node(s)" in result.reason, result.reason
    assert [v.code for v in result.nodes].count("SelectorMismatch") == 3
    assert result == run(svc, nodes)


def test_one_index_serves_services_with_different_selectors() -> None:
    nodes = [
        node("a", internal=["10.0.0.1"], labels={"pool": "edge"}),
        node("b", internal=["10.0.0.2"], labels={"pool": "core"}),
    ]
    index = NodeIndex(nodes)
    for selector, expected in (("pool=edge", "10.0.0.1"), ("pool=core", "10.0.0.2")):
        for _ in range(2):
            got = run(service(selector=selector), index)  # type: ignore[arg-type]
            assert got.ingress == ({"ip": expected, "ipMode": "VIP"},), selector


def test_matching_is_memoised_per_selector_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = NodeIndex([node("a", labels={"pool": "edge"}), node("b")])
    edge = parse("pool=edge")
    assert list(index.matching(edge)) == [0]
    assert index.matching(edge) is index.matching(edge), "memoised"
    assert [v.code for v in index.mismatch_verdicts()] == ["SelectorMismatch"] * 2
    monkeypatch.setattr(nodeindex, "MAX_MEMOISED_INDICES", 3)
    everything = parse("!nothing")
    assert list(index.matching(everything)) == [0, 1]
    assert index.matching(everything) is index.matching(everything)
    again = index.matching(edge)
    assert list(again) == [0], "the oldest entry was dropped, then recomputed"
    assert list(index.matching(None)) == [0, 1]


def test_selectors_matching_no_node_are_bounded_by_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 14: the memo's bound counted matching positions only, so selectors that
    # match no Node (0 positions) were never dropped until the next Node change.
    monkeypatch.setattr(nodeindex, "MAX_MEMOISED_SELECTORS", 50)
    index = NodeIndex([node("a", labels={"pool": "edge"}), node("b")])
    for i in range(500):
        assert list(index.matching(parse(f"pool=nowhere-{i}"))) == []
    assert index.memoised() == 50
    assert list(index.matching(parse("pool=edge"))) == [0]


def test_a_selector_of_many_requirements_is_matched_but_not_memoised() -> None:
    index = NodeIndex([node("a", labels={"pool": "edge"}), node("b")])
    long = parse(",".join(f"!absent-{i}" for i in range(nodeindex.MAX_MEMOISED_REQUIREMENTS)))
    longer = parse(long.__str__() + ",pool")
    assert list(index.matching(long)) == [0, 1]
    assert list(index.matching(longer)) == [0]
    assert index.memoised() == 1


def test_a_shared_index_narrows_by_label_values_and_still_matches_exactly() -> None:
    """After its first selector an index looks up the Nodes carrying the values of an
    ``=``/``==``/``in`` requirement instead of walking every Node; the matches must stay
    apimachinery's, whatever the other requirements say."""
    import random

    rng = random.Random(7)
    nodes = [
        node(
            f"n{i}",
            internal=[f"10.0.{i // 250}.{i % 250}"],
            labels={
                k: v
                for k, v in (
                    ("pool", rng.choice(["a", "b", "c", "d"])),
                    ("zone", rng.choice(["z1", "z2", ""])),
                    ("rank", str(rng.randint(0, 9))),
                )
                if rng.random() < 0.8
            },
        )
        for i in range(300)
    ]
    texts = [
        "pool=a",
        "pool==b,zone=z1",
        "pool in (a,c),zone!=z2",
        "pool in (a,b,c,d,e),rank>4",
        "zone=,pool",
        "zone in (z1,z2),pool notin (a)",
        "kubernetes.io/hostname in (n3,n299,n1000)",
        "pool=missing",
        "rank<3",
        "!zone",
    ]
    index = NodeIndex(nodes)
    index.matching(parse("pool=d"))  # the index is now a shared one: it narrows
    for text in texts:
        selector = parse(text)
        brute = [i for i, n in enumerate(nodes) if selector.matches(n.labels)]
        assert list(index.matching(selector)) == brute, text
        assert list(index.matching(selector)) == brute, f"{text} (memoised)"


def test_label_value_lookups_are_bounded_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodeindex, "MAX_INDEXED_KEYS", 1)
    nodes = [node("a", labels={"x": "1", "y": "1"}), node("b", labels={"x": "2", "y": "1"})]
    index = NodeIndex(nodes)
    assert list(index.matching(parse("x=1"))) == [0]
    assert list(index.matching(parse("x in (1,2)"))) == [0, 1]  # indexes key x
    assert list(index.matching(parse("y=1"))) == [0, 1]  # past the bound: every Node
    assert list(index.matching(parse("y=1,x=2"))) == [1]
