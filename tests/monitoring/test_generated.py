"""The generated monitoring files are current, and the alerts have one source."""

from __future__ import annotations

import json

import yaml

from tests.monitoring import generate

REQUIRED_ALERTS = {
    "NodeIPAMLBServicesPending",
    "NodeIPAMLBInvalidNodeSelector",
    "NodeIPAMLBServicesNotReconciled",
    "NodeIPAMLBReconcileErrors",
    "NodeIPAMLBStatusWriteFailures",
    "NodeIPAMLBNoLeader",
    "NodeIPAMLBWebhookErrors",
    "NodeIPAMLBWebhookSlow",
    "NodeIPAMLBCertificateExpiring",
    "NodeIPAMLBEventsDropped",
    "NodeIPAMLBNodeHealthChecksHeld",
}


def test_every_generated_file_is_current() -> None:
    for path, text in generate.OUTPUTS.items():
        assert path.read_text() == text(), (
            f"{path.relative_to(generate.ROOT)} is stale: run"
            " .venv/bin/python -m tests.monitoring.generate"
        )


def test_the_component_holds_exactly_the_rule_file() -> None:
    (component,) = list(yaml.safe_load_all(generate.COMPONENT_RULE_PATH.read_text()))
    assert component["spec"] == yaml.safe_load(generate.RULES_PATH.read_text())


def test_every_alert_says_what_to_run_and_how_bad_it_is() -> None:
    rules = [rule for group in generate.rules()["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert "`kubectl " in rule["annotations"]["description"], rule["alert"]
    pending = next(r for r in rules if r["alert"] == "NodeIPAMLBServicesPending")
    assert "kubectl node-ipam preview -A -o wide" in pending["annotations"]["description"]


def test_the_dashboard_has_a_panel_for_each_thing_an_operator_watches() -> None:
    board = json.loads(generate.DASHBOARD_PATH.read_text())
    exprs = " ".join(expr for _, expr in generate.queries(board))
    for family in (
        "node_ipam_lb_services",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "node_ipam_lb_status_writes_total",
        "node_ipam_lb_events_total",
        "node_ipam_lb_events_dropped_total",
        "controller_runtime_webhook_requests_total",
        "controller_runtime_webhook_latency_seconds_bucket",
        "leader_election_master_status",
        "node_ipam_lb_serving_certificate_expiry_timestamp_seconds",
    ):
        assert family in exprs, family
    uids = {panel["datasource"]["uid"] for panel in board["panels"]}
    assert uids == {"${datasource}"}  # every panel follows the data source variable
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "job"]


def test_the_panels_tile_the_grid_without_overlap() -> None:
    board = generate.dashboard()
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, (panel["title"], pos)
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, (panel["title"], pos)
        taken |= cells
