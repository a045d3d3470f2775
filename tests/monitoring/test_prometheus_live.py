"""A real Prometheus (built from its module) scrapes a host ``serve`` on the real
kube-apiserver with a metrics-reader token, as deploy/README.md ("Metrics") documents,
evaluates the alerting rules, and a pending Service fires NodeIPAMLBServicesPending.

The rules are files/prometheus-rules.yaml with one change: that alert's ``for:`` is
:data:`FOR` instead of 15 minutes (everything else, annotations included, as shipped).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.controlplane.build import PrometheusBinaries
from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import CLASS, apply_deploy, start_serve, stop, tls, wait_ready
from tests.monitoring import generate
from tests.monitoring.promql import exposed_names, grafana_to_promql, metric_names
from tests.monitoring.render import render
from tests.support.ports import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

ALERT = "NodeIPAMLBServicesPending"
FOR = 8
"""Seconds of the pending alert's ``for:`` here (15 minutes as shipped)."""
ANNOTATION = "io.cilium.nodeipam/match-node-labels"


def live_rules(for_seconds: int) -> dict[str, Any]:
    """The shipped rules with :data:`ALERT`'s ``for:`` set to ``for_seconds``."""
    rules = generate.rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == ALERT:
                rule["for"] = f"{for_seconds}s"
    return rules


def bind_reader(plane: ControlPlane, namespace: str, name: str) -> str:
    """ServiceAccount ``namespace/name`` bound to the metrics-reader and preview ClusterRoles
    as deploy/README.md shows; returns a TokenRequest token once RBAC allows it."""
    plane.kubectl("create", "serviceaccount", name, "-n", namespace)
    for role in ("node-ipam-lb-metrics-reader", "node-ipam-lb-preview"):
        plane.kubectl(
            "create",
            "clusterrolebinding",
            f"{namespace}-{role}",
            f"--clusterrole={role}",
            f"--serviceaccount={namespace}:{name}",
        )
    user = f"system:serviceaccount:{namespace}:{name}"

    def allowed() -> bool:
        got = plane.kubectl("auth", "can-i", "get", "/metrics", "--as", user, check=False)
        return got.stdout.strip() == "yes"

    wait_for(f"RBAC lets {user} get /metrics", allowed)
    return plane.token_for(namespace, name)


def prometheus_config(target: str, token_file: Path, ca: Path, rules: Path) -> dict[str, Any]:
    """Scrape ``target`` (host:port) every second over HTTPS with the bearer token in
    ``token_file``, verifying serve's certificate with ``ca``; evaluate ``rules`` every
    second."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "node-ipam-lb",
                "scheme": "https",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                "tls_config": {"ca_file": str(ca)},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }


def api(url: str, path: str, **params: str) -> Any:
    """``GET`` a Prometheus HTTP API path; the ``data`` of a ``success`` answer."""
    answer = httpx.get(f"{url}{path}", params=params, timeout=5).json()
    assert answer["status"] == "success", answer
    return answer["data"]


def test_a_pending_service_fires_its_alert_in_a_real_prometheus(
    control_plane: ControlPlane, prometheus: PrometheusBinaries, tmp_path: Path
) -> None:
    apply_deploy(control_plane)
    namespace = f"monitoring-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        token = bind_reader(control_plane, namespace, "prometheus")
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "web",
                "namespace": namespace,
                # No Node has this label: the Service stays <pending>.
                "annotations": {ANNOTATION: "node-ipam-lb.test/monitoring=never"},
            },
            "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "ports": [{"port": 80}]},
        }
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(service))
        serve, url, ca, log = start_serve(
            control_plane, tmp_path, "serve", "--auth", "kubernetes", "--no-leader-elect"
        )
        processes.append(serve)
        wait_ready(serve, url, ca, log)
        headers = {"Authorization": f"Bearer {token}"}
        item = httpx.get(
            f"{url}/preview/{namespace}/web", headers=headers, verify=tls(ca), timeout=10
        ).json()
        assert item["ingress"] == [], item
        code = item["code"]  # what preview says emptied the list: the alert's reason label

        token_file = tmp_path / "token"
        token_file.write_text(token)
        rules = tmp_path / "rules.yaml"
        rules.write_text(yaml.safe_dump(live_rules(FOR), sort_keys=False))
        config = tmp_path / "prometheus.yml"
        target = url.removeprefix("https://")
        config.write_text(yaml.safe_dump(prometheus_config(target, token_file, ca, rules)))
        port = free_port()
        prom_url = f"http://127.0.0.1:{port}"
        prom_log = tmp_path / "prometheus.log"
        with prom_log.open("wb") as out:
            processes.append(
                subprocess.Popen(
                    [
                        str(prometheus.prometheus),
                        f"--config.file={config}",
                        f"--storage.tsdb.path={tmp_path / 'data'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )

        def ready() -> bool:
            assert processes[-1].poll() is None, prom_log.read_text()[-3000:]
            try:
                return httpx.get(f"{prom_url}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("prometheus ready", ready)

        def scraped() -> Any:
            targets = api(prom_url, "/api/v1/targets")["activeTargets"]  # [] until discovered
            return next((t for t in targets if t["health"] == "up"), None)

        active = wait_for("the target scraped with the bearer token", scraped)
        assert active["lastError"] == ""

        def ours(state: str) -> dict[str, Any] | None:
            for alert in api(prom_url, "/api/v1/alerts")["alerts"]:
                labels = alert["labels"]
                if labels["alertname"] == ALERT and labels.get("reason") == code:
                    return alert if alert["state"] == state else None
            return None

        wait_for(f"{ALERT} pending", lambda: ours("pending"), timeout=30)
        pending_seen = time.monotonic()
        firing = wait_for(f"{ALERT} firing", lambda: ours("firing"), timeout=FOR + 20)
        took = time.monotonic() - pending_seen
        print(f"\n{ALERT} firing {took:.1f} s after it was seen pending (for: {FOR}s):")
        print(json.dumps(firing, indent=2))
        assert took <= FOR + 5
        assert firing["labels"]["severity"] == "warning"
        assert firing["labels"]["state"] == "pending"
        assert float(firing["value"]) >= 1
        description = firing["annotations"]["description"]
        assert "kubectl node-ipam preview -A -o wide" in description
        assert f"emptied the list is {code}" in description
        assert firing["annotations"]["summary"].endswith(f"pending ({code}) for 15 minutes")

        # Nothing else fires (no reconcile or write errors), and there is a leader.
        alerts = api(prom_url, "/api/v1/alerts")["alerts"]
        names = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
        assert names == {ALERT}, names
        leader = api(prom_url, "/api/v1/query", query="max(leader_election_master_status)")
        assert leader["result"][0]["value"][1] == "1", leader

        # Every metric the dashboard and the alerts read is one this serve's /metrics lists
        # (a family without samples yet, e.g. no admission request so far, counts: it has
        # its TYPE line), and each panel's query evaluates on the real Prometheus.
        text = httpx.get(f"{url}/metrics", headers=headers, verify=tls(ca), timeout=10).text
        exposed = exposed_names(text)
        queries = [(t, grafana_to_promql(e)) for t, e in generate.queries(generate.dashboard())]
        queries += [(r["alert"], r["expr"]) for g in generate.rules()["groups"] for r in g["rules"]]
        for title, query in queries:
            assert metric_names(query) <= exposed, (title, metric_names(query) - exposed)
            api(prom_url, "/api/v1/query", query=query)  # evaluates without an error
        png = os.environ.get("NODE_IPAM_DASHBOARD_PNG")
        if png:  # a look at the dashboard on this data (tests/monitoring/render.py)
            render(generate.dashboard(), prom_url, Path(png))
        scraped_names = set(api(prom_url, "/api/v1/label/__name__/values"))
        assert {"node_ipam_lb_services", "controller_runtime_reconcile_errors_total"} <= (
            scraped_names
        )
    finally:
        for process in reversed(processes):
            stop(process)
        for role in ("node-ipam-lb-metrics-reader", "node-ipam-lb-preview"):
            control_plane.kubectl(
                "delete", "clusterrolebinding", f"{namespace}-{role}", "--ignore-not-found"
            )
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
