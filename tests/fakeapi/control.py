"""``/_fake/`` control endpoints: faults, counters, request log, seeding, auth answers.

- ``POST /_fake/fail`` ``{"method", "path", "status", "times", "message"}`` (globs in
  method/path): the next ``times`` matching requests answer ``status``, state unchanged.
- ``POST /_fake/latency`` ``{"seconds", "method", "path"}``; ``seconds: 0`` clears all.
- ``POST /_fake/hold`` ``{"method", "path"}``: stall matching requests (max 30 s) until
  ``POST /_fake/release``.
- ``POST /_fake/drop-watches`` -> ``{"dropped": N}``.
- ``POST /_fake/compact`` -> ``{"resourceVersion": "N"}``: older versions answer 410.
- ``GET /_fake/requests`` -> ``{"patch services/status": 3, "list nodes": 1, ...}``;
  ``DELETE /_fake/requests`` resets counters and the log.
- ``GET /_fake/log`` -> ``[{"verb", "group", "resource", "subresource", "namespace", "name",
  "user_agent", "user", "method", "path"}, ...]``.
- ``POST /_fake/seed``: a v1 List, one object or multi-document YAML -> ``{"seeded": N}``.
- ``POST /_fake/tokens`` ``{"token", "user": {"username", "groups", "uid"}}``.
- ``POST /_fake/access`` ``{"user", "verb", "path"}``: a nonResourceURL allow rule.
- ``POST /_fake/service-ports`` ``{"namespace", "name", "port", "localPort"}``.
- ``POST /_fake/settings`` ``{"bookmarkInterval": seconds}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tests.fakeapi import errors
from tests.fakeapi.faults import Latency
from tests.fakeapi.seed import parse_documents
from tests.fakeapi.store import dumps

if TYPE_CHECKING:
    from tests.fakeapi.app import FakeApiApp


def _ok(body: Any) -> Response:
    return Response(dumps(body), media_type="application/json")


async def control(app: FakeApiApp, request: Request) -> Response:
    """Dispatch a ``/_fake/...`` request."""
    name = request.url.path[len("/_fake/") :].strip("/")
    method = request.method
    faults, cluster = app.faults, app.cluster
    raw = await request.body()
    body: Any = {}
    if raw and name != "seed":
        try:
            body = json.loads(raw)
        except ValueError as err:
            raise errors.bad_request(f"/_fake/{name}: body is not JSON: {err}") from None
    if not isinstance(body, dict) and name != "seed":
        raise errors.bad_request(f"/_fake/{name}: body must be a JSON object")
    try:
        if (method, name) == ("POST", "fail"):
            faults.fail(
                method=str(body.get("method", "*")),
                path=str(body.get("path", "*")),
                status=int(body.get("status", 500)),
                times=int(body.get("times", 1)),
                message=str(body.get("message", "")),
            )
            return _ok({"rules": len(faults.rules)})
        if (method, name) == ("POST", "latency"):
            seconds = float(body.get("seconds", 0))
            if seconds <= 0:
                faults.latencies.clear()
            else:
                faults.latencies.append(
                    Latency(seconds, str(body.get("method", "*")), str(body.get("path", "*")))
                )
            return _ok({"latencies": len(faults.latencies)})
        if (method, name) == ("POST", "hold"):
            faults.holds.append((str(body.get("method", "*")), str(body.get("path", "*"))))
            return _ok({"holds": len(faults.holds)})
        if (method, name) == ("POST", "release"):
            faults.holds.clear()
            return _ok({"holds": 0})
        if (method, name) == ("POST", "drop-watches"):
            return _ok({"dropped": cluster.store.drop_watches()})
        if (method, name) == ("POST", "compact"):
            return _ok({"resourceVersion": str(cluster.store.compact())})
        if (method, name) == ("GET", "requests"):
            return _ok(dict(faults.counters))
        if (method, name) in (("DELETE", "requests"), ("POST", "requests/reset")):
            faults.reset_counters()
            return _ok({})
        if (method, name) == ("GET", "log"):
            return _ok(faults.log_dicts())
        if (method, name) == ("POST", "seed"):
            return _ok({"seeded": len(cluster.seed(parse_documents(raw.decode(), "request body")))})
        if (method, name) == ("POST", "tokens"):
            cluster.tokens[str(body["token"])] = dict(body["user"])
            return _ok({"tokens": len(cluster.tokens)})
        if (method, name) == ("POST", "access"):
            cluster.allowed_non_resource.add(
                (str(body["user"]), str(body.get("verb", "get")), str(body["path"]))
            )
            return _ok({"rules": len(cluster.allowed_non_resource)})
        if (method, name) == ("POST", "service-ports"):
            key = (str(body["namespace"]), str(body["name"]), int(body.get("port", 443)))
            cluster.admission.service_ports[key] = int(body["localPort"])
            return _ok({"mapped": len(cluster.admission.service_ports)})
        if (method, name) == ("POST", "settings"):
            if "bookmarkInterval" in body:
                app.bookmark_interval = float(body["bookmarkInterval"])
            return _ok({"bookmarkInterval": app.bookmark_interval})
    except (KeyError, TypeError, ValueError) as err:
        raise errors.bad_request(f"/_fake/{name}: {err}") from None
    raise errors.error(404, f"no fake control endpoint {method} /_fake/{name}", "NotFound")
