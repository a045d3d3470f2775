"""Shared pytest fixtures. Add fixtures here with small, targeted edits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakeapi import FakeApiServer

# The session fixture ``control_plane`` (a real kube-apiserver + etcd): tests/controlplane/.
pytest_plugins = ["tests.controlplane.pytest_plugin"]


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A fresh fake Kubernetes API server (``.url``, ``.kubeconfig_path``, ``.client()``,
    faults, counters, seeding; see ``tests/fakeapi/README.md``), stopped after the test."""
    with FakeApiServer() as server:
        yield server
