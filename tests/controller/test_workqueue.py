"""Work queue rules (client-go workqueue semantics), driven by a hand-moved clock."""

from __future__ import annotations

import threading

import pytest

from app.controller.workqueue import WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue:
    return WorkQueue(clock=clock)


def drain(queue: WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_a_key_added_twice_is_processed_once(queue: WorkQueue) -> None:
    for key in ("default/a", "default/b", "default/a"):
        queue.add(key)
    assert drain(queue) == ["default/a", "default/b"]


def test_a_key_added_while_processing_is_processed_again_afterwards_not_concurrently(
    queue: WorkQueue,
) -> None:
    queue.add("default/a")
    taken = queue.get(timeout=0)
    queue.add("default/a")
    assert queue.get(timeout=0) is None, "must not hand out a key being processed"
    assert taken is not None
    queue.done(taken)
    assert queue.get(timeout=0) == "default/a"


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, 0.005), (2, 0.01), (3, 0.02), (10, 2.56), (30, 1000.0)],
    ids=["first retry 5ms", "second 10ms", "third 20ms", "tenth 2.56s", "capped at 1000s"],
)
def test_failures_back_off_exponentially_per_key(
    queue: WorkQueue, failures: int, delay: float
) -> None:
    for _ in range(failures - 1):
        queue.add_rate_limited("default/a")
    assert queue.add_rate_limited("default/a") == pytest.approx(delay)
    assert queue.add_rate_limited("default/b") == pytest.approx(0.005), "backoff is per key"


def test_a_rate_limited_key_waits_for_its_backoff(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_rate_limited("default/a")
    queue.add_rate_limited("default/a")
    assert queue.get(timeout=0) is None
    clock.now += 0.0049
    assert queue.get(timeout=0) is None
    clock.now += 0.0002
    assert queue.get(timeout=0) == "default/a"


def test_forget_after_success_resets_the_backoff(queue: WorkQueue) -> None:
    for _ in range(5):
        queue.add_rate_limited("default/a")
    queue.forget("default/a")
    assert queue.num_requeues("default/a") == 0
    assert queue.add_rate_limited("default/a") == pytest.approx(0.005)


def test_delayed_re_add_for_a_grace_period_keeps_the_earlier_time(
    queue: WorkQueue, clock: FakeClock
) -> None:
    queue.add_after("default/a", 60)
    queue.add_after("default/a", 10)
    queue.add_after("default/a", 30)
    clock.now += 10
    assert drain(queue) == ["default/a"]
    clock.now += 100
    assert drain(queue) == [], "the later re-adds were merged into the earlier one"


def test_shut_down_releases_a_blocked_worker() -> None:
    queue = WorkQueue()
    got: list[str | None] = ["unset"]
    worker = threading.Thread(target=lambda: got.__setitem__(0, queue.get(timeout=30)))
    worker.start()
    queue.shut_down()
    worker.join(5)
    assert not worker.is_alive()
    assert got == [None]


def test_a_blocked_worker_wakes_up_when_a_delayed_key_is_due() -> None:
    queue = WorkQueue()
    queue.add_after("default/a", 0.05)
    assert queue.get(timeout=5) == "default/a"
