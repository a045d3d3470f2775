"""The shutdown delay's app side (app/web/draining.py): once draining starts every response
closes its connection (the 500 of an unexpected error too) and ``/readyz`` is unchanged;
nothing changes before. A SIGTERM before the server runs starts it. The process side
(SIGTERM, the delay, exit 0) is tests/web/test_e2e.py's."""

from __future__ import annotations

import os
import signal

import anyio
import httpx
import pytest
from fastapi import FastAPI

from app.config import InvalidSettings, Settings, from_flags
from app.web.app import create_app
from app.web.draining import Draining, catch_early_sigterm
from app.web.routes.health import readiness
from tests.web.conftest import AppClient, FakeController, cluster


def app_with_a_failing_route() -> FastAPI:
    app = create_app(Settings(auth="none"), controller=FakeController(cache=cluster()))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    return app


def test_draining_starts_once_and_keeps_its_first_time() -> None:
    draining = Draining()
    assert not draining.is_set() and draining.since is None
    draining.start(now=100.0)
    draining.start(now=250.0)
    assert draining.is_set() and draining.since == 100.0


def test_readyz_does_not_change_while_draining() -> None:
    """A terminating Pod's endpoint is not ready anyway; staying ``serving`` keeps it
    kube-proxy's fallback while no endpoint is ready (KEP-1669)."""
    app = create_app(Settings(auth="none"), controller=FakeController(cache=cluster()))
    state = app.state.node_ipam
    state.draining.start()
    assert readiness(state) == (200, "ok\n")


def test_responses_close_their_connection_only_while_draining() -> None:
    app = app_with_a_failing_route()
    with AppClient(app) as client:
        before = client.get("/healthz")
        assert before.status_code == 200 and "connection" not in before.headers
        app.state.node_ipam.draining.start()
        during = client.get("/healthz")
        assert during.status_code == 200 and during.headers["connection"] == "close"
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.headers["connection"] == "close"
        missing = client.get("/no-such-path")
        assert missing.status_code == 404 and missing.headers["connection"] == "close"


def test_an_unexpected_error_closes_its_connection_only_while_draining() -> None:
    """Starlette answers an unexpected error outside the middleware stack (its
    ServerErrorMiddleware), so the 500 handler closes the connection itself."""
    app = app_with_a_failing_route()

    async def boom() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as c:
            return await c.get("/boom")

    failed = anyio.run(boom)
    assert failed.status_code == 500 and "connection" not in failed.headers
    app.state.node_ipam.draining.start()
    failed = anyio.run(boom)
    assert failed.status_code == 500 and failed.headers["connection"] == "close"
    assert failed.json()["reason"] == "InternalError"


def test_a_sigterm_before_the_server_runs_starts_the_delay() -> None:
    """As a container's PID 1, Python ignores a SIGTERM that has no handler: one sent while
    ``serve`` imports and builds would be lost, and the Pod would wait for SIGKILL."""
    before = signal.getsignal(signal.SIGTERM)
    draining = Draining()
    restore = catch_early_sigterm(draining)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert draining.is_set()
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_delay_is_a_non_negative_number_of_seconds() -> None:
    assert Settings().shutdown_delay_seconds == 0.0
    assert from_flags(Settings, {"shutdown_delay_seconds": 10}).shutdown_delay_seconds == 10.0
    with pytest.raises(InvalidSettings, match="shutdown-delay-seconds"):
        from_flags(Settings, {"shutdown_delay_seconds": -1})
