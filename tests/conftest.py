"""Shared pytest fixtures. Add fixtures here with small, targeted edits."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakeapi import FakeApiServer

# No test binds serve's health-probe listener on its default, every address's port 8081
# (tests run in parallel, and only on loopback): off unless a test asks for it with
# --health-probe-bind-address 127.0.0.1:PORT. Inherited by the serve processes tests start.
os.environ.setdefault("NODE_IPAM_HEALTH_PROBE_BIND_ADDRESS", "0")

# The session fixture ``control_plane`` (a real kube-apiserver + etcd): tests/controlplane/.
pytest_plugins = ["tests.controlplane.pytest_plugin"]


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A fresh fake Kubernetes API server (``.url``, ``.kubeconfig_path``, ``.client()``,
    faults, counters, seeding; see ``tests/fakeapi/README.md``), stopped after the test."""
    with FakeApiServer() as server:
        yield server
