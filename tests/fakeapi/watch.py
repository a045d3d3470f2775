"""List and watch responses assembled from the store's serialized bytes.

Watch semantics follow kube-apiserver's watch cache: ``resourceVersion`` unset or ``"0"``
starts with synthetic ADDED events for the current state; a version older than the
compacted one answers HTTP 200 with one ``ERROR`` event carrying a 410 ``Expired`` Status
(what ``kubernetes.watch.Watch`` handles); BOOKMARK events every ``bookmark_interval``
seconds when ``allowWatchBookmarks=true``; the stream ends cleanly after ``timeoutSeconds``.

Pagination: ``limit``/``continue`` are implemented over the *current* state in key order
(the real server serves later pages from the snapshot of the first page's
resourceVersion; here a page reflects writes made between pages). A continue token older
than the compacted revision answers 410 like the real server.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from tests.fakeapi.errors import ApiError, bad_request, status_body
from tests.fakeapi.resources import Resource
from tests.fakeapi.store import Entry, GoneError, Store, Watcher, dumps, etcd_key

LabelMatch = Callable[[Mapping[str, str]], bool]
FieldMatch = Callable[[Mapping[str, Any]], bool]


def _match(entry: Entry, label: LabelMatch | None, fld: FieldMatch | None) -> bool:
    obj = entry.obj
    if label is not None and not label(obj["metadata"].get("labels") or {}):
        return False
    return fld is None or fld(obj)


def list_body(
    store: Store,
    res: Resource,
    *,
    namespace: str | None,
    label: LabelMatch | None,
    fld: FieldMatch | None,
    limit: int,
    cont: str,
) -> bytes:
    """The ``<Kind>List`` JSON for a list request."""
    start: tuple[str, str] | None = None
    list_rv = store.rv
    if cont:
        try:
            token = json.loads(base64.urlsafe_b64decode(cont.encode()))
            list_rv, start = int(token["rv"]), (str(token["start"][0]), str(token["start"][1]))
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
            raise bad_request("continue key is not valid: invalid continue token") from None
        if list_rv < store.compacted_rv:
            raise ApiError(
                status_body(
                    code=410,
                    reason="Expired",
                    # kube-apiserver's words (storage/etcd3, handleCompactedErrorForPaging)
                    message="The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter, or "
                    "use the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list.",
                )
            )
    items: list[bytes] = []
    next_token = ""
    for entry in store.entries(res.key, namespace):
        meta = entry.obj["metadata"]
        if start is not None and etcd_key(meta.get("namespace", ""), meta["name"]) <= etcd_key(
            *start
        ):
            continue
        if not _match(entry, label, fld):
            continue
        if limit and len(items) == limit:
            last = json.loads(items[-1])["metadata"]
            key = [last.get("namespace", ""), last["name"]]
            next_token = base64.urlsafe_b64encode(dumps({"rv": list_rv, "start": key})).decode()
            break
        items.append(entry.raw)
    metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
    if next_token:
        metadata["continue"] = next_token
    return (
        b'{"kind":"'
        + res.kind.encode()
        + b'List","apiVersion":"'
        + res.api_version.encode()
        + b'","metadata":'
        + dumps(metadata)
        + b',"items":['
        + b",".join(items)
        + b"]}"
    )


def _event(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


def open_watch(
    store: Store,
    res: Resource,
    *,
    namespace: str | None,
    label: LabelMatch | None,
    fld: FieldMatch | None,
    resource_version: str,
    send_initial_events: bool = False,
    bookmarks: bool = True,
) -> tuple[Watcher, list[bytes]]:
    """Register a watcher and compute the lines it starts with (atomically, on the loop).

    ``send_initial_events`` (watch-list, KEP-3157): ADDED for the current state, then a
    BOOKMARK annotated ``k8s.io/initial-events-end: "true"``, whatever the resourceVersion.
    """
    watcher = Watcher(res.key, namespace, label, fld)
    initial: list[bytes] = []
    if resource_version in ("", "0") or send_initial_events:
        for entry in store.entries(res.key, namespace):
            if _match(entry, label, fld):
                initial.append(_event("ADDED", entry.raw))
        if send_initial_events and bookmarks:
            end = {"k8s.io/initial-events-end": "true"}
            initial.append(_event("BOOKMARK", _bookmark(res, store.rv, annotations=end)))
    else:
        try:
            rv = int(resource_version)
        except ValueError:
            raise bad_request(f"invalid resource version: {resource_version!r}") from None
        try:
            history = store.events_since(res.key, rv)
        except GoneError as err:
            return watcher, [_event("ERROR", dumps(err.status))]
        for event in history:
            line = watcher.line(event)
            if line is not None:
                initial.append(line)
    store.add_watcher(watcher)
    return watcher, initial


async def stream(
    store: Store,
    res: Resource,
    watcher: Watcher,
    initial: list[bytes],
    *,
    timeout: float,
    bookmarks: bool,
    bookmark_interval: float,
) -> AsyncIterator[bytes]:
    """The watch response body: initial lines, then live events until timeout or drop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        for line in initial:
            yield line
        if initial and initial[0].startswith(b'{"type":"ERROR"'):
            return
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            wait = min(remaining, bookmark_interval) if bookmarks else remaining
            try:
                item = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if bookmarks:
                    yield _event("BOOKMARK", _bookmark(res, store.rv))
                continue
            if item is None:
                break
            yield item
    finally:
        store.remove_watcher(watcher)


def _bookmark(res: Resource, rv: int, annotations: dict[str, str] | None = None) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotations:
        meta["annotations"] = annotations
    return dumps({"kind": res.kind, "apiVersion": res.api_version, "metadata": meta})
