"""``/metrics`` (issue 13, finding 6): no ``*_created`` twin families, and ``process_*``."""

from __future__ import annotations

from tests.web.conftest import AppClient


def test_no_created_families_and_process_metrics(client: AppClient) -> None:
    client.post("/validate", json={})  # make sure some counters have samples
    text = client.get("/metrics").text
    assert "controller_runtime_webhook_requests_total" in text
    assert "_created" not in text
    for family in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ):
        assert f"\n{family} " in text, family


def test_the_state_families_are_served_without_service_labels(client: AppClient) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    for name, labels in (
        ("node_ipam_lb_services", {"state", "reason"}),
        ("node_ipam_lb_service_nodes", {"verdict"}),
    ):
        assert families[name].type == "gauge", name
        for sample in families[name].samples:  # none on an app without a leading controller
            assert set(sample.labels) == labels, sample


def test_every_dashboard_and_alert_query_reads_only_metrics_serve_exposes(
    client: AppClient,
) -> None:
    """The dashboard (deploy/helm/node-ipam-lb/files/dashboard.json) and the alerts
    (files/prometheus-rules.yaml) against this app's /metrics: a query of a metric that
    was renamed or never existed shows an empty panel or an alert that can never fire."""
    from tests.monitoring import generate
    from tests.monitoring.promql import exposed_names, grafana_to_promql, metric_names

    exposed = exposed_names(client.get("/metrics").text)
    board = generate.dashboard()
    queries = [(f"panel {title!r}", grafana_to_promql(e)) for title, e in generate.queries(board)]
    queries += [
        (f"alert {rule['alert']}", rule["expr"])
        for group in generate.rules()["groups"]
        for rule in group["rules"]
    ]
    assert len(queries) >= 25
    missing = {
        where: sorted(metric_names(expr) - exposed)
        for where, expr in queries
        if metric_names(expr) - exposed
    }
    assert not missing, f"queries of metrics /metrics does not list: {missing}"
