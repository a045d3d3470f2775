"""The object store: dicts keyed by resource and ``(namespace, name)``, one global
``resourceVersion``, a bounded event history for watches, and watch fan-out via asyncio queues.

Every stored object is serialized once (``json.dumps`` on write); lists and watch events are
assembled from those bytes. Stored dicts are never mutated after storing: writers build a
new dict. All writes happen on the server's event loop thread (the Python handles marshal
onto it), so watch events are delivered in ``resourceVersion`` order.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi.errors import gone

Obj = dict[str, Any]
Key = tuple[str, str]


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (the wire form of every stored object)."""
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(slots=True)
class Entry:
    """A stored object and its serialized bytes."""

    obj: Obj
    raw: bytes


@dataclass(slots=True)
class Event:
    """One change: ``type`` ADDED/MODIFIED/DELETED, the new object and the old one."""

    rv: int
    collection: str
    type: str
    entry: Entry
    old: Obj | None


def etcd_key(namespace: str, name: str) -> str:
    """The order a real server lists in: etcd's key ``<namespace>/<name>`` as a string, so
    ``team-b/x`` comes before ``team/x`` ('-' sorts before '/')."""
    return f"{namespace}/{name}" if namespace else name


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if not obj:
        return {}
    return obj.get("metadata", {}).get("labels") or {}


@dataclass(eq=False)
class Watcher:
    """One open watch: its filter and the queue its stream reads (``None`` ends it)."""

    collection: str
    namespace: str | None
    label_match: Callable[[Mapping[str, str]], bool] | None
    field_match: Callable[[Mapping[str, Any]], bool] | None
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if (
            self.namespace is not None
            and obj.get("metadata", {}).get("namespace") != self.namespace
        ):
            return False
        if self.label_match is not None and not self.label_match(_labels(obj)):
            return False
        return self.field_match is None or self.field_match(obj)

    def line(self, event: Event) -> bytes | None:
        """The watch line for ``event`` as this watcher sees it, or ``None`` when filtered out.

        An object that leaves the selection is a DELETED event, one that enters it ADDED
        (apiserver ``cacheWatcher.convertToWatchEvent``).
        """
        now = self.matches(event.entry.obj)
        if event.type == "MODIFIED":
            before = self.matches(event.old)
            if now and before:
                kind = "MODIFIED"
            elif now:
                kind = "ADDED"
            elif before:
                kind = "DELETED"
            else:
                return None
        elif now:
            kind = event.type
        else:
            return None
        return b'{"type":"' + kind.encode() + b'","object":' + event.entry.raw + b"}\n"


@dataclass(frozen=True)
class View:
    """A collection served from another one's objects in another API version (one
    resource, two versions, e.g. events.k8s.io/v1 Events over core/v1 Events): writes are
    converted with ``from_view`` and stored in ``base``; reads, lists and watch events are
    converted with ``to_view``. Both keep ``metadata`` (and so resourceVersion) as is."""

    base: str
    to_view: Callable[[Obj], Obj]
    from_view: Callable[[Obj], Obj]


class Store:
    """In-memory object storage with history and watchers (see module docstring)."""

    def __init__(self, *, history_limit: int = 200_000) -> None:
        self.rv = 1
        self.collections: dict[str, dict[Key, Entry]] = {}
        self.history: deque[Event] = deque(maxlen=history_limit)
        self.compacted_rv = 0
        self.watchers: dict[str, set[Watcher]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self.lock = threading.RLock()
        self.views: dict[str, View] = {}

    def add_view(self, collection: str, view: View) -> None:
        """Serve ``collection`` from ``view.base`` (see :class:`View`)."""
        self.views[collection] = view

    def _view_entry(self, view: View, entry: Entry) -> Entry:
        raw = dumps(view.to_view(entry.obj))
        return Entry(json.loads(raw), raw)

    def _view_event(self, name: str, view: View, event: Event) -> Event:
        old = None if event.old is None else view.to_view(event.old)
        return Event(event.rv, name, event.type, self._view_entry(view, event.entry), old)

    # -- reads ---------------------------------------------------------------------------
    def get(self, collection: str, namespace: str, name: str) -> Entry | None:
        view = self.views.get(collection)
        if view is not None:
            entry = self.get(view.base, namespace, name)
            return None if entry is None else self._view_entry(view, entry)
        return self.collections.get(collection, {}).get((namespace, name))

    def entries(self, collection: str, namespace: str | None = None) -> list[Entry]:
        """Entries in etcd key order (:func:`etcd_key`); ``None`` = all namespaces."""
        view = self.views.get(collection)
        if view is not None:
            return [self._view_entry(view, e) for e in self.entries(view.base, namespace)]
        items = self.collections.get(collection, {})
        with self.lock:
            keys = sorted(items, key=lambda k: etcd_key(*k))
        if namespace is not None:
            keys = [k for k in keys if k[0] == namespace]
        return [items[k] for k in keys if k in items]

    # -- writes --------------------------------------------------------------------------
    def put(self, collection: str, obj: Obj, *, old: Obj | None) -> Entry:
        """Store ``obj`` with the next resourceVersion (ADDED when ``old`` is None)."""
        view = self.views.get(collection)
        if view is not None:
            base_old = None if old is None else view.from_view(old)
            stored = self.put(view.base, view.from_view(obj), old=base_old)
            obj["metadata"]["resourceVersion"] = stored.obj["metadata"]["resourceVersion"]
            return self._view_entry(view, stored)
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            entry = Entry(obj, dumps(obj))
            meta = obj["metadata"]
            self.collections.setdefault(collection, {})[
                (meta.get("namespace", ""), meta["name"])
            ] = entry
            self._record(Event(self.rv, collection, "MODIFIED" if old else "ADDED", entry, old))
            return entry

    def remove(self, collection: str, obj: Obj) -> Entry:
        """Delete ``obj`` (a fresh copy of the stored one); the DELETED event carries a new rv."""
        view = self.views.get(collection)
        if view is not None:
            return self._view_entry(view, self.remove(view.base, view.from_view(obj)))
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            entry = Entry(obj, dumps(obj))
            meta = obj["metadata"]
            self.collections.get(collection, {}).pop(
                (meta.get("namespace", ""), meta["name"]), None
            )
            self._record(Event(self.rv, collection, "DELETED", entry, None))
            return entry

    def _record(self, event: Event) -> None:
        if len(self.history) == self.history.maxlen and self.history:
            self.compacted_rv = max(self.compacted_rv, self.history[0].rv)
        self.history.append(event)
        for watcher in self.watchers.get(event.collection, ()):
            line = watcher.line(event)
            if line is not None:
                self._deliver(watcher, line)
        for name, view in self.views.items():
            if view.base != event.collection or not self.watchers.get(name):
                continue
            seen = self._view_event(name, view, event)
            for watcher in self.watchers[name]:
                line = watcher.line(seen)
                if line is not None:
                    self._deliver(watcher, line)

    def _deliver(self, watcher: Watcher, item: bytes | None) -> None:
        if self.loop is None or threading.get_ident() == self.loop_thread:
            watcher.queue.put_nowait(item)
        else:
            self.loop.call_soon_threadsafe(watcher.queue.put_nowait, item)

    # -- watches -------------------------------------------------------------------------
    def events_since(self, collection: str, rv: int) -> Iterable[Event]:
        """History events of ``collection`` newer than ``rv``.

        Raises:
            GoneError: ``rv`` is older than the compacted revision (watch answers 410).
        """
        if rv < self.compacted_rv:
            raise GoneError(f"too old resource version: {rv} ({self.compacted_rv})")
        view = self.views.get(collection)
        if view is not None:
            return [self._view_event(collection, view, e) for e in self.events_since(view.base, rv)]
        return [e for e in self.history if e.rv > rv and e.collection == collection]

    def add_watcher(self, watcher: Watcher) -> None:
        self.watchers.setdefault(watcher.collection, set()).add(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        self.watchers.get(watcher.collection, set()).discard(watcher)

    def drop_watches(self) -> int:
        """End every open watch stream cleanly; returns how many were open."""
        count = 0
        for watchers in self.watchers.values():
            for watcher in list(watchers):
                self._deliver(watcher, None)
                count += 1
        return count

    def compact(self) -> int:
        """Forget history: every resourceVersion older than the current one answers 410."""
        with self.lock:
            self.compacted_rv = self.rv
            self.history.clear()
            return self.rv


class GoneError(Exception):
    """A watch or list asked for a compacted resourceVersion."""

    @property
    def status(self) -> dict[str, Any]:
        return gone(str(self))
