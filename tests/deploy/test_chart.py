"""The Helm chart (deploy/helm/node-ipam-lb), rendered by the Go-built helm.

One source of truth: the chart's default render IS deploy/base, and each kustomize overlay
IS the chart with one value changed, object for object (RBAC rules, webhook rules and
matchConditions, probes, security contexts, env), apart from Helm's own labels. Its
values.schema.json is generated from app.config.Settings and rejects what ``serve``
rejects; templates/validate.yaml holds the cross-field checks.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version
from pydantic import TypeAdapter, ValidationError

from app import __version__
from app.config import Settings
from tests.deploy import chart_schema
from tests.deploy.chart_matrix import CA_PEM, MATRIX
from tests.deploy.helmchart import CHART, run, template, without_helm_labels
from tests.deploy.render import container, env, find, render

SCHEMA_VERSIONS = ("1.30.0", latest_version())


EQUIVALENTS: dict[str, dict[str, Any]] = {
    "deploy": {},
    "deploy/overlays/cert-manager": {"certificates": {"mode": "cert-manager"}},
    "deploy/overlays/default-nodeipam": {"settings": {"default-lb-service-ipam": "nodeipam"}},
    "deploy/overlays/precreated-secret": {"certificates": {"precreateSecret": True}},
    "deploy/overlays/network-policy": {"networkPolicy": {"enabled": True}},
    "deploy/overlays/prometheus-rule": {"prometheusRule": {"enabled": True}},
}
"""Each kustomization an operator may apply, and the chart values that install the same."""


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


@pytest.mark.parametrize("kustomization", sorted(EQUIVALENTS))
def test_the_chart_renders_what_kustomize_renders(helm: Path, kustomization: str) -> None:
    # helm install creates crds/ (helm template prints them only when asked).
    rendered = template(helm, EQUIVALENTS[kustomization], include_crds=True)
    chart = keyed([without_helm_labels(o) for o in rendered])
    kustomized = keyed(render(kustomization))
    # The chart installs into a namespace that exists (helm --create-namespace, or yours
    # with the Pod Security labels: deploy/README.md); kustomize creates it.
    namespace = kustomized.pop(("Namespace", "node-ipam-lb"))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert sorted(chart) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert chart[key] == obj, f"{key} differs between the chart and {kustomization}"


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_every_matrix_render_validates_against_the_kubernetes_schema(helm: Path, name: str) -> None:
    objects = template(helm, MATRIX[name])
    checked = 0
    for obj in objects:
        if obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            continue  # CRDs: no schema in kubernetes-validate (checked below, structurally)
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 12


def test_lint_strict_passes_for_every_matrix_entry(helm: Path) -> None:
    for name, values in MATRIX.items():
        result = run(helm, "lint", "--strict", str(CHART), values=values)
        assert result.returncode == 0, f"{name}:\n{result.stdout}\n{result.stderr}"


def test_values_match_the_render(helm: Path) -> None:
    custom = template(helm, MATRIX["custom-image"])
    assert container(custom)["image"] == "registry.example.org/node-ipam-lb:1.2.3"
    pod = find(custom, "Deployment", "node-ipam-lb")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert container(template(helm, MATRIX["image-digest"]))["image"] == (
        "node-ipam-lb@sha256:" + "ab" * 32
    )
    assert container(template(helm))["image"] == f"node-ipam-lb:{__version__}"
    three = template(helm, MATRIX["replicas-3"])
    assert find(three, "Deployment", "node-ipam-lb")["spec"]["replicas"] == 3
    assert find(three, "PodDisruptionBudget", "node-ipam-lb")["spec"]["minAvailable"] == 2
    one = template(helm, MATRIX["replicas-1"])
    assert not [o for o in one if o["kind"] == "PodDisruptionBudget"]
    scheduled = template(helm, MATRIX["scheduling"])
    pod = find(scheduled, "Deployment", "node-ipam-lb")["spec"]["template"]
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        assert pod["spec"][key] == MATRIX["scheduling"][key]
    assert pod["metadata"]["annotations"] == MATRIX["scheduling"]["podAnnotations"]
    assert container(scheduled)["resources"] == MATRIX["scheduling"]["resources"]


def test_service_monitor_scrapes_metrics_over_https_on_our_service(helm: Path) -> None:
    objects = template(helm, MATRIX["service-monitor"])
    monitor = find(objects, "ServiceMonitor", "node-ipam-lb")
    service = find(objects, "Service", "node-ipam-lb-webhook")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == (
        "https",
        "https",
        "/metrics",
    )
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["tlsConfig"]["serverName"] == "node-ipam-lb-webhook.node-ipam-lb.svc"
    reader = find(objects, "ClusterRole", "node-ipam-lb-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_monitoring_ships_the_rule_file_and_the_dashboard_as_they_are(helm: Path) -> None:
    import json

    objects = template(helm, MATRIX["monitoring"])
    rule = find(objects, "PrometheusRule", "node-ipam-lb")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == rules  # Prometheus templates ({{ $labels.reason }}) intact
    board = find(objects, "ConfigMap", "node-ipam-lb-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"] == {"grafana_folder": "Network"}
    shipped = json.loads(board["data"]["node-ipam-lb.json"])
    assert shipped == json.loads((CHART / "files" / "dashboard.json").read_text())
    kinds = {o["kind"] for o in template(helm, {})}
    assert not kinds & {"PrometheusRule", "ConfigMap"}  # both off by default


def test_existing_secret_mode_mounts_the_secret_and_sets_the_ca_bundle(helm: Path) -> None:
    objects = template(helm, MATRIX["existing-secret"])
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Role", "node-ipam-lb-certificates") not in kinds  # the process touches no Secret
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    assert "NODE_IPAM_CERT_SECRET_NAME" not in env(objects)
    pod = find(objects, "Deployment", "node-ipam-lb")["spec"]["template"]["spec"]
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "node-ipam-lb-webhook-tls"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = find(objects, kind, "node-ipam-lb")["webhooks"]
        assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == CA_PEM


def test_webhook_configurations_are_rendered_only_when_serve_answers_admission(
    helm: Path,
) -> None:
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    default = {o["kind"] for o in template(helm, MATRIX["default"])}
    assert set(kinds) <= default
    objects = template(helm, MATRIX["no-webhook"])
    assert not [o for o in objects if o["kind"] in kinds]
    assert env(objects)["NODE_IPAM_WEBHOOK"] == "false"


def test_another_namespace_is_used_everywhere_a_namespace_appears(helm: Path) -> None:
    objects = template(helm, {"certificates": {"mode": "cert-manager"}}, namespace="lb-system")
    text = yaml.safe_dump_all(objects)
    assert "node-ipam-lb.svc" not in text and "namespace: node-ipam-lb\n" not in text
    hook = find(objects, "ValidatingWebhookConfiguration", "node-ipam-lb")["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "lb-system"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["lb-system"]
    cert = find(objects, "Certificate", "node-ipam-lb-webhook")
    assert cert["spec"]["dnsNames"][0] == "node-ipam-lb-webhook.lb-system.svc"


def test_values_name_every_serve_flag_and_nothing_else() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    result = subprocess.run(
        [str(Path(sys.executable).parent / "node-ipam-lb"), "serve", "--help"],
        cwd=CHART.parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "TERM": "dumb", "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stderr
    flags = set(re.findall(r"--(?:no-)?([a-z][a-z0-9-]+)", result.stdout)) - {"help"}
    assert set(values["settings"]) == flags
    fields = {chart_schema.flag(f) for f in Settings.model_fields}
    assert set(values["settings"]) == fields


def test_values_schema_is_generated_from_the_settings_model() -> None:
    assert (CHART / "values.schema.json").read_text() == chart_schema.text(), (
        "stale: run .venv/bin/python -m tests.deploy.chart_schema"
    )


def _samples(prop: dict[str, Any], *, formatted: bool = False) -> list[Any]:
    """Values of the setting's JSON type around each of its limits, and enum members."""
    kinds = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    samples: list[Any] = [None, "text", True]
    if "integer" in kinds or "number" in kinds:
        samples += [-1, 0, 1, 2.5, 10**9]
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in prop:
                samples += [prop[key] - 1, prop[key], prop[key] + 1]
    if "enum" in prop:
        samples += [*prop["enum"], "NodeIPAM", "bogus"]
    if "string" in kinds:
        samples += ["", "x"]
    if formatted:  # the formats' edges (tests/deploy/chart_schema.FORMATS)
        samples += ["22", "22,80-90/udp", "65535", "65536", "99999", "0", "22,", " 22 , 53/TCP"]
        samples += ["a-b", "Bad_Name", "a,b", "a/b:22", "ns/web:22+53/UDP;ns/x:1", "ns/web"]
        samples += ["a" * 63, "a" * 64]
    return samples


def _serve_accepts(field: str, value: Any) -> bool:
    if field in chart_schema.FORMATS:  # serve checks the text's format at start-up
        try:
            Settings(**{field: value}).selection()
        except ValueError:  # pydantic's ValidationError is one
            return False
        return True
    info = Settings.model_fields[field]
    annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    "field",
    [f for f in Settings.model_fields if f not in chart_schema.CHART_NULL],
)
def test_schema_accepts_a_setting_exactly_when_serve_does(field: str) -> None:
    schema = chart_schema.settings_schema()
    name = chart_schema.flag(field)
    prop = schema["properties"][name]
    for value in _samples(prop, formatted=field in chart_schema.FORMATS):
        if value is None:
            accepted_by_serve = field not in chart_schema.CHART_REQUIRED  # null = unset
        else:
            accepted_by_serve = _serve_accepts(field, value)
            if field in chart_schema.CHART_REQUIRED and "pattern" in prop:
                # The chart also requires a Kubernetes object name.
                accepted_by_serve = accepted_by_serve and bool(
                    re.fullmatch(prop["pattern"].strip("^$"), str(value))
                )
        valid = jsonschema.Draft7Validator(prop).is_valid(value)
        assert valid == accepted_by_serve, (
            f"--{name}={value!r}: schema {valid}, serve {accepted_by_serve}"
        )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"settings": {"default-lb-service-ipam": "NodeIPAM"}}, "default-lb-service-ipam"),
        ({"settings": {"workers": 0}}, "workers"),
        ({"settings": {"per-node-adress-fallback": True}}, "per-node-adress-fallback"),
        # A port list is one string: `--set settings.reserved-node-ports=22` gives a number
        # (deploy/README.md says --set-string).
        ({"settings": {"reserved-node-ports": 22}}, "reserved-node-ports"),
        ({"settings": {"kubeconfig": "/etc/kubeconfig"}}, "kubeconfig"),
        ({"certificates": {"mode": "existing-secret"}}, "caBundle"),
        ({"certificates": {"mode": "cert-manager", "precreateSecret": True}}, "mode"),
        ({"replicas": 0}, "replicas"),
    ],
)
def test_helm_rejects_values_the_schema_rejects(
    helm: Path, values: dict[str, Any], message: str
) -> None:
    result = run(helm, "template", "x", str(CHART), values=values)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


TIMINGS = (
    "lease_duration_seconds",
    "renew_deadline_seconds",
    "retry_period_seconds",
    "cert_check_interval_seconds",
    "cert_renew_before_seconds",
)


@pytest.mark.parametrize(
    "given",
    [
        {"lease_duration_seconds": 10},
        {"lease_duration_seconds": 10.5},
        {"renew_deadline_seconds": 2.4},
        {"renew_deadline_seconds": 2.5},
        {"retry_period_seconds": 9},
        {"lease_duration_seconds": 4, "renew_deadline_seconds": 3, "retry_period_seconds": 2},
        # The check interval is at most a day (docs/design.md §10): the cross-check's edge
        # is moved there by a shorter renewal window.
        {"cert_check_interval_seconds": 86400, "cert_renew_before_seconds": 86400},
        {"cert_check_interval_seconds": 86400, "cert_renew_before_seconds": 86401},
        {"cert_renew_before_seconds": 30},
        {"cert_renew_before_seconds": 60},
    ],
)
def test_the_chart_cross_checks_timings_exactly_as_serve_does(
    helm: Path, given: dict[str, float]
) -> None:
    try:
        Settings(**given)
        serve_accepts = True
    except ValidationError:
        serve_accepts = False
    values = {"settings": {chart_schema.flag(k): v for k, v in given.items()}}
    result = run(helm, "template", "x", str(CHART), values=values)
    assert (result.returncode == 0) == serve_accepts, result.stderr
    if not serve_accepts:
        assert "must be" in result.stderr


def test_the_chart_defaults_in_validate_yaml_are_serves() -> None:
    text = (CHART / "templates" / "validate.yaml").read_text()
    for field in TIMINGS:
        match = re.search(rf'"{chart_schema.flag(field)}" \| default ([0-9.]+)', text)
        assert match, field
        assert float(match.group(1)) == Settings.model_fields[field].default, field


def test_every_setting_reaches_the_container_env_as_serve_reads_it(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = MATRIX["every-setting"]["settings"]
    objects = template(helm, MATRIX["every-setting"])
    for name, value in env(objects).items():
        if isinstance(value, str) and name.startswith("NODE_IPAM_"):
            monkeypatch.setenv(name, value)
    settings = Settings()  # the Pod's variables, as serve reads them
    for name, value in given.items():
        assert getattr(settings, name.replace("-", "_")) == value, name
    settings.selection()  # the port-ownership lists parse as serve parses them
    assert env(objects)["NODE_IPAM_INFLIGHT_BODY_BYTES"] == "16777216"  # not 1.6777216e+07
    port, probes = container(objects)["ports"]
    assert port["containerPort"] == 8443
    assert (probes["name"], probes["containerPort"]) == ("healthz", 8082)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container(objects)[probe]["httpGet"]["port"] == "healthz", probe


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("0", "must name a port of its own"),  # validate.yaml's reason, not a schema regex
        (":0", "must name a port of its own"),
        (":9443", "must name a port of its own"),
        ("[::]:9443", "must name a port of its own"),
        (":99999", "invalid port 99999 (1-65535)"),  # serve would reject it
        ("127.0.0.1:8081", "must not be a loopback address: the kubelet probes the Pod IP"),
        ("[::1]:8081", "must not be a loopback address"),
        ("localhost:8081", "must not be a loopback address"),
    ],
)
def test_the_probes_need_a_health_probe_port_of_their_own(
    helm: Path, address: str, reason: str
) -> None:
    values = {"settings": {"health-probe-bind-address": address}}
    result = run(helm, "template", "x", str(CHART), values=values)
    assert result.returncode != 0
    assert f"settings: health-probe-bind-address ({address})" in result.stderr
    assert reason in result.stderr


@pytest.mark.parametrize("address", [":8081", "0.0.0.0:8081", "[::]:8081", "10.0.0.7:8081"])
def test_a_health_probe_address_the_kubelet_reaches_renders(helm: Path, address: str) -> None:
    objects = template(helm, {"settings": {"health-probe-bind-address": address}})
    assert container(objects)["ports"][1]["containerPort"] == 8081


@pytest.mark.parametrize(("delay", "renders"), [(None, True), (0, True), (15, True), (15.5, False)])
def test_the_shutdown_delay_fits_the_termination_grace_period(
    helm: Path, delay: float | None, renders: bool
) -> None:
    """terminationGracePeriodSeconds is 30: the delay (app/web/draining.py) and the graceful
    shutdown after it must fit, or the kubelet kills the Pod before it releases the Lease."""
    values = {"settings": {"shutdown-delay-seconds": delay}}
    result = run(helm, "template", "x", str(CHART), values=values)
    assert (result.returncode == 0) == renders, result.stderr
    if renders:
        variables = env([o for o in yaml.safe_load_all(result.stdout) if o])
        expected = None if delay is None else json.dumps(delay)
        assert variables.get("NODE_IPAM_SHUTDOWN_DELAY_SECONDS") == expected
    else:
        assert "settings: shutdown-delay-seconds (15.5) must be at most 15" in result.stderr
