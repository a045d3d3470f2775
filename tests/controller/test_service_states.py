"""``node_ipam_lb_services{state, reason}`` and ``node_ipam_lb_service_nodes{verdict}``
(docs/design.md §5, "State metrics"): counted from the reconciler's own outcomes."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from app.core.verdicts import PENDING_CODES
from app.kube.client import ApiError
from app.telemetry import metrics
from tests.controller.support import (
    EXCLUDE,
    World,
    node,
    service,
)


def states(world: World) -> dict[tuple[str, str], int]:
    counts, _ = world.reconciler.states.snapshot()
    return {key: value for key, value in counts.items() if value}


@pytest.fixture
def world() -> World:
    w = World()
    w.apply("nodes", node("worker-1", internal=["10.0.0.1"]))
    w.apply("nodes", node("worker-2", internal=["10.0.0.2"], labels={"tier": "edge"}))
    return w


def manage(world: World, *services: dict[str, Any]) -> None:
    """Apply ``services`` and tell the state tracker they are managed (the controller's
    Service informer handler does this in ``serve``)."""
    for obj in services:
        world.apply("services", obj)
        world.reconciler.states.set_managed(f"default/{obj['metadata']['name']}", True)


def test_each_outcome_is_counted_in_its_state_with_previews_code(world: World) -> None:
    manage(
        world,
        service("web"),
        service("none", selector="tier=gpu"),
        service("bad", selector="tier in (a"),
        service("local", local=True),
        service("later"),
    )
    for name in ("web", "none", "bad", "local"):
        world.reconcile(f"default/{name}")
    assert states(world) == {
        ("assigned", ""): 1,
        ("pending", "SelectorMismatch"): 1,
        ("pending", "NoReadyEndpoint"): 1,
        ("invalid_selector", ""): 1,
        ("unreconciled", ""): 1,
    }
    _, nodes = world.reconciler.states.snapshot()
    assert nodes == (2, 0, 0)  # web: both Nodes advertised; the pending ones: none


def test_a_service_moving_between_states_leaves_its_old_one(world: World) -> None:
    manage(world, service("web", selector="tier=edge"))
    world.reconcile("default/web")
    assert states(world) == {("assigned", ""): 1}
    world.apply(
        "nodes", node("worker-2", internal=["10.0.0.2"], labels={"tier": "edge", EXCLUDE: ""})
    )
    world.reconcile("default/web")
    assert states(world) == {("pending", "Excluded"): 1}
    world.apply("services", service("web", selector="tier in (x"))
    world.reconcile("default/web")
    assert states(world) == {("invalid_selector", ""): 1}
    world.apply("services", service("web"))
    world.reconcile("default/web")
    assert states(world) == {("assigned", ""): 1}
    assert world.reconciler.states.snapshot()[1] == (1, 0, 0)


def test_deleted_and_no_longer_managed_services_leave(world: World) -> None:
    manage(world, service("web"), service("gone"))
    world.reconcile("default/web")
    world.reconcile("default/gone")
    assert states(world) == {("assigned", ""): 2}
    world.api.delete("services", "default/gone")
    world.cache.delete("services", "default/gone")
    world.reconciler.states.set_managed("default/gone", False)
    world.reconcile("default/gone")
    world.apply("services", service("web", lb_class="example.com/other"))
    world.reconcile("default/web")  # not ours any more: forgotten
    assert states(world) == {("unreconciled", ""): 1}  # still listed as managed until the
    world.reconciler.states.set_managed("default/web", False)  # informer says otherwise
    assert states(world) == {}


def test_a_failed_status_write_keeps_the_last_outcome(world: World) -> None:
    manage(world, service("web"))
    world.api.fail("patch services/status", 500)
    with pytest.raises(ApiError):
        world.reconcile("default/web")
    assert states(world) == {("unreconciled", ""): 1}
    world.reconcile("default/web")
    assert states(world) == {("assigned", ""): 1}


def test_an_outcome_before_the_informer_knows_the_service_is_not_counted(world: World) -> None:
    world.apply("services", service("web"))
    world.reconcile("default/web")
    assert states(world) == {}


def test_a_new_leadership_term_starts_from_unreconciled(world: World) -> None:
    manage(world, service("web"), service("none", selector="tier=gpu"))
    world.reconcile("default/web")
    world.reconcile("default/none")
    world.reconciler.reset()
    assert states(world) == {("unreconciled", ""): 2}
    assert world.reconciler.states.snapshot()[1] == (0, 0, 0)


def test_external_ip_preference_hides_are_summed(world: World) -> None:
    world.apply("nodes", node("worker-3", internal=["10.0.0.3"], external=["192.0.2.3"]))
    manage(world, service("a"), service("b"))
    world.reconcile("default/a")
    world.reconcile("default/b")
    assert world.reconciler.states.snapshot()[1] == (2, 4, 0)


def scrape(*trackers: metrics.ServiceStates) -> str:
    registry = CollectorRegistry()
    collector = metrics.ServiceStateCollector(PENDING_CODES)
    for tracker in trackers:
        collector.add(tracker)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_every_state_and_pending_reason_is_a_series_from_the_start() -> None:
    tracker = metrics.ServiceStates(lambda: True)
    tracker.set_managed("default/web", True)
    text = scrape(tracker)
    assert 'node_ipam_lb_services{reason="",state="unreconciled"} 1.0' in text
    assert 'node_ipam_lb_services{reason="",state="assigned"} 0.0' in text
    # Assigned although every candidate fails its health checks (docs/design.md §4.11).
    assert 'node_ipam_lb_services{reason="Unhealthy",state="assigned"} 0.0' in text
    for code in PENDING_CODES:
        assert f'node_ipam_lb_services{{reason="{code}",state="pending"}} 0.0' in text
    assert 'node_ipam_lb_service_nodes{verdict="Selected"} 0.0' in text
    samples = [line for line in text.splitlines() if line.startswith("node_ipam_lb_services{")]
    assert len(samples) == 4 + len(PENDING_CODES)  # bounded: no Service name in any label


def test_a_replica_that_does_not_lead_exports_no_samples() -> None:
    leading = [False]
    tracker = metrics.ServiceStates(lambda: leading[0])
    tracker.set_managed("default/web", True)
    tracker.record("default/web", metrics.PENDING, "NoNodes")
    text = scrape(tracker)
    assert "# TYPE node_ipam_lb_services gauge" in text
    assert "node_ipam_lb_services{" not in text
    leading[0] = True
    assert 'node_ipam_lb_services{reason="NoNodes",state="pending"} 1.0' in scrape(tracker)
