"""events.k8s.io/v1 Event create is validated like kube-apiserver's ``ValidateEventCreate``
(a field the real server requires cannot be left out unnoticed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakeapi_contract.conftest import ApiServer

NOW = "2026-01-01T00:00:00.000000Z"


def event(namespace: str, **changes: Any) -> dict[str, Any]:
    """A valid Event about Service <namespace>/web, with ``changes`` (None removes a field)."""
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": namespace},
        "eventTime": NOW,
        "reportingController": "io.cilium/node-ipam-lb",
        "reportingInstance": "node-ipam-lb-0_abc",
        "action": "Select",
        "reason": "NoMatchingNodes",
        "note": "no node matches",
        "type": "Warning",
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": namespace, "name": "web"},
    }
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


Response = tuple[int, Any]
Post = Callable[[dict[str, Any]], Response]


@pytest.fixture
def post(api_server: ApiServer) -> Post:
    """POST an Event as is (the official client refuses one without ``eventTime``);
    returns ``(status code, decoded body)``."""

    def send(body: dict[str, Any]) -> Response:
        namespace = body["metadata"]["namespace"]
        path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        code, answer, _ = api_server.request("POST", path, body)
        return code, answer

    return send


def create(post: Post, body: dict[str, Any]) -> dict[str, Any]:
    """The 422 Status of creating ``body`` (fails the test when it is accepted)."""
    code, status = post(body)
    assert code == 422, status
    result: dict[str, Any] = status
    return result


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"eventTime": None}, "eventTime", "Required value"),
        ({"action": None}, "action", "Required value"),
        ({"action": "A" * 129}, "action", 'Invalid value: "": can have at most 128 characters'),
        ({"reason": None}, "reason", "Required value"),
        ({"reason": "R" * 129}, "reason", 'Invalid value: "": can have at most 128 characters'),
        ({"reportingController": None}, "reportingController", "Required value"),
        ({"reportingController": "not a name!"}, "reportingController", "name part must"),
        ({"reportingInstance": None}, "reportingInstance", "Required value"),
        ({"reportingInstance": "i" * 129}, "reportingInstance", "can have at most 128"),
        ({"note": "é" * 513}, "message", 'Invalid value: "": can have at most 1024 characters'),
        ({"type": "Error"}, "type", 'Invalid value: "": has invalid value: Error'),
        ({"type": None}, "type", "has invalid value"),
        ({"deprecatedCount": 2}, "count", "needs to be unset"),
    ],
    ids=[
        "no eventTime",
        "no action",
        "action over 128",
        "no reason",
        "reason over 128",
        "no reportingController",
        "reportingController not a qualified name",
        "no reportingInstance",
        "reportingInstance over 128",
        "note over 1 KiB in bytes (513 two-byte characters)",
        "type neither Normal nor Warning",
        "no type",
        "deprecated count set",
    ],
)
def test_event_missing_or_bad_field_is_422_invalid_naming_it(
    post: Post, ns: str, changes: dict[str, Any], field: str, message: str
) -> None:
    status = create(post, event(ns, **changes))
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Event"
    assert "group" not in status["details"]  # validated as the internal core Event
    causes = [c["message"] for c in status["details"]["causes"] if c["field"] == field]
    assert any(message in cause for cause in causes), status["message"]
    assert '"web.1" is invalid: ' in status["message"]


def test_event_without_regarding_namespace_in_a_workload_namespace_is_invalid(
    post: Post, ns: str
) -> None:
    body = event(ns, regarding={"apiVersion": "v1", "kind": "Service", "name": "web"})
    assert "involvedObject.namespace: " in create(post, body)["message"]


def test_complete_event_is_stored(post: Post, ns: str) -> None:
    code, body = post(event(ns, note="é" * 512))
    assert code == 201, body
    assert body["action"] == "Select"


SERIES = {"count": 2, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}


@pytest.fixture
def patch_event(api_server: ApiServer, post: Post, ns: str) -> Post:
    """Create the valid Event ``<ns>/web.1``, then PATCH it (strategic merge, as
    client-go's series update does)."""
    assert post(event(ns))[0] == 201

    def send(body: dict[str, Any]) -> Response:
        path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events/web.1"
        ctype = "application/strategic-merge-patch+json"
        code, answer, _ = api_server.request("PATCH", path, body, content_type=ctype)
        return code, answer

    return send


def test_a_series_update_is_accepted_and_stored(patch_event: Post) -> None:
    code, body = patch_event({"series": SERIES})
    assert code == 200, body
    assert body["series"] == SERIES
    code, again = patch_event({"series": {**SERIES, "count": 3}})
    assert code == 200, again
    assert again["series"]["count"] == 3


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"series": {**SERIES, "count": 1}}, "series.count", "should be at least 2"),
        ({"series": {"count": 2}}, "series.lastObservedTime", "Required value"),
        ({"note": "something else"}, "message", "field is immutable"),
        ({"reason": "Other"}, "reason", "field is immutable"),
        ({"type": "Normal"}, "type", "field is immutable"),
        ({"action": "Other"}, "action", "field is immutable"),
        ({"eventTime": "2026-01-01T00:00:01.000000Z"}, "eventTime", "field is immutable"),
        ({"reportingInstance": "other"}, "reportingInstance", "field is immutable"),
        ({"regarding": {"name": "other"}}, "involvedObject", "field is immutable"),
    ],
    ids=[
        "series count 1",
        "series without lastObservedTime",
        "note changed",
        "reason changed",
        "type changed",
        "action changed",
        "eventTime changed",
        "reportingInstance changed",
        "regarding changed",
    ],
)
def test_an_event_update_is_validated_like_validate_event_update(
    patch_event: Post,
    body: dict[str, Any],
    field: str,
    message: str,
) -> None:
    code, status = patch_event(body)
    assert code == 422, status
    causes = [c["message"] for c in status["details"]["causes"] if c["field"] == field]
    assert any(message in cause for cause in causes), status["message"]


def test_creating_an_event_with_a_series_of_one_is_invalid(post: Post, ns: str) -> None:
    status = create(post, event(ns, series={**SERIES, "count": 1}))
    assert "series.count: Invalid value" in status["message"]


def test_events_are_listed_by_field_selector_on_reporting_controller_and_type(
    api_server: ApiServer, post: Post, ns: str
) -> None:
    assert post(event(ns))[0] == 201
    other = event(ns, reportingController="example.com/other")
    other["metadata"] = {"name": "web.2", "namespace": ns}
    assert post(other)[0] == 201
    selector = "reportingController=io.cilium/node-ipam-lb,type=Warning"
    path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    code, listed, _ = api_server.request("GET", path, query={"fieldSelector": selector})
    assert code == 200, listed
    assert [e["metadata"]["name"] for e in listed["items"]] == ["web.1"]
