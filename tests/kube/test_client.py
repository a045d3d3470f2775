"""The client layer on the real kubernetes ApiClient: errors, raw watch streams, closing."""

from __future__ import annotations

import threading

import kubernetes.client
import pytest

from app.kube.client import ApiError, KubernetesAPI
from tests.controller.support import free_port, node, wait_until
from tests.fakeapi.server import FakeApiServer


def test_no_server_is_an_api_error_with_status_0() -> None:
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{free_port()}"
    cfg.retries = 0
    api = KubernetesAPI(kubernetes.client.ApiClient(cfg), request_timeout=2)
    with pytest.raises(ApiError) as err:
        api.list_page("nodes", limit=10, continue_token=None)
    assert err.value.status == 0


def test_an_error_status_carries_the_api_message(fake_api: FakeApiServer) -> None:
    api = KubernetesAPI(fake_api.client())
    fake_api.fail(method="PATCH", path="*", status=409, message="the object has been modified")
    with pytest.raises(ApiError) as err:
        api.patch_service_status(namespace="default", name="web", patch={})
    assert (err.value.status, err.value.reason) == (409, "the object has been modified")
    assert api.read_lease(namespace="default", name="absent") is None


def test_a_watch_streams_raw_events_and_closes_from_another_thread(
    fake_api: FakeApiServer,
) -> None:
    api = KubernetesAPI(fake_api.client())
    version = api.list_page("nodes", limit=10, continue_token=None)["metadata"]["resourceVersion"]
    stream = api.watch("nodes", resource_version=version, timeout_seconds=60)
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for event in stream:
            seen.append((event["type"], event["object"]["metadata"].get("name", "")))

    reader = threading.Thread(target=consume)
    reader.start()
    fake_api.seed([node("w1", internal=["10.0.0.1"])])
    wait_until(lambda: ("ADDED", "w1") in seen, what="ADDED event")
    stream.close()
    reader.join(5)
    assert not reader.is_alive(), "close() ends a blocked read"


def test_token_and_access_reviews_go_through_the_client_layer(fake_api: FakeApiServer) -> None:
    """app.web.auth's two requests (TokenReview, SubjectAccessReview) as raw JSON, and the
    decision built on them, against the fake API's review endpoints."""
    from app.web.auth import AccessError, KubernetesAuthorizer

    fake_api.add_token("good", username="prom", groups=["system:serviceaccounts"])
    fake_api.allow_non_resource(user="prom", path="/metrics", verb="get")
    api = KubernetesAPI(fake_api.client())
    answer = api.create_token_review(
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
              "spec": {"token": "good"}}
    )  # fmt: skip
    assert answer["status"]["user"]["username"] == "prom"
    authorizer = KubernetesAuthorizer(api)
    authorizer.check(token="good", verb="get", path="/metrics")
    with pytest.raises(AccessError) as denied:
        authorizer.check(token="good", verb="get", path="/preview")
    assert denied.value.status == 403
    with pytest.raises(AccessError) as rejected:
        authorizer.check(token="bad", verb="get", path="/metrics")
    assert rejected.value.status == 401
