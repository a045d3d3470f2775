"""Fixtures for the API contract tests: every test runs against the fake (``tests/fakeapi``)
and against the real kube-apiserver of the session control plane (``tests/controlplane``).

``api_server`` is parametrized ``fake`` / ``real``; ``api``, ``core``, ``kubectl`` and ``ns``
derive from it, so a test written against them pins the fake to what the real server does.
Where the two disagree the fake is wrong. A test that needs what only the fake can do on
demand (injected faults, held or dropped watches, forced compaction, request counters,
configured tokens) asks for ``fake_api`` and must carry ``@pytest.mark.fake_only("why")``;
it then runs against the fake only.

The real variant shares one server with the rest of the session: each test works in a
fresh namespace (``ns``), starts with no Nodes (like a fresh fake), and the Nodes,
webhook configurations and namespaces it made are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.fakeapi import FakeApiServer
from tests.kubectl import kubectl as kubectl_path

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

FAKE_ONLY = "fake_only"

# Paths of the core objects the tests read back through ``ApiServer.get``.
_CORE_PATHS = {
    "nodes": "/api/v1/nodes/{name}",
    "namespaces": "/api/v1/namespaces/{name}",
    "services": "/api/v1/namespaces/{namespace}/services/{name}",
    "secrets": "/api/v1/namespaces/{namespace}/secrets/{name}",
}


@dataclass
class ApiServer:
    """One API server under test: ``kind`` is ``"fake"`` or ``"real"``; ``fake`` is the
    :class:`FakeApiServer` for the fake variant (None for the real one)."""

    kind: str
    url: str
    kubeconfig_path: Path
    namespace: str
    fake: FakeApiServer | None = None
    _clients: list[client.ApiClient] = field(default_factory=list)

    def client(self) -> client.ApiClient:
        """A configured admin ``ApiClient``, closed after the test."""
        configuration = client.Configuration()
        from kubernetes import config

        config.load_kube_config(
            config_file=str(self.kubeconfig_path), client_configuration=configuration
        )
        api_client = client.ApiClient(configuration)
        self._clients.append(api_client)
        return api_client

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any, Any]:
        """``(status, decoded JSON body, headers)`` of one request as the admin."""
        api_client = self._clients[0] if self._clients else self.client()
        url = api_client.configuration.host + path
        if query:
            from urllib.parse import urlencode

            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        resp = api_client.rest_client.pool_manager.request(
            method, url, body=data, headers=headers, timeout=20
        )
        return resp.status, json.loads(resp.data), resp.headers

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object as the server returns it, or None when it answers 404."""
        path = _CORE_PATHS[resource].format(name=name, namespace=namespace)
        status, body, _ = self.request("GET", path)
        if status == 404:
            return None
        assert status == 200, body
        result: dict[str, Any] = body
        return result

    def close(self) -> None:
        for api_client in self._clients:
            api_client.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test against both servers, or against the fake only when it is marked
    ``fake_only`` (which it must be when it asks for ``fake_api``)."""
    if "api_server" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(FAKE_ONLY)
    if "fake_api" in metafunc.fixturenames and marker is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} asks for fake_api: use api_server, or mark it "
            '@pytest.mark.fake_only("<what the real server cannot do on demand>")'
        )
    if marker is not None:
        if not marker.args or not str(marker.args[0]).strip():
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: fake_only needs a reason")
        params = [pytest.param("fake", id="fake")]
    else:
        params = [
            pytest.param("fake", id="fake"),
            pytest.param("real", id="real", marks=pytest.mark.controlplane),
        ]
    metafunc.parametrize("api_server", params, indirect=True)


def _real_cleanup_names(api_client: client.ApiClient) -> dict[str, set[str]]:
    admission = client.AdmissionregistrationV1Api(api_client)
    return {
        "validating": {
            w.metadata.name for w in admission.list_validating_webhook_configuration().items
        },
        "mutating": {
            w.metadata.name for w in admission.list_mutating_webhook_configuration().items
        },
        "namespaces": {
            n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items
        },
    }


def _delete_all_nodes(core: client.CoreV1Api) -> None:
    for node in core.list_node().items:
        if node.metadata.finalizers:
            core.patch_node(node.metadata.name, {"metadata": {"finalizers": None}})
        with contextlib.suppress(client.ApiException):
            core.delete_node(node.metadata.name)


@pytest.fixture
def api_server(request: pytest.FixtureRequest) -> Iterator[ApiServer]:
    """The server under test (see the module docstring), with a fresh namespace ``ns``."""
    namespace = f"c-{uuid.uuid4().hex[:8]}"
    if request.param == "fake":
        fake: FakeApiServer = request.getfixturevalue("fake_api")
        server = ApiServer("fake", fake.url, fake.kubeconfig_path, namespace, fake=fake)
        client.CoreV1Api(server.client()).create_namespace({"metadata": {"name": namespace}})
        fake.reset_requests()  # counters start at zero, as on a fresh fake
        yield server
        server.close()
        return
    plane = request.getfixturevalue("control_plane")
    server = ApiServer("real", plane.url, plane.kubeconfig_path, namespace)
    admin = server.client()
    core = client.CoreV1Api(admin)
    _delete_all_nodes(core)
    before = _real_cleanup_names(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        yield server
    finally:
        after = _real_cleanup_names(admin)
        admission = client.AdmissionregistrationV1Api(admin)
        for name in after["validating"] - before["validating"]:
            admission.delete_validating_webhook_configuration(name)
        for name in after["mutating"] - before["mutating"]:
            admission.delete_mutating_webhook_configuration(name)
        _delete_all_nodes(core)
        # Without a controller-manager a deleted namespace stays Terminating: names are
        # never reused (each test makes unique ones).
        for name in after["namespaces"] - before["namespaces"]:
            with contextlib.suppress(client.ApiException):
                core.delete_namespace(name)
        server.close()


@pytest.fixture
def ns(api_server: ApiServer) -> str:
    """The test's own namespace (exists on both servers)."""
    return api_server.namespace


@pytest.fixture
def api(api_server: ApiServer) -> client.ApiClient:
    """A configured admin ``ApiClient`` for the server under test, closed after the test."""
    return api_server.client()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def kubectl(api_server: ApiServer, tmp_path: Path) -> Kubectl:
    """Run ``kubectl --kubeconfig <server> --namespace <ns>`` with a private cache dir and
    a bounded timeout."""
    binary = kubectl_path()

    def run(
        *args: str, stdin: str | None = None, timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                binary,
                f"--kubeconfig={api_server.kubeconfig_path}",
                f"--cache-dir={tmp_path / 'kube-cache'}",
                f"--namespace={api_server.namespace}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
