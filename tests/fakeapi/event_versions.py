"""One Event resource, two API versions: ``events.k8s.io/v1`` Events are stored as core/v1
Events and converted on every read and write, as kube-apiserver does (both groups read
and write the same etcd key, ``/registry/events/<namespace>/<name>``).

The field mapping is kubernetes ``pkg/apis/events/v1/conversion.go``
(``Convert_v1_Event_To_core_Event`` and back): ``regarding`` is ``involvedObject``,
``note`` is ``message``, ``reportingController`` is core's ``reportingComponent``,
``deprecatedSource``/``deprecatedFirstTimestamp``/``deprecatedLastTimestamp``/
``deprecatedCount`` are ``source``/``firstTimestamp``/``lastTimestamp``/``count``;
``eventTime``, ``series``, ``action``, ``reason``, ``type``, ``related`` and
``reportingInstance`` keep their names. Zero values are serialized as a v1.35 server
does (checked against one): core shows ``source: {}``, ``firstTimestamp: null``,
``lastTimestamp: null``, ``eventTime: null``, ``reportingComponent: ""`` and
``reportingInstance: ""``; events.k8s.io shows ``eventTime: null``, ``deprecatedSource: {}``,
``deprecatedFirstTimestamp: null`` and ``deprecatedLastTimestamp: null``.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

CORE_API_VERSION = "v1"
EVENTS_API_VERSION = "events.k8s.io/v1"


def _set_if(out: Obj, key: str, value: Any) -> None:
    if value not in (None, "", 0, [], {}):
        out[key] = value


def to_core(event: Obj) -> Obj:
    """An ``events.k8s.io/v1`` Event as the core/v1 Event stored for it."""
    out: Obj = {"kind": "Event", "apiVersion": CORE_API_VERSION, "metadata": event["metadata"]}
    out["involvedObject"] = event.get("regarding") or {}
    _set_if(out, "reason", event.get("reason"))
    _set_if(out, "message", event.get("note"))
    out["source"] = event.get("deprecatedSource") or {}
    out["firstTimestamp"] = event.get("deprecatedFirstTimestamp")
    out["lastTimestamp"] = event.get("deprecatedLastTimestamp")
    _set_if(out, "count", event.get("deprecatedCount"))
    _set_if(out, "type", event.get("type"))
    out["eventTime"] = event.get("eventTime")
    _set_if(out, "series", event.get("series"))
    _set_if(out, "action", event.get("action"))
    _set_if(out, "related", event.get("related"))
    out["reportingComponent"] = event.get("reportingController") or ""
    out["reportingInstance"] = event.get("reportingInstance") or ""
    return out


def to_events_v1(core: Obj) -> Obj:
    """A stored core/v1 Event as ``events.k8s.io/v1`` shows it."""
    out: Obj = {"kind": "Event", "apiVersion": EVENTS_API_VERSION, "metadata": core["metadata"]}
    out["eventTime"] = core.get("eventTime")
    _set_if(out, "series", core.get("series"))
    _set_if(out, "reportingController", core.get("reportingComponent"))
    _set_if(out, "reportingInstance", core.get("reportingInstance"))
    _set_if(out, "action", core.get("action"))
    _set_if(out, "reason", core.get("reason"))
    out["regarding"] = core.get("involvedObject") or {}
    _set_if(out, "related", core.get("related"))
    _set_if(out, "note", core.get("message"))
    _set_if(out, "type", core.get("type"))
    out["deprecatedSource"] = core.get("source") or {}
    out["deprecatedFirstTimestamp"] = core.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = core.get("lastTimestamp")
    _set_if(out, "deprecatedCount", core.get("count"))
    return out
