"""EventRecorder: what is sent to the API server (note size, API fallback)."""

from __future__ import annotations

from typing import Any

import pytest

from app.controller.events import (
    WARNING,
    EventRecorder,
    ServiceEvent,
    resource_not_served,
    truncate_note,
)
from app.kube.client import ApiError
from tests.controller.memory_api import MemoryAPI


def recorder(api: MemoryAPI) -> EventRecorder:
    return EventRecorder(api=api, identity="pod-a", clock=lambda: 1e9)


def warning(note: str) -> ServiceEvent:
    return ServiceEvent(WARNING, "InvalidNodeSelector", "SelectNodes", note)


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        ("a" * 1024, "a" * 1024),
        ("a" * 2000, "a" * 1024),
        ("ü" * 2000, "ü" * 512),
        ("a" + "ü" * 600, "a" + "ü" * 511),  # 1 + 511*2 = 1023: the next ü does not fit
        ("€" * 400, "€" * 341),  # 3 bytes each: 1023
        ("x\ud800y", "x?y"),  # a lone surrogate is not encodable: sent as "?"
    ],
    ids=["ascii-at-limit", "ascii-over", "two-byte", "odd-boundary", "three-byte", "surrogate"],
)
def test_a_long_note_is_cut_to_1024_utf8_bytes_at_a_character_boundary(
    note: str, expected: str
) -> None:
    assert truncate_note(note) == expected
    assert len(truncate_note(note).encode()) <= 1024


@pytest.mark.parametrize("served", [True, False], ids=["events.k8s.io-v1", "core-v1"])
def test_an_event_quoting_a_long_non_ascii_annotation_fits_the_api_limit(served: bool) -> None:
    api = MemoryAPI()
    api.events_v1_served = served
    assert recorder(api).emit(namespace="default", name="web", event=warning("ü" * 2000))
    [event] = api.events
    text = event["note"] if served else event["message"]
    assert len(text.encode()) <= 1024
    assert text == "ü" * 512


class NamespaceGoneAPI(MemoryAPI):
    """Answers a create in namespace ``gone`` like the NamespaceLifecycle admission plugin."""

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        if namespace == "gone":
            raise ApiError(404, 'namespaces "gone" not found')
        super().create_event(namespace=namespace, body=body)


def test_a_namespace_deleted_during_a_reconcile_does_not_switch_to_core_v1_events() -> None:
    api = NamespaceGoneAPI()
    events = recorder(api)
    assert not events.emit(namespace="gone", name="web", event=warning("first"))
    assert events.emit(namespace="default", name="web", event=warning("second"))
    assert [e["apiVersion"] for e in api.events] == ["events.k8s.io/v1"]


@pytest.mark.parametrize(
    ("status", "reason", "not_served"),
    [
        (404, "the server could not find the requested resource", True),
        (404, "404 page not found", True),
        (404, 'namespaces "team-a" not found', False),
        (404, 'events.events.k8s.io "web.1" not found', False),
        (403, "forbidden", False),
        (500, "the server could not find the requested resource", False),
    ],
    ids=["unserved-status", "unserved-plain", "namespace-gone", "object", "403", "500"],
)
def test_only_a_404_about_the_api_itself_means_events_k8s_io_is_not_served(
    status: int, reason: str, not_served: bool
) -> None:
    assert resource_not_served(ApiError(status, reason)) is not_served
