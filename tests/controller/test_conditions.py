"""The ``node-ipam-lb.io/NodesServing`` condition the reconciler writes (docs/design.md §5):
once, only on change, beside other controllers' conditions, removed when released."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.conditions import rfc3339
from app.core.options import SelectionSettings
from app.core.views import service_view
from tests.controller.support import EXCLUDE, World, node, service, two_workers

OURS = "node-ipam-lb.io/NodesServing"
THEIRS = {
    "type": "example.com/Probed",
    "status": "True",
    "reason": "Reachable",
    "message": "set by another controller",
    "lastTransitionTime": "2025-01-01T00:00:00Z",
}


@pytest.fixture
def world() -> World:
    return two_workers()


def spy(world: World) -> list[dict[str, Any]]:
    """The patch bodies the reconciler sends from now on."""
    seen: list[dict[str, Any]] = []
    original = world.api.patch_service_status

    def record(**kwargs: Any) -> str | None:
        seen.append(kwargs["patch"])
        return original(**kwargs)

    world.api.patch_service_status = record  # type: ignore[method-assign]
    return seen


def with_conditions(obj: dict[str, Any], *conditions: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"] = list(conditions)
    return obj


def test_written_once_with_the_ingress_and_not_again_when_nothing_changed(world: World) -> None:
    world.apply("services", service("web"))
    world.reconcile("default/web")
    world.reconcile("default/web")
    world.apply("nodes", node("worker-2", internal=["10.0.0.2"], heartbeat="2024-07-16T06:09:00Z"))
    world.reconcile("default/web")
    assert world.api.calls["patch services/status"] == 1
    condition = world.api.serving("default/web")
    assert condition == {
        "type": OURS,
        "status": "True",
        "reason": "Assigned",
        "message": "2 address(es) published on 2 node(s): worker-1, worker-2",
        "lastTransitionTime": rfc3339(world.now),
    }


def test_a_flip_moves_last_transition_time_and_a_new_message_alone_does_not(
    world: World,
) -> None:
    world.apply("services", service("web"))
    world.reconcile("default/web")
    first = world.api.serving("default/web")
    assert first is not None
    world.now += 60
    world.apply("nodes", node("worker-2", internal=["10.0.0.2"], labels={EXCLUDE: ""}))
    world.reconcile("default/web")
    fewer = world.api.serving("default/web")
    assert fewer is not None and fewer["status"] == "True"
    assert fewer["message"] == "1 address(es) published on 1 node(s): worker-1"
    assert fewer["lastTransitionTime"] == first["lastTransitionTime"], "status did not flip"
    world.now += 60
    world.apply("nodes", node("worker-1", internal=["10.0.0.1"], labels={EXCLUDE: ""}))
    world.reconcile("default/web")
    pending = world.api.serving("default/web")
    assert pending is not None
    assert (pending["status"], pending["reason"]) == ("False", "Excluded")
    assert "ExcludedByLabel: worker-1, worker-2" in pending["message"]
    assert pending["lastTransitionTime"] == rfc3339(world.now)
    assert world.api.calls["patch services/status"] == 3


def test_another_controllers_condition_is_kept(world: World) -> None:
    world.apply("services", with_conditions(service("web"), THEIRS))
    world.reconcile("default/web")
    world.apply("nodes", node("worker-1", internal=["10.0.0.1"], labels={EXCLUDE: ""}))
    world.reconcile("default/web")
    stored = world.api.get("services", "default/web")
    assert stored is not None
    types = [c["type"] for c in stored["status"]["conditions"]]
    assert sorted(types) == sorted([OURS, THEIRS["type"]])
    assert THEIRS in stored["status"]["conditions"]


def test_condition_alone_after_an_upgrade_sends_no_ingress_and_no_event(world: World) -> None:
    world.apply("services", service("web"))
    world.reconcile("default/web")
    events = len(world.api.events)
    stored = world.api.get("services", "default/web")
    assert stored is not None
    stored["status"].pop("conditions")
    world.apply("services", stored)
    world.reconciler.reset()  # a new term: nothing remembered
    seen = spy(world)
    world.reconcile("default/web")
    assert [set(p["status"]) for p in seen] == [{"conditions"}]
    assert len(world.api.events) == events, "no IPsAssigned: the ingress did not change"


def test_the_echo_of_a_condition_write_is_our_own(world: World) -> None:
    world.apply("services", service("web"))
    world.reconcile("default/web")
    old = world.cache.service("default", "web")
    world.apply("nodes", node("worker-1", internal=["10.0.0.1"], labels={EXCLUDE: ""}))
    world.reconciler.reconcile("default/web")
    stored = world.api.get("services", "default/web")
    assert stored is not None and old is not None
    assert world.reconciler.is_own_write(old, service_view(stored))
    foreign = with_conditions(stored, {**THEIRS, "type": OURS})
    assert not world.reconciler.is_own_write(old, service_view(foreign))


def test_type_changed_away_the_condition_goes_in_the_write_that_clears_the_ingress(
    world: World,
) -> None:
    world.apply("services", with_conditions(service("web"), THEIRS))
    world.reconcile("default/web")
    released = world.api.get("services", "default/web")
    assert released is not None
    released["spec"]["type"] = "NodePort"
    released["spec"].pop("loadBalancerClass")
    world.apply("services", released)
    seen = spy(world)
    world.reconcile("default/web")
    assert seen == [
        {
            "status": {
                "loadBalancer": {"ingress": []},
                "conditions": [{"$patch": "delete", "type": OURS}],
            }
        }
    ]
    assert world.api.serving("default/web") is None
    stored = world.api.get("services", "default/web")
    assert stored is not None and stored["status"]["conditions"] == [THEIRS]


def test_no_longer_ours_by_setting_loses_the_condition_and_keeps_the_ingress() -> None:
    """A class-less Service under ``default-lb-service-ipam: nodeipam``, then ``lbipam``:
    the ingress may be another controller's now (never written), our condition goes."""
    ours = World(SelectionSettings(default_lb_service_ipam="nodeipam"))
    ours.apply("nodes", node("worker-1", internal=["10.0.0.1"]))
    ours.apply("services", service("web", lb_class=None))
    ours.reconcile("default/web")
    assert ours.api.serving("default/web") is not None
    after = World(SelectionSettings(), api=ours.api, cache=ours.cache)
    seen = spy(after)
    after.reconcile("default/web")
    after.reconcile("default/web")
    assert seen == [{"status": {"conditions": [{"$patch": "delete", "type": OURS}]}}]
    assert after.api.ingress("default/web") == ["10.0.0.1"]
    assert after.api.serving("default/web") is None
    assert after.api.events == ours.api.events, "no StaleIngressWithdrawn: nothing withdrawn"


def test_a_service_of_another_class_with_our_condition_loses_that_condition_only(
    world: World,
) -> None:
    """Our condition on a Service that is not ours (it was, under other settings, or
    someone copied it) says something untrue: it goes, and nothing else is written."""
    svc = with_conditions(service("other", lb_class="example.com/other", ingress=["192.0.2.9"]))
    svc["status"]["conditions"] = [{**THEIRS, "type": OURS}]
    world.apply("services", svc)
    seen = spy(world)
    world.reconcile("default/other")
    assert seen == [{"status": {"conditions": [{"$patch": "delete", "type": OURS}]}}]
    assert world.api.ingress("default/other") == ["192.0.2.9"]
