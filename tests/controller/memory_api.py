"""An in-memory :class:`app.kube.client.KubeAPI` for unit tests (httpx ``MockTransport`` style).

It keeps objects as JSON dicts with a global ``resourceVersion`` counter and an event
history so watches resume from a version, can be compacted (watch from an older version →
an ``ERROR`` event with code 410, as the API server sends it), and lets tests queue faults
per operation (``fail("patch services/status", 409)``). ``calls`` counts every operation.

Lists and watches apply the field selector they are given (the Pod informer's is
``app.kube.client.pod_field_selector``: none, or ``spec.hostNetwork=true``) as
kube-apiserver does: only matching objects are listed; a watch sends an object entering
the selection as ``ADDED``, leaving it as ``DELETED``, and nothing of the others; a field
label the kind does not support is ``400 field label not supported: <label>`` (the
selector rules are ``tests.fakeapi``'s, which ``tests/fakeapi_contract/test_pods.py``
holds to a real kube-apiserver).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from app.core.views import NODES_SERVING
from app.kube.client import ApiError, Kind
from tests.fakeapi.errors import ApiError as FakeApiError
from tests.fakeapi.patch import kind_schema, merge_patch, strategic_merge_patch
from tests.fakeapi.resources import RESOURCES
from tests.fakeapi.selectors import parse_field_selector

SERVICE_SCHEMA = kind_schema("v1", "Service")


def nodes_serving(service: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``node-ipam-lb.io/NodesServing`` item of a Service's ``status.conditions``
    (``None``: no Service, or no such item)."""
    conditions = ((service or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == NODES_SERVING), None)


def _custom_resource_write(obj: dict[str, Any], stored: dict[str, Any] | None) -> None:
    """What kube-apiserver does to a write of a custom resource with a status subresource
    (a NodeAddressPool): ``status`` is the stored one (none on create), and
    ``metadata.generation`` starts at 1 and grows when anything but ``metadata`` and
    ``status`` changes."""
    obj["status"] = copy.deepcopy((stored or {}).get("status") or {})
    if stored is None:
        obj["metadata"]["generation"] = 1
        return
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    before = {k: v for k, v in stored.items() if k not in ("metadata", "status")}
    generation = stored["metadata"].get("generation", 1)
    obj["metadata"]["generation"] = generation + (body != before)


NAMESPACED = {
    "services": True,
    "endpointslices": True,
    "nodes": False,
    "pods": True,
    "namespaces": False,
    "nodeaddresspools": False,
}

Matcher = Callable[[dict[str, Any] | None], bool]


def field_matcher(kind: str, selector: str) -> Matcher:
    """Compile a field selector for ``kind`` with the fake API server's rules
    (:func:`tests.fakeapi.selectors.parse_field_selector` and the resource's field labels:
    a Pod's are kube-apiserver's, ``spec.hostNetwork`` of a Pod without it is ``false``):
    a function of an object (``None``: absent, never matches).

    Raises:
        ApiError: 400 with kube-apiserver's message (``field label not supported: <label>``).
    """
    resource = next(r for r in RESOURCES if r.plural == kind)  # one per watched kind
    try:
        compiled = parse_field_selector(
            selector,
            allowed=resource.field_labels,
            aliases=resource.field_aliases,
            defaults=resource.field_defaults,
        )
    except FakeApiError as err:
        raise ApiError(err.code, str(err)) from None
    return lambda obj: obj is not None and compiled(obj)


def key_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _everything(obj: dict[str, Any] | None) -> bool:
    return obj is not None


def kind_matcher(kind: str, selector: str | None) -> Matcher:
    """What a List or watch of ``kind`` with ``fieldSelector=selector`` returns (``None``
    or empty: every object).

    Raises:
        ApiError: 400, as :func:`field_matcher`.
    """
    return field_matcher(kind, selector) if selector else _everything


def filtered(
    event: dict[str, Any], old: dict[str, Any] | None, wanted: Matcher
) -> dict[str, Any] | None:
    """``event`` as a watch with the selection ``wanted`` sees it (kube-apiserver's
    ``cacheWatcher.convertToWatchEvent``): ``old`` is the object before the change."""
    new = None if event["type"] == "DELETED" else event["object"]
    now, before = wanted(new), wanted(old)
    if now:
        return {"type": "MODIFIED" if before else "ADDED", "object": event["object"]}
    if before and old is not None:
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = event["object"]["metadata"]["resourceVersion"]
        return {"type": "DELETED", "object": gone}
    return None


class MemoryWatch:
    def __init__(
        self, api: MemoryAPI, kind: Kind, version: int, timeout: float, wanted: Matcher
    ) -> None:
        self._api, self._kind, self._version, self._timeout = api, kind, version, timeout
        self._closed = False
        self._generation = api.watch_generation
        self._wanted = wanted

    def __iter__(self) -> Iterator[dict[str, Any]]:
        api = self._api
        with api.cond:
            if self._version < api.compacted:
                yield {
                    "type": "ERROR",
                    "object": {"kind": "Status", "code": 410, "message": "too old"},
                }
                return
        while True:
            with api.cond:
                if self._generation != api.watch_generation:
                    raise ApiError(0, "watch stream broken")
                pending = [e for e in api.history if e[0] > self._version and e[1] == self._kind]
                if not pending and not self._closed:
                    api.cond.wait(0.05)
                    continue
            if self._closed:
                return
            for version, _, event, old in pending:
                self._version = version
                seen = filtered(event, old, self._wanted)
                if seen is not None:
                    yield copy.deepcopy(seen)

    def close(self) -> None:
        self._closed = True


class MemoryAPI:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 0
        self.compacted = 0
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in NAMESPACED}
        self.history: list[tuple[int, str, dict[str, Any], dict[str, Any] | None]] = []
        """``(resourceVersion, kind, watch event, the object before it or None)``."""
        self.leases: dict[str, dict[str, Any]] = {}
        self.config_maps: dict[str, dict[str, Any]] = {}
        """ConfigMaps by ``namespace/name`` (read only: kube-proxy's, docs/design.md §4.10)."""
        self.events: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()
        self.field_selectors: defaultdict[str, list[str | None]] = defaultdict(list)
        """The ``fieldSelector`` of every List page and watch, by ``"list pods"``, ...."""
        self.faults: dict[str, list[int]] = {}
        self.retry_after: dict[str, float] = {}
        self.call_times: dict[str, list[float]] = {}
        self.events_v1_served = True
        self.watch_generation = 0

    # --- test controls -------------------------------------------------------------
    def fail(self, op: str, *statuses: int, retry_after: float | None = None) -> None:
        """Make the next calls of ``op`` fail with these HTTP statuses (0: no response),
        each with ``retry_after`` (the answer's ``Retry-After`` seconds) when given."""
        with self.cond:
            self.faults.setdefault(op, []).extend(statuses)
            if retry_after is not None:
                self.retry_after[op] = retry_after

    def apply(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (like ``kubectl apply``); returns the stored copy."""
        with self.cond:
            obj = copy.deepcopy(obj)
            key = key_of(obj)
            event_type = "MODIFIED" if key in self.objects[kind] else "ADDED"
            if kind == "services" and event_type == "MODIFIED" and "status" not in obj:
                obj["status"] = copy.deepcopy(self.objects[kind][key].get("status", {}))
            if kind == "nodeaddresspools":
                _custom_resource_write(obj, self.objects[kind].get(key))
            return self._store(kind, key, obj, event_type)

    def delete(self, kind: str, key: str) -> None:
        with self.cond:
            obj = self.objects[kind].pop(key)
            before = copy.deepcopy(obj)
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.history.append((self.version, kind, {"type": "DELETED", "object": obj}, before))
            self.cond.notify_all()

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        with self.cond:
            return copy.deepcopy(self.objects[kind].get(key))

    def compact(self) -> None:
        """Forget the history: resuming a watch from an older version gets 410."""
        with self.cond:
            self.compacted = self.version + 1
            self.history.clear()

    def break_watches(self) -> None:
        """Drop every open watch connection (they raise a transport error)."""
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()

    def ingress(self, key: str) -> list[str] | None:
        svc = self.get("services", key)
        assert svc is not None
        entries = svc.get("status", {}).get("loadBalancer", {}).get("ingress")
        return None if entries is None else [e["ip"] for e in entries]

    def serving(self, key: str) -> dict[str, Any] | None:
        """Our ``NodesServing`` condition of Service ``key`` as stored, or ``None``."""
        return nodes_serving(self.get("services", key))

    # --- KubeAPI -------------------------------------------------------------------
    def list_page(
        self,
        kind: Kind,
        *,
        limit: int,
        continue_token: str | None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        self._call(f"list {kind}")
        self.field_selectors[f"list {kind}"].append(field_selector)
        wanted = kind_matcher(kind, field_selector)
        with self.cond:
            items = [(k, o) for k, o in sorted(self.objects[kind].items()) if wanted(o)]
            start = int(continue_token or 0)
            page = [copy.deepcopy(obj) for _, obj in items[start : start + limit]]
            more = start + limit < len(items)
            meta = {"resourceVersion": str(self.version)}
            if more:
                meta["continue"] = str(start + limit)
            return {"items": page, "metadata": meta}

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str | None = None,
    ) -> MemoryWatch:
        self._call(f"watch {kind}")
        self.field_selectors[f"watch {kind}"].append(field_selector)
        # An unsupported field selector fails the request, not the stream.
        wanted = kind_matcher(kind, field_selector)
        return MemoryWatch(self, kind, int(resource_version), timeout_seconds, wanted)

    def patch_service_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> str | None:
        self._call("patch services/status")
        with self.cond:
            key = f"{namespace}/{name}"
            if key not in self.objects["services"]:
                raise ApiError(404, f'services "{name}" not found')
            obj = copy.deepcopy(self.objects["services"][key])
            # A resourceVersion in the patch is a precondition (kube-apiserver: 409).
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != obj["metadata"].get("resourceVersion"):
                raise ApiError(409, f'Operation cannot be fulfilled on services "{name}"')
            # A strategic merge patch of the status alone, as kube-apiserver applies it to
            # the status subresource: ingress replaced, conditions merged by type.
            merged = strategic_merge_patch(obj, {"status": patch["status"]}, SERVICE_SCHEMA)
            obj["status"] = merged.get("status") or {}
            return str(self._store("services", key, obj, "MODIFIED")["metadata"]["resourceVersion"])

    def patch_pool_status(self, *, name: str, patch: dict[str, Any]) -> str | None:
        self._call("patch nodeaddresspools/status")
        with self.cond:
            if name not in self.objects["nodeaddresspools"]:
                raise ApiError(404, f'nodeaddresspools.node-ipam-lb.io "{name}" not found')
            obj = copy.deepcopy(self.objects["nodeaddresspools"][name])
            # A JSON merge patch (RFC 7386) of the status alone, as the status subresource
            # of a custom resource applies it: lists (conditions) replaced whole.
            obj["status"] = merge_patch(obj.get("status") or {}, patch.get("status") or {})
            stored = self._store("nodeaddresspools", name, obj, "MODIFIED")
            return str(stored["metadata"]["resourceVersion"])

    def pool_condition(self, name: str) -> dict[str, Any] | None:
        """The ``Accepted`` condition of NodeAddressPool ``name`` as stored, or ``None``."""
        conditions = ((self.get("nodeaddresspools", name) or {}).get("status") or {}).get(
            "conditions"
        ) or []
        return next((c for c in conditions if c.get("type") == "Accepted"), None)

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        self._call("create events")
        if body["apiVersion"] == "events.k8s.io/v1" and not self.events_v1_served:
            raise ApiError(404, "the server could not find the requested resource")
        with self.cond:
            self.events.append(copy.deepcopy(body))

    def patch_event(
        self, *, namespace: str, name: str, api_version: str, patch: dict[str, Any]
    ) -> None:
        self._call("patch events")
        with self.cond:
            for stored in self.events:
                meta = stored["metadata"]
                if (meta["namespace"], meta["name"], stored["apiVersion"]) == (
                    namespace,
                    name,
                    api_version,
                ):
                    stored.update(copy.deepcopy(patch))
                    return
        raise ApiError(404, f'events.events.k8s.io "{name}" not found')

    def list_events(
        self, *, api_version: str, field_selector: str, limit: int, continue_token: str | None
    ) -> dict[str, Any]:
        """Every Event of ``api_version`` matching the ``k=v,...`` selector (top-level
        fields only), in one page."""
        self._call("list events")
        if api_version == "events.k8s.io/v1" and not self.events_v1_served:
            raise ApiError(404, "the server could not find the requested resource")
        wanted = dict(term.split("=", 1) for term in field_selector.split(",") if term)
        with self.cond:
            items = [
                copy.deepcopy(e)
                for e in self.events
                if e["apiVersion"] == api_version and all(e.get(k) == v for k, v in wanted.items())
            ]
        return {"items": items, "metadata": {"resourceVersion": str(self.version)}}

    def read_lease(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get leases")
        with self.cond:
            return copy.deepcopy(self.leases.get(f"{namespace}/{name}"))

    def read_config_map(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get configmaps")
        with self.cond:
            return copy.deepcopy(self.config_maps.get(f"{namespace}/{name}"))

    def create_lease(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._call("create leases")
        with self.cond:
            key = f"{namespace}/{body['metadata']['name']}"
            if key in self.leases:
                raise ApiError(409, "already exists")
            return self._put_lease(key, body)

    def replace_lease(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._call("update leases")
        with self.cond:
            key = f"{namespace}/{name}"
            current = self.leases.get(key)
            if current is None:
                raise ApiError(404, "not found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "the object has been modified")
            return self._put_lease(key, body)

    # --- internals -----------------------------------------------------------------
    def _call(self, op: str) -> None:
        with self.cond:
            self.calls[op] += 1
            queued = self.faults.get(op)
            status = queued.pop(0) if queued else None
            self.call_times.setdefault(op, []).append(time.monotonic())
            wait = self.retry_after.get(op)
        if status is not None:
            err = ApiError(status, f"injected {status} on {op}")
            err.retry_after = wait
            raise err

    def _put_lease(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[key] = stored
        return copy.deepcopy(stored)

    def _store(self, kind: str, key: str, obj: dict[str, Any], event_type: str) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        before = self.objects[kind].get(key)
        self.objects[kind][key] = obj
        self.history.append(
            (self.version, kind, {"type": event_type, "object": copy.deepcopy(obj)}, before)
        )
        self.cond.notify_all()
        return obj
