"""In-memory stand-ins for the cluster cache and the controller, and an app fixture."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio.from_thread
import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.pools import NO_POOL_SET, PoolSet
from app.core.ports import PortIndex, PortKey
from app.core.views import EndpointSliceView, NodeView, PodView, ServiceView, service_view
from app.web.app import create_app
from tests.core.admission.builders import endpoint_slice, node, service


class AppClient:
    """A synchronous client for an ASGI app, lifespan included (httpx ASGI transport).

    Starlette's TestClient warns about httpx (``filterwarnings = error``), so this does
    the same job: an event loop in a thread (anyio blocking portal), the app's lifespan
    entered on it, and every request sent through ``httpx.ASGITransport``.
    """

    def __init__(self, app: FastAPI) -> None:
        self._stack = ExitStack()
        portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        self._portal = portal
        self._stack.enter_context(
            portal.wrap_async_context_manager(app.router.lifespan_context(app))
        )
        transport = httpx.ASGITransport(app=app)
        self._client = httpx.AsyncClient(transport=transport, base_url="https://testserver")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._portal.call(lambda: self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def __enter__(self) -> AppClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._portal.call(self._client.aclose)
        self._stack.close()


@dataclass
class FakeCache:
    """Satisfies the ClusterCache read interface from plain lists."""

    synced: bool = True
    node_views: list[NodeView] = field(default_factory=list)
    service_views: dict[tuple[str, str], ServiceView] = field(default_factory=dict)
    slices: list[EndpointSliceView] = field(default_factory=list)
    _index: NodeIndex | None = field(default=None, repr=False)
    pod_views: list[PodView] = field(default_factory=list)
    selection: SelectionSettings = field(default_factory=SelectionSettings)
    """Decides which Services the port index counts as managed (as ClusterCache's)."""
    pool_set: PoolSet = NO_POOL_SET
    """The NodeAddressPools (docs/design.md §4.13; as ClusterCache.pools())."""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Namespaces' labels by name."""

    def nodes(self) -> list[NodeView]:
        return list(self.node_views)

    def pools(self) -> PoolSet:
        return self.pool_set

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        return self.labels.get(name)

    def unsynced(self) -> tuple[str, ...]:
        return () if self.synced else ("nodes", "services", "endpointslices", "pods")

    def node_index(self) -> NodeIndex:
        """One index per Node snapshot, like ClusterCache: a new one once ``node_views``
        holds other objects (tests append, remove or replace views)."""
        nodes = tuple(self.node_views)
        index = self._index
        if (
            index is None
            or len(index.nodes) != len(nodes)
            or any(a is not b for a, b in zip(index.nodes, nodes, strict=True))
        ):
            index = self._index = NodeIndex(nodes)
        return index

    def service(self, namespace: str, name: str) -> ServiceView | None:
        return self.service_views.get((namespace, name))

    def services(self) -> list[ServiceView]:
        return list(self.service_views.values())

    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]:
        return [
            s for s in self.slices if s.namespace == namespace and s.service_name == service_name
        ]

    def add_service(self, obj: dict[str, Any]) -> None:
        view = service_view(obj)
        self.service_views[(view.namespace, view.name)] = view

    # app.core.ports.PortLookup, from an index built afresh from the lists (tests mutate them).

    def _ports(self) -> PortIndex:
        index = PortIndex(lambda view: is_managed(view, self.selection)[0])
        for view in self.service_views.values():
            index.put_service(f"{view.namespace}/{view.name}", None, view)
        for pod in self.pod_views:
            index.put_pod(f"{pod.namespace}/{pod.name}", None, pod)
        return index

    def claimants(self, key: PortKey) -> list[ServiceView]:
        return self._ports().claimants(key)

    def fixed(self, key: PortKey) -> list[tuple[ServiceView, tuple[str, ...]]]:
        return self._ports().fixed(key)

    def node_port_holders(self, key: PortKey) -> list[tuple[ServiceView, str]]:
        return self._ports().node_port_holders(key)

    def pods(self, key: PortKey) -> list[PodView]:
        return self._ports().pods(key)


@dataclass
class FakeController:
    """Records start/stop; reports the readiness and health it is told."""

    cache: FakeCache
    is_ready: bool = True
    health: tuple[bool, str] = (True, "")
    calls: list[str] = field(default_factory=list)
    leader: bool = False

    def start(self) -> None:
        self.calls.append("start")

    def stop(self, timeout: float = 10.0) -> None:
        self.calls.append("stop")

    def ready(self) -> bool:
        return self.is_ready

    def healthy(self) -> tuple[bool, str]:
        return self.health

    def is_leader(self) -> bool:
        return self.leader


def cluster() -> FakeCache:
    """Two ready nodes (edge-1 10.0.0.1, core-1 10.0.0.2) and one managed Service ``web``."""
    cache = FakeCache(
        node_views=[
            node("edge-1", {"role": "edge"}, "10.0.0.1"),
            node("core-1", {"role": "core"}, "10.0.0.2"),
        ],
        slices=[endpoint_slice("web", "edge-1")],
    )
    cache.add_service(service(cls="io.cilium/node", selector="role=edge"))
    return cache


@pytest.fixture
def cache() -> FakeCache:
    return cluster()


@pytest.fixture
def controller(cache: FakeCache) -> FakeController:
    return FakeController(cache=cache)


@pytest.fixture
def client(controller: FakeController) -> Iterator[AppClient]:
    # These tests pin verdicts, not the deadline (tests/web/test_bounded_cost.py does): a
    # loaded CI machine must not turn a slow first decode in the review process into 503.
    settings = Settings(default_lb_service_ipam="nodeipam", auth="none", review_deadline_seconds=25)
    with AppClient(create_app(settings, controller=controller, clock=lambda: 1e6)) as test_client:
        yield test_client
