"""Discovery documents: /api, /apis, group and version resource lists, /version, /openapi/v3."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client


def _get(api: client.ApiClient, path: str) -> tuple[int, Any]:
    resp = api.rest_client.pool_manager.request("GET", api.configuration.host + path)
    return resp.status, json.loads(resp.data)


def test_core_and_group_lists(api: client.ApiClient) -> None:
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {
        g.name: g.preferred_version.group_version
        for g in client.ApisApi(api).get_api_versions().groups
    }
    # A real server serves many more groups; these are the ones the fake serves.
    assert (
        groups.items()
        >= {
            "discovery.k8s.io": "discovery.k8s.io/v1",
            "coordination.k8s.io": "coordination.k8s.io/v1",
            "events.k8s.io": "events.k8s.io/v1",
            "admissionregistration.k8s.io": "admissionregistration.k8s.io/v1",
            "authentication.k8s.io": "authentication.k8s.io/v1",
            "authorization.k8s.io": "authorization.k8s.io/v1",
        }.items()
    )


@pytest.mark.parametrize(
    ("path", "name", "namespaced", "verbs"),
    [
        (
            "/api/v1",
            "services",
            True,
            ["create", "delete", "get", "list", "patch", "update", "watch"],
        ),
        ("/api/v1", "services/status", True, ["get", "patch", "update"]),
        ("/api/v1", "pods", True, ["create", "delete", "get", "list", "patch", "update", "watch"]),
        ("/api/v1", "serviceaccounts", True, ["create", "delete", "get", "list", "watch"]),
        ("/api/v1", "nodes/status", False, ["get", "patch", "update"]),
        (
            "/apis/discovery.k8s.io/v1",
            "endpointslices",
            True,
            ["create", "delete", "get", "list", "patch", "update", "watch"],
        ),
        ("/apis/authentication.k8s.io/v1", "tokenreviews", False, ["create"]),
    ],
)
def test_resource_lists(
    api: client.ApiClient, path: str, name: str, namespaced: bool, verbs: list[str]
) -> None:
    code, body = _get(api, path)
    entry = next(r for r in body["resources"] if r["name"] == name)
    assert (code, body["kind"]) == (200, "APIResourceList")
    # A real server also lists deletecollection, which the fake refuses (405).
    assert entry["namespaced"] is namespaced
    assert set(verbs) <= set(entry["verbs"])


def test_version_and_group_document(api: client.ApiClient) -> None:
    version = client.VersionApi(api).get_code()
    assert (version.major, version.git_version.split(".")[0]) == ("1", "v1")
    assert 32 <= int(version.minor) <= 37
    code, group = _get(api, "/apis/coordination.k8s.io")
    assert (code, group["kind"], group["preferredVersion"]["version"]) == (200, "APIGroup", "v1")


def test_openapi_v3_declares_field_validation_on_patch(api: client.ApiClient) -> None:
    code, root = _get(api, "/openapi/v3")
    assert code == 200 and "api/v1" in root["paths"]
    code, doc = _get(api, root["paths"]["api/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "",
        "version": "v1",
        "kind": "Service",
    }
    assert any(
        {"name": "fieldValidation", "in": "query"}.items() <= p.items() for p in patch["parameters"]
    )


@pytest.mark.fake_only("the fake serves no apps/v1; a real server does")
def test_openapi_v3_of_an_unserved_group_is_404(api: client.ApiClient) -> None:
    assert _get(api, "/openapi/v3/apis/apps/v1")[0] == 404
