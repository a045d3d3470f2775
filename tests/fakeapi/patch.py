"""PATCH bodies: JSON merge patch, strategic merge patch and JSON patch.

- JSON merge patch: RFC 7386.
- Strategic merge patch: k8s.io/apimachinery/pkg/util/strategicpatch, driven by the real
  ``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key`` metadata of the
  Kubernetes OpenAPI (the definitions ``kubernetes-validate`` ships for v1.32). Supported
  directives: ``$patch: replace|delete`` (maps and list items), ``$retainKeys``,
  ``$setElementOrder/<field>``, ``$deleteFromPrimitiveList/<field>``.
- JSON patch: RFC 6902 via the ``jsonpatch`` library.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate

from tests.fakeapi.errors import ApiError, bad_request, status_body

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

Schema = dict[str, Any]


@functools.cache
def _definitions() -> dict[str, Schema]:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / "v1.32.0-local"
    data: dict[str, Schema] = json.loads((root / "_definitions.json").read_text())["$defs"]
    return data


def _resolve(schema: Schema | None) -> Schema | None:
    seen = 0
    while schema is not None and "$ref" in schema and seen < 10:
        schema = _definitions().get(schema["$ref"].rsplit("/", 1)[-1])
        seen += 1
    return schema


@functools.cache
def kind_schema(api_version: str, kind: str) -> Schema | None:
    """The OpenAPI definition of ``kind`` in ``api_version`` (``None`` when unknown)."""
    group, _, version = api_version.rpartition("/")
    for schema in _definitions().values():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk.get("group", ""), gvk["version"], gvk["kind"]) == (group, version, kind):
                return schema
    return None


def _prop(schema: Schema | None, key: str) -> Schema | None:
    schema = _resolve(schema)
    if schema is None:
        return None
    props = schema.get("properties")
    if props and key in props:
        found: Schema = props[key]
        return found
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value (inputs are not modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, schema: Schema | None) -> Any:
    """Apply a strategic merge patch to ``target`` using ``schema`` (an OpenAPI definition).

    Raises :class:`ApiError` 400 for malformed directives.
    """
    return _smp_map(target if isinstance(target, dict) else {}, patch, schema)


def _smp_map(target: dict[str, Any], patch: Any, schema: Schema | None) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:  # "merge" too: apimachinery knows only replace and delete
        raise ApiError(
            status_body(code=500, message=f"unknown patch type: {directive} in map: {_go(patch)}")
        )
    result = dict(target)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in (value or [])]
            continue
        if key.startswith("$"):
            raise bad_request(f"unknown patch directive {key!r}")
        if value is None:
            result.pop(key, None)
            continue
        sub = _prop(schema, key)
        if isinstance(value, dict):
            merged = _smp_map(result.get(key) or {}, value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, sub)
        else:
            result[key] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _reorder(result[field], order, _merge_key(_prop(schema, field)))
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or [])
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _go(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (maps with sorted keys), for error texts."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    return str(value)


def _merge_key(schema: Schema | None) -> str | None:
    if schema is None:
        return None
    strategy = str(schema.get("x-kubernetes-patch-strategy", ""))
    if "merge" not in strategy.split(","):
        return None
    return str(schema.get("x-kubernetes-patch-merge-key", "")) or ""


def _smp_list(target: Any, patch: list[Any], schema: Schema | None) -> list[Any]:
    key = _merge_key(schema)
    if key is None:
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    current = list(target) if isinstance(target, list) else []
    if key == "":
        merged = current + [copy.deepcopy(v) for v in patch if v not in current]
        return _normalize_order(merged, current, patch, None)
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    item_schema = _resolve(schema).get("items") if _resolve(schema) else None  # type: ignore[union-attr]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(
                status_body(
                    code=422,
                    message=f"map: {item} does not contain declared merge key: {key}",
                    reason="Invalid",
                )
            )
        index = next(
            (i for i, v in enumerate(current) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            current = [v for v in current if not (isinstance(v, dict) and v.get(key) == item[key])]
        elif index is None:
            current.append(_smp_map({}, item, item_schema))
        else:
            current[index] = _smp_map(current[index], item, item_schema)
    server = list(target) if isinstance(target, list) else []
    return _normalize_order(current, server, patch, key)


def _normalize_order(
    merged: list[Any], server: list[Any], patch: list[Any], key: str | None
) -> list[Any]:
    """apimachinery ``normalizeElementOrder`` + ``mergeSortedSlice``: the items named in
    the patch (in patch order) and the server-only items (in server order) are merged; an
    item the server did not have goes before the server items it is compared with, so a
    new list entry comes first (a real server answers ``["x/two", "x/one"]`` for a
    finalizer ``x/two`` merged into ``["x/one"]``)."""

    def ident(v: Any) -> Any:
        return v.get(key) if key and isinstance(v, dict) else json.dumps(v, sort_keys=True)

    server_index = {ident(v): i for i, v in enumerate(server)}
    patch_ids = [ident(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    named = set(patch_ids)
    patch_pos = {w: i for i, w in enumerate(patch_ids)}
    right = sorted((v for v in merged if ident(v) in named), key=lambda v: patch_pos[ident(v)])
    left = [v for v in merged if ident(v) not in named]
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li, ri = server_index.get(ident(left[i])), server_index.get(ident(right[j]))
            if li is not None and ri is not None and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(v: Any) -> Any:
        return v.get(key) if key and isinstance(v, dict) else json.dumps(v, sort_keys=True)

    wanted = [ident(o) for o in order]
    position = {w: i for i, w in enumerate(wanted)}
    return sorted(items, key=lambda v: position.get(ident(v), len(wanted)))


def json_patch(target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """RFC 6902 JSON patch; raises :class:`ApiError` 400 (bad document) or 422 (does not apply)."""
    if not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        result = jsonpatch.JsonPatch(patch).apply(target)
    except (jsonpatch.InvalidJsonPatch, TypeError) as err:
        raise bad_request(str(err)) from None
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
        raise ApiError(status_body(code=422, message=str(err), reason="Invalid")) from None
    if not isinstance(result, dict):
        raise ApiError(
            status_body(code=422, message="patch result is not an object", reason="Invalid")
        )
    return result
