"""NodeAddressPools through the running Controller (docs/design.md §4.13): the informers
feed pools and namespaces' labels to the one decision path, a change of either requeues the
Services it concerns, and a tenant gets nothing a pool does not grant with no webhook in
the path (the reconciler enforces it). The in-memory API serves the CRD; a 404 on its List
(no CRD installed) means no pools, and the controller still becomes ready.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.controller.cache import ClusterCache
from app.controller.informer import Informer
from app.core.pools import pool_from_object
from app.core.views import NamespaceView
from app.kube.client import ApiError
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import QueueAdds, Start, converged, node, service, wait_until
from tests.support.objects import node_address_pool as pool


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def reasons_for(api: MemoryAPI, name: str) -> list[str]:
    return [
        e.get("reason", "")
        for e in api.events
        if (e.get("regarding") or e.get("involvedObject") or {}).get("name") == name
    ]


def seed(api: MemoryAPI) -> None:
    api.apply("nodes", node("edge-1", internal=["10.0.0.1"], labels={"role": "edge"}))
    api.apply("nodes", node("work-1", internal=["10.0.1.1"], labels={"role": "worker"}))
    api.apply("namespaces", namespace("team-a", tenant="a"))
    api.apply("namespaces", namespace("team-b", tenant="b"))


def test_tenants_get_their_pools_nodes_and_a_pool_change_requeues(
    memory_api: MemoryAPI, start: Start
) -> None:
    seed(memory_api)
    memory_api.apply(
        "nodeaddresspools",
        pool(
            "team-a-edge",
            nodeSelector={"matchLabels": {"role": "edge"}},
            ports=[{"port": 80}, {"port": 443}],
            serviceAllocation={"namespaces": ["team-a"]},
        ),
    )
    memory_api.apply(
        "nodeaddresspools",
        pool(
            "team-b-high",
            ports=[{"port": 8000, "endPort": 8999}],
            serviceAllocation={"namespaceSelectors": [{"matchLabels": {"tenant": "b"}}]},
        ),
    )
    memory_api.apply("services", service("web", namespace="team-a", port=443))
    memory_api.apply("services", service("api", namespace="team-b", port=8080))
    memory_api.apply("services", service("stray", namespace="team-a", port=8443))
    start(leader_elect=False)
    wait_until(converged(memory_api, "team-a/web", ["10.0.0.1"]), what="team-a on edge")
    wait_until(
        converged(memory_api, "team-b/api", ["10.0.0.1", "10.0.1.1"]), what="team-b everywhere"
    )
    # No webhook in this path: the reconciler refuses the port outside team-a's pool.
    wait_until(lambda: "PortNotInPool" in reasons_for(memory_api, "stray"), what="the Warning")
    assert not memory_api.ingress("team-a/stray")
    # The administrator widens team-a's pool to every node: its Service follows.
    memory_api.apply(
        "nodeaddresspools",
        pool(
            "team-a-edge",
            ports=[{"port": 80}, {"port": 443}],
            serviceAllocation={"namespaces": ["team-a"]},
        ),
    )
    wait_until(converged(memory_api, "team-a/web", ["10.0.0.1", "10.0.1.1"]), what="widened")
    # A namespace relabelled out of team-b's selector loses its addresses (fail closed).
    memory_api.apply("namespaces", namespace("team-b", tenant="c"))
    wait_until(converged(memory_api, "team-b/api", []), what="team-b refused")
    wait_until(lambda: "NoPool" in reasons_for(memory_api, "api"), what="the NoPool Warning")
    # The last pool gone: today's behaviour again, for every namespace.
    memory_api.delete("nodeaddresspools", "team-a-edge")
    memory_api.delete("nodeaddresspools", "team-b-high")
    wait_until(converged(memory_api, "team-b/api", ["10.0.0.1", "10.0.1.1"]), what="no pools: all")


class _NoCRD:
    """A KubeAPI whose ``nodeaddresspools`` List is a 404 (the CRD is not installed)."""

    def __init__(self) -> None:
        self.lists = 0

    def list_page(self, kind: str, **_: Any) -> dict[str, Any]:
        self.lists += 1
        raise ApiError(404, "the server could not find the requested resource")


def test_no_crd_means_no_pools_and_the_cache_syncs() -> None:
    cache = ClusterCache()
    api = _NoCRD()
    informer = Informer(
        kind="nodeaddresspools",
        api=api,  # type: ignore[arg-type]
        cache=cache,
        to_view=lambda obj: obj,
        handler=lambda kind, changes: None,
    )
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: "nodeaddresspools" not in cache.unsynced(), what="synced empty")
        assert not cache.pools()
        assert informer.stuck_for() < 5, "waiting for a CRD is not a stuck watch"
    finally:
        informer.stop()
        thread.join(5)
    assert api.lists == 1, "it waits before listing again"


def test_another_error_on_an_optional_kind_keeps_it_unsynced() -> None:
    """A 403 (RBAC missing) is not "no pools": pools the controller cannot read must not
    let every tenant through, so readiness waits and names the kind."""

    class Forbidden(_NoCRD):
        def list_page(self, kind: str, **_: Any) -> dict[str, Any]:
            self.lists += 1
            raise ApiError(403, "forbidden")

    cache = ClusterCache()
    api = Forbidden()
    informer = Informer(
        kind="nodeaddresspools",
        api=api,  # type: ignore[arg-type]
        cache=cache,
        to_view=lambda obj: obj,
        handler=lambda kind, changes: None,
        backoff_initial=0.01,
    )
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: api.lists >= 2, what="retries")
        assert "nodeaddresspools" in cache.unsynced()
    finally:
        informer.stop()
        thread.join(5)


def test_a_malformed_selector_keeps_no_stored_address_outside_its_pool(
    memory_api: MemoryAPI, start: Start
) -> None:
    """§4.1 keeps a malformed selector's stored ingress, but under pools only inside the
    Service's pool: addresses it got before the pools (or the webhook) go, and claim no
    port, so the tenant the administrator gave those nodes gets them."""
    seed(memory_api)
    for name, role, tenant in (
        ("team-a-edge", "edge", "team-a"),
        ("team-b-workers", "worker", "team-b"),
    ):
        memory_api.apply(
            "nodeaddresspools",
            pool(
                name,
                nodeSelector={"matchLabels": {"role": role}},
                serviceAllocation={"namespaces": [tenant]},
            ),
        )
    memory_api.apply(
        "services",
        service("old", namespace="team-a", port=80, selector="role in (edge", ingress=["10.0.1.1"]),
    )
    memory_api.apply("services", service("web", namespace="team-b", port=80))
    start(leader_elect=False)
    wait_until(converged(memory_api, "team-a/old", []), what="the stored worker address withdrawn")
    wait_until(converged(memory_api, "team-b/web", ["10.0.1.1"]), what="team-b gets its node")
    wait_until(
        lambda: "StaleIngressWithdrawn" in reasons_for(memory_api, "old"), what="the Warning"
    )


def accepted_in_cache(controller: Any, name: str) -> Callable[[], bool]:
    """A condition: the controller's cache holds pool ``name`` with its ``Accepted``
    condition (the echo of the pool status writer's write has come back)."""
    return lambda: any(
        p.name == name and p.accepted is not None for p in controller.cache.pool_views()
    )


def test_the_echo_of_a_pool_status_write_enqueues_no_service(
    memory_api: MemoryAPI, start: Start
) -> None:
    """Our own ``Accepted`` write on a pool changes its status alone, which no decision
    reads (a pool view's status fields are out of its equality, so the informer reports no
    change): its echo enqueues nothing; otherwise every pool's first write would be a pass
    over every managed Service at a cold start. A change of a pool's spec, and its
    deletion, still enqueue every managed Service, once each."""
    seed(memory_api)
    memory_api.apply("nodeaddresspools", pool("everything"))
    memory_api.apply("services", service("web", namespace="team-a", port=443))
    controller = start(leader_elect=False)
    wait_until(converged(memory_api, "team-a/web", ["10.0.0.1", "10.0.1.1"]), what="first")
    wait_until(accepted_in_cache(controller, "everything"), what="the first echo")
    adds = QueueAdds(controller)
    edge = pool(
        "team-a-edge",
        nodeSelector={"matchLabels": {"role": "edge"}},
        serviceAllocation={"priority": 10, "namespaces": ["team-a"]},
    )
    memory_api.apply("nodeaddresspools", edge)
    wait_until(converged(memory_api, "team-a/web", ["10.0.0.1"]), what="the edge pool")
    wait_until(accepted_in_cache(controller, "team-a-edge"), what="its status echo")
    # The deletion comes after the echo on the same watch: once its effect shows, the
    # echo's handler has run too.
    memory_api.delete("nodeaddresspools", "team-a-edge")
    wait_until(converged(memory_api, "team-a/web", ["10.0.0.1", "10.0.1.1"]), what="deleted")
    assert adds.count == 2, "the creation and the deletion, not the status echo"


def test_a_namespace_update_that_keeps_its_labels_keeps_every_decision() -> None:
    """Only a change of a namespace's labels (what pools read) makes a new PoolSet, which
    starts every memoised decision over."""
    cache = ClusterCache()
    cache.replace("nodeaddresspools", {"p": pool_from_object(pool("p"))})
    cache.put("namespaces", "team-a", NamespaceView("team-a", (("tenant", "a"),)))
    first = cache.pools()
    cache.put("namespaces", "team-a", NamespaceView("team-a", (("tenant", "a"),)))
    assert cache.pools() is first
    cache.put("namespaces", "team-a", NamespaceView("team-a", (("tenant", "b"),)))
    assert cache.pools() is not first
