"""Create-time validation of ``events.k8s.io/v1`` Events, like kube-apiserver.

kubernetes ``pkg/apis/core/validation/events.go`` ``ValidateEventCreate`` for a request
in ``events.k8s.io/v1``: ``legacyValidateEvent`` (the branch for an Event with
``eventTime``) plus the strict checks. Field paths are the internal type's, as the real
server reports them: ``note`` is ``message``, ``regarding`` is ``involvedObject``,
``deprecatedCount`` is ``count``, ``deprecatedSource`` is ``source``.
"""

from __future__ import annotations

from typing import Any

from tests.fakeapi.service_rules import Cause, qualified_name_errors

REPORTING_INSTANCE_LENGTH_LIMIT = 128
ACTION_LENGTH_LIMIT = 128
REASON_LENGTH_LIMIT = 128
NOTE_LENGTH_LIMIT = 1024
"""Bytes (Go ``len`` of the string), though the message says characters."""


def _required(path: str) -> Cause:
    return (path, "FieldValueRequired", "Required value")


def _invalid(path: str, detail: str) -> Cause:
    return (path, "FieldValueInvalid", f'Invalid value: "": {detail}')


def _length(value: str, path: str, limit: int) -> list[Cause]:
    if len(value.encode()) > limit:
        return [_invalid(path, f"can have at most {limit} characters")]
    return []


def _text(event: dict[str, Any], key: str) -> str:
    value = event.get(key)
    return value if isinstance(value, str) else ""


def create_errors(event: dict[str, Any]) -> list[Cause]:
    """Field errors ``(field, reason, body)`` of creating ``event`` (events.k8s.io/v1)."""
    causes: list[Cause] = []
    namespace = event.get("metadata", {}).get("namespace", "")
    if not event.get("eventTime"):
        causes.append(_required("eventTime"))
    else:
        regarding = event.get("regarding")
        regarding_ns = regarding.get("namespace", "") if isinstance(regarding, dict) else ""
        if not regarding_ns and namespace not in ("default", "kube-system"):
            causes.append(_invalid("involvedObject.namespace", "does not match event.namespace"))
        controller = _text(event, "reportingController")
        if not controller:
            causes.append(_required("reportingController"))
        causes += qualified_name_errors(controller, "reportingController")
        for key, limit, path in (
            ("reportingInstance", REPORTING_INSTANCE_LENGTH_LIMIT, "reportingInstance"),
            ("action", ACTION_LENGTH_LIMIT, "action"),
            ("reason", REASON_LENGTH_LIMIT, "reason"),
        ):
            if not _text(event, key):
                causes.append(_required(path))
            causes += _length(_text(event, key), path, limit)
        causes += _length(_text(event, "note"), "message", NOTE_LENGTH_LIMIT)
    kind = event.get("type")
    if kind not in ("Normal", "Warning"):
        causes.append(_invalid("type", f"has invalid value: {kind if kind is not None else ''}"))
    for key, path in (
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ):
        if event.get(key):
            causes.append(_invalid(path, "needs to be unset"))
    source = event.get("deprecatedSource")
    if isinstance(source, dict) and (source.get("component") or source.get("host")):
        causes.append(_invalid("source", "needs to be unset"))
    return causes
