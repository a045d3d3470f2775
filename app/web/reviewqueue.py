"""The admission route's scheduling (docs/design.md §7.1): a review's share of the body
byte budget as its body arrives, the places for large reviews, and the job that decides a
review in a pool thread and publishes its verdict before the cluster-state warnings.

HTTP, deadlines and the decision itself stay in :mod:`app.web.routes.admission` and
:mod:`app.core.admission`; this module only holds the bookkeeping they share.
"""

from __future__ import annotations

import asyncio
import time

from app.core import admission
from app.core.decision import NotMemoised
from app.web.limits import BodyBudget, Overloaded
from app.web.routes.deps import AppState

INLINE_BODY_BYTES = 64 * 1024
"""Bodies up to this size are decoded on the event loop (a 2.5 KB review: ~50 µs); larger
ones only in the heavy review pool, so one cannot stall the other requests."""


class BudgetShare:
    """A review's share of the byte budget (:class:`~app.web.limits.BodyBudget`), grown
    as its body arrives: the first :data:`INLINE_BODY_BYTES` are free (so an ordinary
    review never waits behind large bodies in progress; at most ``max_connections`` x
    64 KiB in all), every byte beyond is taken before the next chunk is read. A sender
    that declares 4 MiB and stalls holds what it sent, not what it declared
    (docs/design.md §7.1)."""

    def __init__(self, budget: BodyBudget, deadline: float) -> None:
        self._budget = budget
        self._deadline = deadline
        self.held = 0

    async def grow(self, received: int) -> None:
        """Hold ``received - INLINE_BODY_BYTES`` bytes (raises Overloaded by the deadline)."""
        needed = received - INLINE_BODY_BYTES - self.held
        if needed > 0:
            timeout = max(0.0, self._deadline - time.perf_counter())
            await self._budget.acquire(needed, timeout=timeout)
            self.held += needed

    def release(self) -> None:
        """Give back all that is held (once)."""
        held, self.held = self.held, 0
        if held:
            self._budget.release(held)


class HeavySlot:
    """One of the :data:`~app.web.limits.HEAVY_QUEUE` places for large reviews: taken
    before the body is read (waiting costs nothing then: the body stays in the socket),
    held until the review's thread is done (even past the response), given back once."""

    def __init__(self, slots: BodyBudget) -> None:
        self._slots = slots
        self.held = False
        self.handed_over = False

    async def take(self, deadline: float) -> None:
        if not self.held:
            try:
                await self._slots.acquire(1, timeout=max(0.0, deadline - time.perf_counter()))
            except Overloaded as err:
                raise Overloaded(f"{self._slots.capacity} large reviews are in progress") from err
            self.held = True

    def give_back(self, *, owner: bool = False) -> None:
        """Release the slot; the route's own release is skipped once a job took it over."""
        if self.held and (owner or not self.handed_over):
            self.held = False
            self._slots.release(1)


class TooLong(NotMemoised):
    """The node selector is too long to parse on the event loop."""


class Abandoned(Exception):
    """The route gave up on this review before it started (its deadline passed)."""


class Job:
    """One review decided in a pool thread; publishes its verdict (``verdict``: the
    request and the decision without cluster-state warnings) before those are computed."""

    def __init__(
        self,
        raw: bytes,
        state: AppState,
        *,
        path: str,
        loop: asyncio.AbstractEventLoop,
        heavy: bool = False,
    ) -> None:
        self.heavy = heavy
        self.deadline = time.perf_counter() + state.settings.review_deadline_seconds
        self.raw: bytes | None = raw
        self.state = state
        self.path = path
        self.loop = loop
        self.abandoned = False
        self.verdict: asyncio.Future[tuple[admission.AdmissionRequest, admission.Decision]] = (
            loop.create_future()
        )

    def publish(self, review: admission.AdmissionRequest, decision: admission.Decision) -> None:
        def settle() -> None:
            if not self.verdict.done():
                self.verdict.set_result((review, decision))

        self.loop.call_soon_threadsafe(settle)
