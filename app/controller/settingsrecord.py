"""The Lease holder publishes its effective settings on the record Lease, once per term
and only when they differ from what is stored (docs/design.md §8).

Settings change only with the process (in our deployment, a rollout: ``helm upgrade``,
``kubectl apply -k``), so a term's start is the one moment they can differ from the record:
the new holder compares (one GET) and writes only then (one PUT or POST). A replica that
does not hold the Lease never writes. A failed request is tried again every
``retry_period`` while the term lasts, on a thread of its own: leader election's thread
must never wait on it (a slow write would delay the renewals).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from app.core.published import SETTINGS_ANNOTATION

LOG = logging.getLogger("node_ipam_lb.controller")


class AnnotationRecord(Protocol):
    """Where the settings go (:class:`app.controller.healthrecord.LeaseHealthRecord`)."""

    def publish(self, annotation: str, text: str) -> bool:
        """Make ``annotation`` ``text`` (a write only when it differs); ``False``: failed."""
        ...


class SettingsPublisher:
    """Publishes ``text`` (:func:`app.core.published.encode_settings` of
    :func:`app.config.published`) under :data:`SETTINGS_ANNOTATION` of ``record``.

    Args:
        record: the record Lease.
        text: the encoded settings, fixed for the process's life.
        is_leader: whether this replica holds the Lease now (asked before every attempt).
        retry_period: seconds between two attempts after a failed one (> 0).
        stopping: set when the process stops; no attempt starts after it.
    """

    def __init__(
        self,
        *,
        record: AnnotationRecord,
        text: str,
        is_leader: Callable[[], bool],
        retry_period: float,
        stopping: threading.Event,
    ) -> None:
        self._record = record
        self.text = text
        self._is_leader = is_leader
        self._retry = retry_period
        self._stopping = stopping
        self._lock = threading.Lock()
        self._pending = False
        self._thread: threading.Thread | None = None

    def term_started(self) -> None:
        """A term starts (or, without leader election, the process): publish on a thread,
        returning at once. A term that starts while the previous one's attempt runs is
        published again after it."""
        with self._lock:
            self._pending = True
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="publish-settings", daemon=True)
            self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running attempt (after ``stopping`` is set)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending or self._stopping.is_set():
                    self._thread = None
                    return
                self._pending = False
            try:
                while not self._stopping.is_set() and self._is_leader():
                    if self._record.publish(SETTINGS_ANNOTATION, self.text):
                        break
                    self._stopping.wait(self._retry)
            except Exception as err:  # a bug here must not end the next terms' publishing
                LOG.exception("publishing the effective settings failed: %s", err)
