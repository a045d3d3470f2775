"""Fixtures for the fake API contract tests: official-client APIs, kubectl, a webhook app."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.fakeapi import FakeApiServer
from tests.kubectl import kubectl as kubectl_path

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def api(fake_api: FakeApiServer) -> Iterator[client.ApiClient]:
    """A configured ``ApiClient`` for the fake server, closed after the test."""
    with fake_api.client() as api_client:
        yield api_client


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def kubectl(fake_api: FakeApiServer, tmp_path: Path) -> Kubectl:
    """Run ``kubectl --kubeconfig <fake>`` with a private cache dir and a bounded timeout."""
    binary = kubectl_path()

    def run(
        *args: str, stdin: str | None = None, timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                binary,
                f"--kubeconfig={fake_api.kubeconfig_path}",
                f"--cache-dir={tmp_path / 'kube-cache'}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
