"""Create and update validation of ``events.k8s.io/v1`` Events, like kube-apiserver.

kubernetes ``pkg/apis/core/validation/events.go`` for a request in ``events.k8s.io/v1``:
``ValidateEventCreate`` is ``legacyValidateEvent`` (the branch for an Event with
``eventTime``) plus the strict checks and ``validateV1EventSeries``;
``ValidateEventUpdate`` (a PUT or PATCH, e.g. client-go's series update) is
``legacyValidateEvent`` of the new Event, ``validateV1EventSeries`` when ``series``
changed, and every field but ``series`` and metadata immutable. Field paths are the
internal type's, as the real server reports them: ``note`` is ``message``, ``regarding``
is ``involvedObject``, ``deprecatedCount`` is ``count``, ``deprecatedSource`` is
``source``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakeapi import event_versions
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


def _series_errors(event: dict[str, Any]) -> list[Cause]:
    """``validateV1EventSeries``: a series counts at least 2 and has a lastObservedTime."""
    series = event.get("series")
    if not isinstance(series, dict):
        return []
    causes: list[Cause] = []
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        causes.append(_invalid("series.count", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(_required("series.lastObservedTime"))
    return causes


def _legacy_errors(
    event: dict[str, Any], *, controller_path: str = "reportingController", core: bool = False
) -> list[Cause]:
    """``legacyValidateEvent`` of an Event in the events.k8s.io form. Without ``eventTime``
    an events.k8s.io request is missing a required field; a core/v1 request is an "old"
    Event whose ``involvedObject.namespace`` must match its namespace (empty only in
    ``default``)."""
    causes: list[Cause] = []
    namespace = event.get("metadata", {}).get("namespace", "")
    if not event.get("eventTime"):
        if not core:
            causes.append(_required("eventTime"))
            return causes
        regarding = event.get("regarding")
        regarding_ns = regarding.get("namespace", "") if isinstance(regarding, dict) else ""
        if (regarding_ns and regarding_ns != namespace) or (
            not regarding_ns and namespace not in ("", "default")
        ):
            shown = f'Invalid value: "{regarding_ns}": does not match event.namespace'
            causes.append(("involvedObject.namespace", "FieldValueInvalid", shown))
    else:
        regarding = event.get("regarding")
        regarding_ns = regarding.get("namespace", "") if isinstance(regarding, dict) else ""
        if not regarding_ns and namespace not in ("default", "kube-system"):
            causes.append(_invalid("involvedObject.namespace", "does not match event.namespace"))
        controller = _text(event, "reportingController")
        if not controller:
            causes.append(_required(controller_path))
        causes += qualified_name_errors(controller, controller_path)
        for key, limit, path in (
            ("reportingInstance", REPORTING_INSTANCE_LENGTH_LIMIT, "reportingInstance"),
            ("action", ACTION_LENGTH_LIMIT, "action"),
            ("reason", REASON_LENGTH_LIMIT, "reason"),
        ):
            if not _text(event, key):
                causes.append(_required(path))
            causes += _length(_text(event, key), path, limit)
        causes += _length(_text(event, "note"), "message", NOTE_LENGTH_LIMIT)
    return causes


def core_errors(core_event: dict[str, Any]) -> list[Cause]:
    """Field errors of writing a core/v1 Event (``ValidateEventCreate``/``Update`` for a
    core/v1 request: ``legacyValidateEvent`` only, the controller field named
    ``reportingComponent``)."""
    event = event_versions.to_events_v1(core_event)
    return _legacy_errors(event, controller_path="reportingComponent", core=True)


def create_errors(event: dict[str, Any]) -> list[Cause]:
    """Field errors ``(field, reason, body)`` of creating ``event`` (events.k8s.io/v1)."""
    causes = _legacy_errors(event) + _series_errors(event)
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


# events.k8s.io/v1 field -> the internal field path the real server reports.
_IMMUTABLE = (
    ("regarding", "involvedObject"),
    ("reason", "reason"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("action", "action"),
    ("related", "related"),
    ("reportingController", "reportingController"),
    ("reportingInstance", "reportingInstance"),
)


def update_errors(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """Field errors of updating ``old`` to ``new`` (a PUT or PATCH in events.k8s.io/v1):
    ``ValidateEventUpdate``. Only ``series`` (and metadata) may change; a changed series
    must count at least 2 and carry ``lastObservedTime``. An immutable field's message is
    ``Invalid value: <new value>: field is immutable`` (the value as JSON here, Go's
    ``%#v`` on the real server for structs)."""
    causes = _legacy_errors(new)
    if new.get("series") != old.get("series"):
        causes += _series_errors(new)
    for key, path in _IMMUTABLE:
        if new.get(key) != old.get(key):
            shown = json.dumps(new.get(key)) if new.get(key) is not None else '""'
            message = f"Invalid value: {shown}: field is immutable"
            causes.append((path, "FieldValueInvalid", message))
    return causes
