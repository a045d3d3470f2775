"""Generate ``deploy/helm/node-ipam-lb/values.schema.json``; the ``settings`` part comes
from ``app.config.Settings`` (its pydantic JSON schema), so the chart rejects what
``node-ipam-lb serve`` rejects and the two cannot drift: tests/deploy/test_chart.py fails
when the committed file differs from :func:`schema`.

    .venv/bin/python -m tests.deploy.chart_schema          # rewrite the file
    .venv/bin/python -m tests.deploy.chart_schema --check  # exit 1 when it is stale

Each setting is keyed by its flag name (``default_lb_service_ipam`` ->
``default-lb-service-ipam``) and may be null (= serve's default), except the settings the
chart wires itself (:data:`CHART_REQUIRED`, :data:`CHART_NULL`). JSON Schema cannot
compare two fields, so the cross-field checks live in the chart's
``templates/validate.yaml``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.config import Settings

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "node-ipam-lb"
SCHEMA_PATH = CHART / "values.schema.json"

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

CHART_NULL = {
    "kubeconfig": "in-cluster ServiceAccount credentials",
    "tls_cert_file": "the chart points it at the mounted certificate volume",
    "tls_private_key_file": "the chart points it at the mounted certificate volume",
    "ca_bundle_out": "the CA goes into the webhook configurations",
    "leader_election_namespace": "always the release namespace",
    "cert_secret_namespace": "always the release namespace",
}
"""Settings the chart sets itself: the value must stay null."""

CHART_REQUIRED: dict[str, tuple[str, dict[str, Any]]] = {
    "port": ("the container port of the Service", {}),
    "health_probe_bind_address": (
        "the probes' container port (host:port, :port or [v6]:port; not 0, not port)",
        # 0 passes here to get templates/validate.yaml's message, which says why not.
        {"pattern": r"^(0|(\[[^\]]*\]|[^:\[\]]*):[0-9]{1,5})$"},
    ),
    "leader_elect": ("must be true with more than one replica (templates/validate.yaml)", {}),
    "leader_election_id": (
        "the Lease name, also in the leader-election Role",
        {"maxLength": 253, "pattern": DNS1123_SUBDOMAIN},
    ),
    "cert_secret_name": (
        "the certificate Secret's name in every certificates.mode",
        {"maxLength": 253, "pattern": DNS1123_SUBDOMAIN},
    ),
    "webhook_service_name": (
        "the webhook Service's name (a DNS-1035 label, as Service names are)",
        {"maxLength": 63, "pattern": DNS1035_LABEL},
    ),
    "webhook_configuration_name": (
        "the name of both webhook configurations",
        {"maxLength": 253, "pattern": DNS1123_SUBDOMAIN},
    ),
}
"""Settings the chart uses as object names or ports: never null (with the chart's extra
constraints, Kubernetes name rules)."""

_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_RANGE = rf"{_PORT}(-{_PORT})?(/([Tt][Cc][Pp]|[Uu][Dd][Pp]|[Ss][Cc][Tt][Pp]))?"
_NS = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_LIST = r"^[ ,]*({item}([ ]*{sep}[ ]*{item})*)?[ {sep}]*$"
FORMATS: dict[str, dict[str, Any]] = {
    # app.core.ports.parse_port_ranges: PORT or FIRST-LAST, /TCP|UDP|SCTP, comma-separated
    # (a range that ends before it starts passes here and fails serve).
    "reserved_node_ports": {"pattern": _LIST.format(item=_RANGE, sep=",")},
    # app.core.ports.parse_namespaces: DNS-1123 labels, comma-separated.
    "allowed_namespaces": {"pattern": _LIST.format(item=_NS, sep=",")},
    # app.core.ports.parse_port_exceptions: NAMESPACE/NAME:PORTS;... with + between ports.
    "reserved_port_exceptions": {
        "pattern": _LIST.format(
            item=rf"{_NS}/[a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?:{_RANGE}(\+{_RANGE})*", sep=";"
        )
    },
    # app.config.Settings: a namespace name, or empty (no probe).
    "admission_probe_namespace": {"maxLength": 63, "pattern": rf"^({_NS})?$"},
}
"""Settings whose text has a format of its own that serve checks at start: the schema
checks the same syntax, so `helm install` fails instead of Pods that crash-loop."""

CONSTRAINTS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength")


def flag(field: str) -> str:
    """``default_lb_service_ipam`` -> ``default-lb-service-ipam`` (serve's flag name)."""
    return field.replace("_", "-")


def _setting(field: str, prop: dict[str, Any]) -> dict[str, Any]:
    """One setting's schema from its pydantic property schema."""
    variants = prop.get("anyOf", [prop])
    (value,) = [v for v in variants if v.get("type") != "null"]
    out: dict[str, Any] = {"type": value["type"]}
    if "enum" in value:
        out["enum"] = list(value["enum"])
    for key in CONSTRAINTS:
        if key in value:
            out[key] = value[key]
    default = Settings.model_fields[field].default
    description = f"serve --{flag(field)} (NODE_IPAM_{field.upper()})"
    if field in CHART_NULL:
        return {"type": "null", "description": f"{description}: {CHART_NULL[field]}"}
    if field in CHART_REQUIRED:
        why, extra = CHART_REQUIRED[field]
        return {**out, **extra, "description": f"{description}; chart: {why}"}
    out.update(FORMATS.get(field, {}))
    out["type"] = [out["type"], "null"]
    if "enum" in out:
        out["enum"].append(None)
    out["description"] = f"{description}; null: serve's default ({json.dumps(default)})"
    return out


def settings_schema() -> dict[str, Any]:
    """The ``settings`` object: one property per ``serve`` flag, nothing else allowed."""
    props = Settings.model_json_schema()["properties"]
    fields = list(Settings.model_fields)
    return {
        "type": "object",
        "description": "Every `node-ipam-lb serve` setting under its flag name",
        "additionalProperties": False,
        "required": [flag(f) for f in fields if f in CHART_REQUIRED],
        "properties": {flag(f): _setting(f, props[f]) for f in fields},
    }


def _obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


def schema() -> dict[str, Any]:
    """The whole values schema (JSON Schema draft 7, which helm v3 evaluates)."""
    string, boolean, free = {"type": "string"}, {"type": "boolean"}, {"type": "object"}
    return _obj(
        {
            "global": free,  # helm passes it to every chart, even without subcharts
            "image": _obj(
                {
                    "repository": {"type": "string", "minLength": 1},
                    "tag": string,
                    "digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
                    "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                },
                required=["repository"],
            ),
            "imagePullSecrets": {"type": "array", "items": free},
            "replicas": {"type": "integer", "minimum": 1},
            "settings": settings_schema(),
            "certificates": _obj(
                {
                    "mode": {"enum": ["self-managed", "cert-manager", "existing-secret"]},
                    "precreateSecret": boolean,
                    "caBundle": string,
                },
                required=["mode"],
                allOf=[
                    {
                        "if": {"properties": {"mode": {"const": "existing-secret"}}},
                        "then": {
                            "properties": {"caBundle": {"pattern": "-----BEGIN CERTIFICATE-----"}},
                            "required": ["caBundle"],
                        },
                    },
                    {
                        "if": {
                            "properties": {"precreateSecret": {"const": True}},
                            "required": ["precreateSecret"],
                        },
                        "then": {"properties": {"mode": {"const": "self-managed"}}},
                    },
                ],
            ),
            "podDisruptionBudget": _obj(
                {"enabled": boolean, "minAvailable": {"type": "integer", "minimum": 0}}
            ),
            "resources": free,
            "nodeSelector": {"type": "object", "additionalProperties": string},
            "tolerations": {"type": "array", "items": free},
            "affinity": free,
            "priorityClassName": string,
            "podAnnotations": {"type": "object", "additionalProperties": string},
            "podLabels": {"type": "object", "additionalProperties": string},
            "readerRoles": _obj({"enabled": boolean}),
            "networkPolicy": _obj({"enabled": boolean, "from": {"type": "array", "items": free}}),
            "serviceMonitor": _obj(
                {
                    "enabled": boolean,
                    "interval": {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"},
                    "scrapeTimeout": {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"},
                    "labels": {"type": "object", "additionalProperties": string},
                    "tlsConfig": free,
                }
            ),
            "prometheusRule": _obj(
                {"enabled": boolean, "labels": {"type": "object", "additionalProperties": string}}
            ),
            "grafanaDashboard": _obj(
                {
                    "enabled": boolean,
                    "labels": {"type": "object", "additionalProperties": string},
                    "annotations": {"type": "object", "additionalProperties": string},
                }
            ),
        },
        **{"$schema": "http://json-schema.org/draft-07/schema#"},
        title="node-ipam-lb chart values (generated by tests/deploy/chart_schema.py)",
    )


def text() -> str:
    """The file's exact content."""
    return json.dumps(schema(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write the schema file, or with ``--check`` report whether it is current."""
    if "--check" in argv:
        current = SCHEMA_PATH.read_text() == text()
        print(f"{SCHEMA_PATH}: {'up to date' if current else 'stale; regenerate it'}")
        return 0 if current else 1
    SCHEMA_PATH.write_text(text())
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
