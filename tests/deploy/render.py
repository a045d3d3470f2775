"""Render the kustomizations under ``deploy/`` with ``kubectl kustomize`` (offline).

Shared by the deploy tests: one render per directory per test session.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.kubectl import kubectl

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# Every kustomization an operator may apply as is.
KUSTOMIZATIONS = (
    "deploy",
    "deploy/overlays/cert-manager",
    "deploy/overlays/default-nodeipam",
    "deploy/overlays/precreated-secret",
    "deploy/overlays/network-policy",
)

NAMESPACE = "node-ipam-lb"
SECRET_NAME = "node-ipam-lb-webhook-tls"
WEBHOOK_SERVICE = "node-ipam-lb-webhook"
WEBHOOK_CONFIGURATION = "node-ipam-lb"


@functools.cache
def _rendered_text(relative: str) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(ROOT / relative)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {relative} failed:\n{result.stderr}"
    return result.stdout


def render(relative: str) -> list[dict[str, Any]]:
    """Return the objects ``kubectl kustomize <relative>`` prints, in order (fresh copies)."""
    return [doc for doc in yaml.safe_load_all(_rendered_text(relative)) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """Return the one rendered object of ``kind`` named ``name``; fail the test if absent."""
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected exactly one {kind}/{name}, found {len(matches)}"
    return matches[0]


def of_kind(objects: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """Yield the rendered objects of ``kind``."""
    return (o for o in objects if o["kind"] == kind)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the node-ipam-lb container of the rendered Deployment."""
    pod = find(objects, "Deployment", "node-ipam-lb")["spec"]["template"]["spec"]
    (only,) = pod["containers"]
    return dict(only)


def env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the container's env as name → value (or the valueFrom mapping)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}
