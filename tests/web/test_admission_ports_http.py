"""POST /validate port rules over HTTP (docs/design.md §7, §4.9): every path of the route
(event loop, review threads, review process, skipped cluster checks) applies them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.web.app import create_app
from tests.core.admission.builders import ANNOTATION, node, review
from tests.core.admission_support import GARBAGE_PORTS, svc
from tests.web.conftest import AppClient, FakeCache, FakeController
from tests.web.support import BlockingLabels

JSON = {"content-type": "application/json"}
NODE_PORT_HOLDER = svc(
    "np", namespace="team-a", type="NodePort", cls=None, ports=((80, "TCP", 30080),)
)
ALPHA = svc(
    "alpha", namespace="team-a", created="2024-01-01T00:00:00Z", ingress=("10.0.0.1", "10.0.0.2")
)


def post(client: AppClient, body: Any) -> httpx.Response:
    return client.post("/validate", content=json.dumps(body).encode(), headers=JSON)


def answer(client: AppClient, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    response = post(client, review(obj, **kwargs))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["response"]
    return result


@pytest.fixture
def pool_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each decision the route sends to the review pools."""
    from app.web.routes import admission as route

    hops: list[str] = []
    real = route.run_in_threadpool

    async def recording(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(kwargs.get("path", "?"))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(route, "run_in_threadpool", recording)
    return hops


@pytest.mark.parametrize("synced", [True, False])
def test_a_reserved_port_is_denied_synced_or_not(
    client: AppClient, cache: FakeCache, synced: bool
) -> None:
    cache.synced = synced
    result = answer(client, svc("ssh", ports=((22, "TCP"),)))
    assert result["allowed"] is False
    assert result["status"]["code"] == 403
    assert result["status"]["message"].startswith(
        "spec.ports[0].port: Forbidden: 22/TCP is reserved for the node itself (SSH);"
    )


def test_a_service_we_do_not_manage_is_untouched_on_port_22(
    client: AppClient, cache: FakeCache
) -> None:
    cache.add_service(NODE_PORT_HOLDER)
    cluster_ip = svc("ssh", type="ClusterIP", cls=None, ports=((22, "TCP"), (30080, "TCP")))
    assert answer(client, cluster_ip) == {"uid": "uid-1", "allowed": True}


def test_a_node_port_conflict_is_denied_naming_the_holder(
    client: AppClient, cache: FakeCache
) -> None:
    cache.add_service(NODE_PORT_HOLDER)
    result = answer(client, svc("new", ports=((30080, "TCP"),)))
    assert result["allowed"] is False
    message = result["status"]["message"]
    assert message.startswith("spec.ports[0].port: Forbidden: 30080/TCP is allocated as a nodePort")
    assert "of Service team-a/np" in message


def test_a_node_port_conflict_is_not_checked_while_the_cache_is_not_synced(
    client: AppClient, cache: FakeCache
) -> None:
    cache.add_service(NODE_PORT_HOLDER)
    cache.synced = False
    assert answer(client, svc("new", ports=((30080, "TCP"),))) == {"uid": "uid-1", "allowed": True}


def test_an_unchanged_node_port_conflict_is_a_warning(client: AppClient, cache: FakeCache) -> None:
    cache.add_service(NODE_PORT_HOLDER)
    obj = svc("new", ports=((30080, "TCP"),))
    result = answer(client, obj, operation="UPDATE", old=obj)
    assert result["allowed"] is True
    assert result["warnings"] == [
        "spec.ports[0].port 30080/TCP is a nodePort of Service team-a/np (unchanged): the Service"
        " gets no node address"
    ]


def test_a_namespace_not_allowed_is_a_warning() -> None:
    settings = Settings(auth="none", allowed_namespaces="prod", review_deadline_seconds=25)
    with AppClient(create_app(settings, controller=FakeController(cache=FakeCache()))) as client:
        result = answer(client, svc("web", ports=((22, "TCP"),)))
    assert result["allowed"] is True
    assert result["warnings"] == [
        "the Service gets no node address: namespace default is not in the setting"
        " allowed-namespaces"
    ]


def test_addresses_lost_to_another_service_are_warned_about(
    client: AppClient, cache: FakeCache, pool_hops: list[str]
) -> None:
    cache.add_service(ALPHA)
    expected = [
        "TCP/80: loses 2 of 2 node addresses (2 nodes) to Service team-a/alpha (same"
        " class, publishes it first)",
        "no node address left: use another port, or a node selector that avoids the holders",
    ]
    first = answer(client, svc("new"))
    assert first["allowed"] is True and first["warnings"] == expected
    assert answer(client, svc("new")) == first
    assert pool_hops == ["/validate"]  # the repeat is answered from the memo, on the event loop


def test_a_conflict_appearing_between_identical_reviews_is_seen(
    client: AppClient, cache: FakeCache
) -> None:
    """The memo keeps selections, never the port decision: the port index is read each time."""
    assert "warnings" not in answer(client, svc("new"))
    cache.add_service(svc("lb", namespace="infra", cls="metallb", ingress=("10.0.0.2",)))
    assert answer(client, svc("new"))["warnings"] == [
        "TCP/80: loses 1 of 2 node addresses (1 node) to the load-balancer ingress of Service"
        " infra/lb"
    ]


def test_the_review_process_applies_the_port_rules(client: AppClient, cache: FakeCache) -> None:
    from app.web.routes.admission import INLINE_BODY_BYTES

    cache.add_service(NODE_PORT_HOLDER)
    cache.add_service(ALPHA)

    def padded(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["annotations"] = {"example.com/padding": "x" * INLINE_BODY_BYTES}
        return obj

    reserved = answer(client, padded(svc("a", ports=((6443, "TCP"),))))
    assert reserved["allowed"] is False and "the kube-apiserver" in reserved["status"]["message"]
    node_port = answer(client, padded(svc("b", ports=((30080, "TCP"),))))
    assert node_port["allowed"] is False and "Service team-a/np" in node_port["status"]["message"]
    lost = answer(client, padded(svc("c")))
    assert lost["allowed"] is True and "team-a/alpha" in lost["warnings"][0]


@pytest.mark.parametrize("ports", GARBAGE_PORTS, ids=[repr(p)[:30] for p in GARBAGE_PORTS])
@pytest.mark.parametrize("cls", ["io.cilium/node", None])
def test_garbage_ports_are_never_a_500(
    client: AppClient, cache: FakeCache, ports: Any, cls: Any
) -> None:
    cache.add_service(NODE_PORT_HOLDER)
    cache.add_service(ALPHA)
    obj = svc("new", ports=ports, cls=cls, type="LoadBalancer" if cls else "ClusterIP")
    for body in (review(obj), review(obj, operation="UPDATE", old=obj)):
        response = post(client, body)
        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert response.json()["detail"].startswith("request.object: spec.")


def test_the_node_port_rule_holds_when_the_cluster_checks_run_out_of_time() -> None:
    """The node-port denial is part of the verdict: a select() that blocks past
    cluster_check_seconds skips the warnings, never the denial."""
    labels = BlockingLabels()
    cache = FakeCache(node_views=[dataclasses.replace(node("n1"), labels=labels)])
    cache.add_service(NODE_PORT_HOLDER)
    cache.add_service(svc("rival", created="2024-01-01T00:00:00Z"))
    labels.armed = True
    settings = Settings(auth="none", cluster_check_seconds=0.1)
    app = create_app(settings, controller=FakeController(cache=cache), clock=lambda: 1e6)

    async def scenario() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            try:
                out = []
                # Both with a selector: select() reads the blocking labels.
                objs = (svc("a", ports=((30080, "TCP"),)), svc("b"))
                for obj in objs:
                    obj["metadata"]["annotations"] = {ANNOTATION: "a=b"}
                for obj in objs:
                    data = json.dumps(review(obj)).encode()
                    response = await asyncio.wait_for(
                        client.post("/validate", content=data, headers=JSON), 10
                    )
                    assert response.status_code == 200
                    out.append(response.json()["response"])
                return out
            finally:
                labels.release.set()
                app.state.node_ipam.limits.pools.shutdown()

    denied, skipped = asyncio.run(scenario())
    assert denied["allowed"] is False and "Service team-a/np" in denied["status"]["message"]
    assert skipped["allowed"] is True
    (warning,) = skipped["warnings"]
    assert warning == (
        "cluster checks skipped (selector match, ready endpoints, port conflicts): not done in"
        " 100 ms"
    )
