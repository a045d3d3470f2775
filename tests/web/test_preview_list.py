"""GET /preview and GET /preview/{namespace}: every live Service, a bounded page at a time
(issue 13, finding 7)."""

from __future__ import annotations

import pytest

from app.web.routes.preview import MAX_LIST_LIMIT
from tests.controller.support import distinct_port
from tests.core.admission.builders import service
from tests.web.conftest import AppClient, FakeCache


def add(cache: FakeCache, namespace: str, name: str) -> None:
    """A managed Service with a port of its own (no port ownership conflict, §4.9)."""
    obj = service(name=name, cls="io.cilium/node")
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["ports"] = [{"port": distinct_port(namespace, name), "protocol": "TCP"}]
    cache.add_service(obj)


def keys(body: dict[str, object]) -> list[str]:
    items = body["items"]
    assert isinstance(items, list)
    return [f"{i['namespace']}/{i['name']}" for i in items]


def test_all_services_in_namespace_name_order(client: AppClient, cache: FakeCache) -> None:
    add(cache, "shop", "b")
    add(cache, "blog", "z")
    body = client.get("/preview").json()
    assert keys(body) == ["blog/z", "default/web", "shop/b"]
    assert body["metadata"] == {"continue": None, "remainingItemCount": 0}
    assert body["items"][1]["ingress"] == [
        {"ip": "10.0.0.1", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]}
    ]
    assert keys(client.get("/preview/shop").json()) == ["shop/b"]
    assert client.get("/preview/nowhere").json()["items"] == []


def test_pages_follow_the_continue_token(client: AppClient, cache: FakeCache) -> None:
    for i in range(7):
        add(cache, "shop", f"s{i}")
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        params = {"limit": 3, **({"continue": token} if token else {})}
        body = client.get("/preview/shop", params=params).json()
        seen += keys(body)
        pages += 1
        token = body["metadata"]["continue"]
        if not token:
            assert body["metadata"]["remainingItemCount"] == 0
            break
    assert pages == 3
    assert seen == [f"shop/s{i}" for i in range(7)]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"limit": MAX_LIST_LIMIT + 1}, 422),
        ({"limit": 0}, 422),
        ({"continue": "not-a-token!"}, 400),
    ],
)
def test_bounds_and_bad_tokens(client: AppClient, params: dict[str, object], status: int) -> None:
    assert client.get("/preview", params=params).status_code == status


def test_lists_are_503_while_the_cache_is_not_synced(client: AppClient, cache: FakeCache) -> None:
    cache.synced = False
    assert client.get("/preview").status_code == 503
    assert client.get("/preview/default").status_code == 503
