"""TokenReview and SubjectAccessReview: create-only, answers configured from Python or HTTP."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.fakeapi import FakeApiServer

pytestmark = pytest.mark.fake_only(
    "the fake answers TokenReview/SubjectAccessReview from configured tokens and rules; on a "
    "real server both are decided by its authenticators and RBAC (tests/controlplane/"
    "test_e2e_auth.py runs /metrics and /preview against them)"
)


def test_token_review_answers_configured_tokens(
    api: client.ApiClient, fake_api: FakeApiServer
) -> None:
    fake_api.add_token(
        "good",
        username="system:serviceaccount:monitoring:prometheus",
        groups=["system:serviceaccounts"],
    )
    authn = client.AuthenticationV1Api(api)
    ok = authn.create_token_review({"spec": {"token": "good"}})
    bad = authn.create_token_review({"spec": {"token": "bad"}})
    assert ok.status.authenticated is True
    assert ok.status.user.username == "system:serviceaccount:monitoring:prometheus"
    assert ok.status.user.groups == ["system:serviceaccounts"]
    assert not bad.status.authenticated
    assert bad.status.error == "invalid bearer token"


def test_subject_access_review_for_non_resource_urls(
    api: client.ApiClient, fake_api: FakeApiServer
) -> None:
    fake_api.allow_non_resource(user="prom", path="/metrics", verb="get")
    authz = client.AuthorizationV1Api(api)

    def allowed(user: str, path: str, verb: str = "get") -> bool:
        review = authz.create_subject_access_review(
            {"spec": {"user": user, "nonResourceAttributes": {"path": path, "verb": verb}}}
        )
        return bool(review.status.allowed)

    assert allowed("prom", "/metrics")
    assert not allowed("prom", "/metrics", "post")
    assert not allowed("other", "/metrics")
    assert not allowed("prom", "/healthz")


def test_reviews_over_http_configuration(api: client.ApiClient) -> None:
    pool = api.rest_client.pool_manager
    host = api.configuration.host
    pool.request(
        "POST",
        f"{host}/_fake/tokens",
        body=json.dumps({"token": "t", "user": {"username": "u"}}).encode(),
    )
    pool.request(
        "POST", f"{host}/_fake/access", body=json.dumps({"user": "u", "path": "/metrics"}).encode()
    )
    assert (
        client.AuthenticationV1Api(api)
        .create_token_review({"spec": {"token": "t"}})
        .status.user.username
        == "u"
    )
    sar = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": {"user": "u", "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}
    )
    assert sar.status.allowed is True


def test_requests_with_a_configured_token_act_as_that_user(
    api: client.ApiClient, fake_api: FakeApiServer
) -> None:
    fake_api.add_token("tok", username="alice")
    resp = api.rest_client.pool_manager.request(
        "POST",
        f"{api.configuration.host}/apis/authentication.k8s.io/v1/tokenreviews",
        body=json.dumps({"spec": {"token": "tok"}}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer tok"},
    )
    assert resp.status == 201
    assert fake_api.request_log()[-1]["user"] == "alice"


def test_reviews_are_create_only(api: client.ApiClient) -> None:
    resp = api.rest_client.pool_manager.request(
        "GET", f"{api.configuration.host}/apis/authorization.k8s.io/v1/subjectaccessreviews"
    )
    body = json.loads(resp.data)
    assert (resp.status, body["reason"]) == (405, "MethodNotAllowed")
