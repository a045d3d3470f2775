"""Fault injection, request counters and the request log, from Python and over HTTP."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.fakeapi import FakeApiServer

pytestmark = pytest.mark.fake_only(
    "injected failures, latency, holds, counters, compaction and seeding are the fake's own "
    "test handles"
)


def _control(api: client.ApiClient, method: str, name: str, body: Any = None) -> Any:
    resp = api.rest_client.pool_manager.request(
        method,
        f"{api.configuration.host}/_fake/{name}",
        body=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 200, resp.data
    return json.loads(resp.data)


def _service(core: client.CoreV1Api) -> None:
    core.create_namespaced_service(
        "default",
        {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
    )


STATUS_PATH = "/api/v1/namespaces/*/services/*/status"
INGRESS = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}


def test_fail_next_n_matching_requests_leaves_state_unchanged(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    _service(core)
    fake_api.fail(method="PATCH", path=STATUS_PATH, status=503, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.patch_namespaced_service_status("s", "default", INGRESS)
        assert err.value.status == 503
        assert json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    assert core.read_namespaced_service("s", "default").status.load_balancer.ingress is None
    third = core.patch_namespaced_service_status("s", "default", INGRESS)
    assert third.status.load_balancer.ingress[0].ip == "192.0.2.1"


def test_fail_over_http_matches_only_its_method_and_path(
    api: client.ApiClient, core: client.CoreV1Api
) -> None:
    _service(core)
    _control(
        api, "POST", "fail", {"method": "GET", "path": "/api/v1/nodes", "status": 500, "times": 1}
    )
    core.read_namespaced_service("s", "default")
    with pytest.raises(ApiException) as err:
        core.list_node()
    assert err.value.status == 500
    assert core.list_node().items == []


def test_counters_by_verb_and_resource(
    core: client.CoreV1Api, fake_api: FakeApiServer, api: client.ApiClient
) -> None:
    _service(core)
    core.list_node()
    core.patch_namespaced_service_status("s", "default", INGRESS)
    core.patch_namespaced_service_status("s", "default", INGRESS)
    list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    expected = {
        "create services": 1,
        "list nodes": 1,
        "patch services/status": 2,
        "watch nodes": 1,
    }
    assert fake_api.requests() == expected
    assert _control(api, "GET", "requests") == expected
    _control(api, "DELETE", "requests")
    assert fake_api.requests() == {}


def test_no_status_write_is_assertable(core: client.CoreV1Api, fake_api: FakeApiServer) -> None:
    _service(core)
    fake_api.reset_requests()
    core.read_namespaced_service("s", "default")
    assert not any(key.endswith("services/status") for key in fake_api.requests())


def test_request_log_records_rbac_facts(core: client.CoreV1Api, fake_api: FakeApiServer) -> None:
    _service(core)
    core.patch_namespaced_service_status("s", "default", INGRESS)
    last = fake_api.request_log()[-1]
    assert {
        k: last[k] for k in ("verb", "group", "resource", "subresource", "namespace", "name")
    } == {
        "verb": "patch",
        "group": "",
        "resource": "services",
        "subresource": "status",
        "namespace": "default",
        "name": "s",
    }
    assert last["user_agent"].startswith("OpenAPI-Generator/")


def test_latency_delays_matching_requests(core: client.CoreV1Api, fake_api: FakeApiServer) -> None:
    fake_api.add_latency(0.3, method="GET", path="/api/v1/nodes")
    started = time.monotonic()
    core.list_node()
    slow = time.monotonic() - started
    fake_api.clear_latency()
    assert slow >= 0.3


def test_compact_over_http_makes_older_versions_gone(
    api: client.ApiClient, core: client.CoreV1Api
) -> None:
    old = core.list_node().metadata.resource_version
    core.create_node(body={"metadata": {"name": "a"}})
    answer = _control(api, "POST", "compact")
    assert int(answer["resourceVersion"]) > int(old)
    line = json.loads(
        core.list_node(watch=True, resource_version=old, _preload_content=False).data.splitlines()[
            0
        ]
    )
    assert line["object"]["code"] == 410


def test_drop_watches_over_http(api: client.ApiClient) -> None:
    assert _control(api, "POST", "drop-watches") == {"dropped": 0}


def test_seed_over_http_keeps_status(api: client.ApiClient, core: client.CoreV1Api) -> None:
    dump = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "seeded", "namespace": "apps", "resourceVersion": "885"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}},
            }
        ],
    }
    assert _control(api, "POST", "seed", dump) == {"seeded": 1}
    svc = core.read_namespaced_service("seeded", "apps")
    assert svc.status.load_balancer.ingress[0].ip == "192.0.2.7"
    assert svc.metadata.resource_version != "885"


def test_unknown_control_endpoint_is_404(api: client.ApiClient) -> None:
    resp = api.rest_client.pool_manager.request("POST", f"{api.configuration.host}/_fake/nope")
    assert resp.status == 404 and json.loads(resp.data)["kind"] == "Status"


def test_hold_stalls_matching_requests_until_release(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    fake_api.hold(method="GET", path="/api/v1/nodes")
    done = threading.Event()
    threading.Thread(target=lambda: (core.list_node(), done.set()), daemon=True).start()
    assert not done.wait(0.3)
    core.create_node(body={"metadata": {"name": "unaffected"}})
    fake_api.release()
    assert done.wait(5)


def test_an_injected_429_answers_as_api_priority_and_fairness(fake_api: FakeApiServer) -> None:
    """The real server's 429 (tests/controlplane/test_faults.py,
    test_apf_rejects_with_retry_after): plain text with Retry-After, not a Status."""
    fake_api.fail(method="GET", path="/api/v1/nodes", status=429)
    api = fake_api.client()
    resp = api.rest_client.pool_manager.request(  # urllib3 itself retries after Retry-After
        "GET", f"{api.configuration.host}/api/v1/nodes", retries=False
    )
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert resp.data == b"Too many requests, please try again later.\n"


def test_a_continue_token_from_before_compaction_is_expired(fake_api: FakeApiServer) -> None:
    """As on the real server after etcd compaction (tests/controlplane/test_faults.py,
    test_compaction_expires_old_revisions_and_a_continue_token): 410 Expired with its
    message."""
    core = client.CoreV1Api(fake_api.client())
    for name in ("a", "b", "c"):
        core.create_node(body={"metadata": {"name": name}})
    token = core.list_node(limit=1).metadata._continue
    core.create_node(body={"metadata": {"name": "d"}})  # history moves on, then compaction
    fake_api.compact()
    with pytest.raises(ApiException) as err:
        core.list_node(limit=1, _continue=token)
    body = json.loads(err.value.body)
    assert (err.value.status, body["reason"]) == (410, "Expired")
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result."
        " You can start a new list without the continue parameter, or use the continue"
        " token in this response"
    )
