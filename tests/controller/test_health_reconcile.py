"""Health-checked nodes in a reconcile (docs/design.md §4.11): what is written, which Event
an operator reads, what the state metrics count, and that a new health view is seen by the
shared selections (keyed by its identity) while an unchanged one costs nothing."""

from __future__ import annotations

from app.core.nodehealth import HealthPolicy, HealthTable
from tests.controller.support import World, node, service


def world_of_three() -> World:
    world = World()
    for i in (1, 2, 3):
        world.apply("nodes", node(f"worker-{i}", internal=[f"10.0.0.{i}"]))
    return world


def fail(table: HealthTable, *names: str, rounds: int = 1) -> None:
    """``rounds`` probe rounds in which ``names`` fail and the other known nodes pass."""
    for _ in range(rounds):
        for name in ("worker-1", "worker-2", "worker-3"):
            bad = name in names
            table.record(name, ok=not bad, detail="GET http://x:10256/healthz: HTTP 503")
        table.evaluate(0.0)


def test_an_unhealthy_node_leaves_the_ingress_with_a_normal_event_and_comes_back() -> None:
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=2, success_threshold=1))
    world.health = table.view
    world.apply("services", service("web"))
    world.reconciler.states.set_managed("default/web", True)
    world.reconcile("default/web")
    assert world.api.ingress("default/web") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]

    fail(table, "worker-2", rounds=2)
    world.health = table.view
    world.reconcile("default/web")
    assert world.api.ingress("default/web") == ["10.0.0.1", "10.0.0.3"]
    event = world.api.events[-1]
    assert (event["type"], event["reason"]) == ("Normal", "NodesUnhealthy")
    note = event.get("note") or event.get("message")
    assert "1 node(s) are not advertised because they fail their kube-proxy health" in note
    assert "worker-2" in note
    assert world.reconciler.states.snapshot()[1] == (2, 0, 1)

    fail(table)  # one good round brings it back (success_threshold 1)
    world.health = table.view
    world.reconcile("default/web")
    assert world.api.ingress("default/web") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert world.reconciler.states.snapshot()[1] == (3, 0, 0)


def test_most_nodes_failing_at_once_writes_nothing() -> None:
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=1))
    world.health = table.view
    world.apply("services", service("web"))
    world.reconcile("default/web")
    writes = world.api.calls["patch services/status"]
    fail(table, "worker-1", "worker-2")  # two of three: the prober's side is suspect
    assert table.view.holding
    world.health = table.view
    world.reconcile("default/web")
    assert world.api.ingress("default/web") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert world.api.calls["patch services/status"] == writes


def test_health_never_empties_a_service_by_itself() -> None:
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=1.0))
    world.apply("services", service("edge", selector="kubernetes.io/hostname=worker-3"))
    fail(table, "worker-3")
    world.health = table.view
    world.reconcile("default/edge")
    assert world.api.ingress("default/edge") == ["10.0.0.3"]
    assert "NodesUnhealthy" not in world.reasons()


def test_a_service_whose_every_candidate_fails_gets_a_warning_and_is_counted() -> None:
    """Advertised anyway (never empty for health alone), but not silently: a Warning Event
    naming the nodes and node_ipam_lb_services{state="assigned", reason="Unhealthy"}."""
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=1, max_unhealthy_fraction=1.0))
    world.apply("services", service("edge", selector="kubernetes.io/hostname=worker-3"))
    world.reconciler.states.set_managed("default/edge", True)
    fail(table, "worker-3")
    world.health = table.view
    world.reconcile("default/edge")
    assert world.api.ingress("default/edge") == ["10.0.0.3"]
    event = world.api.events[-1]
    assert (event["type"], event["reason"]) == ("Warning", "AllNodesUnhealthy")
    note = event.get("note") or event.get("message")
    assert note.startswith("every candidate node fails its kube-proxy health checks: worker-3")
    assert world.reconciler.states.snapshot()[0][("assigned", "Unhealthy")] == 1
    fail(table, rounds=2)  # it recovers (success threshold 2): plainly assigned again
    world.health = table.view
    world.reconcile("default/edge")
    assert world.reconciler.states.snapshot()[0].get(("assigned", "Unhealthy"), 0) == 0


def test_services_sharing_a_selection_see_a_new_health_view_at_once() -> None:
    """Cluster Services with equal selection inputs share one Outcome per Node snapshot and
    health view; the second Service must not reuse the Outcome of the old view."""
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=1))
    world.health = table.view
    for name in ("a", "b"):
        world.apply("services", service(name))
        world.reconcile(f"default/{name}")
    fail(table, "worker-1")
    world.health = table.view
    for name in ("a", "b"):
        world.reconcile(f"default/{name}")
        assert world.api.ingress(f"default/{name}") == ["10.0.0.2", "10.0.0.3"], name


def test_port_ownership_rivals_are_judged_with_the_same_health_view() -> None:
    """Port ownership (§4.9) asks what an older rival claims: with its health-checked
    candidates of the current view, not of a cached older one. ``older`` (worker-1 and
    worker-2) and ``edge`` (worker-1 only) share port 80: ``edge`` gets nothing while
    ``older`` holds 10.0.0.1. When worker-1 fails its checks, ``older`` leaves it, and
    ``edge``, whose only candidate it is (health never empties a list), takes it."""
    world = world_of_three()
    table = HealthTable(HealthPolicy(failure_threshold=1))
    world.health = table.view
    older = service("older", selector="kubernetes.io/hostname in (worker-1,worker-2)", port=80)
    older["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    edge = service("edge", selector="kubernetes.io/hostname=worker-1", port=80)
    edge["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    world.apply("services", older)
    world.apply("services", edge)
    for key in ("default/older", "default/edge"):
        world.reconcile(key)
    assert world.api.ingress("default/older") == ["10.0.0.1", "10.0.0.2"]
    assert not world.api.ingress("default/edge")
    fail(table, "worker-1")
    world.health = table.view
    world.reconcile("default/edge")  # first: older's claims come from the new view
    assert world.api.ingress("default/edge") == ["10.0.0.1"]
    world.reconcile("default/older")
    assert world.api.ingress("default/older") == ["10.0.0.2"]
