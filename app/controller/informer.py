"""List + watch one kind into the :class:`~app.controller.cache.ClusterCache` (client-go Reflector).

One thread per kind. It lists in pages (``limit``/``continue``), replaces the cache content,
then watches from the list's ``resourceVersion`` with ``allowWatchBookmarks=true`` and a
server-side ``timeoutSeconds``; a closed watch resumes from the last seen version, a
``410 Gone`` (compaction, "too old resource version") re-lists, any other failure reconnects
after an exponential backoff (0.2 s doubling to 30 s, reset after a working watch; never
sooner than the answer's ``Retry-After``, e.g. a 429 from API Priority and Fairness). Objects
are turned into slim views at once; the raw dict is dropped.

An optional ``field_selector`` goes on the List and on every watch (client-go's
``NewFilteredListWatchFromClient`` with ``options.FieldSelector``). What no selector can
express is filtered here, before the cache (client-go's ``TransformFunc`` runs at the same
place): a ``to_view`` that returns ``None`` keeps nothing of the object. On a List it is
left out, so the cache and the memory hold only what is kept; on a watch event it is a
deletion of the key (an object that stopped being kept leaves the cache and its handler
hears ``(key, old, None)``), and an object that was never kept and still is not costs one
dictionary lookup and no change, no handler call.

Nothing but :meth:`Informer.stop` ends the thread: an exception from the handler or the view
conversion is logged with its traceback and only that change is skipped (the watch goes on
from the same position); any other unexpected exception in a list/watch cycle is logged,
backed off and followed by a re-list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from app.controller.cache import Change, ClusterCache, View
from app.core.views import ViewError
from app.kube.client import ApiError, Kind, KubeAPI, WatchStream
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.informer")

SHORT_WATCH_SECONDS = 1.0

ToView = Callable[[Mapping[str, Any]], View]
Handler = Callable[[Kind, list[Change]], None]


def object_key(obj: Mapping[str, Any]) -> str | None:
    """``namespace/name`` (or ``name`` for cluster-scoped objects) from ``metadata``."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    return (
        f"{namespace}/{meta['name']}" if isinstance(namespace, str) and namespace else meta["name"]
    )


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return str(version) if version else None


OPTIONAL_KINDS: frozenset[str] = frozenset({"nodeaddresspools"})
"""Kinds whose resource may not be served (a CRD of ours that is not installed): a 404 on
the List means "no such object", not a failure."""
ABSENT_RELIST_SECONDS = 30.0
"""How long an informer of an optional kind whose resource is not served waits before
listing again."""


class Informer:
    """Keeps ``cache``'s ``kind`` store in step with the API and reports every change.

    ``handler(kind, changes)`` is called on the informer thread after the cache is
    updated; it must be quick (enqueue keys, nothing more). ``to_view`` returns the view
    to cache or ``None`` (keep nothing of this object); ``field_selector`` is sent with
    every List and watch (module docstring). ``touched(keys)``, when given, is called
    after ``handler`` with the key of every object a List or watch event stored or removed,
    its view changed or not (client-go calls ``UpdateFunc`` on every update; ``handler``
    hears only views that differ): a view that leaves status fields out of equality
    (:class:`~app.core.pools.Pool`) still tells its status writer of each update. Quick,
    like ``handler``.
    """

    def __init__(
        self,
        *,
        kind: Kind,
        api: KubeAPI,
        cache: ClusterCache,
        to_view: ToView,
        handler: Handler,
        watch_timeout_seconds: int = 300,
        page_size: int = 500,
        backoff_initial: float = 0.2,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        field_selector: str | None = None,
        touched: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.kind: Kind = kind
        self.field_selector = field_selector
        self._api = api
        self._cache = cache
        self._to_view = to_view
        self._handler = handler
        self._touched = touched
        self._watch_timeout = watch_timeout_seconds
        self._page_size = page_size
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_activity = clock()
        self.lists = 0
        self.watches = 0
        self._absent_logged = False

    def start(self) -> None:
        """Start the informer thread (returns at once)."""
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end and close the open watch so a blocked read returns."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """True while the informer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stuck_for(self) -> float:
        """Seconds since the last list, watch (re)connect, event or bookmark."""
        return self._clock() - self.last_activity

    def run(self) -> None:
        """Thread body: list, watch, resume, re-list on 410, back off on errors, until stopped."""
        resource_version: str | None = None
        backoff = self._backoff_initial
        while not self._stop.is_set():
            self.last_activity = self._clock()
            listing = resource_version is None
            retry_after = 0.0
            try:
                version = self._list() if resource_version is None else resource_version
                resource_version = version
                opened = self._clock()
                resource_version, events = self._watch(version)
                # client-go's "very short watch" rule: a watch that ended at once without
                # an event is treated as a failure; anything else reconnects immediately.
                if events or self._clock() - opened >= SHORT_WATCH_SECONDS:
                    backoff = self._backoff_initial
                    continue
            except ApiError as err:
                if err.status == 404 and listing and self.kind in OPTIONAL_KINDS:
                    # No CRD, so no such object can exist: an empty, synced store; look
                    # again later (an administrator may install the CRD after us).
                    self._absent()
                    resource_version = None
                    continue
                retry_after = min(err.retry_after or 0.0, self._backoff_max)
                if err.status == 410:
                    # Compacted: re-list at once, unless this attempt already listed (an
                    # expired continue token, or a fresh list's version already too old):
                    # then back off like any failure.
                    log_event(LOG, "resourceVersion expired, re-listing", kind=self.kind)
                    resource_version = None
                    if not listing:
                        continue
                log_event(
                    LOG,
                    "watch failed, retrying",
                    level=logging.WARNING,
                    kind=self.kind,
                    error=str(err),
                    retry_in_seconds=max(backoff, retry_after),
                )
            except Exception:
                # A bug, not the API: never let it end the thread (healthy() would fail and
                # a poison object would become a restart loop). Re-list after the backoff.
                LOG.exception(
                    "list/watch cycle failed, re-listing",
                    extra={"fields": {"kind": self.kind, "retry_in_seconds": backoff}},
                )
                resource_version = None
            # A failed call, or a watch the server closed without sending anything:
            # wait before the next try so a broken API is not hammered, and not before
            # the server's Retry-After (a 429 from API Priority and Fairness).
            self._stop.wait(max(backoff, retry_after))
            backoff = min(backoff * 2, self._backoff_max)

    def _absent(self) -> None:
        """The kind's resource is not served (404 on the List: a CRD not installed): store
        nothing, marked synced, and wait :data:`ABSENT_RELIST_SECONDS` before listing
        again, staying live (``stuck_for`` is reset)."""
        changes = self._cache.replace(self.kind, {})
        if not self._absent_logged:
            log_event(LOG, "resource not served, none assumed", kind=self.kind)
            self._absent_logged = True
        self._notify(changes)
        self._touch([key for key, _, _ in changes])
        self.last_activity = self._clock()
        self._stop.wait(ABSENT_RELIST_SECONDS)
        self.last_activity = self._clock()

    def _list(self) -> str:
        views: dict[str, View] = {}
        continue_token: str | None = None
        version = ""
        read = 0
        while True:
            page = self._api.list_page(
                self.kind,
                limit=self._page_size,
                continue_token=continue_token,
                field_selector=self.field_selector,
            )
            meta = page.get("metadata") if isinstance(page.get("metadata"), Mapping) else {}
            assert isinstance(meta, Mapping)
            items = page.get("items")
            read += len(items) if isinstance(items, list) else 0
            for obj in items if isinstance(items, list) else []:
                key, view = self._view(obj)
                if key is not None and view is not None:
                    views[key] = view
            version = str(meta.get("resourceVersion") or version)
            continue_token = meta.get("continue") or None
            del page, items, meta  # one page of raw objects in memory at a time
            if continue_token is None:
                break
            self.last_activity = self._clock()
        changes = self._cache.replace(self.kind, views)
        self.lists += 1
        self.last_activity = self._clock()
        # count: objects kept (cached); read: objects the List returned.
        log_event(
            LOG, "listed", kind=self.kind, count=len(views), read=read, resourceVersion=version
        )
        self._notify(changes)
        if self._touched is not None:
            self._touch([*views, *(key for key, _, new in changes if new is None)])
        return version

    def _watch(self, resource_version: str) -> tuple[str, int]:
        stream = self._api.watch(
            self.kind,
            resource_version=resource_version,
            timeout_seconds=self._watch_timeout,
            field_selector=self.field_selector,
        )
        with self._lock:
            self._stream = stream
        if self._stop.is_set():
            stream.close()
        self.watches += 1
        self.last_activity = self._clock()
        events = 0
        try:
            for event in stream:
                self.last_activity = self._clock()
                events += 1
                resource_version = self._apply(event) or resource_version
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        return resource_version, events

    def _apply(self, event: Mapping[str, Any]) -> str | None:
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code = obj.get("code")
            if obj.get("reason") in ("Expired", "Gone"):  # a Status without its code
                code = 410
            raise ApiError(code if isinstance(code, int) else 0, str(obj.get("message", obj)))
        version = _resource_version(obj)
        if kind == "BOOKMARK":
            return version
        key, view = self._view(obj)
        if key is None:
            return version
        if kind == "DELETED" or view is None:
            # Also an object that is not (or no longer) kept: deleting a key the cache
            # does not hold changes nothing and reports nothing.
            old = self._cache.delete(self.kind, key)
            if old is not None:
                self._notify([(key, old, None)])
                self._touch([key])
        else:
            old = self._cache.put(self.kind, key, view)
            if old != view:
                self._notify([(key, old, view)])
            self._touch([key])
        return version

    def _touch(self, keys: list[str]) -> None:
        """Call ``touched`` with ``keys`` (when given and any), like :meth:`_notify`."""
        if self._touched is None or not keys:
            return
        try:
            self._touched(keys)
        except Exception:
            LOG.exception(
                "touched callback failed", extra={"fields": {"kind": self.kind, "keys": keys[:5]}}
            )

    def _notify(self, changes: list[Change]) -> None:
        """Call the handler; an exception from it is logged with its traceback and that
        change is skipped: the cache is already updated and the watch position kept."""
        try:
            self._handler(self.kind, changes)
        except Exception:
            keys = [key for key, _, _ in changes[:5]]
            LOG.exception(
                "event handler failed, change skipped",
                extra={"fields": {"kind": self.kind, "keys": keys, "changes": len(changes)}},
            )

    def _view(self, obj: Any) -> tuple[str | None, View | None]:
        if not isinstance(obj, Mapping):
            return None, None
        key = object_key(obj)
        try:
            return key, self._to_view(obj)
        except ViewError as err:
            # Unusable object: leave it out of the cache (never a crash, never a write
            # based on garbage), and say so.
            log_event(
                LOG,
                "object ignored",
                level=logging.WARNING,
                kind=self.kind,
                key=key,
                error=str(err),
            )
            return key, None
        except Exception:
            # A bug in the conversion: treated like an unusable object, with the traceback.
            LOG.exception(
                "object ignored: view conversion failed",
                extra={"fields": {"kind": self.kind, "key": key}},
            )
            return key, None
