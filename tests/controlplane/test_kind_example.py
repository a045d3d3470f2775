"""``kubectl apply -f examples/kind-4node/cluster.yaml`` exactly as a user runs it.

The example pins what a kind cluster allocated (``clusterIP``, ``nodePort`` 31817-31821):
on the session's shared control plane any other test's LoadBalancer Service may already
hold one of those ports ("provided port is already allocated"), so this module gets a
control plane of its own (``own_control_plane``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.controlplane.plane import ControlPlane

pytestmark = pytest.mark.controlplane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kind-4node" / "cluster.yaml"


def test_kubectl_applies_the_kind_example_verbatim(own_control_plane: ControlPlane) -> None:
    """Every item of the List is created, with the Services the README talks about."""
    applied = own_control_plane.kubectl("apply", "-f", str(EXAMPLE), check=False)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    listing = yaml.safe_load(EXAMPLE.read_text())
    assert len(applied.stdout.strip().splitlines()) == len(listing["items"]), applied.stdout
    services = json.loads(own_control_plane.kubectl("get", "services", "-o", "json").stdout)
    names = {s["metadata"]["name"] for s in services["items"]}
    assert {"nginx-cluster", "nginx-local", "other-class"} <= names
    pinned = {
        s["metadata"]["name"]: [p["nodePort"] for p in s["spec"]["ports"]]
        for s in listing["items"]
        if s["kind"] == "Service" and s["spec"].get("type") == "LoadBalancer"
    }
    got = {
        s["metadata"]["name"]: [p.get("nodePort") for p in s["spec"]["ports"]]
        for s in services["items"]
        if s["metadata"]["name"] in pinned
    }
    assert pinned and got == pinned  # the server kept the ports the example pins
