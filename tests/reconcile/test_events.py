"""EventRecorder: what is sent to the API server (note size, API fallback)."""

from __future__ import annotations

import pytest

from app.events import WARNING, EventRecorder, ServiceEvent, truncate_note
from tests.reconcile.memory_api import MemoryAPI


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
