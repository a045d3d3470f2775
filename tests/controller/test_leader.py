"""Lease-based leader election with client-go semantics, driven step by step on fake clocks."""

from __future__ import annotations

import threading
import time

import pytest

from app.controller.leader import LeaderElector
from app.kube.client import ApiError
from tests.controller.memory_api import MemoryAPI

LEASE = "kube-system/node-ipam-lb"


class Clocks:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1.8e9

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def elector(api: MemoryAPI, clocks: Clocks, identity: str, log: list[str]) -> LeaderElector:
    return LeaderElector(
        api=api,
        namespace="kube-system",
        name="node-ipam-lb",
        identity=identity,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
        clock=lambda: clocks.mono,
        wall_clock=lambda: clocks.wall,
    )


def spec(api: MemoryAPI) -> dict[str, object]:
    return api.leases[LEASE]["spec"]


def test_first_candidate_creates_the_lease_and_leads(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a = elector(api, clocks, "a", log)
    assert a.step()
    assert log == ["a started"]
    assert spec(api) == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2027-01-15T08:00:00.000000Z",
        "renewTime": "2027-01-15T08:00:00.000000Z",
        "leaseTransitions": 0,
    }


def test_a_held_lease_is_not_taken_before_it_expires_on_our_clock(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a, b = elector(api, clocks, "a", log), elector(api, clocks, "b", log)
    a.step()
    assert not b.step()
    clocks.advance(14)
    assert not b.step(), "the record has not changed for 14 s < 15 s"
    clocks.advance(1.5)
    assert b.step()
    assert spec(api)["holderIdentity"] == "b"
    assert spec(api)["leaseTransitions"] == 1


def test_renewing_keeps_the_acquire_time_and_moves_renew_time(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a, b = elector(api, clocks, "a", log), elector(api, clocks, "b", log)
    a.step()
    for _ in range(10):
        clocks.advance(2)
        assert a.step()
        assert not b.step(), "a renewing leader keeps the lease"
    assert spec(api)["acquireTime"] == "2027-01-15T08:00:00.000000Z"
    assert spec(api)["renewTime"] == "2027-01-15T08:00:20.000000Z"
    assert spec(api)["leaseTransitions"] == 0


def test_a_leader_that_cannot_renew_past_the_deadline_stops_leading(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a = elector(api, clocks, "a", log)
    a.step()
    api.fail("get leases", 500, 500, 500, 500, 500, 500)
    clocks.advance(2)
    assert a.step(), "one failed renew within the deadline keeps leadership"
    clocks.advance(8.5)
    assert not a.is_leader(), "writes stop by the clock even before the next attempt"
    a.step()
    assert log == ["a started", "a stopped"]


def test_a_conflict_on_the_lease_update_means_another_candidate_won(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a, b = elector(api, clocks, "a", log), elector(api, clocks, "b", log)
    a.step()
    b.step()
    clocks.advance(16)
    api.fail("update leases", 409)
    assert not b.step()
    assert spec(api)["holderIdentity"] == "a"
    assert log == ["a started"]


def test_a_lease_update_sends_the_resource_version_it_read(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a = elector(api, clocks, "a", log)
    a.step()
    api.leases[LEASE]["metadata"]["resourceVersion"] = "999"  # someone wrote meanwhile...
    real_read = api.read_lease
    api.read_lease = lambda **kw: {
        **real_read(**kw),
        "metadata": {"name": "node-ipam-lb", "resourceVersion": "1"},
    }  # type: ignore[method-assign]
    clocks.advance(2)
    assert not a.try_acquire_or_renew(), "...so a PUT with the older version is refused"


def test_stop_releases_the_lease_so_a_standby_takes_over_at_once(clocks: Clocks) -> None:
    api, log = MemoryAPI(), []
    a, b = elector(api, clocks, "a", log), elector(api, clocks, "b", log)
    a.step()
    assert not b.step()
    a.stop()
    assert spec(api)["holderIdentity"] == ""
    assert spec(api)["leaseDurationSeconds"] == 1
    assert b.step(), "an empty holder can be taken without waiting"
    assert spec(api)["leaseTransitions"] == 1
    assert log == ["a started", "a stopped", "b started"]


@pytest.mark.parametrize("slow", ["get leases", "update leases"])
def test_a_slow_renew_counts_from_before_the_request_was_sent(clocks: Clocks, slow: str) -> None:
    """client-go observes the time before tryAcquireOrRenew: the renewTime other replicas
    see. A 6 s answer must not give the leader 6 s more than they assume."""
    api = MemoryAPI()
    log: list[str] = []
    a = elector(api, clocks, "a", log)
    assert a.step()
    op = {"get leases": "read_lease", "update leases": "replace_lease"}[slow]
    real = getattr(api, op)

    def slow_call(**kwargs: object) -> object:
        clocks.advance(6)
        return real(**kwargs)

    setattr(api, op, slow_call)
    clocks.advance(2)
    sent = clocks.mono
    assert a.step(), "renewed"
    assert clocks.mono == sent + 6
    clocks.advance(10 - 6 - 0.01)
    assert a.is_leader(), "9.99 s after the renew was sent: still within the renew deadline"
    clocks.advance(0.02)
    assert not a.is_leader(), "10 s after the renew was *sent*, not after it was answered"


def test_a_missing_lease_namespace_is_reported_once_and_retried_with_backoff(
    clocks: Clocks, caplog: pytest.LogCaptureFixture
) -> None:
    """serve outside a cluster without the namespace: one clear error, not a warning every
    2 s; retried with backoff; picked up as soon as the namespace exists."""
    api = MemoryAPI()
    log: list[str] = []
    a = elector(api, clocks, "a", log)
    real_create = api.create_lease

    def no_namespace(**kwargs: object) -> object:
        raise ApiError(404, 'namespaces "kube-system" not found')

    api.create_lease = no_namespace  # type: ignore[assignment,method-assign]
    waits = []
    with caplog.at_level("WARNING", logger="node_ipam_lb.leader"):
        for _ in range(7):
            assert not a.step()
            waits.append(a.retry_wait())
    [error] = [r for r in caplog.records if r.name == "node_ipam_lb.leader"]
    assert error.levelname == "ERROR"
    for needle in ("namespace 'kube-system' not found", "kubectl create namespace kube-system"):
        assert needle in error.getMessage()
    for flag in ("--leader-election-namespace", "--no-leader-elect"):
        assert flag in error.getMessage()
    # Honest: it leads once the namespace exists (below), so it must not say "never".
    assert "never" not in error.getMessage()
    assert "until the namespace exists" in error.getMessage()
    assert a.problem() == error.getMessage()
    assert all(
        base <= w <= base * 1.2 for w, base in zip(waits, [2, 4, 8, 16, 30, 30, 30], strict=True)
    ), waits
    assert log == []
    api.create_lease = real_create  # type: ignore[method-assign]
    assert a.step(), "the namespace was created: the next attempt leads"
    assert a.problem() is None
    assert a.retry_wait() == 2.0


@pytest.mark.parametrize(
    ("hang", "terms"),
    [
        (7.0, ["a started"]),  # 2 s since the last renew + 7 s = 9 s < the 10 s deadline
        (11.0, ["a started", "a stopped", "a started"]),  # the deadline passed meanwhile
    ],
)
def test_a_renew_that_succeeds_after_the_deadline_starts_a_new_term(
    clocks: Clocks, hang: float, terms: list[str]
) -> None:
    """kube-apiserver holds requests while etcd restarts: a renew may hang past the renew
    deadline and then succeed. ``is_leader`` was false meanwhile (the controller dropped
    what it saw then), so the replica must not quietly resume the old term: stopped, then
    started again at the next prompt renew, so ``on_started_leading`` resyncs (found by
    bench_faults scenario 3). A renew slow but within the deadline keeps the term."""
    api = MemoryAPI()
    log: list[str] = []
    a = elector(api, clocks, "a", log)
    assert a.step()
    real = api.read_lease

    def hung(**kwargs: object) -> object:
        clocks.advance(hang)
        return real(**kwargs)

    api.read_lease = hung  # type: ignore[method-assign]
    clocks.advance(2)
    # Renewed `hang` s after it was sent: valid by our own clock only within the deadline.
    assert a.step() == (hang < 10)
    assert log == (terms[:1] if hang < 10 else terms[:2]), "the lapsed term was resumed"
    api.read_lease = real  # type: ignore[method-assign]
    for _ in range(2):
        clocks.advance(2)
        assert a.step() and a.is_leader()
        assert log == terms, "a prompt renew is not a new term"


@pytest.mark.parametrize("leading_first", [False, True], ids=["acquire", "renew"])
def test_an_attempt_that_hangs_through_stop_starts_no_term_and_hands_the_lease_back(
    leading_first: bool,
) -> None:
    """stop() gives up waiting for a hung acquire or renew (its join times out) and steps
    down; when the call then succeeds, no term starts after stop() and the Lease is
    released again, so a standby takes over at its next retry (found by a review)."""
    api, log = MemoryAPI(), []
    a = LeaderElector(
        api=api,
        namespace="kube-system",
        name="node-ipam-lb",
        identity="a",
        on_started_leading=lambda: log.append("started"),
        on_stopped_leading=lambda: log.append("stopped"),
        retry_period=0.05,
    )
    if leading_first:
        assert a.step()
    answer = threading.Event()
    real = api.read_lease

    def hung(**kwargs: object) -> object:
        answer.wait(5)
        return real(**kwargs)

    api.read_lease = hung  # type: ignore[method-assign]
    a.start()
    time.sleep(0.1)
    a.stop(timeout=0.2)  # the attempt is still hanging
    answer.set()
    assert a._thread is not None
    a._thread.join(5)
    assert log == (["started", "stopped"] if leading_first else []), log
    assert not a.is_leader()
    holder = api.leases[LEASE]["spec"]["holderIdentity"] if LEASE in api.leases else ""
    assert holder == "", f"the Lease is held by {holder!r} after stop()"
