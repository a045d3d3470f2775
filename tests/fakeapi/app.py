"""The HTTP layer: Kubernetes REST paths and discovery on Starlette, plus ``/_fake/`` control.

Anything not implemented answers 404 (unknown path) or 405 (unsupported verb) with a
``Status`` body, never a fake success.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from tests.fakeapi import errors, openapi, resources, tables, watch
from tests.fakeapi.admission import format_warning
from tests.fakeapi.cluster import ADMIN, Cluster, Context
from tests.fakeapi.control import control
from tests.fakeapi.errors import ApiError
from tests.fakeapi.faults import Faults, RequestRecord
from tests.fakeapi.resources import Resource
from tests.fakeapi.selectors import parse_field_selector, parse_label_selector
from tests.fakeapi.store import dumps

JSON = "application/json"
HOLD_LIMIT = 30.0  # seconds a held request waits at most for release()


@dataclass
class Target:
    """A parsed resource path."""

    res: Resource
    namespace: str | None
    name: str
    sub: str


APF_REJECTED = "Too many requests, please try again later.\n"
"""The body of a 429 from API Priority and Fairness (Go's ``http.Error``)."""


def _json(body: Any, code: int = 200, warnings: list[str] | None = None) -> Response:
    raw = body if isinstance(body, bytes) else dumps(body)
    resp = Response(raw, status_code=code, media_type=JSON)
    for w in warnings or []:
        resp.headers.append("Warning", format_warning(w))
    return resp


def _error(err: ApiError, warnings: list[str] | None = None) -> Response:
    resp = _json(err.status, err.code, warnings)
    for key, value in err.headers.items():
        resp.headers[key] = value
    return resp


def _not_found_path() -> ApiError:
    return errors.error(404, "the server could not find the requested resource", "NotFound")


def parse_target(parts: list[str]) -> Target | None:
    """``/api/v1/...`` or ``/apis/<g>/<v>/...`` split on ``/``; ``None`` when not a resource."""
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = resources.lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    res = resources.lookup(group, version, rest[0])
    if res is None:
        return None
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not (sub == "status" and res.has_status):
        return None
    if res.namespaced and namespace is None and name:
        return None
    return Target(res, namespace, name, sub)


def _verb(method: str, target: Target, query: Any) -> str:
    if method == "GET":
        if target.name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if target.name else "deletecollection",
    }.get(method, method.lower())


async def _body(request: Request) -> Any:
    raw = await request.body()
    ctype = request.headers.get("content-type", JSON).split(";")[0].strip()
    if not raw:
        return None
    if "protobuf" in ctype:
        raise errors.error(
            415,
            f"the fake API only accepts JSON, not {ctype} (kubectl create <kind> sends "
            "protobuf: use kubectl create -f or kubectl apply -f with a manifest)",
        )
    try:
        if ctype in ("application/yaml", "application/x-yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as err:
        raise errors.bad_request(f"error decoding request body: {err}") from None


async def _table_events(
    lines: AsyncIterator[bytes], res: Resource, include: str
) -> AsyncIterator[bytes]:
    """Watch events whose objects are one-row Tables (what kubectl get -w asks for)."""
    async for line in lines:
        event = json.loads(line)
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            obj = event["object"]
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            event["object"] = tables.table(res, [obj], metadata=meta, include=include)
        yield dumps(event) + b"\n"


def _watch_list(q: Any) -> bool:
    """Validate ``sendInitialEvents`` like ``ValidateListOptions`` (422 on misuse)."""
    if q.get("sendInitialEvents") not in ("true", "1"):
        return False
    # A real v1.35 server does not require allowWatchBookmarks here (it then sends the
    # initial events without the closing bookmark).
    causes: list[tuple[str, str, str]] = []
    if q.get("resourceVersionMatch") != "NotOlderThan":
        causes.append(
            (
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                "NotOlderThan",
            )
        )
    if causes:
        raise errors.invalid("ListOptions", "", causes, group="meta.k8s.io")
    return True


class FakeApiApp:
    """ASGI app; ``cluster`` and ``faults`` are shared with the Python handle."""

    def __init__(self, cluster: Cluster, faults: Faults) -> None:
        self.cluster = cluster
        self.faults = faults
        self.bookmark_interval = 1.0
        self.server_address = "127.0.0.1:0"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        request = Request(scope, receive)
        try:
            response = await self.handle(request)
        except ApiError as err:
            response = _error(err)
        except Exception as err:  # a bug in the fake still answers with a Status body
            response = _error(errors.error(500, f"fake API internal error: {err!r}"))
        await response(scope, receive, send)

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        method = request.method
        if path.startswith("/_fake/"):
            return await control(self, request)
        parts = [p for p in path.split("/") if p]
        target = parse_target(parts)
        if target is not None:
            verb = _verb(method, target, request.query_params)
            self.faults.record(
                RequestRecord(
                    verb=verb,
                    group=target.res.group,
                    resource=target.res.plural,
                    subresource=target.sub,
                    namespace=target.namespace or "",
                    name=target.name,
                    user_agent=request.headers.get("user-agent", ""),
                    user=self._user(request)["username"],
                    method=method,
                    path=path,
                )
            )
        delay = self.faults.delay(method, path)
        if delay:
            await asyncio.sleep(delay)
        deadline = asyncio.get_running_loop().time() + HOLD_LIMIT
        while self.faults.held(method, path) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        rule = self.faults.take_failure(method, path)
        if rule is not None and rule.status == 429 and not rule.message:
            # What API Priority and Fairness answers (apiserver filters/
            # priority-and-fairness.go tooManyRequests): plain text, not a Status, and
            # Retry-After (1 s until drops keep coming).
            return Response(
                APF_REJECTED,
                status_code=429,
                media_type="text/plain; charset=utf-8",
                headers={"Retry-After": "1", "X-Content-Type-Options": "nosniff"},
            )
        if rule is not None:
            message = rule.message or f"injected failure for {method} {path}"
            raise ApiError(errors.status_body(code=rule.status, message=message))
        if target is None:
            return self.discovery(method, parts)
        return await self.resource(request, target, verb)

    def discovery(self, method: str, parts: list[str]) -> Response:
        if method != "GET":
            raise _not_found_path()
        body: Any = None
        if parts == ["api"]:
            body = resources.api_versions(self.server_address)
        elif parts == ["apis"]:
            body = resources.api_group_list()
        elif parts == ["version"]:
            body = resources.VERSION_INFO
        elif parts in (["healthz"], ["readyz"], ["livez"]):
            return Response(b"ok", media_type="text/plain")
        elif parts == ["openapi", "v2"]:
            return Response(openapi.v2_document(), media_type=openapi.V2_PROTOBUF)
        elif parts == ["openapi", "v3"]:
            body = openapi.root()
        elif parts[:2] == ["openapi", "v3"]:
            body = openapi.group_version("/".join(parts[2:]))
        elif parts == ["api", "v1"]:
            body = resources.api_resource_list("", "v1")
        elif len(parts) == 2 and parts[0] == "apis" and parts[1] in resources.GROUPS:
            body = resources.api_group(parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            body = resources.api_resource_list(parts[1], parts[2])
        if body is None:
            raise _not_found_path()
        return _json(body)

    def _user(self, request: Request) -> dict[str, Any]:
        """The user a request acts as: a configured bearer token's user, else the admin."""
        auth = request.headers.get("authorization", "")
        user = ADMIN
        if auth.lower().startswith("bearer "):
            user = self.cluster.tokens.get(auth[7:].strip(), ADMIN)
        return dict(user)

    def _context(self, request: Request) -> Context:
        dry_run = request.query_params.getlist("dryRun")
        if any(v != "All" for v in dry_run):
            raise errors.bad_request(f"Invalid dry run value: {dry_run!r}; supported: All")
        return Context(
            user=self._user(request),
            dry_run=bool(dry_run),
            field_validation=request.query_params.get("fieldValidation", ""),
        )

    async def resource(self, request: Request, t: Target, verb: str) -> Response:
        res, cluster = t.res, self.cluster
        ns = t.namespace or ""
        if res.create_only:
            if verb != "create" or t.namespace is not None:
                raise errors.method_not_supported(res.group, res.plural, verb)
            return _json(cluster.review(res, await _body(request)), 201)
        if verb in ("list", "watch"):
            return self._list_or_watch(request, t, verb)
        ctx = self._context(request)
        try:
            if verb == "get":
                entry = cluster.store.get(res.key, ns, t.name)
                if entry is None:
                    raise errors.not_found(res.group, res.plural, t.name)
                if tables.wants_table(request.headers.get("accept", "")) and not t.sub:
                    rv = entry.obj["metadata"]["resourceVersion"]
                    include = request.query_params.get("includeObject", "Metadata")
                    one = tables.table(
                        res, [entry.obj], metadata={"resourceVersion": rv}, include=include
                    )
                    return Response(dumps(one), media_type=tables.TABLE_MEDIA_TYPE)
                return _json(entry.raw)
            if verb == "create" and not t.name and not t.sub:
                if res.namespaced and t.namespace is None:
                    raise errors.method_not_supported(res.group, res.plural, "create")
                obj = await cluster.create(res, ns, await _body(request), ctx)
                return _json(obj, 201, ctx.warnings)
            if verb == "update":
                obj = await cluster.update(
                    res, ns, t.name, await _body(request), sub=t.sub, ctx=ctx
                )
                return _json(obj, 200, ctx.warnings)
            if verb == "patch":
                ctype = request.headers.get("content-type", "").split(";")[0].strip()
                obj = await cluster.patch(
                    res, ns, t.name, await request.body(), content_type=ctype, sub=t.sub, ctx=ctx
                )
                return _json(obj, 200, ctx.warnings)
            if verb == "delete" and not t.sub:
                options = await _body(request)
                grace = request.query_params.get("gracePeriodSeconds")
                if grace is not None:  # query parameters are DeleteOptions too
                    try:
                        options = {**(options or {}), "gracePeriodSeconds": int(grace)}
                    except ValueError:
                        raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}") from None
                code, body = cluster.delete(res, ns, t.name, options, ctx)
                return _json(body, code, ctx.warnings)
        except ApiError as err:
            return _error(err, ctx.warnings)
        raise errors.method_not_supported(res.group, res.plural, verb)

    def _list_or_watch(self, request: Request, t: Target, verb: str) -> Response:
        q = request.query_params
        label = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fld = (
            parse_field_selector(
                q["fieldSelector"],
                allowed=t.res.field_labels,
                aliases=t.res.field_aliases,
                defaults=t.res.field_defaults,
            )
            if q.get("fieldSelector")
            else None
        )
        store = self.cluster.store
        as_table = tables.wants_table(request.headers.get("accept", ""))
        include = q.get("includeObject", "Metadata")
        if verb == "list":
            match = q.get("resourceVersionMatch", "")
            rv = q.get("resourceVersion", "")
            if match == "Exact" and rv != str(store.rv):
                # No snapshots are kept: an exact read of an older version is refused as
                # expired rather than answered with the current state.
                raise ApiError(
                    errors.status_body(
                        code=410,
                        reason="Expired",
                        message=f"too old resource version: {rv} ({store.rv})",
                    )
                )
            try:
                limit = int(q.get("limit") or 0)
            except ValueError:
                raise errors.bad_request(f"invalid limit: {q.get('limit')!r}") from None
            body = watch.list_body(
                store,
                t.res,
                namespace=t.namespace,
                label=label,
                fld=fld,
                limit=limit,
                cont=q.get("continue", ""),
            )
            if as_table:
                listed = json.loads(body)
                body = dumps(
                    tables.table(
                        t.res, listed["items"], metadata=listed["metadata"], include=include
                    )
                )
                return Response(body, media_type=tables.TABLE_MEDIA_TYPE)
            return _json(body)
        try:
            timeout = float(q.get("timeoutSeconds") or 1800)
        except ValueError:
            raise errors.bad_request("invalid timeoutSeconds") from None
        watcher, initial = watch.open_watch(
            store,
            t.res,
            namespace=t.namespace,
            label=label,
            fld=fld,
            resource_version=q.get("resourceVersion", ""),
            send_initial_events=_watch_list(q),
            bookmarks=q.get("allowWatchBookmarks") in ("true", "1"),
        )
        events = watch.stream(
            store,
            t.res,
            watcher,
            initial,
            timeout=timeout,
            bookmarks=q.get("allowWatchBookmarks") in ("true", "1"),
            bookmark_interval=self.bookmark_interval,
        )
        if as_table:
            return StreamingResponse(
                _table_events(events, t.res, include), media_type=tables.TABLE_MEDIA_TYPE
            )
        return StreamingResponse(events, media_type=JSON)
