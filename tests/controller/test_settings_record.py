"""The Lease holder publishes its effective settings on the record Lease for the live
preview (docs/design.md §8, issue 37 item 6): once per term, only when they differ from
what is stored, with health checks on or off; a replica that does not hold the Lease
never writes; the node-health decision and the settings never undo each other."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from app.config import published
from app.controller.healthrecord import LeaseHealthRecord
from app.controller.settingsrecord import SettingsPublisher
from app.core.nodehealth import HEALTH_ANNOTATION
from app.core.published import SETTINGS_ANNOTATION, decode_settings
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import Start, node, service, wait_until

RECORD = "kube-system/node-ipam-lb-node-health"  # fast_settings' leader-election namespace


class RecordWrites(MemoryAPI):
    """:class:`MemoryAPI` that lists each write of the record Lease: the writer
    (``spec.holderIdentity``) and the settings it carried."""

    def __init__(self) -> None:
        super().__init__()
        self.record_writes: list[tuple[str, str | None]] = []

    def create_lease(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = super().create_lease(namespace=namespace, body=body)
        self._note(body)
        return stored

    def replace_lease(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = super().replace_lease(namespace=namespace, name=name, body=body)
        self._note(body)
        return stored

    def _note(self, body: dict[str, Any]) -> None:
        if body["metadata"]["name"].endswith("-node-health"):
            annotations = body["metadata"].get("annotations") or {}
            writer = body["spec"]["holderIdentity"]
            self.record_writes.append((writer, annotations.get(SETTINGS_ANNOTATION)))


@pytest.fixture
def memory_api() -> RecordWrites:
    return RecordWrites()


def stored_settings(api: MemoryAPI) -> dict[str, Any] | None:
    lease = api.leases.get(RECORD)
    text = ((lease or {}).get("metadata", {}).get("annotations") or {}).get(SETTINGS_ANNOTATION)
    return None if text is None else decode_settings(text)


def test_the_lease_holder_publishes_its_settings_once_with_health_checks_off(
    memory_api: RecordWrites, start: Start
) -> None:
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("services", service("web"))
    a = start("pod-a", allowed_namespaces="default,team-a", node_health_check=False)
    wait_until(lambda: stored_settings(memory_api), what="the settings published")
    assert stored_settings(memory_api) == published(a.settings)
    assert stored_settings(memory_api)["allowed-namespaces"] == "default,team-a"  # type: ignore[index]
    time.sleep(0.5)  # five renewals of the election Lease: the record is not rewritten
    assert [writer for writer, _ in memory_api.record_writes] == ["pod-a"]


def test_a_follower_never_writes_and_only_a_holder_with_other_settings_does(
    memory_api: RecordWrites, start: Start
) -> None:
    """A rollout with the same settings writes nothing; ``helm upgrade`` with others (a
    new Pod taking the Lease) writes them once."""
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    a = start("pod-a")
    wait_until(lambda: memory_api.record_writes, what="a publishes")
    b = start("pod-b")
    wait_until(b.ready, what="b synced")
    time.sleep(0.3)
    assert not b.is_leader()
    a.stop(timeout=5)
    wait_until(b.is_leader, timeout=3, what="b takes over")
    time.sleep(0.3)
    assert [writer for writer, _ in memory_api.record_writes] == ["pod-a"]  # same settings
    c = start("pod-c", allowed_namespaces="team-a")
    wait_until(c.ready, what="c synced")
    b.stop(timeout=5)
    wait_until(c.is_leader, timeout=3, what="c takes over")
    wait_until(
        lambda: (stored_settings(memory_api) or {}).get("allowed-namespaces") == "team-a",
        what="c publishes its settings",
    )
    time.sleep(0.3)
    assert [writer for writer, _ in memory_api.record_writes] == ["pod-a", "pod-c"]


def test_publishing_keeps_the_health_decision_and_the_health_record_keeps_the_settings() -> None:
    api = MemoryAPI()
    record = LeaseHealthRecord(
        api=api, namespace="kube-system", name="node-ipam-lb-node-health", identity="pod-a"
    )
    assert record.save({"w1": "failed 3 kube-proxy health checks in a row"})
    assert record.publish(SETTINGS_ANNOTATION, '{"ip-mode":"Proxy"}')
    assert record.save({"w2": "failed 3 kube-proxy health checks in a row"})
    annotations = api.leases[RECORD]["metadata"]["annotations"]
    assert json.loads(annotations[HEALTH_ANNOTATION]) == {
        "w2": "failed 3 kube-proxy health checks in a row"
    }
    assert annotations[SETTINGS_ANNOTATION] == '{"ip-mode":"Proxy"}'
    version = api.leases[RECORD]["metadata"]["resourceVersion"]
    assert record.publish(SETTINGS_ANNOTATION, '{"ip-mode":"Proxy"}')  # the same: no write
    assert api.leases[RECORD]["metadata"]["resourceVersion"] == version
    assert api.calls["update leases"] == 2


class FlakyRecord:
    """A record whose first ``failures`` publishes fail (as a 409 or a 500 would)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[str] = []
        self.done = threading.Event()

    def publish(self, annotation: str, text: str) -> bool:
        self.attempts.append(text)
        if len(self.attempts) <= self.failures:
            return False
        self.done.set()
        return True


def test_a_failed_write_is_tried_again_every_retry_period_while_leading() -> None:
    record, stopping = FlakyRecord(failures=2), threading.Event()
    publisher = SettingsPublisher(
        record=record, text="{}", is_leader=lambda: True, retry_period=0.05, stopping=stopping
    )
    publisher.term_started()
    assert record.done.wait(5)
    publisher.join(5)
    assert record.attempts == ["{}", "{}", "{}"]
    publisher.term_started()  # a new term: one more GET, the record is then compared
    wait_until(lambda: len(record.attempts) == 4, what="the next term's attempt")


def test_a_replica_that_lost_the_lease_stops_trying() -> None:
    record, stopping = FlakyRecord(failures=1000), threading.Event()
    leading = [True]
    publisher = SettingsPublisher(
        record=record,
        text="{}",
        is_leader=lambda: leading[0],
        retry_period=0.02,
        stopping=stopping,
    )
    publisher.term_started()
    wait_until(lambda: len(record.attempts) >= 2, what="a few attempts")
    leading[0] = False
    publisher.join(5)
    attempts = len(record.attempts)
    time.sleep(0.1)
    assert len(record.attempts) == attempts
