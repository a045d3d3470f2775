"""Generate the monitoring files that are derived from code or from one source of truth.

    .venv/bin/python -m tests.monitoring.generate          # rewrite them
    .venv/bin/python -m tests.monitoring.generate --check  # exit 1 when one is stale

- ``deploy/helm/node-ipam-lb/files/dashboard.json``: the Grafana dashboard, built with
  ``grafana-foundation-sdk`` from :data:`PANELS` (the chart ships it in a ConfigMap for
  the Grafana sidecar, ``grafanaDashboard.enabled``).
- ``deploy/components/prometheus-rule/prometheusrule.yaml``: the kustomize component's
  PrometheusRule, whose ``spec`` is ``deploy/helm/node-ipam-lb/files/prometheus-rules.yaml``
  (the one source of the alerts; the chart embeds that file itself with ``.Files.Get``).

tests/monitoring/test_generated.py fails when a committed file differs from what this
module generates.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

ROOT = Path(__file__).resolve().parents[2]
CHART_FILES = ROOT / "deploy" / "helm" / "node-ipam-lb" / "files"
RULES_PATH = CHART_FILES / "prometheus-rules.yaml"
DASHBOARD_PATH = CHART_FILES / "dashboard.json"
COMPONENT_RULE_PATH = ROOT / "deploy" / "components" / "prometheus-rule" / "prometheusrule.yaml"

DASHBOARD_UID = "node-ipam-lb"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
"""Every query's data source: the dashboard's ``datasource`` variable (any Prometheus)."""
JOB = 'job=~"$job"'
"""The matcher that picks the scraped node-ipam-lb Pods (the ``job`` variable: the
ServiceMonitor's job is the webhook Service's name)."""


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel and its legend (Grafana's ``{{label}}`` syntax)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    """One panel: ``kind`` ``timeseries`` or ``stat``, a Grafana ``unit``, its queries."""

    title: str
    description: str
    kind: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 12


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "Managed Services by state",
        "node_ipam_lb_services: assigned, pending by the step that emptied the list (the code"
        " `kubectl node-ipam preview -o json` shows), invalid selector, not yet reconciled."
        " Only the leader exports samples.",
        "timeseries",
        "short",
        (
            Query(
                f'sum by (state) (node_ipam_lb_services{{{JOB}, state!="pending"}})', "{{state}}"
            ),
            Query(
                f'sum by (reason) (node_ipam_lb_services{{{JOB}, state="pending"}})',
                "pending: {{reason}}",
            ),
        ),
    ),
    PanelSpec(
        "Nodes per Service by verdict (summed)",
        "node_ipam_lb_service_nodes: Nodes advertised (Selected) and hidden by the global"
        " ExternalIP preference (ExternalIPPreferred), summed over the managed Services.",
        "timeseries",
        "short",
        (Query(f"sum by (verdict) (node_ipam_lb_service_nodes{{{JOB}}})", "{{verdict}}"),),
    ),
    PanelSpec(
        "Reconciles per second by result",
        "controller_runtime_reconcile_total of the service-nodeipam controller: success,"
        " requeue_after (a NotReady grace period) and error (retried with backoff).",
        "timeseries",
        "ops",
        (
            Query(
                "sum by (result) (rate(controller_runtime_reconcile_total"
                f'{{{JOB}, controller="service-nodeipam"}}[$__rate_interval]))',
                "{{result}}",
            ),
            Query(
                "sum(rate(controller_runtime_reconcile_errors_total"
                f'{{{JOB}, controller="service-nodeipam"}}[$__rate_interval]))',
                "errors",
            ),
        ),
    ),
    PanelSpec(
        "Reconcile latency",
        "controller_runtime_reconcile_time_seconds: p50 and p99 of one reconcile (select"
        " plus the status write when one is needed).",
        "timeseries",
        "s",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) (rate("
                "controller_runtime_reconcile_time_seconds_bucket"
                f'{{{JOB}, controller="service-nodeipam"}}[$__rate_interval])))',
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ),
    ),
    PanelSpec(
        "Work queue",
        "workqueue_depth (keys waiting), and adds and retries (rate-limited re-adds) per"
        " second of the Service queue.",
        "timeseries",
        "short",
        (
            Query(f'max(workqueue_depth{{{JOB}, name="service"}})', "depth"),
            Query(
                f'sum(rate(workqueue_adds_total{{{JOB}, name="service"}}[$__rate_interval]))',
                "adds/s",
            ),
            Query(
                f'sum(rate(workqueue_retries_total{{{JOB}, name="service"}}[$__rate_interval]))',
                "retries/s",
            ),
        ),
    ),
    PanelSpec(
        "Status writes per second by result",
        "node_ipam_lb_status_writes_total: PATCH services/status, by result (success,"
        " conflict, error, not_found).",
        "timeseries",
        "ops",
        (
            Query(
                "sum by (result) (rate(node_ipam_lb_status_writes_total"
                f"{{{JOB}}}[$__rate_interval]))",
                "{{result}}",
            ),
        ),
    ),
    PanelSpec(
        "Events per second",
        "node_ipam_lb_events_total by reason and result, and Events dropped by cause"
        " (queue_full, spam, shutdown).",
        "timeseries",
        "ops",
        (
            Query(
                "sum by (reason, result) (rate(node_ipam_lb_events_total"
                f"{{{JOB}}}[$__rate_interval]))",
                "{{reason}} {{result}}",
            ),
            Query(
                "sum by (cause) (rate(node_ipam_lb_events_dropped_total"
                f"{{{JOB}}}[$__rate_interval]))",
                "dropped: {{cause}}",
            ),
        ),
    ),
    PanelSpec(
        "Admission requests per second by verdict",
        "controller_runtime_webhook_requests_total by webhook path and verdict (allowed,"
        " patched, denied, invalid, overloaded).",
        "timeseries",
        "reqps",
        (
            Query(
                "sum by (webhook, verdict) (rate(controller_runtime_webhook_requests_total"
                f"{{{JOB}}}[$__rate_interval]))",
                "{{webhook}} {{verdict}}",
            ),
        ),
    ),
    PanelSpec(
        "Admission latency p99 by verdict",
        "controller_runtime_webhook_latency_seconds p99 by webhook and verdict; the webhooks'"
        " timeoutSeconds is 3 s and the NodeIPAMLBWebhookSlow alert fires above 2.4 s.",
        "timeseries",
        "s",
        (
            Query(
                "histogram_quantile(0.99, sum by (le, webhook, verdict) (rate("
                f"controller_runtime_webhook_latency_seconds_bucket{{{JOB}}}[$__rate_interval])))",
                "{{webhook}} {{verdict}}",
            ),
        ),
        width=24,
    ),
    PanelSpec(
        "Leader",
        "leader_election_master_status per Pod: 1 on the replica holding the Lease; the sum"
        " must be 1 (NodeIPAMLBNoLeader fires when it is 0 for a minute).",
        "stat",
        "short",
        (
            Query(
                f"max by (instance) (leader_election_master_status{{{JOB}}}"
                f" and on (instance, job) node_ipam_lb_build_info{{{JOB}}})",
                "{{instance}}",
            ),
        ),
        width=8,
    ),
    PanelSpec(
        "Serving certificate expires in",
        "node_ipam_lb_serving_certificate_expiry_timestamp_seconds minus now, per Pod:"
        " self-managed certificates renew 90 days ahead; NodeIPAMLBCertificateExpiring fires"
        " under 30 days.",
        "stat",
        "s",
        (
            Query(
                "min by (instance) (node_ipam_lb_serving_certificate_expiry_timestamp_seconds"
                f"{{{JOB}}} - time())",
                "{{instance}}",
            ),
        ),
        width=8,
    ),
    PanelSpec(
        "Version",
        "node_ipam_lb_build_info: the version and Python each Pod runs.",
        "stat",
        "short",
        (
            Query(
                f"count by (version, python) (node_ipam_lb_build_info{{{JOB}}})",
                "{{version}} (Python {{python}})",
            ),
        ),
        width=8,
    ),
)
"""The dashboard's panels, in order: rows of 24 columns, two graphs or three stats each."""


def _panel(spec: PanelSpec, ref: int) -> Any:
    builder = timeseries.Panel() if spec.kind == "timeseries" else stat.Panel()
    builder = builder.title(spec.title).description(spec.description).unit(spec.unit)
    builder = builder.datasource(DATASOURCE).span(spec.width).height(8)
    for index, query in enumerate(spec.queries):
        target = (
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
        builder = builder.with_target(target)
    return builder


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (a dict): a ``datasource`` and a ``job``
    variable, then :data:`PANELS`."""
    builder = (
        gd.Dashboard("node-ipam-lb")
        .uid(DASHBOARD_UID)
        .description(
            "node-ipam-lb (io.cilium/node LoadBalancer controller): Services by state,"
            " reconciler, admission webhook, leader and certificate (deploy/README.md,"
            " Monitoring). Generated by tests/monitoring/generate.py."
        )
        .tags(["node-ipam-lb", "kubernetes"])
        .time("now-6h", "now")
        .refresh("30s")
        .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            gd.QueryVariable("job")
            .label("Job")
            .datasource(DATASOURCE)
            .query("label_values(node_ipam_lb_build_info, job)")
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
    )
    for ref, spec in enumerate(PANELS):
        builder = builder.with_panel(_panel(spec, ref))
    encoded: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return encoded


def dashboard_text() -> str:
    """The exact content of :data:`DASHBOARD_PATH`."""
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """``[(panel title, PromQL expr)]`` of every target of every panel of ``board`` (the
    variable queries are not PromQL: ``label_values(...)``)."""
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def rules() -> dict[str, Any]:
    """The parsed rule file (``{"groups": [...]}``)."""
    loaded: dict[str, Any] = yaml.safe_load(RULES_PATH.read_text())
    return loaded


def component_rule() -> dict[str, Any]:
    """The kustomize component's PrometheusRule: metadata as deploy/base's objects (name,
    namespace, labels), ``spec`` the rule file's groups."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "node-ipam-lb",
            "namespace": "node-ipam-lb",
            "labels": {
                "app.kubernetes.io/name": "node-ipam-lb",
                "app.kubernetes.io/part-of": "node-ipam-lb",
            },
        },
        "spec": {"groups": rules()["groups"]},
    }


def component_rule_text() -> str:
    """The exact content of :data:`COMPONENT_RULE_PATH`."""
    header = (
        "# GENERATED from deploy/helm/node-ipam-lb/files/prometheus-rules.yaml by\n"
        "# `.venv/bin/python -m tests.monitoring.generate`: edit that file, then regenerate\n"
        "# (tests/monitoring/test_generated.py fails when this one is stale).\n"
    )
    body = yaml.safe_dump(component_rule(), sort_keys=False, width=100, allow_unicode=True)
    return header + body


OUTPUTS = {DASHBOARD_PATH: dashboard_text, COMPONENT_RULE_PATH: component_rule_text}


def main(argv: list[str]) -> int:
    """Write every generated file, or with ``--check`` report which are stale (exit 1)."""
    stale = 0
    for path, text in OUTPUTS.items():
        content = text()
        if "--check" in argv:
            current = path.is_file() and path.read_text() == content
            stale += not current
            print(f"{path.relative_to(ROOT)}: {'up to date' if current else 'stale'}")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {path.relative_to(ROOT)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
