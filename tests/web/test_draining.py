"""The shutdown delay's app side (app/web/draining.py): ``/readyz`` fails and every
response closes its connection once draining starts; nothing changes before. The process
side (SIGTERM, the delay, exit 0) is tests/web/test_e2e.py's."""

from __future__ import annotations

import pytest

from app.config import InvalidSettings, Settings, from_flags
from app.web.app import create_app
from app.web.draining import Draining
from app.web.routes.health import readiness
from tests.web.conftest import AppClient, FakeController, cluster


def test_draining_starts_once_and_keeps_its_first_time() -> None:
    draining = Draining()
    assert not draining.is_set() and draining.since is None
    draining.start(now=100.0)
    draining.start(now=250.0)
    assert draining.is_set() and draining.since == 100.0


def test_readyz_fails_from_the_start_of_the_delay_on() -> None:
    app = create_app(Settings(auth="none"), controller=FakeController(cache=cluster()))
    state = app.state.node_ipam
    assert readiness(state) == (200, "ok\n")
    state.draining.start()
    assert readiness(state) == (503, "not ready: shutting down\n")


def test_responses_close_their_connection_only_while_draining() -> None:
    app = create_app(Settings(auth="none"), controller=FakeController(cache=cluster()))
    with AppClient(app) as client:
        before = client.get("/healthz")
        assert before.status_code == 200 and "connection" not in before.headers
        app.state.node_ipam.draining.start()
        during = client.get("/healthz")
        assert during.status_code == 200  # still answered: liveness holds while draining
        assert during.headers["connection"] == "close"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.text == "not ready: shutting down\n"
        assert ready.headers["connection"] == "close"


def test_the_delay_is_a_non_negative_number_of_seconds() -> None:
    assert Settings().shutdown_delay_seconds == 0.0
    assert from_flags(Settings, {"shutdown_delay_seconds": 10}).shutdown_delay_seconds == 10.0
    with pytest.raises(InvalidSettings, match="shutdown-delay-seconds"):
        from_flags(Settings, {"shutdown_delay_seconds": -1})
