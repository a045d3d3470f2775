"""docs/design.md §4.11: the health-check rule with a fake clock (app/core/nodehealth.py).

The thresholds and hysteresis (N failures in a row to leave, M passes in a row to come
back), the most-fail rule (more than the fraction unhealthy at once: keep the last set),
and the identity of the view across rounds that change nothing (the reconciler keys its
shared selections by it).
"""

from __future__ import annotations

import pytest

from app.core.nodehealth import NO_HEALTH, HealthPolicy, HealthTable

NODES = [f"n{i}" for i in range(10)]


def round_(table: HealthTable, results: dict[str, bool], *, now: float) -> frozenset[str]:
    """One probe round: every node of ``results`` answered ok or not; then evaluate."""
    for name, ok in results.items():
        table.record(name, ok=ok, detail="" if ok else f"GET http://{name}:10256/healthz: HTTP 503")
    return table.evaluate(now)


def all_ok(**failing: bool) -> dict[str, bool]:
    return {n: not failing.get(n, False) for n in NODES}


def test_a_node_leaves_after_exactly_the_failure_threshold_and_says_why() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=3, success_threshold=2))
    assert round_(table, all_ok(), now=0) == frozenset()
    assert table.view.unhealthy == {}
    for second in (1, 2):
        assert round_(table, all_ok(n3=True), now=second) == frozenset()
        assert "n3" not in table.view.unhealthy, f"left after {second} failure(s)"
    assert round_(table, all_ok(n3=True), now=3) == {"n3"}
    reason = table.view.unhealthy["n3"]
    assert reason == (
        "failed 3 kube-proxy health checks in a row"
        " (the last: GET http://n3:10256/healthz: HTTP 503)"
    )
    assert (table.view.probed, table.view.failing, table.view.holding) == (10, 1, False)


def test_a_pass_between_failures_starts_the_count_again() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=3, success_threshold=2))
    for ok in (False, False, True, False, False):
        round_(table, all_ok(n1=not ok), now=0)
    assert table.view.unhealthy == {}
    round_(table, all_ok(n1=True), now=0)
    assert set(table.view.unhealthy) == {"n1"}


def test_a_node_comes_back_after_the_success_threshold_in_a_row() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1, success_threshold=3))
    round_(table, all_ok(n5=True), now=0)
    assert set(table.view.unhealthy) == {"n5"}
    round_(table, all_ok(), now=1)
    round_(table, all_ok(), now=2)
    round_(table, all_ok(n5=True), now=3)  # a failure resets the passes
    round_(table, all_ok(), now=4)
    round_(table, all_ok(), now=5)
    assert set(table.view.unhealthy) == {"n5"}, "back after 2 passes with threshold 3"
    assert round_(table, all_ok(), now=6) == {"n5"}
    assert table.view.unhealthy == {}


def test_rounds_that_change_nothing_keep_the_same_view_object() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1))
    round_(table, all_ok(n2=True), now=0)
    view = table.view
    for second in range(1, 5):
        assert round_(table, all_ok(n2=True), now=second) == frozenset()
        assert table.view is view


def test_most_fail_keeps_the_last_good_set_until_the_fraction_falls_back() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1, success_threshold=1))
    round_(table, all_ok(n0=True), now=0)
    assert set(table.view.unhealthy) == {"n0"}
    last_good = table.view.unhealthy
    # Six of ten fail at once (more than half): the prober is the likelier casualty.
    failing = {n: True for n in NODES[:6]}
    assert round_(table, all_ok(**failing), now=10) == frozenset()
    view = table.view
    assert view.holding and view.since == 10
    assert view.unhealthy is last_good
    assert (view.probed, view.failing) == (10, 6)
    round_(table, all_ok(**failing), now=20)
    assert table.view.holding and table.view.since == 10, "the hold's start stays"
    # Back to one failing: the hold ends and the real set is used.
    assert round_(table, all_ok(n9=True), now=30) == {"n0", "n9"}
    assert not table.view.holding and table.view.since is None
    assert set(table.view.unhealthy) == {"n9"}


def test_exactly_the_fraction_is_not_yet_most() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=0.5))
    round_(table, all_ok(**{n: True for n in NODES[:5]}), now=0)
    assert not table.view.holding
    assert len(table.view.unhealthy) == 5


def test_a_fraction_of_one_turns_the_most_fail_rule_off() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=1.0))
    round_(table, {n: False for n in NODES}, now=0)
    assert not table.view.holding and len(table.view.unhealthy) == len(NODES)


def test_deleted_nodes_are_forgotten_also_from_a_held_set() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1))
    round_(table, all_ok(n0=True), now=0)
    round_(table, {n: False for n in NODES}, now=1)
    assert table.view.holding and set(table.view.unhealthy) == {"n0"}
    table.retain(NODES[1:])
    assert table.evaluate(2) == {"n0"}
    assert table.view.unhealthy == {}
    table.retain(())
    table.evaluate(3)
    assert table.view == NO_HEALTH


def test_a_node_never_probed_counts_as_healthy_and_not_as_probed() -> None:
    table = HealthTable(HealthPolicy(failure_threshold=1))
    round_(table, {"n0": False, "n1": True, "n2": True}, now=0)
    assert set(table.view.unhealthy) == {"n0"}
    assert table.view.probed == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"failure_threshold": 0}, {"success_threshold": 0}, {"max_unhealthy_fraction": 0.0},
     {"max_unhealthy_fraction": 1.5}],
)  # fmt: skip
def test_thresholds_out_of_range_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HealthPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_hold_stops_removals_but_lets_a_recovered_node_return() -> None:
    """The set before the hold is kept, minus what recovers: four nodes, n0 out; then all
    four fail; then n0 passes while n1-n3 still fail (still most): n0 comes back, n1-n3
    do not leave."""
    table = HealthTable(HealthPolicy(failure_threshold=1, success_threshold=1))
    four = ["n0", "n1", "n2", "n3"]
    round_(table, {"n0": False, "n1": True, "n2": True, "n3": True}, now=0)
    assert set(table.view.unhealthy) == {"n0"}
    round_(table, dict.fromkeys(four, False), now=1)
    assert table.view.holding and set(table.view.unhealthy) == {"n0"}
    changed = round_(table, {"n0": True, "n1": False, "n2": False, "n3": False}, now=2)
    assert table.view.holding and table.view.unhealthy == {}
    assert changed == {"n0"}


def test_a_break_in_the_middle_of_a_round_removes_nobody() -> None:
    """The prober's network breaks after n4 in round 1 (threshold 3): n5-n9 reach three
    failures one round before n0-n4, but by then every latest probe fails: a hold, not a
    removal of half the nodes."""
    table = HealthTable(HealthPolicy(failure_threshold=3))
    round_(table, all_ok(), now=0)
    round_(table, {n: n < "n5" for n in NODES}, now=1)  # the break after n4
    for second in (2, 3, 4):
        round_(table, {n: False for n in NODES}, now=second)
        assert table.view.unhealthy == {}, f"round {second}: {dict(table.view.unhealthy)}"
        assert table.view.holding
    assert table.failing_sample(2) == [
        "n0: GET http://n0:10256/healthz: HTTP 503",
        "n1: GET http://n1:10256/healthz: HTTP 503",
    ]


def test_probe_targets_leave_out_what_no_service_can_get_unless_the_label_is_ignored() -> None:
    """KEP-3458 nodes are not probed; with ignore-exclude-lb a labelled node is a candidate,
    so it is probed (its first InternalIP), while a node being deleted still is not."""
    from app.core.nodehealth import probe_targets
    from tests.core.builders import node

    label = {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
    nodes = [
        node("w1", internal=["10.0.0.1"], external=["198.51.100.1"]),
        node("cp", internal=["10.0.0.9"], labels=label),
        node("gone", internal=["10.0.0.8"], deleting=True),
        node("bare"),
    ]
    assert probe_targets(nodes) == {"w1": "10.0.0.1"}
    assert probe_targets(nodes, ignore_exclude_lb=True) == {"w1": "10.0.0.1", "cp": "10.0.0.9"}


def test_a_seeded_node_stays_out_until_success_threshold_good_probes() -> None:
    """The previous Lease holder's decision is taken over as if made here (§4.11)."""
    table = HealthTable(HealthPolicy(failure_threshold=3, success_threshold=2))
    table.seed({"a": "failed 3 kube-proxy health checks in a row (the last: HTTP 503)"})
    assert set(table.view.unhealthy) == {"a"}
    for node in ("a", "b"):
        table.record(node, ok=True, detail="")
    assert table.evaluate(1.0) == frozenset() and set(table.view.unhealthy) == {"a"}
    table.record("a", ok=True, detail="")
    table.record("b", ok=True, detail="")
    assert table.evaluate(2.0) == {"a"} and table.view.unhealthy == {}


def test_a_seeded_set_is_what_the_most_fail_rule_keeps() -> None:
    """Most nodes fail right after a leader change: the hold keeps the seeded set, not none."""
    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=0.5))
    table.seed({"a": "failed"})
    for node in ("a", "b", "c"):
        table.record(node, ok=False, detail="HTTP 503")
    table.evaluate(1.0)
    assert table.view.holding and set(table.view.unhealthy) == {"a"}


def test_mirror_keeps_the_view_object_while_the_record_is_the_same() -> None:
    table = HealthTable(HealthPolicy())
    assert table.mirror({"a": "x"}) == {"a"}
    view = table.view
    assert table.mirror({"a": "x"}) == frozenset() and table.view is view
    assert table.mirror({}) == {"a"} and table.view.unhealthy == {}


def test_the_record_round_trips_and_refuses_what_it_did_not_write() -> None:
    from app.core.nodehealth import MAX_RECORD_BYTES, decode_unhealthy, encode_unhealthy

    unhealthy = {"b": "HTTP 503", "a": "x" * 1000}
    decoded = decode_unhealthy(encode_unhealthy(unhealthy))
    assert decoded == {"a": "x" * 256, "b": "HTTP 503"}
    assert decode_unhealthy(None) == {}
    assert decode_unhealthy('{"a": 1, "b": "", "": "x"}') == {
        "b": "unhealthy (as recorded by the previous Lease holder)"
    }
    for bad in ("[1]", "not json", "x" * (MAX_RECORD_BYTES + 1)):
        with pytest.raises(ValueError, match=r"node-ipam-lb\.io/unhealthy-nodes"):
            decode_unhealthy(bad)
    many = {f"node-{i:05d}": "failed 3 kube-proxy health checks in a row" for i in range(5000)}
    text = encode_unhealthy(many)
    assert len(text.encode()) <= MAX_RECORD_BYTES
    assert 0 < len(decode_unhealthy(text)) <= len(many)
