"""EventRecorder: what is sent to the API server (note size, API fallback)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.controller.events import (
    NORMAL,
    WAITING_FOR_ENDPOINTS,
    WARNING,
    EventRecorder,
    ServiceEvent,
    micro_time,
    resource_not_served,
    truncate_note,
)
from app.kube.client import ApiError
from app.telemetry import metrics
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import wait_until


def recorder(api: MemoryAPI) -> EventRecorder:
    return EventRecorder(api=api, identity="pod-a", clock=lambda: 1e9)


def warning(note: str) -> ServiceEvent:
    return ServiceEvent(WARNING, "InvalidNodeSelector", "SelectNodes", note)


@pytest.mark.parametrize(
    "note",
    ["a" * 2000, "ü" * 2000, "a" + "ü" * 600, "€" * 400, "x\ud800y" * 600],
    ids=["ascii-over", "two-byte", "odd-boundary", "three-byte", "surrogate"],
)
def test_a_long_note_is_cut_in_the_middle_to_1024_utf8_bytes(note: str) -> None:
    cut = truncate_note(note)
    assert len(cut.encode()) <= 1024
    assert "bytes)…" in cut
    assert cut[0] == note[0] and cut[-1] == note[-1].replace("\ud800", "?")


def test_a_note_within_the_limit_is_sent_as_is() -> None:
    assert truncate_note("a" * 1024) == "a" * 1024


@pytest.mark.parametrize("served", [True, False], ids=["events.k8s.io-v1", "core-v1"])
def test_an_event_quoting_a_long_non_ascii_annotation_fits_the_api_limit(served: bool) -> None:
    api = MemoryAPI()
    api.events_v1_served = served
    events = recorder(api)
    assert events.emit(namespace="default", name="web", event=warning("ü" * 2000 + " END"))
    events.flush()
    [event] = api.events
    text = event["note"] if served else event["message"]
    assert len(text.encode()) <= 1024
    assert text.startswith("üü") and text.endswith(" END")


class NamespaceGoneAPI(MemoryAPI):
    """Answers a create in namespace ``gone`` like the NamespaceLifecycle admission plugin."""

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        if namespace == "gone":
            raise ApiError(404, 'namespaces "gone" not found')
        super().create_event(namespace=namespace, body=body)


def test_a_namespace_deleted_during_a_reconcile_does_not_switch_to_core_v1_events() -> None:
    api = NamespaceGoneAPI()
    events = recorder(api)
    events.emit(namespace="gone", name="web", event=warning("first"))
    events.emit(namespace="default", name="web", event=warning("second"))
    events.flush()
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


def normal(note: str) -> ServiceEvent:
    return ServiceEvent("Normal", "IPsAssigned", "UpdateStatus", note)


class BlockingAPI(MemoryAPI):
    """``create_event`` waits until ``release`` is set (a slow or hung API server)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        self.entered.set()
        assert self.release.wait(10)
        super().create_event(namespace=namespace, body=body)


def dropped(cause: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value("node_ipam_lb_events_dropped_total", {"cause": cause})
        or 0.0
    )


def test_emit_never_waits_for_the_api_server_and_a_full_queue_drops_with_a_counter() -> None:
    api = BlockingAPI()
    events = EventRecorder(api=api, identity="pod-a", queue_size=2)
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=warning("x"))
        assert api.entered.wait(5), "the sender thread took the first Event"
        # The sender is stuck in create_event; emit still returns at once.
        assert events.emit(namespace="default", name="b", event=warning("x"))
        assert events.emit(namespace="default", name="c", event=warning("x"))
        before = dropped("queue_full")
        assert not events.emit(namespace="default", name="d", event=warning("x"))
        assert dropped("queue_full") == before + 1
        api.release.set()
        assert events.flush(5)
    finally:
        api.release.set()
        events.stop()
    assert sorted(e["regarding"]["name"] for e in api.events) == ["a", "b", "c"]
    # The dropped Event was not remembered as said: the next reconcile says it.
    assert events.emit(namespace="default", name="d", event=warning("x"))


def test_the_spam_filter_drops_a_services_events_beyond_its_burst() -> None:
    api = MemoryAPI()
    now = [0.0]
    events = EventRecorder(
        api=api, identity="pod-a", spam_burst=3, spam_refill_seconds=300, monotonic=lambda: now[0]
    )
    before = dropped("spam")
    sent = [events.emit(namespace="default", name="web", event=normal(f"{i}")) for i in range(5)]
    assert sent == [True, True, True, False, False]
    assert dropped("spam") == before + 2
    assert events.emit(namespace="default", name="other", event=normal("0")), "per Service"
    now[0] = 300.0  # one token back
    assert events.emit(namespace="default", name="web", event=normal("5"))
    events.flush()
    assert len(api.events) == 5


def test_a_repeated_event_updates_the_series_of_the_first_one() -> None:
    api = MemoryAPI()
    clock = [1e9]
    events = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
    for note in ["A", "B", "A"]:
        clock[0] += 10
        events.emit(namespace="default", name="web", event=warning(note))
        events.flush()
    assert [e["note"] for e in api.events] == ["A", "B"]
    assert api.events[0]["series"] == {
        "count": 2,
        "lastObservedTime": "2001-09-09T01:47:10.000000Z",
    }
    assert api.calls["patch events"] == 1


def test_later_repeats_are_counted_and_sent_by_the_periodic_series_refresh() -> None:
    api = MemoryAPI()
    now = [0.0]
    events = EventRecorder(
        api=api, identity="pod-a", monotonic=lambda: now[0], series_refresh_seconds=60
    )
    for note in ["A", "B", "A", "B", "A"]:
        events.emit(namespace="default", name="web", event=warning(note))
    events.flush()
    # A: created, first repeat sent at once (2), the next one waits; B: created, repeat (2).
    assert [e["series"]["count"] for e in api.events] == [2, 2]
    now[0] = 61.0
    events.start()
    try:
        wait_until(lambda: api.events[0]["series"]["count"] == 3, what="refresh sent A's count")
    finally:
        events.stop()
    assert api.calls["patch events"] == 3


def test_a_new_term_updates_the_series_of_the_event_an_earlier_process_created() -> None:
    """A Warning still holding at a start more than 30 min after its Event was last
    observed: the series counts it (seven such starts: one Event, ``series.count`` 7)."""
    api = MemoryAPI()
    clock = [1e9]
    first = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
    first.emit(namespace="default", name="web", event=warning("bad selector"))
    first.flush()
    for start in range(2, 8):  # six more starts, each a new process and term
        clock[0] += 1801
        restarted = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
        restarted.reset()
        restarted.emit(namespace="default", name="web", event=warning("bad selector"))
        restarted.flush()
        assert [e["series"]["count"] for e in api.events] == [start]
    assert len(api.events) == 1, "7 starts, one Event"
    assert api.events[0]["series"]["lastObservedTime"] == "2001-09-09T04:46:46.000000Z"


def test_a_restart_soon_after_writes_nothing_about_a_warning_that_still_holds() -> None:
    """docs/design.md §5: the condition persisting across a restart is not a new
    occurrence; an Event observed less than 30 min ago is current, so a restart of a
    synced cluster writes no Event at all. A later change in the new term is one."""
    api = MemoryAPI()
    clock = [1e9]
    first = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
    first.emit(namespace="default", name="web", event=warning("bad selector"))
    first.flush()
    clock[0] += 1799
    restarted = EventRecorder(api=api, identity="pod-b", clock=lambda: clock[0])
    restarted.reset()
    assert restarted.emit(namespace="default", name="web", event=warning("bad selector"))
    restarted.flush()
    assert api.calls["list events"] == 4, "primed at each start (Warnings, WaitingForEndpoints)"
    assert api.calls["create events"] == 1
    assert api.calls["patch events"] == 0
    assert "series" not in api.events[0]
    # The condition changes and comes back in this term: a new occurrence, counted.
    restarted.emit(namespace="default", name="web", event=warning("other"))
    restarted.emit(namespace="default", name="web", event=warning("bad selector"))
    restarted.flush()
    assert api.events[0]["series"]["count"] == 2
    assert api.calls["patch events"] == 1


@pytest.mark.parametrize("first_outcome", ["addresses, not written", "condition cleared"])
def test_a_listed_warning_that_comes_back_later_in_the_term_is_counted(first_outcome: str) -> None:
    """docs/design.md §5: only a Warning that held when the term started is the listed
    Event's occurrence still going on. When the slot's first outcome in the term is
    another one (``IPsAssigned`` recorded without a write on the resync, or the condition
    cleared) and the Warning comes back, it is a new occurrence: the series counts it at
    once, even minutes after the Event was last observed."""
    api = MemoryAPI()
    clock = [1e9]
    first = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
    first.emit(namespace="default", name="web", event=warning("no nodes"), slot="s")
    first.flush()
    clock[0] += 180  # the Lease moves three minutes later
    successor = EventRecorder(api=api, identity="pod-b", clock=lambda: clock[0])
    successor.reset()
    if first_outcome == "condition cleared":
        successor.clear("default", "web", "s")
    else:
        assigned = ServiceEvent("Normal", "IPsAssigned", "UpdateStatus", "Assigned IPs: 10.0.0.1")
        successor.emit(namespace="default", name="web", event=assigned, slot="s", record_only=True)
    clock[0] += 60
    assert successor.emit(namespace="default", name="web", event=warning("no nodes"), slot="s")
    successor.flush()
    assert len(api.events) == 1
    assert api.events[0]["series"] == {
        "count": 2,
        "lastObservedTime": micro_time(clock[0]),
    }


def test_a_series_whose_event_is_gone_creates_it_again_with_its_count() -> None:
    api = MemoryAPI()
    events = recorder(api)
    for note in ["A", "B"]:
        events.emit(namespace="default", name="web", event=warning(note))
    events.flush()
    api.events.pop(0)  # A expired (--event-ttl)
    events.emit(namespace="default", name="web", event=warning("A"))
    events.flush()
    assert [(e["note"], (e.get("series") or {}).get("count")) for e in api.events] == [
        ("B", None),
        ("A", 2),
    ]


def test_without_events_k8s_io_the_series_is_kept_in_core_v1_count() -> None:
    api = MemoryAPI()
    api.events_v1_served = False
    events = recorder(api)
    for note in ["A", "B", "A"]:
        events.emit(namespace="default", name="web", event=warning(note))
        events.flush()
    assert [(e["message"], e["count"]) for e in api.events] == [("A", 2), ("B", 1)]


def test_priming_failure_still_creates_events() -> None:
    api = MemoryAPI()
    api.fail("list events", 500)
    events = recorder(api)
    events.emit(namespace="default", name="web", event=warning("x"))
    events.flush()
    assert len(api.events) == 1


def test_a_service_recreated_under_its_name_gets_an_event_of_its_own() -> None:
    """The series cache is primed from the API server at each term: an Event an earlier
    term created about a deleted Service of the same name (another ``uid``) is not the
    new Service's, so its series is not continued (``kubectl describe`` of the new one
    selects by ``involvedObject.uid`` and would never show it); the same ``uid`` is."""
    api = MemoryAPI()
    first = recorder(api)
    first.emit(namespace="default", name="web", event=warning("bad"), uid="uid-old")
    first.flush()
    # The same uid within 30 min of its last observation: the condition merely persists,
    # nothing is written (count stays 1); another uid: an Event of its own.
    for uid, count in [("uid-old", 1), ("uid-new", 1)]:
        restarted = recorder(api)
        restarted.reset()
        restarted.emit(namespace="default", name="web", event=warning("bad"), uid=uid)
        restarted.flush()
        assert (
            api.events[-1]["regarding"]["uid"],
            api.events[-1].get("series", {}).get("count", 1),
        ) == (uid, count)
    assert [e["regarding"]["uid"] for e in api.events] == ["uid-old", "uid-new"]


def test_a_series_recreated_after_its_event_expired_keeps_the_uid() -> None:
    api = MemoryAPI()
    events = recorder(api)
    events.emit(namespace="default", name="web", event=warning("A"), uid="u-1")
    events.emit(namespace="default", name="web", event=warning("B"), uid="u-1")
    events.flush()
    api.events.pop(0)  # A expired (--event-ttl): its series is created again
    events.emit(namespace="default", name="web", event=warning("A"), uid="u-1")
    events.flush()
    assert [(e["note"], e["regarding"].get("uid")) for e in api.events] == [
        ("B", "u-1"),
        ("A", "u-1"),
    ]


def test_events_wait_while_defer_holds_and_go_out_once_it_lets_go() -> None:
    api = MemoryAPI()
    holding = threading.Event()
    holding.set()
    events = EventRecorder(api=api, identity="pod-a", defer=holding.is_set, defer_max_seconds=60)
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=normal("assigned"))
        # Held (statuses first): nothing sent while defer() is true, well within its 60 s.
        time.sleep(0.5)
        assert api.events == [] and events.pending() == 1
        holding.clear()
        assert wait_until(lambda: len(api.events) == 1, timeout=5)
    finally:
        events.stop()


def test_a_deferred_event_is_sent_after_defer_max_seconds_even_if_defer_still_holds() -> None:
    api = MemoryAPI()
    events = EventRecorder(api=api, identity="pod-a", defer=lambda: True, defer_max_seconds=0.3)
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=normal("assigned"))
        time.sleep(0.1)
        assert api.events == []
        assert wait_until(lambda: len(api.events) == 1, timeout=5)
    finally:
        events.stop()


def test_flush_and_stop_send_without_waiting_for_defer() -> None:
    api = MemoryAPI()
    events = EventRecorder(api=api, identity="pod-a", defer=lambda: True, defer_max_seconds=600)
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=normal("one"))
        assert events.flush(5)
        assert len(api.events) == 1
        assert events.emit(namespace="default", name="b", event=normal("two"))
    finally:
        events.stop(timeout=5)
    assert sorted(e["regarding"]["name"] for e in api.events) == ["a", "b"]


def test_a_failing_defer_check_does_not_stop_events() -> None:
    api = MemoryAPI()

    def broken() -> bool:
        raise RuntimeError("boom")

    events = EventRecorder(api=api, identity="pod-a", defer=broken, defer_max_seconds=600)
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=normal("assigned"))
        assert wait_until(lambda: len(api.events) == 1, timeout=5)
    finally:
        events.stop()


def test_a_three_quarters_full_queue_is_sent_even_while_defer_holds() -> None:
    # Holding must never be why the queue overflows and drops an Event.
    api = MemoryAPI()
    events = EventRecorder(
        api=api, identity="pod-a", defer=lambda: True, defer_max_seconds=600, queue_size=4
    )
    events.start()
    try:
        assert events.emit(namespace="default", name="a", event=normal("one"))
        time.sleep(0.2)
        assert api.events == []
        assert events.emit(namespace="default", name="b", event=normal("two"))
        time.sleep(0.2)
        assert api.events == [] and events.pending() == 2
        assert events.emit(namespace="default", name="c", event=normal("three"))
        # Three quarters full (3 of 4): sent until it is below that again, the rest held.
        assert wait_until(lambda: len(api.events) == 1, timeout=5)
        time.sleep(0.2)
        assert len(api.events) == 1 and events.pending() == 2
    finally:
        events.stop()


def test_a_restart_during_the_grace_does_not_say_waiting_for_endpoints_again() -> None:
    """The Normal ``WaitingForEndpoints`` is not tied to a status write, so it is listed at
    the start of a term with the Warnings: a restart while a new Local Service still waits
    for its Pods writes no Event (bench_restart's target: 0 Events)."""
    api = MemoryAPI()
    clock = [1e9]
    waiting = ServiceEvent(NORMAL, WAITING_FOR_ENDPOINTS, "SelectNodes", "no ready endpoint yet")
    first = EventRecorder(api=api, identity="pod-a", clock=lambda: clock[0])
    first.emit(namespace="default", name="web", event=waiting)
    first.flush()
    clock[0] += 60
    restarted = EventRecorder(api=api, identity="pod-b", clock=lambda: clock[0])
    restarted.reset()
    restarted.emit(namespace="default", name="web", event=waiting)
    restarted.flush()
    assert api.calls["create events"] == 1
    assert api.calls["patch events"] == 0
