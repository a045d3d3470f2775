"""The client layer on the real kubernetes ApiClient: errors, raw watch streams, closing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from app.kube.client import (
    HOST_NETWORK_PODS,
    ApiError,
    ConnectError,
    KubernetesAPI,
    connect,
    pod_field_selector,
)
from tests.controller.support import node, wait_until
from tests.fakeapi.server import FakeApiServer
from tests.support.ports import free_port


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


def test_a_config_map_is_read_absent_is_none_and_a_refusal_raises(fake_api: FakeApiServer) -> None:
    api = KubernetesAPI(fake_api.client())
    assert api.read_config_map(namespace="kube-system", name="kube-proxy") is None
    stored = {"metadata": {"name": "kube-proxy", "namespace": "kube-system"}, "data": {"a": "b"}}
    fake_api.seed([{"apiVersion": "v1", "kind": "ConfigMap", **stored}])
    read = api.read_config_map(namespace="kube-system", name="kube-proxy")
    assert read is not None and read["data"] == {"a": "b"}
    fake_api.fail(method="GET", path="*/configmaps/*", status=403, message="forbidden")
    with pytest.raises(ApiError) as err:
        api.read_config_map(namespace="kube-system", name="kube-proxy")
    assert (err.value.status, err.value.reason) == (403, "forbidden")


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


def test_a_failed_call_is_one_attempt_without_urllib3_retry_chatter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client's default urllib3 Retry(3) logged a ``Retrying (...)`` warning per attempt
    (three quarters of the log lines during an API outage); the callers back off and log."""
    cfg = kubernetes.client.Configuration()  # retries left at the client's default
    cfg.host = f"http://127.0.0.1:{free_port()}"
    api = KubernetesAPI(kubernetes.client.ApiClient(cfg), request_timeout=2)
    with caplog.at_level("DEBUG"), pytest.raises(ApiError) as err:
        api.list_page("nodes", limit=10, continue_token=None)
    assert err.value.status == 0
    assert "Connection refused" in err.value.reason or "refused" in err.value.reason.lower()
    retrying = [r.getMessage() for r in caplog.records if "Retrying" in r.getMessage()]
    assert retrying == []
    starts = [r for r in caplog.records if "Starting new HTTP connection" in r.getMessage()]
    assert len(starts) == 1, "one connection attempt, not four"


def test_list_items_pages_through_a_namespace_and_reads_one_service(
    fake_api: FakeApiServer,
) -> None:
    fake_api.seed([node(f"n{i}") for i in range(7)])
    api = KubernetesAPI(fake_api.client())
    assert [n["metadata"]["name"] for n in api.list_items("nodes", page_size=3)] == [
        f"n{i}" for i in range(7)
    ]
    assert fake_api.requests()["list nodes"] == 3
    assert api.list_items("services", namespace="kube-system") == []
    assert api.read_service(namespace="default", name="absent") is None
    with pytest.raises(ApiError, match="more than 5 nodes"):
        api.list_items("nodes", page_size=3, max_items=5)


def _pod(
    name: str, *, host: bool, namespace: str = "monitoring", host_port: int | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "e:1"}
    if host_port is not None:
        container["ports"] = [{"containerPort": 8080, "hostPort": host_port}]
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [container]}
    if host:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}  # fmt: skip


@pytest.mark.parametrize(
    ("selector", "listed", "watched"),
    [
        pytest.param(
            HOST_NETWORK_PODS,
            ["host-0", "host-2", "host-1"],
            [("ADDED", "host-9")],
            id="host-port-pods off: spec.hostNetwork=true",
        ),
        pytest.param(
            None,
            ["host-0", "host-2", "pod-0", "pod-2", "host-1", "pod-1"],
            [("ADDED", "pod-9"), ("ADDED", "host-9")],
            id="host-port-pods on: every Pod",
        ),
    ],
)
def test_pods_are_listed_and_watched_with_the_field_selector_given(
    fake_api: FakeApiServer, selector: str | None, listed: list[str], watched: list[Any]
) -> None:
    """``field_selector`` goes on every List page, watch and ``list_items`` of ``pods``,
    across all namespaces (``pod_field_selector``: ``spec.hostNetwork=true`` with
    ``host-port-pods`` off, so the others never cross the wire; nothing with it on), and
    nothing is sent without one."""
    assert pod_field_selector(False) == HOST_NETWORK_PODS == "spec.hostNetwork=true"
    assert pod_field_selector(True) is None
    fake_api.seed([_pod(f"host-{i}", host=True, namespace=f"ns-{i % 2}") for i in range(3)])
    fake_api.seed([_pod(f"pod-{i}", host=False, namespace=f"ns-{i % 2}") for i in range(3)])
    api = KubernetesAPI(fake_api.client())
    pages, token = [], None
    while True:
        page = api.list_page("pods", limit=2, continue_token=token, field_selector=selector)
        pages += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages == listed
    assert [
        p["metadata"]["name"] for p in api.list_items("pods", page_size=1, field_selector=selector)
    ] == listed
    version = page["metadata"]["resourceVersion"]
    stream = api.watch(
        "pods", resource_version=version, timeout_seconds=60, field_selector=selector
    )
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for event in stream:
            seen.append((event["type"], event["object"]["metadata"].get("name", "")))

    reader = threading.Thread(target=consume)
    reader.start()
    fake_api.seed([_pod("pod-9", host=False), _pod("host-9", host=True)])
    wait_until(lambda: ("ADDED", "host-9") in seen, what="ADDED event")
    stream.close()
    reader.join(5)
    assert [s for s in seen if s[0] != "BOOKMARK"] == watched
    requests = [r for r in fake_api.request_log() if r["resource"] == "pods"]
    assert requests and {r["path"] for r in requests} == {"/api/v1/pods"}


def test_list_items_keeps_per_page_and_bounds_what_it_reads(fake_api: FakeApiServer) -> None:
    """``keep`` decides per object as each page arrives (the live preview keeps the Pods
    that hold node ports, of every Pod listed); ``max_items`` bounds the objects read,
    kept or not."""
    fake_api.seed([_pod(f"pod-{i}", host=False) for i in range(5)])
    fake_api.seed([_pod("ingress", host=False, host_port=80)])
    api = KubernetesAPI(fake_api.client())
    kept = api.list_items("pods", page_size=2, keep=lambda p: p["metadata"]["name"] == "ingress")
    assert [p["metadata"]["name"] for p in kept] == ["ingress"]
    assert fake_api.requests()["list pods"] == 3
    with pytest.raises(ApiError, match="more than 4 pods"):
        api.list_items("pods", page_size=2, max_items=4, keep=lambda _: False)


def kubeconfig(path: Path, server: str, namespace: str = "default") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: {namespace}}}}}]
current-context: x
"""
    )
    return path


@pytest.mark.parametrize("order", ["kubectl", "controller-runtime"])
def test_connect_reads_the_flag_then_kubeconfig_variable(tmp_path: Path, order: Any) -> None:
    # Before: serve ignored $KUBECONFIG (preview read it); one lookup serves both now.
    env = {
        "KUBECONFIG": str(kubeconfig(tmp_path / "env", "https://127.0.0.2:6443", "envns")),
        "HOME": str(tmp_path / "home"),
    }
    kubeconfig(tmp_path / "home" / ".kube" / "config", "https://127.0.0.3:6443")
    found = connect(environ=env, order=order)
    assert (found.api_client.configuration.host, found.namespace, found.in_cluster) == (
        "https://127.0.0.2:6443",
        "envns",
        False,
    )
    flag = kubeconfig(tmp_path / "flag", "https://127.0.0.4:6443")
    assert connect(flag, environ=env, order=order).api_client.configuration.host == (
        "https://127.0.0.4:6443"
    )


@pytest.mark.parametrize("order", ["kubectl", "controller-runtime"])
def test_connect_falls_back_to_the_home_kubeconfig_outside_a_pod(
    tmp_path: Path, order: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env = {"HOME": str(tmp_path)}
    kubeconfig(tmp_path / ".kube" / "config", "https://127.0.0.3:6443")
    found = connect(environ=env, order=order)
    assert found.api_client.configuration.host == "https://127.0.0.3:6443"
    (tmp_path / ".kube" / "config").unlink()
    with pytest.raises(ConnectError, match="no cluster to talk to: give --kubeconfig PATH"):
        connect(environ=env, order=order)
