"""The documents an outsider reads first say what is true and need no inside knowledge."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_layout_table_names_every_route_module_as_it_is() -> None:
    # Before: "routes/ (admission, preview, health, metrics)": there is no metrics module.
    row = next(line for line in README.splitlines() if line.startswith("| `app/web/` |"))
    listed = row.split("`routes/` (", 1)[1].split("), `tls.py`", 1)[0]
    named = set(re.findall(r"`(\w+\.py)`", listed))
    modules = {p.name for p in (ROOT / "app/web/routes").glob("*.py")} - {"__init__.py"}
    assert named == modules


def test_bench_readme_needs_no_inside_knowledge() -> None:
    text = (ROOT / "bench/README.md").read_text()
    for phrase in (r"\bissue \d+", r"\bthe brief\b", r"\bits owner\b", r"running in parallel"):
        assert re.search(phrase, text, re.IGNORECASE) is None, phrase


def test_readme_says_how_long_setup_and_tests_take_and_what_the_real_api_tier_needs() -> None:
    top = README.split("## ", 1)[0]
    assert "Setup takes about 3 minutes" in top and "the test run about 30 minutes" in top
    assert "needs Go" in top
    assert "](#tests-against-a-real-api-server)" in top
    assert "\n## Tests against a real API server\n" in README


def test_readme_names_every_settings_flag_of_preview() -> None:
    from app.config import SelectionConfig

    listed = README.split("The settings are flags named like", 1)[1].split(". A dump", 1)[0]
    named = set(re.findall(r"`--([a-z-]+)`", listed))
    # enable_node_ipam is Cilium's on/off switch: preview has no flag for it.
    settings = {f.replace("_", "-") for f in SelectionConfig.model_fields} - {"enable-node-ipam"}
    assert named == settings


DEPLOY_README = (ROOT / "deploy/README.md").read_text()


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DEPLOY_README, re.M | re.S)
    assert match, title
    return match.group(1)


def test_verify_quotes_the_denial_as_kubectl_prints_it() -> None:
    """kubectl v1.32 prints an API error as ``Error from server (<reason>): <message>``
    (``cmdutil.StandardErrorMessage``), and kube-apiserver prefixes a webhook's message
    with ``admission webhook "<name>" denied the request: ``."""
    from app.core import admission
    from app.core.options import SelectionSettings

    verify = _section("Verify")
    command = "kubectl annotate svc echo 'io.cilium.nodeipam/match-node-labels=role in (edge'"
    assert command in verify
    quoted = verify.split(command, 1)[1].split("```", 1)[0]
    printed = " ".join(line.removeprefix("# ").strip() for line in quoted.strip().splitlines())
    echo = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "echo",
            "namespace": "default",
            "annotations": {"io.cilium.nodeipam/match-node-labels": "role in (edge"},
        },
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "io.cilium/node"},
    }
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "operation": "UPDATE",
            "object": echo,
            "oldObject": {**echo, "metadata": {"name": "echo", "namespace": "default"}},
        },
    }
    decision = admission.validate(
        admission.parse_review(body), settings=SelectionSettings(), snapshot=None
    )
    assert printed == (
        'Error from server (Forbidden): admission webhook "validate.node-ipam-lb.io" denied'
        f" the request: {decision.message}"
    )


def test_uninstall_removes_the_bindings_the_metrics_and_preview_sections_create() -> None:
    created = re.findall(r"kubectl create clusterrolebinding (\S+)", DEPLOY_README)
    assert len(created) == 2, created
    uninstall = _section("Uninstall")
    for name in created:
        assert re.search(rf"kubectl delete clusterrolebinding .*\b{name}\b", uninstall), name


def test_the_helm_example_marks_its_registry_as_a_placeholder_and_names_the_default() -> None:
    from app import __version__

    helm = _section("Install with Helm")
    assert "--set image.repository=registry.example.org/node-ipam-lb   # placeholder" in helm
    assert f"the chart's default image is `node-ipam-lb:{__version__}`" in helm


def test_the_metrics_how_to_reaches_the_lease_holder() -> None:
    metrics = _section("Metrics")
    assert "port-forward deployment/" not in metrics
    assert "{.spec.holderIdentity}" in metrics and 'port-forward "pod/${LEADER%_*}"' in metrics


def test_the_first_command_runs_the_product_on_a_bundled_example_and_the_second_the_tests() -> None:
    """Both work from the checkout as written: the first is the offline preview (what
    tests/test_wheel.py also runs from an installed wheel), not a command that needs
    test code (issue 31: ``node-ipam-lb demo`` started tests/ modules)."""
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert commands[0].endswith(
        " && .venv/bin/node-ipam-lb preview -f examples/kind-4node/cluster.yaml"
    )
    assert commands[1].endswith(" && .venv/bin/python -m pytest")
    assert (ROOT / "examples/kind-4node/cluster.yaml").is_file()


def test_run_it_locally_points_to_the_development_walkthrough() -> None:
    local = README.split("## Run it against an API server\n", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/python -m tests.devenv" in local
    assert (ROOT / "tests/devenv/__main__.py").is_file()
    for path in [ROOT / "README.md", *ROOT.glob("*/README.md"), ROOT / "docs/design.md"]:
        assert "node-ipam-lb demo" not in path.read_text(), path
