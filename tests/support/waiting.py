"""Bounded waits: poll a check until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
TIMEOUT = 30.0
"""Seconds :func:`wait_for` waits by default."""
INTERVAL = 0.2
"""Seconds between two checks by default."""


class WaitTimeout(AssertionError, TimeoutError):
    """A :func:`wait_for` that ran out of time: an ``AssertionError`` (a test fails) and a
    ``TimeoutError`` (what a benchmark catches)."""


def wait_for(
    what: str,
    check: Callable[[], T],
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``check()`` every ``interval`` seconds until it returns something truthy, and
    return that. After ``timeout`` seconds raise :class:`WaitTimeout` naming ``what``, the
    last value and what ``explain()`` says then (the state that kept the check false: a
    Service's status and Events)."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            said = f"\n{explain()}" if explain is not None else ""
            raise WaitTimeout(
                f"timed out after {timeout:g} s waiting for {what}; last: {last!r}{said}"
            )
        time.sleep(interval)
