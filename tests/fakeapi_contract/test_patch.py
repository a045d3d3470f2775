"""PATCH flavours: JSON merge patch, strategic merge patch (real patch metadata), JSON patch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

NODE = {
    "metadata": {"name": "n", "labels": {"a": "1", "b": "2"}, "finalizers": ["x/one"]},
    "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}]},
    "status": {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n"},
        ]
    },
}


def _patch(
    api: client.ApiClient, path: str, body: Any, content_type: str
) -> tuple[int, dict[str, Any]]:
    resp = api.rest_client.pool_manager.request(
        "PATCH",
        api.configuration.host + path,
        body=json.dumps(body).encode(),
        headers={"Content-Type": content_type},
    )
    return resp.status, json.loads(resp.data)


SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSONP = "application/json-patch+json"


@pytest.mark.parametrize(
    ("path", "ctype", "patch", "field", "expected"),
    [
        (
            "",
            MERGE,
            {"metadata": {"labels": {"a": None, "c": "3"}}},
            "metadata.labels",
            {"b": "2", "c": "3"},
        ),
        ("", SMP, {"metadata": {"labels": {"a": None}}}, "metadata.labels", {"b": "2"}),
        (
            "",
            SMP,
            {"metadata": {"finalizers": ["x/two"]}},
            "metadata.finalizers",
            ["x/two", "x/one"],  # a new item goes first (apimachinery mergeSortedSlice)
        ),
        ("", MERGE, {"metadata": {"finalizers": ["x/two"]}}, "metadata.finalizers", ["x/two"]),
        (
            "",
            SMP,
            {"spec": {"taints": [{"key": "t2", "effect": "NoExecute"}]}},
            "spec.taints",
            [{"key": "t2", "effect": "NoExecute"}],
        ),
        (
            "/status",
            SMP,
            {"status": {"addresses": [{"type": "ExternalIP", "address": "192.0.2.1"}]}},
            "status.addresses",
            [
                {"type": "ExternalIP", "address": "192.0.2.1"},
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n"},
            ],
        ),
        (
            "/status",
            SMP,
            {"status": {"addresses": [{"type": "InternalIP", "$patch": "delete"}]}},
            "status.addresses",
            [{"type": "Hostname", "address": "n"}],
        ),
        (
            "/status",
            SMP,
            {
                "status": {
                    "addresses": [
                        {"$patch": "replace"},
                        {"type": "InternalIP", "address": "10.9.9.9"},
                    ]
                }
            },
            "status.addresses",
            [{"type": "InternalIP", "address": "10.9.9.9"}],
        ),
        (
            "",
            JSONP,
            [
                {"op": "add", "path": "/metadata/labels/c", "value": "3"},
                {"op": "remove", "path": "/metadata/labels/a"},
            ],
            "metadata.labels",
            {"b": "2", "c": "3"},
        ),
    ],
    ids=[
        "merge patch null deletes a label",
        "strategic patch null deletes a label",
        "strategic patch merges finalizers (primitive merge list)",
        "merge patch replaces finalizers",
        "strategic patch replaces taints (atomic list)",
        "strategic patch merges node addresses by type (declared merge key)",
        "strategic patch $patch delete removes an address",
        "strategic patch $patch replace replaces the list",
        "json patch add and remove",
    ],
)
def test_patch_types(
    api: client.ApiClient, path: str, ctype: str, patch: Any, field: str, expected: Any
) -> None:
    client.CoreV1Api(api).create_node(body=NODE)
    code, body = _patch(api, f"/api/v1/nodes/n{path}", patch, ctype)
    assert code == 200, body
    value: Any = body
    for part in field.split("."):
        value = value[part]
    assert value == expected


def test_strategic_patch_directive_merge_is_unknown(api: client.ApiClient) -> None:
    client.CoreV1Api(api).create_node(body=NODE)
    patch = {"metadata": {"$patch": "merge", "labels": {"c": "3"}}}
    code, body = _patch(api, "/api/v1/nodes/n", patch, SMP)
    assert code == 500
    assert body["message"].startswith("unknown patch type: merge in map: map[$patch:merge ")


def test_strategic_patch_replaces_load_balancer_ingress(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service(
        ns,
        {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
    )
    path = f"/api/v1/namespaces/{ns}/services/s/status"
    first = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}]}}}
    _patch(api, path, first, SMP)
    code, body = _patch(
        api, path, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.3"}]}}}, SMP
    )
    assert code == 200
    assert body["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.3", "ipMode": "VIP"}]


def test_strategic_patch_merges_service_ports_by_port(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service(
        ns, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "name": "http"}]}}
    )
    code, body = _patch(
        api,
        f"/api/v1/namespaces/{ns}/services/s",
        {"spec": {"ports": [{"port": 443, "name": "https"}]}},
        SMP,
    )
    assert code == 200
    assert [p["port"] for p in body["spec"]["ports"]] == [443, 80]  # the new port first


def test_json_patch_test_failure_is_422_and_changes_nothing(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    before = core.create_node(body=NODE)
    code, body = _patch(
        api, "/api/v1/nodes/n", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}], JSONP
    )
    assert (code, body["kind"]) == (422, "Status")
    assert core.read_node("n").metadata.resource_version == before.metadata.resource_version


def test_patch_with_stale_resource_version_is_409(api: client.ApiClient) -> None:
    client.CoreV1Api(api).create_node(body=NODE)
    code, body = _patch(
        api, "/api/v1/nodes/n", {"metadata": {"resourceVersion": "1", "labels": {}}}, MERGE
    )
    assert (code, body["reason"]) == (409, "Conflict")


def test_patch_of_missing_object_is_404(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).patch_node("ghost", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 404
