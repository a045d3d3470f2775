"""Pods as the controller's fourth informer meets them: every Pod listed and watched
without a field selector (``host-port-pods``, the default), the ``spec.hostNetwork``
field selector on lists and watches across namespaces (the setting off), what an
unsupported field label answers,
and the create and graceful delete rules a host-network Pod goes through
(kube-apiserver ``pkg/registry/core/pod/strategy.go``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakeapi_contract.conftest import ApiServer

HOST_NETWORK = "spec.hostNetwork=true"
"""What the controller sends with ``host-port-pods`` off (app.kube.client.HOST_NETWORK_PODS)."""


def pod(name: str, *, host: bool, node_name: str | None = "n1", **extra: Any) -> dict[str, Any]:
    """A Pod declaring TCP/9100, bound to ``node_name`` (``None``: unbound)."""
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "exporter:1", "ports": [{"containerPort": 9100}]}],
        **extra,
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if host:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def pods(api_server: ApiServer, ns: str) -> Iterator[str]:
    """The collection path of ``ns``'s Pods, with its ``default`` ServiceAccount (no
    controller-manager makes it; the ServiceAccount admission plugin wants it). Pods left
    at the end are deleted at once (a bound Pod's delete otherwise waits for a kubelet)."""
    path = f"/api/v1/namespaces/{ns}/pods"
    code, body, _ = api_server.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}}
    )
    assert code == 201, body
    yield path
    _, listed, _ = api_server.request("GET", path)
    for item in listed.get("items", []):
        api_server.request(
            "DELETE", f"{path}/{item['metadata']['name']}", {"gracePeriodSeconds": 0}
        )


def create(api_server: ApiServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    code, made, _ = api_server.request("POST", path, body)
    assert code == 201, made
    result: dict[str, Any] = made
    return result


def names(api_server: ApiServer, selector: str, ns: str) -> list[str]:
    code, listed, _ = api_server.request("GET", "/api/v1/pods", query={"fieldSelector": selector})
    assert code == 200, listed
    return [p["metadata"]["name"] for p in listed["items"] if p["metadata"]["namespace"] == ns]


def watch_lines(api_server: ApiServer, query: dict[str, str]) -> list[dict[str, Any]]:
    """Every event of a cluster-wide Pod watch that ends after ``timeoutSeconds``."""
    api_client = api_server.client()
    from urllib.parse import urlencode

    url = f"{api_client.configuration.host}/api/v1/pods?{urlencode(query)}"
    resp = api_client.rest_client.pool_manager.request("GET", url, timeout=20)
    assert resp.status == 200, resp.data
    return [json.loads(line) for line in resp.data.splitlines() if line.strip()]


def test_the_host_network_field_selector_filters_lists_and_watches(
    api_server: ApiServer, pods: str, ns: str
) -> None:
    _, before, _ = api_server.request("GET", "/api/v1/pods", query={"limit": "1"})
    start = before["metadata"]["resourceVersion"]
    create(api_server, pods, pod("exporter", host=True))
    create(api_server, pods, pod("web", host=False))
    assert names(api_server, HOST_NETWORK, ns) == ["exporter"]
    # strconv.FormatBool: a Pod without the field is "false", never "".
    assert names(api_server, "spec.hostNetwork=false", ns) == ["web"]
    assert names(api_server, "spec.hostNetwork!=true", ns) == ["web"]
    assert names(api_server, "spec.hostNetwork=True", ns) == []
    assert names(api_server, "spec.host=n1", ns) == ["exporter", "web"]  # spec.nodeName
    events = watch_lines(
        api_server,
        {"watch": "true", "resourceVersion": start, "fieldSelector": HOST_NETWORK,
         "timeoutSeconds": "1"},
    )  # fmt: skip
    ours = [
        (e["type"], e["object"]["metadata"]["name"])
        for e in events
        if e["object"].get("metadata", {}).get("namespace") == ns
    ]
    assert ours == [("ADDED", "exporter")]


def test_without_a_field_selector_every_pod_is_listed_in_pages_and_watched(
    api_server: ApiServer, pods: str, ns: str
) -> None:
    """``host-port-pods`` (the default): no ``fieldSelector``, so the pages and the watch
    carry every Pod, host network or not, with its ``hostPort`` as stored (defaulted
    protocol), and a status update of an ordinary Pod is a MODIFIED event like any
    other (the informer drops it)."""
    _, before, _ = api_server.request("GET", "/api/v1/pods", query={"limit": "1"})
    start = before["metadata"]["resourceVersion"]
    create(api_server, pods, pod("exporter", host=True))
    create(api_server, pods, pod("web", host=False))
    ingress = pod("ingress", host=False)
    ingress["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 80}]
    create(api_server, pods, ingress)
    code, _, _ = api_server.request(
        "PATCH",
        f"{pods}/web/status",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    listed, token = [], None
    while True:
        query = {"limit": "2", **({"continue": token} if token else {})}
        code, page, _ = api_server.request("GET", pods, query=query)
        assert code == 200, page
        listed += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert [p["metadata"]["name"] for p in listed] == ["exporter", "ingress", "web"]
    assert listed[1]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 8080, "hostPort": 80, "protocol": "TCP"}
    ]
    events = watch_lines(api_server, {"watch": "true", "resourceVersion": start,
                                      "timeoutSeconds": "1"})  # fmt: skip
    ours = [
        (e["type"], e["object"]["metadata"]["name"])
        for e in events
        if e["object"].get("metadata", {}).get("namespace") == ns
    ]
    assert ours == [
        ("ADDED", "exporter"), ("ADDED", "web"), ("ADDED", "ingress"), ("MODIFIED", "web")
    ]  # fmt: skip


def test_an_unsupported_pod_field_label_is_400(api_server: ApiServer) -> None:
    code, body, _ = api_server.request(
        "GET", "/api/v1/pods", query={"fieldSelector": "spec.hostPID=true"}
    )
    assert (code, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        "field label not supported: spec.hostPID",
    )


def test_a_pod_needs_its_service_account_and_is_defaulted(
    api_server: ApiServer, pods: str, ns: str
) -> None:
    lost = pod("lost", host=True, serviceAccountName="absent")
    code, refused, _ = api_server.request("POST", pods, lost)
    assert (code, refused["reason"]) == (403, "Forbidden")
    assert refused["message"] == (
        f'pods "lost" is forbidden: error looking up service account {ns}/absent: '
        'serviceaccount "absent" not found'
    )
    made = create(api_server, pods, pod("exporter", host=True) | {"status": {"phase": "Running"}})
    spec = made["spec"]
    assert spec["containers"][0]["ports"] == [
        {"containerPort": 9100, "hostPort": 9100, "protocol": "TCP"}
    ]
    assert (spec["serviceAccountName"], spec["restartPolicy"], spec["schedulerName"]) == (
        "default",
        "Always",
        "default-scheduler",
    )
    assert spec["terminationGracePeriodSeconds"] == 30
    assert made["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert made["metadata"]["generation"] == 1
    bad = pod("bad", host=True)
    bad["spec"]["containers"][0]["ports"][0]["hostPort"] = 9200
    code, invalid, _ = api_server.request("POST", pods, bad)
    assert (code, invalid["reason"]) == (422, "Invalid")
    assert invalid["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 9200: must match `containerPort` when `hostNetwork` is true",
            "field": "spec.containers[0].ports[0].hostPort",
        }
    ]
    moved = dict(made)
    moved["spec"] = {**made["spec"], "hostNetwork": False}
    code, refused, _ = api_server.request("PUT", f"{pods}/exporter", moved)
    assert code == 422
    assert refused["details"]["causes"][0]["field"] == "spec"
    assert refused["details"]["causes"][0]["message"].startswith(
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
    )


def test_a_bound_pod_is_deleted_gracefully_until_a_zero_period(
    api_server: ApiServer, pods: str, ns: str
) -> None:
    """What the Pod informer sees while a host-network Pod terminates: it stays (still
    holding its port) with a ``deletionTimestamp`` until the kubelet, or a delete with
    ``gracePeriodSeconds: 0``, ends it; then MODIFIED and DELETED."""
    made = create(api_server, pods, pod("exporter", host=True))
    start = made["metadata"]["resourceVersion"]
    code, marked, _ = api_server.request("DELETE", f"{pods}/exporter")
    assert code == 200 and marked["kind"] == "Pod"
    meta = marked["metadata"]
    assert (meta["deletionGracePeriodSeconds"], meta["generation"]) == (30, 2)
    assert meta["deletionTimestamp"]
    assert names(api_server, HOST_NETWORK, ns) == ["exporter"], "still there, terminating"
    code, gone, _ = api_server.request("DELETE", f"{pods}/exporter", {"gracePeriodSeconds": 0})
    assert code == 200 and gone["metadata"]["deletionGracePeriodSeconds"] == 0
    assert names(api_server, HOST_NETWORK, ns) == []
    events = watch_lines(
        api_server,
        {"watch": "true", "resourceVersion": start, "fieldSelector": HOST_NETWORK,
         "timeoutSeconds": "1"},
    )  # fmt: skip
    ours = [
        (e["type"], e["object"]["metadata"].get("deletionGracePeriodSeconds"))
        for e in events
        if e["object"].get("metadata", {}).get("namespace") == ns
    ]
    assert ours == [("MODIFIED", 30), ("MODIFIED", 0), ("DELETED", 0)]
    unbound = create(api_server, pods, pod("pending", host=True, node_name=None))
    assert unbound["spec"].get("nodeName") is None
    code, _, _ = api_server.request("DELETE", f"{pods}/pending")
    assert code == 200 and names(api_server, HOST_NETWORK, ns) == [], "unbound: at once"
