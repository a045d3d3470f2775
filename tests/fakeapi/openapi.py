"""A small, honest OpenAPI v3 discovery: ``/openapi/v3`` and ``/openapi/v3/<api|apis/g>/<v>``.

kubectl asks ``/openapi/v3`` to learn whether the server supports the ``fieldValidation``
query parameter (``resource.QueryParamVerifierV3``: the PATCH operation of the kind's path
carries ``x-kubernetes-group-version-kind`` and a ``fieldValidation`` query parameter). We
answer with the operations we implement and no component schemas, so ``kubectl apply``
computes its strategic merge patch from its built-in types, and validation happens
server-side (see :mod:`tests.fakeapi.fields`). ``/openapi/v2`` answers 404.
"""

from __future__ import annotations

from typing import Any

from tests.fakeapi.resources import RESOURCES, Resource


def _param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def _op(res: Resource, action: str, *, write: bool) -> dict[str, Any]:
    params = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")] if write else []
    return {
        "operationId": f"{action}{res.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "version": res.version,
            "kind": res.kind,
        },
    }


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def root() -> dict[str, Any]:
    """``GET /openapi/v3``: one entry per served group-version."""
    paths = {}
    for gv in sorted({(r.group, r.version) for r in RESOURCES}):
        path = _gv_path(*gv)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash=fakeapi"}
    return {"paths": paths}


def group_version(path: str) -> dict[str, Any] | None:
    """``GET /openapi/v3/<path>``; ``None`` when no such group-version is served."""
    paths: dict[str, Any] = {}
    for res in RESOURCES:
        if _gv_path(res.group, res.version) != path:
            continue
        base = "/" + path
        if res.namespaced:
            base += "/namespaces/{namespace}"
        collection = f"{base}/{res.plural}"
        if res.create_only:
            paths[collection] = {"post": _op(res, "post", write=True)}
            continue
        paths[collection] = {
            "get": _op(res, "list", write=False),
            "post": _op(res, "post", write=True),
        }
        item = {
            "get": _op(res, "get", write=False),
            "put": _op(res, "put", write=True),
            "patch": _op(res, "patch", write=True),
            "delete": _op(res, "delete", write=True),
        }
        paths[f"{collection}/{{name}}"] = item
        if res.has_status:
            paths[f"{collection}/{{name}}/status"] = {
                k: v for k, v in item.items() if k in ("get", "put", "patch")
            }
    if not paths:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (fake API)", "version": "v1.32.0-fakeapi"},
        "paths": paths,
        "components": {"schemas": {}},
    }


# -- /openapi/v2 --------------------------------------------------------------------------

V2_PROTOBUF = (
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # as kube-apiserver answers
)


def _pb_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (strings and embedded messages)."""
    return _pb_varint(number << 3 | 2) + _pb_varint(len(payload)) + payload


def v2_document() -> bytes:
    """A minimal OpenAPI v2 document in gnostic's protobuf form (what kubectl asks
    ``/openapi/v2`` for): ``swagger: "2.0"``, ``info`` and empty ``paths`` and
    ``definitions`` (``openapi_v2.Document`` fields 1, 2, 8 and 9). kubectl fetches it to
    validate a ``kind: List`` client-side; it finds no schema for the items, so it
    validates nothing there and the server's own ``fieldValidation`` does the checking."""
    info = _pb_field(1, b"Kubernetes") + _pb_field(2, b"v1.32.0")
    return _pb_field(1, b"2.0") + _pb_field(2, info) + _pb_field(8, b"") + _pb_field(9, b"")
