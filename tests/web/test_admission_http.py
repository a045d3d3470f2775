"""POST /validate and /mutate over HTTP: wire format, malformed bodies, metrics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.web.app import create_app
from app.web.routes import deps
from tests.core.admission.builders import ANNOTATION, patched, review, service
from tests.web.conftest import AppClient

JSON = {"content-type": "application/json"}


def post(client: AppClient, path: str, body: Any, headers: dict[str, str] = JSON) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=data, headers=headers)


def test_validate_denies_a_malformed_selector_with_a_field_error(client: AppClient) -> None:
    response = post(client, "/validate", review(service(selector="role in (edge"), uid="u-42"))
    assert response.status_code == 200
    body = response.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert body["response"]["uid"] == "u-42"
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"].startswith(
        f'metadata.annotations[{ANNOTATION}]: Invalid value: "role in (edge": '
    )


def test_validate_warns_about_a_malformed_selector_on_a_service_we_do_not_manage(
    client: AppClient,
) -> None:
    """docs/design.md §7: ignored there, so a warning, not a denial."""
    svc = service(type="ClusterIP", selector="role in (edge")
    response = post(client, "/validate", review(svc, uid="u-43"))
    assert response.status_code == 200
    body = response.json()["response"]
    assert body["allowed"] is True
    assert [w.split(":")[0] for w in body["warnings"]] == [
        f"{ANNOTATION} is ignored",
        f"{ANNOTATION} is invalid",
    ]


def test_validate_warns_from_the_live_cache(client: AppClient) -> None:
    svc = service(name="new", cls="io.cilium/node", selector="role=gpu")
    response = post(client, "/validate", review(svc))
    assert response.json()["response"]["allowed"] is True
    assert response.json()["response"]["warnings"] == [
        f"{ANNOTATION} matches no node now: the Service gets no ingress"
    ]


def test_validate_skips_cluster_warnings_while_the_cache_is_not_synced(
    client: AppClient, cache: Any
) -> None:
    cache.synced = False
    svc = service(name="new", cls="io.cilium/node", selector="role=gpu")
    response = post(client, "/validate", review(svc))
    assert response.json()["response"] == {"uid": "uid-1", "allowed": True}


def test_mutate_defaults_the_class_with_a_base64_json_patch(client: AppClient) -> None:
    svc = service()
    response = post(client, "/mutate", review(svc))
    assert response.status_code == 200
    assert (
        patched(svc, response.json()["response"])["spec"]["loadBalancerClass"] == "io.cilium/node"
    )


def test_mutate_leaves_lbipam_default_alone() -> None:
    app = create_app(Settings(default_lb_service_ipam="lbipam", auth="none"))
    with AppClient(app) as client:
        response = post(client, "/mutate", review(service()))
    assert response.json()["response"] == {"uid": "uid-1", "allowed": True}


def test_charset_parameter_is_accepted(client: AppClient) -> None:
    headers = {"content-type": "application/json; charset=utf-8"}
    assert post(client, "/validate", review(service()), headers).status_code == 200


NESTED = b"[" * 100_000 + b"]" * 100_000
BAD_BODIES = [
    ("not JSON", b"{not json", JSON, "not JSON"),
    ("empty body", b"", JSON, "not JSON"),
    ("Latin-1 bytes", b'{"a": "\xe9"}', JSON, "not UTF-8"),
    ("UTF-16 JSON", json.dumps(review(service())).encode("utf-16"), JSON, "not UTF-8"),
    ("JSON nested too deeply", NESTED, JSON, "nested too deeply"),
    (
        "integer with too many digits",
        b'{"a": ' + b"9" * 5000 + b"}",
        JSON,
        "not JSON: integer of 5000 digits: more than 4300 digits (Kubernetes integers are"
        " int32 or int64) at line 1, column 7",
    ),
    ("a bare Service", json.dumps(service()).encode(), JSON, "apiVersion/kind"),
    (
        "AdmissionReview v1beta1",
        json.dumps({**review(service()), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
        JSON,
        "apiVersion/kind",
    ),
    (
        "no request",
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
        JSON,
        "request:",
    ),
    (
        "no uid",
        json.dumps({**review(service()), "request": {"kind": {}}}).encode(),
        JSON,
        "request.uid",
    ),
    (
        "object is not a Service",
        json.dumps(review({"apiVersion": "v1", "kind": "Pod"})).encode(),
        JSON,
        "request.object",
    ),
]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize(
    ("data", "headers", "reason"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES]
)
def test_body_that_is_not_an_admission_review_gets_400_with_a_reason(
    client: AppClient, path: str, data: bytes, headers: dict[str, str], reason: str
) -> None:
    response = client.post(path, content=data, headers=headers)
    assert response.status_code == 400
    assert reason in response.json()["detail"]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/yaml", None])
def test_a_body_that_is_not_json_by_content_type_gets_415(
    client: AppClient, path: str, content_type: str | None
) -> None:
    # The API server always sends application/json; anything else is 415, not 400.
    headers = {"content-type": content_type} if content_type else {}
    response = client.post(path, content=json.dumps(review(service())).encode(), headers=headers)
    assert response.status_code == 415
    assert "Content-Type" in response.json()["detail"]


@pytest.mark.parametrize("padding", [0, 100_000], ids=["inline", "in the worker process"])
def test_an_integer_of_5000_digits_is_400_never_500(client: AppClient, padding: int) -> None:
    svc = service()
    svc["metadata"]["annotations"] = {"pad": "x" * padding}
    svc["spec"]["ports"] = [{"port": 1234567}]
    text = json.dumps(review(svc)).replace("1234567", "9" * 5000)
    response = client.post("/validate", content=text.encode(), headers=JSON)
    assert response.status_code == 400
    assert "integer of 5000 digits" in response.json()["detail"]


def test_oversized_body_gets_413(client: AppClient) -> None:
    data = b" " * (deps.MAX_BODY_BYTES + 1)
    response = client.post("/validate", content=data, headers=JSON)
    assert response.status_code == 413
    assert "Too long" in response.json()["detail"]


def test_lying_content_length_gets_413(client: AppClient) -> None:
    headers = {**JSON, "content-length": str(deps.MAX_BODY_BYTES + 1)}
    response = client.post("/validate", content=b"{}", headers=headers)
    assert response.status_code == 413


def test_a_sender_that_stalls_gets_408_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "BODY_READ_SECONDS", 0.05)
    app = create_app(Settings(auth="none"))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not sent:
            sent.append({})
            return {"type": "http.request", "body": b'{"apiVersion"', "more_body": True}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": "/validate",
        "raw_path": b"/validate",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 9443),
        "state": {},
        "app": app,
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=10))
    start = next(m for m in sent if m.get("type") == "http.response.start")
    assert start["status"] == 408  # Request Timeout (docs/design.md §7.1), not the sender's 400


def test_requests_are_independent_after_a_bad_one(client: AppClient) -> None:
    assert client.post("/validate", content=b"\xff", headers=JSON).status_code == 400
    ok = post(client, "/validate", review(service(), uid="after"))
    assert ok.status_code == 200 and ok.json()["response"]["uid"] == "after"


def test_webhook_metrics_count_by_path_and_verdict(client: AppClient) -> None:
    def count(path: str, verdict: str) -> float:
        text = client.get("/metrics").text
        prefix = (
            f'controller_runtime_webhook_requests_total{{verdict="{verdict}",webhook="{path}"}} '
        )
        lines = [line for line in text.splitlines() if line.startswith(prefix)]
        return float(lines[0].split()[-1]) if lines else 0.0

    before = {v: count("/validate", v) for v in ("denied", "allowed", "invalid")}
    before_patched = count("/mutate", "patched")
    post(client, "/validate", review(service(selector="(")))
    post(client, "/validate", review(service()))
    client.post("/validate", content=b"nope", headers=JSON)
    post(client, "/mutate", review(service()))
    assert count("/validate", "denied") == before["denied"] + 1
    assert count("/validate", "allowed") == before["allowed"] + 1
    assert count("/validate", "invalid") == before["invalid"] + 1
    assert count("/mutate", "patched") == before_patched + 1
    assert "controller_runtime_webhook_latency_seconds_bucket" in client.get("/metrics").text


def test_no_webhook_leaves_out_admission_routes() -> None:
    with AppClient(create_app(Settings(webhook=False, auth="none"))) as client:
        assert post(client, "/validate", review(service())).status_code == 404
        assert client.get("/healthz").status_code == 200


def webhook_count(client: AppClient, path: str, verdict: str) -> float:
    prefix = f'controller_runtime_webhook_requests_total{{verdict="{verdict}",webhook="{path}"}} '
    lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


LONE_SURROGATES = [
    ("in the uid", review(service(), uid="u\udc00"), "request.uid: Invalid value"),
    (
        "in the annotation value",
        review(service(selector="a=\ud800")),
        f"request.object.metadata.annotations[{ANNOTATION}]: Invalid value",
    ),
    (
        "in a label key",
        review({**service(), "metadata": {"name": "web", "labels": {"k\ud800": "v"}}}),
        "request.object.metadata.labels[k\\ud800]: Invalid value",
    ),
]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize(
    ("body", "reason"), [c[1:] for c in LONE_SURROGATES], ids=[c[0] for c in LONE_SURROGATES]
)
def test_lone_utf16_surrogate_gets_400_naming_the_field(
    client: AppClient, path: str, body: Any, reason: str
) -> None:
    data = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as a \\uXXXX escape
    assert b"\\ud" in data
    before = webhook_count(client, path, "invalid")
    response = post(client, path, data)
    assert response.status_code == 400
    assert reason in response.json()["detail"]
    assert "not valid Unicode" in response.json()["detail"]
    assert webhook_count(client, path, "invalid") == before + 1


def test_a_valid_surrogate_pair_is_an_ordinary_character(client: AppClient) -> None:
    data = json.dumps(review(service(selector="a=\U0001f600"))).encode()
    assert b"\\ud83d\\ude00" in data
    response = post(client, "/validate", data)
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False


def test_a_response_that_cannot_be_rendered_is_not_counted_as_allowed(
    client: AppClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.core import admission

    def unrenderable(*_: object) -> dict[str, Any]:
        return {"response": {"uid": "\ud800", "allowed": True}}

    monkeypatch.setattr(admission, "review_response", unrenderable)
    before = webhook_count(client, "/validate", "allowed")
    response = post(client, "/validate", review(service()))
    assert response.status_code == 400
    assert "cannot be processed" in response.json()["detail"]
    assert webhook_count(client, "/validate", "allowed") == before


def test_an_unexpected_error_in_the_decision_is_a_logged_400(
    client: AppClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from app.core import admission

    def broken(*_: object, **__: object) -> None:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(admission, "verdict", broken)
    response = post(client, "/validate", review(service()))
    assert response.status_code == 400
    assert "TypeError(\"unhashable type: 'dict'\")" in response.json()["detail"]
    assert any(r.exc_info and r.exc_info[0] is TypeError for r in caplog.records)


@pytest.fixture
def pool_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each decision the route sends to the thread pool."""
    from app.web.routes import admission as route

    hops: list[str] = []
    real = route.run_in_threadpool

    async def recording(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(kwargs.get("path", "?"))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(route, "run_in_threadpool", recording)
    return hops


def test_repeated_review_is_answered_from_the_memo_without_the_thread_pool(
    client: AppClient, pool_hops: list[str]
) -> None:
    svc = service(name="new", cls="io.cilium/node", selector="role=gpu")
    first = post(client, "/validate", review(svc)).json()
    again = post(client, "/validate", review(svc)).json()
    assert again == first
    assert first["response"]["warnings"] == [
        f"{ANNOTATION} matches no node now: the Service gets no ingress"
    ]
    assert pool_hops == ["/validate"]  # only the first one ran select()


def test_node_change_between_identical_reviews_changes_the_warning(
    client: AppClient, cache: Any, pool_hops: list[str]
) -> None:
    from tests.core.admission.builders import node

    svc = service(name="new", cls="io.cilium/node", selector="role=gpu")
    assert "warnings" in post(client, "/validate", review(svc)).json()["response"]
    cache.node_views.append(node("gpu-1", {"role": "gpu"}, "10.0.0.3"))
    assert "warnings" not in post(client, "/validate", review(svc)).json()["response"]
    assert len(pool_hops) == 2


def test_large_body_is_decided_in_the_thread_pool(client: AppClient, pool_hops: list[str]) -> None:
    from app.web.routes.admission import INLINE_BODY_BYTES

    svc = service(name="new", cls="io.cilium/node", selector="role=edge")
    svc["metadata"]["annotations"]["example.com/padding"] = "x" * INLINE_BODY_BYTES
    for _ in range(2):  # the second is a memo hit, still decoded off the loop
        response = post(client, "/validate", review(svc))
        assert response.json()["response"] == {"uid": "uid-1", "allowed": True}
    bad = json.dumps({"kind": "AdmissionReview", "padding": "x" * INLINE_BODY_BYTES}).encode()
    assert post(client, "/validate", bad).status_code == 400
    assert pool_hops == ["/validate"] * 3


def test_the_webhook_answers_with_the_core_pipeline_the_tests_call(
    client: AppClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/validate decides through app.core.admission.validate (on the event loop, in the
    pool and after the worker process's verdict alike): the core tests exercise what the
    webhook answers, nothing the route adds."""
    from app.core import admission
    from app.web.reviewqueue import INLINE_BODY_BYTES

    calls: list[tuple[str, bool]] = []
    real = admission.validate

    def spy(request: Any, **kwargs: Any) -> Any:
        calls.append((request.name, kwargs.get("prejudged") is not None))
        return real(request, **kwargs)

    monkeypatch.setattr(admission, "validate", spy)
    for name in ("first", "second"):
        svc = service(name=name, cls="io.cilium/node", selector="role=gpu")
        answered = post(client, "/validate", review(svc)).json()["response"]
        assert answered["allowed"] and answered["warnings"]
    assert ("first", False) in calls and ("second", False) in calls
    large = service(name="large", cls="io.cilium/node", selector="role=gpu")
    large["metadata"]["annotations"]["example.com/padding"] = "x" * INLINE_BODY_BYTES
    answered = post(client, "/validate", review(large)).json()["response"]
    assert answered["warnings"] == [
        f"{ANNOTATION} matches no node now: the Service gets no ingress"
    ]
    assert calls[-1] == ("large", True)  # the verdict from the worker process, then validate
