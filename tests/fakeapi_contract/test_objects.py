"""Object lifecycle through the official client: metadata, versions, conflicts, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.fakeapi import FakeApiServer
from tests.fakeapi_contract.conftest import ApiServer


def _status(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def test_create_fills_uid_timestamp_generation_and_increasing_resource_version(
    core: client.CoreV1Api,
) -> None:
    first = core.create_node(body=_node("a"))
    second = core.create_node(body=_node("b"))
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None
    assert first.metadata.generation is None  # the Node strategy keeps no generation
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)


def test_list_carries_kind_api_version_and_resource_version(
    core: client.CoreV1Api, api: client.ApiClient
) -> None:
    core.create_node(body=_node("a"))
    raw = json.loads(core.list_node(_preload_content=False).data)
    assert (raw["kind"], raw["apiVersion"]) == ("NodeList", "v1")
    assert int(raw["metadata"]["resourceVersion"]) >= 2
    disc = client.DiscoveryV1Api(api)
    slices = json.loads(disc.list_endpoint_slice_for_all_namespaces(_preload_content=False).data)
    assert (slices["kind"], slices["apiVersion"]) == ("EndpointSliceList", "discovery.k8s.io/v1")


def test_generate_name_appends_five_random_characters(core: client.CoreV1Api, ns: str) -> None:
    made = core.create_namespaced_service(
        ns,
        {"metadata": {"generateName": "web-"}, "spec": {"ports": [{"port": 80}]}},
    )
    assert made.metadata.name.startswith("web-") and len(made.metadata.name) == 9


def test_create_twice_is_409_already_exists(core: client.CoreV1Api) -> None:
    core.create_node(body=_node("a"))
    with pytest.raises(ApiException) as err:
        core.create_node(body=_node("a"))
    status = _status(err.value)
    assert (err.value.status, status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == 'nodes "a" already exists'
    assert status["details"] == {"name": "a", "kind": "nodes"}


def test_get_missing_is_404_not_found_status(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_service("nope", ns)
    status = _status(err.value)
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'services "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "services"},
        "code": 404,
    }


def test_object_in_missing_namespace_is_404_namespace_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(
            "ghost", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}}
        )
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "ghost" not found'


def test_default_and_kube_system_namespaces_pre_exist(core: client.CoreV1Api) -> None:
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_update_with_stale_resource_version_is_409_conflict(core: client.CoreV1Api) -> None:
    node = core.create_node(body=_node("a"))
    core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    node.metadata.labels = {"x": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_node("a", node)
    status = _status(err.value)
    assert (err.value.status, status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on nodes "a": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )


def test_update_with_current_resource_version_succeeds(core: client.CoreV1Api) -> None:
    node = core.create_node(body=_node("a"))
    node.metadata.labels = {"x": "2"}
    updated = core.replace_node("a", node)
    assert updated.metadata.labels == {"x": "2"}
    assert int(updated.metadata.resource_version) > int(node.metadata.resource_version)


def test_generation_bumps_on_spec_change_only(api: client.ApiClient, ns: str) -> None:
    slices = client.DiscoveryV1Api(api)
    made = slices.create_namespaced_endpoint_slice(
        ns, {"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": []}
    )
    annotated = slices.patch_namespaced_endpoint_slice(
        "e", ns, {"metadata": {"annotations": {"x": "1"}}}
    )
    labelled = slices.patch_namespaced_endpoint_slice("e", ns, {"metadata": {"labels": {"x": "1"}}})
    changed = slices.patch_namespaced_endpoint_slice(
        "e", ns, {"endpoints": [{"addresses": ["10.0.0.1"]}]}
    )
    # The EndpointSlice strategy bumps on label changes too (consumers select by label).
    assert (made.metadata.generation, annotated.metadata.generation) == (1, 1)
    assert (labelled.metadata.generation, changed.metadata.generation) == (2, 3)


def test_no_op_write_keeps_resource_version(core: client.CoreV1Api) -> None:
    node = core.create_node(body=_node("a", x="1"))
    again = core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    assert again.metadata.resource_version == node.metadata.resource_version


def test_main_resource_write_never_changes_status(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_service(
        ns,
        {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
    )
    core.patch_namespaced_service_status(
        "s", ns, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}
    )
    after = core.patch_namespaced_service(
        "s", ns, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}}}
    )
    assert [i.ip for i in after.status.load_balancer.ingress] == ["192.0.2.1"]


def test_status_write_changes_status_and_metadata_never_spec(core: client.CoreV1Api) -> None:
    core.create_node(body=_node("a", keep="yes"))
    after = core.patch_node_status(
        "a",
        {
            "metadata": {"labels": {"keep": "no"}},
            "spec": {"unschedulable": True},
            "status": {"phase": "x"},
        },
    )
    assert after.metadata.labels == {"keep": "no"}  # the Node status strategy keeps metadata
    assert after.spec.unschedulable is None
    assert after.status.phase == "x"


def test_create_keeps_node_status_but_resets_service_status(
    core: client.CoreV1Api, ns: str
) -> None:
    node = core.create_node(
        body={
            "metadata": {"name": "a"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
        }
    )
    svc = core.create_namespaced_service(
        ns,
        {
            "metadata": {"name": "s"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}},
        },
    )
    assert node.status.addresses[0].address == "10.0.0.1"
    assert svc.status.load_balancer.ingress is None


def test_delete_with_finalizer_sets_deletion_timestamp_until_finalizers_removed(
    core: client.CoreV1Api,
    ns: str,
) -> None:
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "s", "finalizers": ["example.com/keep"]}}
    )
    core.delete_namespaced_secret("s", ns)
    pending = core.read_namespaced_secret("s", ns)
    assert pending.metadata.deletion_timestamp is not None
    core.patch_namespaced_secret("s", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_secret("s", ns)
    assert err.value.status == 404


def test_no_new_finalizers_on_an_object_being_deleted(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_secret(ns, {"metadata": {"name": "s", "finalizers": ["a/b"]}})
    core.delete_namespaced_secret("s", ns)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_secret("s", ns, {"metadata": {"finalizers": ["a/b", "c/d"]}})
    assert err.value.status == 422
    assert "no new finalizers can be added if the object is being deleted" in err.value.body


def test_delete_precondition_on_resource_version_is_409(core: client.CoreV1Api) -> None:
    core.create_node(body=_node("a"))
    with pytest.raises(ApiException) as err:
        core.delete_node("a", body={"preconditions": {"resourceVersion": "1"}})
    assert err.value.status == 409
    assert "does not match the ResourceVersion in record" in _status(err.value)["message"]


def test_dry_run_all_stores_nothing(core: client.CoreV1Api, api_server: ApiServer) -> None:
    made = core.create_node(body=_node("a"), dry_run="All")
    assert made.metadata.name == "a"
    assert api_server.get("nodes", "a") is None


@pytest.mark.fake_only(
    "a real server needs kube-controller-manager's namespace controller to empty and remove a "
    "namespace (it stays Terminating here); the fake removes it and its objects at once"
)
def test_namespace_delete_removes_its_objects(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_secret("team", {"metadata": {"name": "s"}})
    core.delete_namespace("team")
    assert fake_api.get("secrets", "s", "team") is None
    assert fake_api.get("namespaces", "team") is None


def test_coordination_lease_round_trip(api: client.ApiClient, ns: str) -> None:
    leases = client.CoordinationV1Api(api)
    made = leases.create_namespaced_lease(
        ns,
        {"metadata": {"name": "lock"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}},
    )
    made.spec.holder_identity = "b"
    replaced = leases.replace_namespaced_lease("lock", ns, made)
    assert replaced.spec.holder_identity == "b"
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease("lock", ns, made)
    assert err.value.status == 409


def test_config_map_get_and_missing_config_map(core: client.CoreV1Api, ns: str) -> None:
    """What the controller and preview read of kube-proxy's ConfigMap (docs/design.md
    §4.10): ``data`` as stored; a missing one is a 404 NotFound Status."""
    text = "kind: KubeProxyConfiguration\nmode: ipvs\n"
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "kube-proxy"}, "data": {"config.conf": text}}
    )
    raw = json.loads(core.read_namespaced_config_map("kube-proxy", ns, _preload_content=False).data)
    assert (raw["kind"], raw["apiVersion"], raw["data"]) == (
        "ConfigMap",
        "v1",
        {"config.conf": text},
    )
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("nope", ns)
    status = _status(err.value)
    assert (status["code"], status["reason"], status["message"]) == (
        404,
        "NotFound",
        'configmaps "nope" not found',
    )


def test_events_in_both_groups(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    events = client.EventsV1Api(api)
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Service", "name": "s", "namespace": ns},
            "reason": "R",
        },
    )
    events.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e2"},
            # Not .000000: the official client re-serializes a parsed time with isoformat(),
            # which drops a zero fraction, and MicroTime needs six digits.
            "eventTime": "2024-01-01T00:00:00.123456Z",
            "reportingController": "example.io/x",
            "reportingInstance": "x-1",
            "action": "Assign",
            "reason": "IPsAssigned",
            "type": "Normal",
            "regarding": {"kind": "Service", "name": "s", "namespace": ns},
        },
    )
    # One resource served in two API versions: each list shows both Events, each in its
    # version's fields. (Raw JSON: the official client's EventsV1Event model refuses the
    # "eventTime": null that a core Event shows in events.k8s.io/v1.)
    core_list = json.loads(core.list_namespaced_event(ns, _preload_content=False).data)
    v1_list = json.loads(events.list_namespaced_event(ns, _preload_content=False).data)
    assert [(e["reason"], e["involvedObject"]["name"]) for e in core_list["items"]] == [
        ("R", "s"),
        ("IPsAssigned", "s"),
    ]
    assert [(e["reason"], e["regarding"]["name"]) for e in v1_list["items"]] == [
        ("R", "s"),
        ("IPsAssigned", "s"),
    ]
    core_e2, v1_e2 = core_list["items"][1], v1_list["items"][1]
    assert core_e2["metadata"]["resourceVersion"] == v1_e2["metadata"]["resourceVersion"]
    assert (core_e2["reportingComponent"], v1_e2["reportingController"]) == (
        "example.io/x",
        "example.io/x",
    )
    assert (core_e2["source"], v1_e2["deprecatedSource"]) == ({}, {})
    assert (core_list["items"][0]["eventTime"], v1_list["items"][0]["eventTime"]) == (None, None)


@pytest.mark.fake_only("pins what the fake does not serve; a real server serves all of it")
@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("GET", "/api/v1/persistentvolumes", 404),
        ("GET", "/apis/apps/v1/deployments", 404),
        ("GET", "/api/v1/namespaces/default/services/s/proxy", 404),
        ("DELETE", "/api/v1/namespaces/default/services", 405),
        ("GET", "/apis/authentication.k8s.io/v1/tokenreviews", 405),
        ("PATCH", "/api/v1/namespaces/default/services/s", 415),
    ],
    ids=[
        "unserved resource",
        "unserved group",
        "unserved subresource",
        "deletecollection",
        "list tokenreviews",
        "server-side apply",
    ],
)
def test_unimplemented_answers_status_not_fake_success(
    api: client.ApiClient, core: client.CoreV1Api, method: str, path: str, code: int
) -> None:
    core.create_namespaced_service(
        "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}}
    )
    headers = {"Content-Type": "application/apply-patch+yaml"} if method == "PATCH" else {}
    resp = api.rest_client.pool_manager.request(
        method,
        api.configuration.host + path,
        body=b"{}" if method == "PATCH" else None,
        headers=headers,
    )
    body = json.loads(resp.data)
    assert (resp.status, body["kind"], body["status"], body["code"]) == (
        code,
        "Status",
        "Failure",
        code,
    )


def test_strict_field_validation_rejects_unknown_fields_and_default_drops_them(
    api: client.ApiClient,
    ns: str,
) -> None:
    url = api.configuration.host + f"/api/v1/namespaces/{ns}/services"
    body = json.dumps({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}], "bogus": 1}})
    pool = api.rest_client.pool_manager
    strict = pool.request(
        "POST",
        url + "?fieldValidation=Strict",
        body=body,
        headers={"Content-Type": "application/json"},
    )
    warned = pool.request("POST", url, body=body, headers={"Content-Type": "application/json"})
    assert strict.status == 400
    assert json.loads(strict.data)["message"] == (
        'Service in version "v1" cannot be handled as a Service: strict decoding error: '
        'unknown field "spec.bogus"'
    )
    assert warned.status == 201
    assert warned.headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
    assert "bogus" not in json.loads(warned.data)["spec"]


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("2024-05-01T10:00:00.123456+00:00", "2024-05-01T10:00:00.123456Z"),
        ("2024-05-01T12:00:00.000001+02:00", "2024-05-01T10:00:00.000001Z"),
    ],
    ids=["python isoformat", "offset converted to UTC"],
)
def test_micro_time_is_normalized_like_the_server_serializes_it(
    api: client.ApiClient, sent: str, stored: str, ns: str
) -> None:
    leases = client.CoordinationV1Api(api)
    body = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "renewTime": sent}}
    made = leases.create_namespaced_lease(ns, body, _preload_content=False)
    assert json.loads(made.data)["spec"]["renewTime"] == stored


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        ("yesterday", 'parsing time "yesterday"'),
        (
            "2024-05-01T10:00:00Z",
            'parsing time "2024-05-01T10:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse "Z" as ".000000"',
        ),
    ],
    ids=["not a time", "MicroTime without its six fraction digits"],
)
def test_unparsable_time_is_400(api: client.ApiClient, ns: str, sent: str, message: str) -> None:
    body = {"metadata": {"name": "l"}, "spec": {"renewTime": sent}}
    resp = api.rest_client.pool_manager.request(
        "POST",
        api.configuration.host + f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 400
    assert message in json.loads(resp.data)["message"]


def test_namespaces_carry_their_name_label(core: client.CoreV1Api, ns: str) -> None:
    team = f"{ns}-team"
    made = core.create_namespace({"metadata": {"name": team, "labels": {"a": "b"}}})
    assert made.metadata.labels == {"a": "b", "kubernetes.io/metadata.name": team}
    relabelled = core.patch_namespace(
        team, {"metadata": {"labels": {"kubernetes.io/metadata.name": "x"}}}
    )
    assert relabelled.metadata.labels["kubernetes.io/metadata.name"] == team
    assert core.read_namespace("default").metadata.labels == {
        "kubernetes.io/metadata.name": "default"
    }


@pytest.mark.parametrize(
    ("create", "message"),
    [
        (
            lambda core, ns: core.create_namespaced_service(
                ns, {"metadata": {"name": "1web"}, "spec": {"ports": [{"port": 1}]}}
            ),
            'Service "1web" is invalid: metadata.name: Invalid value: "1web": a DNS-1035 label',
        ),
        (
            lambda core, ns: core.create_node(body={"metadata": {"name": "Node_A"}}),
            'Node "Node_A" is invalid: metadata.name: Invalid value: "Node_A": a lowercase '
            "RFC 1123",
        ),
    ],
    ids=["service names are DNS-1035 labels", "other names are DNS-1123 subdomains"],
)
def test_invalid_names_are_422(core: client.CoreV1Api, create: Any, message: str, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        create(core, ns)
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"].startswith(message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metadata": {"name": "s", "labels": ["a"]}, "spec": {"ports": [{"port": 1}]}},
            ("json: cannot unmarshal array into Go struct field ", "metadata.labels"),
        ),
        (
            {"metadata": {"name": "s"}, "spec": {"ports": [{"port": "80"}]}},
            ("json: cannot unmarshal string into Go struct field ", ".port of type int"),
        ),
    ],
    ids=["labels not a map", "port not an integer"],
)
def test_wrongly_typed_fields_are_400_decode_errors(
    api: client.ApiClient, body: dict[str, Any], message: tuple[str, str], ns: str
) -> None:
    resp = api.rest_client.pool_manager.request(
        "POST",
        api.configuration.host + f"/api/v1/namespaces/{ns}/services",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    status = json.loads(resp.data)
    assert (resp.status, status["reason"]) == (400, "BadRequest")
    assert status["message"].startswith('Service in version "v1" cannot be handled as a Service: ')
    assert all(part in status["message"] for part in message), status["message"]


def test_secret_string_data_is_folded_into_data(core: client.CoreV1Api, ns: str) -> None:
    made = core.create_namespaced_secret(
        ns,
        {"metadata": {"name": "tls"}, "data": {"a": "YQ=="}, "stringData": {"ca.crt": "PEM"}},
    )
    assert made.data == {"a": "YQ==", "ca.crt": "UEVN"}
    assert made.string_data is None


def test_secret_data_must_be_base64(api: client.ApiClient, ns: str) -> None:
    resp = api.rest_client.pool_manager.request(
        "POST",
        api.configuration.host + f"/api/v1/namespaces/{ns}/secrets",
        body=json.dumps({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 400
    assert "illegal base64 data" in json.loads(resp.data)["message"]
