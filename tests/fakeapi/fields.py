"""Decoding rules: unknown fields (``fieldValidation`` = ``Ignore``/``Warn`` (default)/``Strict``)
and ``metav1.Time``/``MicroTime`` normalization.

kube-apiserver decodes into typed structs, so unknown fields are dropped; ``Warn`` reports
each as a warning, ``Strict`` rejects the request with 400 ``strict decoding error: unknown
field "spec.foo"``. The schema is the real v1.32 OpenAPI (see :mod:`tests.fakeapi.patch`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from typing import Any

from tests.fakeapi import errors
from tests.fakeapi.patch import Schema, _resolve, kind_schema


def prune(obj: dict[str, Any], *, api_version: str, kind: str) -> list[str]:
    """Drop fields unknown to the kind's schema from ``obj`` (in place); return their paths.

    Raises :class:`TypeMismatch` for a value of the wrong JSON type."""
    schema = kind_schema(api_version, kind)
    unknown: list[str] = []
    if schema is not None:
        _walk(obj, schema, "", unknown)
    return unknown


_TIME = "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_MICRO_TIME = "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_RFC3339_MICRO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")
_SECONDS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def normalize_time(value: str, *, micro: bool, path: str) -> str:
    """``metav1.Time`` (seconds) / ``MicroTime`` (microseconds) as the server re-serializes
    them: UTC with ``Z``. Raises 400 like the decoder for a string its layout does not
    parse: ``Time`` is Go's ``time.RFC3339`` (a fraction is accepted), ``MicroTime`` is
    ``RFC3339Micro`` = ``2006-01-02T15:04:05.000000Z07:00``, exactly six fraction digits
    (apimachinery ``metav1.MicroTime.UnmarshalJSON``; a real v1.35 server refuses
    ``2024-05-01T10:00:00Z`` for a Lease's ``renewTime``). ``path`` is unused in the text,
    as in the decoder's."""
    layout = "2006-01-02T15:04:05.000000Z07:00" if micro else "2006-01-02T15:04:05Z07:00"
    if (_RFC3339_MICRO if micro else _RFC3339).fullmatch(value) is None:
        seconds = _SECONDS.match(value)
        if micro and seconds is not None:
            detail = f'cannot parse "{value[seconds.end() :]}" as ".000000"'
        else:
            detail = f'cannot parse "{value}" as "2006"'
        raise errors.bad_request(f'parsing time "{value}" as "{layout}": {detail}')
    parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    parsed = parsed.astimezone(datetime.UTC)
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


_JSON_KIND: dict[type, str] = {dict: "object", list: "array", str: "string", bool: "bool"}
_GO_TYPE = {
    "object": "map/struct",
    "array": "slice",
    "string": "string",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
}


class TypeMismatch(ValueError):
    """A value whose JSON type the field's schema does not allow (the decoder's error)."""


def _types(schema: Schema) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {str(t) for t in declared}
    branches = schema.get("oneOf") or schema.get("anyOf") or []
    return {t for b in branches if isinstance(b, dict) for t in _types(b)}


def _fits(value: Any, types: set[str]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool(types & {"integer", "number"})
    if isinstance(value, float):
        return "number" in types
    return _JSON_KIND.get(type(value)) in types


def _check_type(value: Any, schema: Schema, path: str) -> None:
    types = _types(schema) - {"null"}
    if schema.get("format") == "byte" and isinstance(value, str):
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error as err:
            raise TypeMismatch(f"illegal base64 data in .{path}: {err}") from None
    if types and not _fits(value, types):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        got = "number" if number else _JSON_KIND.get(type(value), "value")
        want = "/".join(sorted(_GO_TYPE.get(t, t) for t in types))
        raise TypeMismatch(
            f"json: cannot unmarshal {got} into Go struct field .{path} of type {want}"
        )


def _walk(value: Any, schema: Schema | None, path: str, unknown: list[str]) -> None:
    schema = _resolve(schema)
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if path:
        _check_type(value, schema, path)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            sub = f"{path}.{key}" if path else key
            ref = props.get(key, {}).get("$ref") if props is not None else None
            if ref in (_TIME, _MICRO_TIME) and isinstance(value[key], str):
                value[key] = normalize_time(value[key], micro=ref == _MICRO_TIME, path=sub)
            elif props is not None and key in props:
                _walk(value[key], props[key], sub, unknown)
            elif isinstance(extra, dict):
                _walk(value[key], extra, sub, unknown)
            elif props is not None:
                unknown.append(sub)
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{i}]", unknown)


def check(obj: dict[str, Any], *, api_version: str, kind: str, directive: str) -> list[str]:
    """Apply ``directive`` to ``obj``; returns warnings, raises 400 under ``Strict``."""
    if directive not in ("", "Ignore", "Warn", "Strict"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{directive}": supported values: '
            '"Ignore", "Strict", "Warn"'
        )
    try:
        unknown = prune(obj, api_version=api_version, kind=kind)
    except TypeMismatch as err:
        version = api_version.rpartition("/")[2]
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: {err}'
        ) from None
    if not unknown or directive == "Ignore":
        return []
    texts = [f'unknown field "{u}"' for u in unknown]
    if directive == "Strict":
        version = api_version.rpartition("/")[2]
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding '
            "error: " + ", ".join(texts)
        )
    return texts
