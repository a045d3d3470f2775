"""Bearer-token access (TokenReview + SubjectAccessReview) for preview and /metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.config import Settings
from app.web.app import create_app
from app.web.auth import AccessError, KubernetesAuthorizer
from tests.core.admission.builders import review, service
from tests.web.conftest import AppClient, FakeController
from tests.web.support import FakeReviews


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("token", "path", "status"),
    [
        (None, "/metrics", 401),
        ("", "/metrics", 401),
        ("forged", "/metrics", 401),
        ("good", "/preview/default/web", 403),
    ],
    ids=["no token", "empty token", "token the API server rejects", "path not granted"],
)
def test_access_is_refused(token: str | None, path: str, status: int) -> None:
    authorizer = KubernetesAuthorizer(FakeReviews())
    with pytest.raises(AccessError) as err:
        authorizer.check(token=token, verb="get", path=path)
    assert err.value.status == status


def test_allowed_scraper_is_cached_for_five_minutes() -> None:
    reviews, clock = FakeReviews(), Clock()
    authorizer = KubernetesAuthorizer(reviews, clock=clock)
    for _ in range(3):
        authorizer.check(token="good", verb="get", path="/metrics")
    assert reviews.calls == ["TokenReview", "SubjectAccessReview"]
    clock.now = 61  # token cache (1 min) expired, decision (5 min) still cached
    authorizer.check(token="good", verb="get", path="/metrics")
    assert reviews.calls[2:] == ["TokenReview"]
    clock.now = 400
    authorizer.check(token="good", verb="get", path="/metrics")
    assert reviews.calls[3:] == ["TokenReview", "SubjectAccessReview"]


def test_denial_is_cached_for_thirty_seconds_then_asked_again() -> None:
    reviews, clock = FakeReviews(), Clock()
    authorizer = KubernetesAuthorizer(reviews, clock=clock)
    for _ in range(2):
        with pytest.raises(AccessError):
            authorizer.check(token="good", verb="get", path="/preview/a/b")
    assert reviews.calls.count("SubjectAccessReview") == 1
    reviews.allowed.add(("system:serviceaccount:mon:prom", "get", "/preview/a/b"))
    clock.now = 31
    authorizer.check(token="good", verb="get", path="/preview/a/b")
    assert reviews.calls.count("SubjectAccessReview") == 2


def test_api_server_unreachable_is_503_and_not_cached() -> None:
    reviews = FakeReviews(failing=True)
    authorizer = KubernetesAuthorizer(reviews)
    with pytest.raises(AccessError) as err:
        authorizer.check(token="good", verb="get", path="/metrics")
    assert err.value.status == 503
    reviews.failing = False
    authorizer.check(token="good", verb="get", path="/metrics")


@pytest.fixture
def protected(controller: FakeController) -> AppClient:
    app = create_app(
        Settings(auth="kubernetes"),
        controller=controller,
        authorizer=KubernetesAuthorizer(FakeReviews()),
    )
    return AppClient(app)


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/metrics", {}, 401),
        ("GET", "/metrics", {"authorization": "Bearer forged"}, 401),
        ("GET", "/metrics", {"authorization": "Basic Z29vZA=="}, 401),
        ("GET", "/metrics", {"authorization": "Bearer good"}, 200),
        ("GET", "/preview/default/web", {}, 401),
        ("GET", "/preview/default/web", {"authorization": "Bearer good"}, 403),
        ("POST", "/preview", {"authorization": "Bearer good"}, 403),
        ("GET", "/healthz", {}, 200),
        ("GET", "/readyz", {}, 200),
    ],
)
def test_endpoints_that_need_a_token(
    protected: AppClient, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    with protected as client:
        response = client.request(method, path, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def test_admission_needs_no_token(protected: AppClient) -> None:
    with protected as client:
        response = client.post(
            "/validate",
            content=json.dumps(review(service())),
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 200 and response.json()["response"]["allowed"] is True


def test_kubernetes_auth_without_an_authorizer_is_refused() -> None:
    with pytest.raises(ValueError, match="auth"):
        create_app(Settings(auth="kubernetes"))


def test_the_reviews_sent_are_the_api_servers_own_shapes() -> None:
    reviews = FakeReviews()
    KubernetesAuthorizer(reviews).check(token="good", verb="get", path="/metrics")
    assert reviews.bodies == [
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": "good"},
        },
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "system:serviceaccount:mon:prom",
                "groups": ["system:authenticated"],
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                "uid": "u-1",
            },
        },
    ]


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"status": None},
        {"status": []},
        {"status": {"authenticated": "yes", "user": {"username": "mallory"}}},
        {"status": {"authenticated": True, "user": {}}},
        {"status": {"authenticated": True, "user": {"username": 7}}},
    ],
    ids=[
        "no status",
        "null status",
        "status not an object",
        "authenticated not a bool",
        "no username",
        "username not a string",
    ],
)
def test_a_garbled_token_review_answer_is_a_rejected_token(answer: dict[str, Any]) -> None:
    reviews = FakeReviews()
    reviews.create_token_review = lambda *, body: answer  # type: ignore[method-assign]
    with pytest.raises(AccessError) as err:
        KubernetesAuthorizer(reviews).check(token="good", verb="get", path="/metrics")
    assert err.value.status == 401


def test_begin_decides_from_the_caches_without_an_api_call() -> None:
    reviews, clock = FakeReviews(), Clock()
    authorizer = KubernetesAuthorizer(reviews, clock=clock)
    with pytest.raises(AccessError) as err:
        authorizer.check(token="forged", verb="get", path="/metrics")
    authorizer.check(token="good", verb="get", path="/metrics")
    with pytest.raises(AccessError):
        authorizer.check(token="good", verb="get", path="/preview/a/b")
    calls = list(reviews.calls)
    for token, path, status in (
        (None, "/metrics", 401),
        ("forged", "/metrics", 401),  # rejected within 10 s
        ("good", "/preview/a/b", 403),  # denial cached
    ):
        with pytest.raises(AccessError) as err:
            authorizer.begin(token=token, verb="get", path=path)
        assert err.value.status == status, (token, path)
    assert authorizer.begin(token="good", verb="get", path="/metrics") is None  # allowed
    assert reviews.calls == calls, "no review sent"
    pending = authorizer.begin(token="new", verb="get", path="/metrics")
    assert pending is not None and reviews.calls == calls, "sent only when run"
    with pytest.raises(AccessError) as err:
        pending.run()
    assert err.value.status == 401 and reviews.calls == [*calls, "TokenReview"]
    clock.now = 11  # the rejection expired: reviewed again
    assert authorizer.begin(token="forged", verb="get", path="/metrics") is not None


def test_a_review_slot_is_held_from_begin_until_run_ends_or_it_is_abandoned() -> None:
    reviews = FakeReviews()
    authorizer = KubernetesAuthorizer(reviews, max_in_flight=1)
    first = authorizer.begin(token="good", verb="get", path="/metrics")
    assert first is not None
    with pytest.raises(AccessError) as err:
        authorizer.begin(token="other", verb="get", path="/metrics")
    assert err.value.status == 503, "no slot free: refused at once, no review sent"
    assert reviews.calls == []
    first.abandon()
    second = authorizer.begin(token="good", verb="get", path="/metrics")
    assert second is not None
    second.run()  # frees its slot; abandon afterwards changes nothing
    second.abandon()
    assert reviews.calls == ["TokenReview", "SubjectAccessReview"]
    third = authorizer.begin(token="other", verb="get", path="/metrics")
    assert third is not None
    with pytest.raises(AccessError) as err:
        first.run()
    assert err.value.status == 503, "an abandoned review never runs"
    third.abandon()
    assert authorizer.begin(token="good", verb="get", path="/metrics") is None


def test_rejections_are_answered_while_every_worker_thread_is_busy(
    controller: FakeController,
) -> None:
    # Before: require_access was a sync dependency, a thread-pool hop per request: under a
    # flood of random tokens each 401/503 queued for a thread like real work.
    import asyncio
    import threading

    import anyio.to_thread
    import httpx
    from fastapi.concurrency import run_in_threadpool

    reviews = FakeReviews()
    authorizer = KubernetesAuthorizer(reviews, max_in_flight=1)
    with pytest.raises(AccessError):
        authorizer.check(token="forged", verb="get", path="/metrics")
    authorizer.check(token="good", verb="get", path="/metrics")
    held = authorizer.begin(token="another", verb="get", path="/metrics")  # the one slot
    app = create_app(Settings(auth="kubernetes"), controller=controller, authorizer=authorizer)
    release = threading.Event()

    async def scenario() -> list[int]:
        limit = int(anyio.to_thread.current_default_thread_limiter().total_tokens)
        busy = [asyncio.ensure_future(run_in_threadpool(release.wait, 20)) for _ in range(limit)]
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
                await asyncio.sleep(0.1)
                statuses = []
                for headers in (
                    {},
                    {"authorization": "Bearer forged"},
                    {"authorization": "Bearer x"},
                ):
                    response = await asyncio.wait_for(client.get("/metrics", headers=headers), 5)
                    statuses.append(response.status_code)
                return statuses
        finally:
            release.set()
            await asyncio.gather(*busy)

    try:
        assert asyncio.run(scenario()) == [401, 401, 503]
    finally:
        assert held is not None
        held.abandon()
    assert reviews.calls == ["TokenReview", "TokenReview", "SubjectAccessReview"]


@pytest.mark.parametrize(("wait", "second"), [(10.0, 200), (0.2, 503)])
def test_a_request_waits_on_the_loop_for_a_review_slot_then_is_answered(
    controller: FakeController, monkeypatch: pytest.MonkeyPatch, wait: float, second: int
) -> None:
    # Before: 503 at once when every slot was taken, so a flood of new tokens was answered
    # as fast as it was sent (the event loop busy with little else); now it waits, holding
    # no thread, for a slot to end (then reviewed: 200), or for the wait to end (503).
    import asyncio
    import threading

    import httpx

    from app.web.routes import deps

    entered, release = threading.Event(), threading.Event()

    class SlowReviews(FakeReviews):
        def create_token_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
            entered.set()
            release.wait(10)
            return super().create_token_review(body=body)

    users = {"good": "prom", "other": "prom"}
    reviews = SlowReviews(users=users, allowed={("prom", "get", "/metrics")})
    authorizer = KubernetesAuthorizer(reviews, max_in_flight=1)
    app = create_app(Settings(auth="kubernetes"), controller=controller, authorizer=authorizer)
    slots = app.state.node_ipam.limits.review_slots
    monkeypatch.setattr(deps, "ACCESS_REVIEW_WAIT_SECONDS", wait)

    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as client:
            good, other = ({"authorization": f"Bearer {t}"} for t in ("good", "other"))
            first = asyncio.ensure_future(client.get("/metrics", headers=good))
            while not entered.is_set():
                await asyncio.sleep(0.01)  # the first holds the only slot...
            waiting = asyncio.ensure_future(client.get("/metrics", headers=other))
            while len(slots) == 0:
                await asyncio.sleep(0.01)  # ...the second waits for it
            if second == 503:
                await asyncio.wait_for(asyncio.shield(waiting), 5)  # its wait ran out
            release.set()
            answers = await asyncio.wait_for(asyncio.gather(first, waiting), 10)
            return [answer.status_code for answer in answers]

    assert asyncio.run(scenario()) == [200, second]
    assert reviews.calls.count("TokenReview") == (2 if second == 200 else 1)
