"""Which Services a Node change re-enqueues (docs/design.md §5 event → keys)."""

from __future__ import annotations

from typing import Any

import pytest

from app.controller.cache import ClusterCache
from app.controller.triggers import services_for_endpoint_slice_changes, services_for_node_change
from app.core.views import endpoint_slice_view, node_view, service_view
from tests.controller.support import EXCLUDE, endpoint_slice, node, service

SERVICES = [
    service("all"),
    service("zone-a", selector="zone=a"),
    service("zone-b", selector="zone=b"),
    service("broken", selector="zone in (a"),
    service("local", local=True),
]


def changed(**overrides: Any) -> dict[str, Any]:
    obj = node("n1", internal=["10.0.0.1"], labels={"zone": "a"})
    for path, value in overrides.items():
        if path == "labels":
            obj["metadata"]["labels"].update(value)
        elif path == "internal":
            obj["status"]["addresses"][0]["address"] = value
        elif path == "heartbeat":
            obj["status"]["conditions"][0]["lastHeartbeatTime"] = value
        elif path == "taint":
            obj["spec"]["taints"] = [{"key": value, "effect": "NoSchedule"}]
    return obj


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    cache.put(
        "endpointslices",
        "default/local-x",
        endpoint_slice_view(endpoint_slice("local", nodes=["n2"])),
    )
    return cache


BEFORE = changed()
CASES = [
    ("heartbeat-only update", BEFORE, changed(heartbeat="2030-01-01T00:00:00Z"), []),
    (
        "exclusion label added: every Service that can select the node",
        BEFORE,
        changed(labels={EXCLUDE: ""}),
        ["default/all", "default/zone-a"],
    ),
    (
        "zone label moved a→b: Services of both zones",
        BEFORE,
        changed(labels={"zone": "b"}),
        ["default/all", "default/zone-a", "default/zone-b"],
    ),
    ("address changed", BEFORE, changed(internal="10.0.0.9"), ["default/all", "default/zone-a"]),
    ("node deleted", BEFORE, None, ["default/all", "default/zone-a"]),
    ("node added", None, BEFORE, ["default/all", "default/zone-a"]),
    (
        "autoscaler taint",
        BEFORE,
        changed(taint="ToBeDeletedByClusterAutoscaler"),
        ["default/all", "default/zone-a"],
    ),
]


@pytest.mark.parametrize(("old", "new", "keys"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_node_change_enqueues_only_services_whose_result_can_change(
    cache: ClusterCache, old: dict[str, Any] | None, new: dict[str, Any] | None, keys: list[str]
) -> None:
    managed = [service_view(s) for s in SERVICES]
    got = services_for_node_change(
        old=node_view(old) if old else None,
        new=node_view(new) if new else None,
        managed=managed,
        cache=cache,
    )
    assert got == keys


def test_local_service_is_enqueued_for_a_node_hosting_its_endpoint(cache: ClusterCache) -> None:
    old = node_view(node("n2", internal=["10.0.0.2"]))
    new = node_view(node("n2", internal=["10.0.0.3"]))
    got = services_for_node_change(
        old=old, new=new, managed=[service_view(s) for s in SERVICES], cache=cache
    )
    assert "default/local" in got


def test_endpoint_slice_changes_enqueue_only_managed_local_services() -> None:
    managed = {
        "default/local": service_view(service("local", local=True)),
        "default/all": service_view(service("all")),
    }
    web = endpoint_slice_view(endpoint_slice("local", nodes=["n1"]))
    other = endpoint_slice_view(endpoint_slice("all", nodes=["n1"]))
    unknown = endpoint_slice_view(endpoint_slice("not-ours", nodes=["n1"]))
    changes = [("a", None, web), ("b", other, None), ("c", unknown, unknown)]
    assert services_for_endpoint_slice_changes(changes=changes, managed=managed) == {
        "default/local"
    }


def test_a_slice_change_of_its_own_backends_enqueues_any_managed_service() -> None:
    """Port ownership's own-backend rule (docs/design.md §4.9) reads every managed Service's
    backend Pods: a change of them enqueues the Service, whatever its traffic policy."""
    managed = {"default/all": service_view(service("all"))}
    before = endpoint_slice("all", nodes=["n1"])
    after = endpoint_slice("all", nodes=["n1"])
    after["endpoints"][0]["targetRef"] = {"kind": "Pod", "name": "edge-1"}
    changes = [("s", endpoint_slice_view(before), endpoint_slice_view(after))]
    assert services_for_endpoint_slice_changes(changes=changes, managed=managed) == {"default/all"}
    same = [("s", endpoint_slice_view(after), endpoint_slice_view(after))]
    assert services_for_endpoint_slice_changes(changes=same, managed=managed) == set()
