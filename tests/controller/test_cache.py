"""ClusterCache: re-list diffs, the EndpointSlice index, the shared Node snapshot, the
host-network Pods of the port index."""

from __future__ import annotations

from app.controller.cache import KINDS, ClusterCache
from app.core.views import PodView, endpoint_slice_view, node_view
from tests.controller.support import endpoint_slice, node


def test_relist_reports_additions_changes_and_deletions_missed_during_a_gap() -> None:
    cache = ClusterCache()
    a, b = node_view(node("a", internal=["10.0.0.1"])), node_view(node("b", internal=["10.0.0.2"]))
    b2 = node_view(node("b", internal=["10.0.0.3"]))
    c = node_view(node("c", internal=["10.0.0.4"]))
    assert not cache.synced
    cache.replace("nodes", {"a": a, "b": b})
    changes = cache.replace("nodes", {"b": b2, "c": c})
    assert sorted((k, o is not None, n is not None) for k, o, n in changes) == [
        ("a", True, False),
        ("b", True, True),
        ("c", False, True),
    ]
    assert sorted(n.name for n in cache.nodes()) == ["b", "c"]
    assert cache.unsynced() == (
        "services", "endpointslices", "pods", "namespaces", "nodeaddresspools",
    ) and not cache.synced  # fmt: skip


def test_endpoint_slices_are_found_by_service_name_and_follow_relabelling() -> None:
    cache = ClusterCache()
    web = endpoint_slice_view(endpoint_slice("web", nodes=["n1"]))
    moved = endpoint_slice_view(endpoint_slice("api", nodes=["n1"], suffix="abcde"))
    cache.put("endpointslices", "default/web-abcde", web)
    assert cache.endpoint_slices("default", "web") == [web]
    cache.put("endpointslices", "default/web-abcde", moved)
    assert cache.endpoint_slices("default", "web") == []
    assert cache.endpoint_slices("default", "api") == [moved]
    cache.delete("endpointslices", "default/web-abcde")
    assert cache.endpoint_slices("default", "api") == []


def test_node_list_is_rebuilt_after_a_node_change() -> None:
    cache = ClusterCache()
    cache.put("nodes", "a", node_view(node("a")))
    first = cache.nodes()
    assert cache.nodes() is first
    cache.put("nodes", "b", node_view(node("b")))
    assert [n.name for n in cache.nodes()] == ["a", "b"]
    assert [n.name for n in first] == ["a"]


def test_node_index_is_shared_until_a_node_changes() -> None:
    from app.core.selector import parse

    cache = ClusterCache()
    cache.put("nodes", "a", node_view(node("a", labels={"pool": "edge"})))
    cache.put("nodes", "b", node_view(node("b", labels={"pool": "core"})))
    edge = parse("pool=edge")
    index = cache.node_index()
    assert cache.node_index() is index, "one index per Node snapshot"
    assert [n.name for n in index.nodes] == ["a", "b"]
    assert list(index.matching(edge)) == [0]
    cache.put("nodes", "b", node_view(node("b", labels={"pool": "edge"})))
    assert cache.node_index() is not index
    assert list(cache.node_index().matching(edge)) == [0, 1]


def test_host_network_pods_feed_the_port_index_and_the_sync_waits_for_them() -> None:
    """docs/design.md §4.9: the Pods' ports go into the port index on a list, a put and a
    delete (its version moves each time), and the cache is not synced before them."""
    cache = ClusterCache()
    assert KINDS[:4] == ("nodes", "services", "endpointslices", "pods")
    for kind in ("nodes", "services", "endpointslices", "namespaces", "nodeaddresspools"):
        cache.replace(kind, {})
    assert not cache.synced, "no decision before the host-network Pods are known"
    exporter = PodView("monitoring", "exporter", "n1", (("TCP", 9100),))
    version = cache.port_version()
    cache.replace("pods", {"monitoring/exporter": exporter})
    assert cache.synced and cache.pods(("TCP", 9100)) == [exporter]
    assert cache.port_version() > version
    moved = PodView("monitoring", "exporter", "n1", (("UDP", 9100),))
    cache.put("pods", "monitoring/exporter", moved)
    assert (cache.pods(("TCP", 9100)), cache.pods(("UDP", 9100))) == ([], [moved])
    version = cache.port_version()
    cache.delete("pods", "monitoring/exporter")
    assert cache.pods(("UDP", 9100)) == [] and cache.port_version() > version
    cache.put("pods", "monitoring/exporter", exporter)
    assert cache.replace("pods", {}) == [("monitoring/exporter", exporter, None)]
    assert cache.pods(("TCP", 9100)) == [], "a re-list drops what it no longer lists"
