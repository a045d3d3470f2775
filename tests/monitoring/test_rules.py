"""``promtool check rules`` and ``promtool test rules`` on the alerting rules (promtool
built from its module, tests/controlplane/go/prometheus; the ``prometheus`` fixture)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.build import PrometheusBinaries
from tests.monitoring import generate

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "rules_test.yaml"


def promtool(
    binaries: PrometheusBinaries, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.promtool), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def summary_only(rules: dict[str, Any]) -> dict[str, Any]:
    """``rules`` with each alert's annotations cut to ``summary``: promtool compares
    annotations exactly, and the long descriptions are checked rendered by a real
    Prometheus (tests/monitoring/test_prometheus_live.py)."""
    groups = []
    for group in rules["groups"]:
        kept = []
        for rule in group["rules"]:
            annotations = {"summary": rule["annotations"]["summary"]}
            kept.append({**rule, "annotations": annotations})
        groups.append({**group, "rules": kept})
    return {"groups": groups}


def test_promtool_check_rules_accepts_the_rule_file_and_the_component(
    prometheus: PrometheusBinaries, tmp_path: Path
) -> None:
    result = promtool(prometheus, "check", "rules", str(generate.RULES_PATH), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(generate.rules()['groups'][0]['rules'])} rules found" in result.stdout
    # The PrometheusRule object of the kustomize component: its spec is a rule file too.
    (component,) = list(yaml.safe_load_all(generate.COMPONENT_RULE_PATH.read_text()))
    spec = tmp_path / "component-spec.yaml"
    spec.write_text(yaml.safe_dump(component["spec"]))
    result = promtool(prometheus, "check", "rules", str(spec), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_rules_rejects_a_broken_rule(
    prometheus: PrometheusBinaries, tmp_path: Path
) -> None:
    broken = generate.rules()
    broken["groups"][0]["rules"][0]["expr"] = "node_ipam_lb_services{state=pending} >"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = promtool(prometheus, "check", "rules", str(path), cwd=tmp_path)
    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


def test_every_alert_has_unit_tests_firing_and_not_firing() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in tests:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    alerts = {r["alert"] for g in generate.rules()["groups"] for r in g["rules"]}
    assert firing == alerts, f"no firing case for {sorted(alerts - firing)}"
    assert quiet == alerts, f"no not-firing case for {sorted(alerts - quiet)}"


def test_promtool_test_rules_passes(prometheus: PrometheusBinaries, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(summary_only(generate.rules())))
    (tmp_path / "rules_test.yaml").write_text(UNIT_TESTS.read_text())
    result = promtool(prometheus, "test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_fails_when_an_alert_threshold_moves(
    prometheus: PrometheusBinaries, tmp_path: Path
) -> None:
    """The unit tests can fail: with the pending alert's `for:` at 25 minutes, its firing
    case at 20 minutes must fail."""
    rules = summary_only(generate.rules())
    for rule in rules["groups"][0]["rules"]:
        if rule["alert"] == "NodeIPAMLBServicesPending":
            rule["for"] = "25m"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "rules_test.yaml").write_text(UNIT_TESTS.read_text())
    result = promtool(prometheus, "test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "NodeIPAMLBServicesPending" in result.stdout + result.stderr
