"""A bounded memo of values derived from :func:`app.core.nodeipam.select`, keyed by inputs.

The validating webhook derives two cluster-state warnings from a Selection (docs/design.md §7:
"selector matches no node now", "externalTrafficPolicy Local with no ready endpoint now").
Running ``select`` over 5,000 cached Nodes for every AdmissionReview costs milliseconds,
while a GitOps controller re-applies the same Services again and again. This memo answers
those repeats without calling ``select``, and is exact, not approximate, because the key is
everything ``select`` reads:

* the Service: every :class:`~app.core.views.ServiceView` field except ``ingress`` and
  ``resource_version``, which ``select`` never reads (tested:
  ``tests/core/test_selection_memo.py``);
* the Node snapshot, by identity: ``ClusterCache`` builds a new snapshot (and a new
  :class:`~app.core.nodeindex.NodeIndex`) on every Node change and never mutates one, so a
  different object means "Nodes may have changed": the whole memo is dropped;
* the Service's EndpointSlice views (frozen, compared by value);
* the :class:`~app.core.options.SelectionSettings` and the deriving function;
* ``now``, only through the NotReady grace period (``exclude_not_ready_nodes``): a
  Selection is the same for every ``now`` from the moment it was computed until its
  ``recheck_at`` (the first grace period that runs out), so an entry is used only inside
  that window.

Only the derived value is kept (a few strings), never the Selection with its 5,000
verdicts, so 1,024 entries cost kilobytes. Node selection itself still happens in exactly
one place, :func:`app.core.nodeipam.select`; the memo only calls it.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from app.core.nodeipam import NodeIndex, Selection, select
from app.core.options import SelectionSettings
from app.core.views import EndpointSliceView, NodeView, ServiceView

T = TypeVar("T")

MAX_ENTRIES = 1024
"""Default bound: least recently used entries beyond it are dropped."""
MAX_SELECTOR_CHARS = 4096
"""Services whose node selector annotation is longer are never memoised (each entry's key
holds the annotation: 1,024 entries of 256 KiB annotations would pin 256 MiB); they are
rare, and their selection is computed every time."""

Derive = Callable[[ServiceView, SelectionSettings, Selection], T]


class NotMemoised(LookupError):
    """``derived(..., compute=False)`` has no valid entry: ``select`` would have to run."""


class SelectionMemo(Generic[T]):
    """LRU ``(select inputs, derive) → derive(service, settings, select(...))`` for one Node
    snapshot at a time; thread-safe (``select`` runs outside the lock).

    ``derive`` must be a pure function of its arguments (it is part of the key by identity,
    so pass a module-level function, not a fresh lambda per call).
    """

    __slots__ = ("_entries", "_lock", "_max", "_nodes", "hits", "misses")

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: Invalid value: {max_entries}: must be at least 1")
        self._max = max_entries
        self._entries: OrderedDict[Hashable, tuple[T, float, float | None]] = OrderedDict()
        self._nodes: object = None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def derived(
        self,
        *,
        service: ServiceView,
        nodes: Sequence[NodeView] | NodeIndex,
        endpoint_slices: Iterable[EndpointSliceView],
        settings: SelectionSettings,
        now: float,
        derive: Derive[T],
        compute: bool = True,
    ) -> T:
        """``derive(service, settings, select(service=..., nodes=..., ...))``, memoised.

        Args:
            service: the Service (``ingress`` and ``resource_version`` are not part of the key).
            nodes: the cache's current Node snapshot (``ClusterCache.node_index()`` or
                ``nodes()``): compared by identity, so it must never be mutated.
            endpoint_slices: the Service's EndpointSlices (compared by value).
            settings: the selection settings.
            now: epoch seconds, as for ``select``.
            derive: pure function of the Service, the settings and its Selection.
            compute: ``False`` answers only from the memo (for callers that must not
                spend milliseconds here, such as an event loop).

        Raises:
            NotMemoised: ``compute`` is ``False`` and no valid entry exists.
        """
        slices = tuple(endpoint_slices)
        if len(service.match_node_labels or "") > MAX_SELECTOR_CHARS:
            if not compute:
                raise NotMemoised("node selector too long to memoise")
            selection = select(
                service=service, nodes=nodes, endpoint_slices=slices, settings=settings, now=now
            )
            return derive(service, settings, selection)
        key = (
            dataclasses.replace(service, ingress=None, ingress_ports=None, resource_version=None),
            slices,
            settings,
            derive,
        )
        with self._lock:
            if nodes is not self._nodes:
                self._entries.clear()
                self._nodes = nodes
            entry = self._entries.get(key)
            if entry is not None and entry[1] <= now and (entry[2] is None or now < entry[2]):
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[0]
            if not compute:
                raise NotMemoised("no memoised selection for these inputs")
            self.misses += 1
        selection = select(
            service=service, nodes=nodes, endpoint_slices=slices, settings=settings, now=now
        )
        value = derive(service, settings, selection)
        with self._lock:
            if nodes is self._nodes:  # a Node change meanwhile: do not keep a stale entry
                # select reads ``now`` only for the NotReady grace period.
                since = now if settings.exclude_not_ready_nodes else -math.inf
                self._entries[key] = (value, since, selection.recheck_at)
                self._entries.move_to_end(key)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return value
