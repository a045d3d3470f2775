"""The version lives in one place, app/__init__.py ``__version__`` (pyproject's dynamic
version, ``node-ipam-lb --version``); every other place that states it must agree: the
image tag in deploy/, the chart's version and appVersion, the build-info metric, and the
image tags the docs tell you to build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from app import __version__
from app.telemetry.metrics import REGISTRY
from tests.deploy.render import DEPLOY, ROOT, container, render


def test_the_kustomize_image_tag_is_the_version() -> None:
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert image["newTag"] == __version__
    assert container(render("deploy"))["image"] == f"node-ipam-lb:{__version__}"


def test_the_chart_version_and_app_version_are_the_version() -> None:
    chart = yaml.safe_load((DEPLOY / "helm" / "node-ipam-lb" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert chart["version"] == __version__


def test_the_build_info_metric_reports_the_version() -> None:
    text = generate_latest(REGISTRY).decode()
    python = ".".join(map(str, sys.version_info[:3]))
    line = f'node_ipam_lb_build_info{{python="{python}",version="{__version__}"}} 1.0'
    assert line in text.splitlines(), [x for x in text.splitlines() if "build_info" in x]


def test_the_cli_reports_the_version() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "node-ipam-lb"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert __version__ in result.stdout


def test_every_image_tag_the_docs_and_dockerfile_name_is_the_version() -> None:
    texts = {
        "Dockerfile": (ROOT / "Dockerfile").read_text(),
        "deploy/README.md": (DEPLOY / "README.md").read_text(),
        "README.md": (ROOT / "README.md").read_text(),
    }
    found = 0
    for where, text in texts.items():
        for tag in re.findall(r"\bnode-ipam-lb:(\d+\.\d+\.\d+\S*)", text):
            assert tag.rstrip("`.,") == __version__, f"{where}: node-ipam-lb:{tag}"
            found += 1
    assert found >= 2
