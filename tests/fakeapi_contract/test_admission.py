"""The admission chain: webhooks from Mutating/ValidatingWebhookConfiguration objects."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from kubernetes import client

from tests.fakeapi import FakeApiServer
from tests.fakeapi_contract.webhook_app import WebhookApp, patch_response, webhook_configuration

pytestmark = pytest.mark.fake_only(
    "webhook configurations are cluster-wide: on the shared real server they would intercept "
    "every other test's writes, and kube-apiserver picks them up asynchronously; the real "
    "admission chain is exercised end to end with deploy/'s webhooks in "
    "tests/controlplane/test_e2e.py"
)

SERVICE = {
    "metadata": {"name": "s", "labels": {"app": "web"}},
    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def webhook(ca: trustme.CA) -> Iterator[WebhookApp]:
    app = WebhookApp(ca, hostnames=("127.0.0.1", "hook.webhooks.svc")).start()
    yield app
    app.stop()


def _register(api: client.ApiClient, kind: str, webhook: WebhookApp, **fields: Any) -> None:
    fields.setdefault(
        "client_config", {"url": webhook.url + "/" + kind.lower(), "caBundle": webhook.ca_bundle}
    )
    body = webhook_configuration(kind, **fields)
    admission = client.AdmissionregistrationV1Api(api)
    if kind == "Mutating":
        admission.create_mutating_webhook_configuration(body)
    else:
        admission.create_validating_webhook_configuration(body)


def _create(
    api: client.ApiClient, body: dict[str, Any] = SERVICE, query: str = ""
) -> tuple[int, Any, Any]:
    resp = api.rest_client.pool_manager.request(
        "POST",
        f"{api.configuration.host}/api/v1/namespaces/default/services{query}",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return resp.status, json.loads(resp.data), resp.headers


def test_admission_review_carries_request_fields(
    api: client.ApiClient, webhook: WebhookApp
) -> None:
    _register(api, "Validating", webhook)
    _create(api)
    client.CoreV1Api(api).patch_namespaced_service(
        "s", "default", {"metadata": {"labels": {"v": "2"}}}
    )
    create, update = (r["request"] for r in webhook.reviews)
    assert (webhook.reviews[0]["apiVersion"], webhook.reviews[0]["kind"]) == (
        "admission.k8s.io/v1",
        "AdmissionReview",
    )
    assert create["uid"] != update["uid"]
    assert create["kind"] == {"group": "", "version": "v1", "kind": "Service"}
    assert create["resource"] == {"group": "", "version": "v1", "resource": "services"}
    assert (create["operation"], create["name"], create["namespace"]) == ("CREATE", "s", "default")
    assert create["object"]["spec"]["type"] == "LoadBalancer" and create["oldObject"] is None
    assert create["dryRun"] is False
    assert create["userInfo"]["username"] == "kubernetes-admin"
    assert update["operation"] == "UPDATE"
    assert update["oldObject"]["metadata"]["labels"] == {"app": "web"}
    assert update["object"]["metadata"]["labels"] == {"app": "web", "v": "2"}


@pytest.mark.parametrize(
    ("status", "code", "reason", "message"),
    [
        (
            {"code": 403, "reason": "Forbidden", "message": "bad selector"},
            403,
            "Forbidden",
            'admission webhook "hook.example.com" denied the request: bad selector',
        ),
        (
            {"message": "no code"},
            400,
            "",
            'admission webhook "hook.example.com" denied the request: no code',
        ),
        (
            {},
            400,
            "",
            'admission webhook "hook.example.com" denied the request without explanation',
        ),
    ],
    ids=["webhook status code kept", "missing code becomes 400", "no message"],
)
def test_denial_is_returned_like_kube_apiserver(
    api: client.ApiClient,
    webhook: WebhookApp,
    fake_api: FakeApiServer,
    status: dict[str, Any],
    code: int,
    reason: str,
    message: str,
) -> None:
    _register(api, "Validating", webhook)
    webhook.decide = lambda request: {"allowed": False, "status": status, "warnings": ["look out"]}
    got, body, headers = _create(api)
    assert (got, body["code"], body["reason"], body["message"]) == (code, code, reason, message)
    assert headers["Warning"] == '299 - "look out"'
    assert fake_api.get("services", "s", "default") is None


def test_mutating_patch_is_applied_before_validating_webhooks(
    api: client.ApiClient, webhook: WebhookApp
) -> None:
    _register(api, "Mutating", webhook)
    _register(api, "Validating", webhook, name="check.example.com")

    def decide(request: dict[str, Any]) -> dict[str, Any]:
        if "loadBalancerClass" in request["object"]["spec"]:
            return {"allowed": True}
        return patch_response(
            [{"op": "add", "path": "/spec/loadBalancerClass", "value": "io.cilium/node"}]
        )

    webhook.decide = decide
    code, body, _ = _create(api)
    assert code == 201
    assert body["spec"]["loadBalancerClass"] == "io.cilium/node"
    assert webhook.paths == ["/mutating?timeout=10s", "/validating?timeout=10s"]
    assert webhook.reviews[1]["request"]["object"]["spec"]["loadBalancerClass"] == "io.cilium/node"


def test_warnings_become_warning_headers(api: client.ApiClient, webhook: WebhookApp) -> None:
    _register(api, "Validating", webhook)
    webhook.decide = lambda request: {"allowed": True, "warnings": ["first", 'has "quotes"']}
    code, _, headers = _create(api)
    assert code == 201
    assert headers.getlist("Warning") == ['299 - "first"', '299 - "has \\"quotes\\""']


@pytest.mark.parametrize(
    ("fields", "called"),
    [
        ({"operations": ("UPDATE",)}, False),
        ({"resources": ("services/status",)}, False),
        ({"resources": ("*",)}, True),
        ({"objectSelector": {"matchLabels": {"app": "db"}}}, False),
        (
            {
                "objectSelector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                }
            },
            True,
        ),
        ({"namespaceSelector": {"matchLabels": {"team": "x"}}}, False),
        ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}, True),
        (
            {
                "matchConditions": [
                    {"name": "lb", "expression": "object.spec.type == 'LoadBalancer'"}
                ]
            },
            True,
        ),
        (
            {"matchConditions": [{"name": "cip", "expression": "object.spec.type == 'ClusterIP'"}]},
            False,
        ),
        (
            {
                "matchConditions": [
                    {"name": "no-class", "expression": "!has(object.spec.loadBalancerClass)"}
                ]
            },
            True,
        ),
    ],
    ids=[
        "operation not matched",
        "status subresource rule does not match main resource",
        "wildcard resource",
        "objectSelector mismatch",
        "objectSelector match",
        "namespaceSelector mismatch",
        "namespaceSelector on the name label",
        "matchCondition true",
        "matchCondition false skips",
        "matchCondition with has()",
    ],
)
def test_rules_selectors_and_match_conditions(
    api: client.ApiClient,
    webhook: WebhookApp,
    fields: dict[str, Any],
    called: bool,
) -> None:
    _register(api, "Validating", webhook, **fields)
    code, _, _ = _create(api)
    assert code == 201
    assert bool(webhook.reviews) is called


@pytest.mark.parametrize(
    ("policy", "code"), [("Fail", 403), ("Ignore", 201)], ids=["Fail rejects", "Ignore skips"]
)
def test_unsupported_match_condition_is_an_error_never_true(
    api: client.ApiClient, webhook: WebhookApp, policy: str, code: int
) -> None:
    cond = [{"name": "sized", "expression": "size(object.spec.ports) > 0"}]
    _register(api, "Validating", webhook, matchConditions=cond, failurePolicy=policy)
    got, body, _ = _create(api)
    assert got == code
    assert webhook.reviews == []
    if policy == "Fail":
        assert body["reason"] == "Forbidden" and 'webhook "hook.example.com"' in body["message"]


@pytest.mark.parametrize(
    ("policy", "code"), [("Fail", 500), ("Ignore", 201)], ids=["Fail", "Ignore"]
)
def test_wrong_ca_bundle_follows_failure_policy(
    api: client.ApiClient, webhook: WebhookApp, policy: str, code: int
) -> None:
    bundle = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    _register(
        api,
        "Validating",
        webhook,
        client_config={"url": webhook.url, "caBundle": bundle},
        failurePolicy=policy,
    )
    got, body, _ = _create(api)
    assert got == code
    if policy == "Fail":
        assert body["reason"] == "InternalError"
        assert body["message"].startswith(
            'Internal error occurred: failed calling webhook "hook.example.com"'
        )


def test_timeout_seconds_is_honoured(api: client.ApiClient, webhook: WebhookApp) -> None:
    webhook.delay = 2.0
    _register(api, "Validating", webhook, timeoutSeconds=1)
    started = time.monotonic()
    code, body, _ = _create(api)
    assert code == 500
    assert "failed calling webhook" in body["message"]
    assert time.monotonic() - started < 1.9
    assert webhook.paths == ["/validating?timeout=1s"]


def test_service_reference_is_dialled_on_loopback_with_svc_host_name(
    api: client.ApiClient, webhook: WebhookApp, fake_api: FakeApiServer
) -> None:
    fake_api.map_service_port(namespace="webhooks", name="hook", port=443, local_port=webhook.port)
    ref = {
        "service": {"namespace": "webhooks", "name": "hook", "path": "/validate"},
        "caBundle": webhook.ca_bundle,
    }
    _register(api, "Validating", webhook, client_config=ref)
    code, _, _ = _create(api)
    assert code == 201
    assert webhook.paths == ["/validate?timeout=10s"]


def test_unmapped_service_reference_fails_closed(
    api: client.ApiClient, webhook: WebhookApp
) -> None:
    ref = {"service": {"namespace": "webhooks", "name": "missing"}, "caBundle": webhook.ca_bundle}
    _register(api, "Validating", webhook, client_config=ref)
    code, body, _ = _create(api)
    assert code == 500 and "failed calling webhook" in body["message"]


def test_dry_run_runs_admission_but_stores_nothing(
    api: client.ApiClient, webhook: WebhookApp, fake_api: FakeApiServer
) -> None:
    _register(api, "Validating", webhook)
    code, _, _ = _create(api, query="?dryRun=All")
    assert code == 201
    assert webhook.reviews[0]["request"]["dryRun"] is True
    assert fake_api.get("services", "s", "default") is None


def test_dry_run_is_refused_for_webhooks_with_side_effects(
    api: client.ApiClient, webhook: WebhookApp
) -> None:
    _register(api, "Validating", webhook, sideEffects="Some")
    code, body, _ = _create(api, query="?dryRun=All")
    assert code == 400
    assert body["message"] == 'admission webhook "hook.example.com" does not support dry run'


def test_kubectl_shows_webhook_warnings_and_denials(
    api: client.ApiClient, webhook: WebhookApp, kubectl: Any
) -> None:
    _register(api, "Validating", webhook)
    webhook.decide = lambda request: {"allowed": True, "warnings": ["selector matches no node"]}
    manifest = json.dumps({"apiVersion": "v1", "kind": "Service", **SERVICE})
    applied = kubectl("apply", "-f", "-", stdin=manifest)
    assert applied.returncode == 0, applied.stderr
    assert "Warning: selector matches no node" in applied.stderr
    webhook.decide = lambda request: {"allowed": False, "status": {"code": 400, "message": "bad"}}
    denied = kubectl("label", "service", "s", "x=y")
    assert denied.returncode == 1
    assert 'admission webhook "hook.example.com" denied the request: bad' in denied.stderr
