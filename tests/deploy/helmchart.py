"""Run the Go-built ``helm`` (fixture ``helm``, tests/controlplane) on the chart in
``deploy/helm/node-ipam-lb`` with its own throwaway config, cache and data directories."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.render import DEPLOY

CHART = DEPLOY / "helm" / "node-ipam-lb"
RELEASE = "node-ipam-lb"
NAMESPACE = "node-ipam-lb"
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
"""Labels Helm charts add by convention (and deploy/base does not carry)."""

_HOME = tempfile.mkdtemp(prefix="node-ipam-helm-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)  # one per test session


def environment(kubeconfig: Path | None = None) -> dict[str, str]:
    """``helm``'s environment: private XDG directories (no user config, no repositories),
    and ``KUBECONFIG`` when given."""
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": f"{_HOME}/config",
        "HELM_CACHE_HOME": f"{_HOME}/cache",
        "HELM_DATA_HOME": f"{_HOME}/data",
    }
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run(
    helm: Path,
    *args: str,
    kubeconfig: Path | None = None,
    timeout: float = 90,
    values: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` (plus ``-f <values as a file>`` when ``values``), never raising on a
    non-zero exit; the caller checks ``returncode``."""
    extra: list[str] = []
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        json.dump(values or {}, handle)
    if values:
        extra = ["-f", handle.name]
    try:
        return subprocess.run(
            [str(helm), *args, *extra],
            env=environment(kubeconfig),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        os.unlink(handle.name)


def template(
    helm: Path,
    values: dict[str, Any] | None = None,
    namespace: str = NAMESPACE,
    *,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders for ``values`` (with the chart's ``crds/``
    first when ``include_crds``, as ``helm install`` creates them); fails the test on an
    error."""
    crds = ["--include-crds"] if include_crds else []
    result = run(
        helm, "template", RELEASE, str(CHART), "--namespace", namespace, *crds, values=values
    )
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with :data:`HELM_LABELS` removed from ``metadata.labels``."""
    labels = {k: v for k, v in obj["metadata"].get("labels", {}).items() if k not in HELM_LABELS}
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}
