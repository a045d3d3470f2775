"""``metav1.Status`` error bodies with kube-apiserver's reason/code/message shapes.

Source: k8s.io/apimachinery/pkg/api/errors (``NewNotFound``, ``NewAlreadyExists``,
``NewConflict``, ``NewInvalid``, ``NewBadRequest``, ``NewMethodNotSupported``, ...).
"""

from __future__ import annotations

from typing import Any

REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the fake API answers with: ``status`` is the full ``metav1.Status`` dict."""

    def __init__(self, status: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])


def status_body(
    *, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` of ``status: Failure`` (``reason`` defaults from the HTTP code)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASON_BY_CODE.get(code, ""),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _details(group: str, resource: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def _qualified(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def error(code: int, message: str, reason: str | None = None) -> ApiError:
    """A generic error (``reason`` defaults from the code)."""
    return ApiError(status_body(code=code, message=message, reason=reason))


def not_found(group: str, resource: str, name: str) -> ApiError:
    """``errors.NewNotFound``: ``services "x" not found``."""
    msg = f'{_qualified(group, resource)} "{name}" not found'
    return ApiError(status_body(code=404, message=msg, details=_details(group, resource, name)))


def already_exists(group: str, resource: str, name: str) -> ApiError:
    """``errors.NewAlreadyExists``: ``services "x" already exists``."""
    msg = f'{_qualified(group, resource)} "{name}" already exists'
    return ApiError(
        status_body(
            code=409, message=msg, reason="AlreadyExists", details=_details(group, resource, name)
        )
    )


def forbidden(group: str, resource: str, name: str, why: str) -> ApiError:
    """``errors.NewForbidden``: ``pods "x" is forbidden: <why>``."""
    msg = f'{_qualified(group, resource)} "{name}" is forbidden: {why}'
    return ApiError(
        status_body(
            code=403, message=msg, reason="Forbidden", details=_details(group, resource, name)
        )
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    """``errors.NewConflict``: ``Operation cannot be fulfilled on services "x": <why>``."""
    msg = f'Operation cannot be fulfilled on {_qualified(group, resource)} "{name}": {why}'
    return ApiError(
        status_body(
            code=409, message=msg, reason="Conflict", details=_details(group, resource, name)
        )
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """``errors.NewInvalid`` from field errors ``(field, reason, body)``.

    ``body`` is the field error's text without the field path, e.g.
    ``Invalid value: "x": may not change once set``; ``reason`` is the cause type
    (``FieldValueInvalid``, ``FieldValueForbidden``, ``FieldValueRequired``, ...).
    """
    texts = [f"{fld}: {body}" for fld, _, body in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": r, "message": body, "field": fld} for fld, r, body in causes],
    }
    if group:
        details["group"] = group
    return ApiError(
        status_body(
            code=422,
            message=f'{kind} "{name}" is invalid: {joined}',
            reason="Invalid",
            details=details,
        )
    )


def bad_request(message: str) -> ApiError:
    """``errors.NewBadRequest``."""
    return ApiError(status_body(code=400, message=message, reason="BadRequest"))


def method_not_supported(group: str, resource: str, action: str) -> ApiError:
    """``errors.NewMethodNotSupported``: 405 ``<action> is not supported on resources ...``."""
    msg = f'{action} is not supported on resources of kind "{_qualified(group, resource)}"'
    return ApiError(
        status_body(
            code=405,
            message=msg,
            reason="MethodNotAllowed",
            details={"kind": resource, "group": group},
        )
    )


def gone(message: str) -> dict[str, Any]:
    """The 410 ``Expired`` Status the watch cache sends for a compacted resourceVersion."""
    return status_body(code=410, message=message, reason="Expired")
