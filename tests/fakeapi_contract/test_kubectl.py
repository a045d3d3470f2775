"""kubectl against the fake API: get, apply, label, patch --subresource=status, delete, get -w."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeapi import FakeApiServer
from tests.fakeapi_contract.conftest import ApiServer, Kubectl
from tests.kubectl import kubectl as kubectl_path

MANIFEST = """apiVersion: v1
kind: Service
metadata:
  name: web
  annotations:
    io.cilium.nodeipam/match-node-labels: "pool=edge"
spec:
  type: LoadBalancer
  loadBalancerClass: io.cilium/node
  ports:
  - {port: 80, name: http}
"""


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.fake_only("seeds objects with their status through the fake's handle")
def test_get_lists_seeded_kind_cluster(kubectl: Kubectl, fake_api: FakeApiServer) -> None:
    fake_api.seed(files=["tests/data/cases/kind-4node/cluster.yaml"])
    nodes = _ok(kubectl("get", "nodes", "-o", "name")).split()
    assert nodes == [
        "node/kind-control-plane",
        "node/kind-worker",
        "node/kind-worker2",
        "node/kind-worker3",
    ]
    table = _ok(kubectl("get", "services", "-A"))
    assert table.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert "nginx-cluster" in table


def test_apply_creates_then_patches_with_last_applied(
    kubectl: Kubectl, api_server: ApiServer
) -> None:
    assert _ok(kubectl("apply", "-f", "-", stdin=MANIFEST)).strip() == "service/web created"
    changed = MANIFEST.replace(
        "- {port: 80, name: http}", "- {port: 80, name: http}\n  - {port: 443, name: https}"
    )
    assert _ok(kubectl("apply", "-f", "-", stdin=changed)).strip() == "service/web configured"
    assert _ok(kubectl("apply", "-f", "-", stdin=changed)).strip() == "service/web unchanged"
    stored = api_server.get("services", "web", api_server.namespace)
    assert stored is not None
    assert [p["port"] for p in stored["spec"]["ports"]] == [80, 443]
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]


def test_apply_strict_validation_rejects_unknown_fields(kubectl: Kubectl) -> None:
    result = kubectl(
        "apply",
        "-f",
        "-",
        stdin=MANIFEST.replace("type: LoadBalancer", "type: LoadBalancer\n  bogus: 1"),
    )
    assert result.returncode == 1
    assert 'strict decoding error: unknown field "spec.bogus"' in result.stderr


@pytest.mark.fake_only("pins the fake's refusal of server-side apply (a real server does it)")
def test_apply_server_side_is_refused_honestly(kubectl: Kubectl) -> None:
    result = kubectl("apply", "--server-side", "-f", "-", stdin=MANIFEST)
    assert result.returncode == 1
    assert "does not implement server-side apply" in result.stderr


def test_label_and_selector(kubectl: Kubectl) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    assert _ok(kubectl("label", "service", "web", "tier=front")).strip() == "service/web labeled"
    assert _ok(kubectl("get", "services", "-l", "tier=front", "-o", "name")).split() == [
        "service/web"
    ]
    assert _ok(kubectl("get", "services", "-l", "tier!=front", "-o", "name")).split() == []


def test_patch_status_subresource(kubectl: Kubectl) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    patch = json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}})
    out = _ok(
        kubectl(
            "patch",
            "service",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
            "-o",
            "json",
        )
    )
    assert json.loads(out)["status"]["loadBalancer"]["ingress"] == [
        {"ip": "192.0.2.10", "ipMode": "VIP"}
    ]
    ingress = _ok(
        kubectl("get", "service", "web", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}")
    )
    assert ingress == "192.0.2.10"


def test_patch_invalid_class_change_shows_field_error(kubectl: Kubectl) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    result = kubectl(
        "patch", "service", "web", "-p", '{"spec":{"loadBalancerClass":"example.com/x"}}'
    )
    assert result.returncode == 1
    assert (
        'The Service "web" is invalid: spec.loadBalancerClass: Invalid value: "example.com/x": '
        "may not change once set" in result.stderr
    )


def test_delete(kubectl: Kubectl, api_server: ApiServer) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    assert _ok(kubectl("delete", "service", "web")).strip() == 'service "web" deleted'
    assert api_server.get("services", "web", api_server.namespace) is None
    missing = kubectl("delete", "service", "web")
    assert missing.returncode == 1
    assert 'services "web" not found' in missing.stderr


def _read_until(proc: subprocess.Popen[str], want: int, deadline: float) -> list[str]:
    lines: list[str] = []
    assert proc.stdout is not None
    while len(lines) < want and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
    return lines


@contextlib.contextmanager
def _watching(api_server: ApiServer, cache: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``kubectl get services -w <args>`` in the background, terminated on exit."""
    proc = subprocess.Popen(
        [
            kubectl_path(),
            f"--kubeconfig={api_server.kubeconfig_path}",
            f"--cache-dir={cache}",
            f"--namespace={api_server.namespace}",
            "get",
            "services",
            "-w",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.communicate(timeout=5)


def test_get_watch_streams_changes(kubectl: Kubectl, api_server: ApiServer, tmp_path: Path) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    template = 'jsonpath={.type} {.object.metadata.name} {.object.metadata.labels.tier}{"\\n"}'
    with _watching(api_server, tmp_path / "cache", "--output-watch-events", "-o", template) as proc:
        deadline = time.monotonic() + 15
        first = _read_until(proc, 1, deadline)
        _ok(kubectl("label", "service", "web", "tier=front"))
        _ok(kubectl("delete", "service", "web"))
        rest = _read_until(proc, 2, deadline)
    assert first + rest == ["ADDED web", "MODIFIED web front", "DELETED web front"]


@pytest.mark.fake_only("seeds Nodes with their status through the fake's handle")
def test_get_prints_server_side_tables(kubectl: Kubectl, fake_api: FakeApiServer) -> None:
    fake_api.seed(files=["tests/data/cases/kind-4node/cluster.yaml"])
    nodes = [line.split() for line in _ok(kubectl("get", "nodes")).splitlines()]
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert nodes[1][:3] == ["kind-control-plane", "Ready", "control-plane"]
    assert nodes[1][4] == "v1.30.0"
    patch = json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}})
    _ok(
        kubectl(
            "--namespace=default",
            "patch",
            "service",
            "nginx-cluster",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        )
    )
    one = [
        line.split()
        for line in _ok(
            kubectl("--namespace=default", "get", "service", "nginx-cluster")
        ).splitlines()
    ]
    assert one[0] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert one[1][:2] == ["nginx-cluster", "LoadBalancer"]
    assert one[1][3] == "192.0.2.10"
    pending = _ok(
        kubectl("--namespace=default", "get", "service", "nginx-local", "--no-headers")
    ).split()
    assert pending[3] == "<pending>"


def test_get_watch_human_output_prints_updated_rows(
    kubectl: Kubectl, api_server: ApiServer, tmp_path: Path
) -> None:
    _ok(kubectl("apply", "-f", "-", stdin=MANIFEST))
    with _watching(api_server, tmp_path / "cache", "--no-headers") as proc:
        deadline = time.monotonic() + 15
        first = _read_until(proc, 1, deadline)
        patch = json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.20"}]}}})
        _ok(kubectl("patch", "service", "web", "--subresource=status", "--type=merge", "-p", patch))
        second = _read_until(proc, 1, deadline)
    assert [line.split()[3] for line in first + second] == ["<pending>", "192.0.2.20"]


def test_create_namespace(kubectl: Kubectl, api_server: ApiServer) -> None:
    """What our error message tells a user to run: kubectl asks for protobuf first and JSON
    second (``Accept: application/vnd.kubernetes.protobuf,application/json``)."""
    name = f"{api_server.namespace}-x"
    if api_server.kind == "fake":
        # The fake decodes no protobuf: it says so (415) rather than guess.
        refused = kubectl("create", "namespace", name)
        assert refused.returncode == 1
        assert "(UnsupportedMediaType): the fake API only accepts JSON" in refused.stderr
        assert "kubectl create -f" in refused.stderr
        return
    assert _ok(kubectl("create", "namespace", name)).strip() == f"namespace/{name} created"
    again = kubectl("create", "namespace", name)
    assert again.returncode == 1
    assert f'namespaces "{name}" already exists' in again.stderr


LIST = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: one}
  spec: {ports: [{port: 80}]}
- apiVersion: v1
  kind: Secret
  metadata: {name: two}
  data: {k: dg==}
"""


def test_apply_a_list(kubectl: Kubectl, api_server: ApiServer) -> None:
    """A v1 List (what ``kubectl get -o yaml`` prints) goes in with ``kubectl apply -f``."""
    assert _ok(kubectl("apply", "-f", "-", stdin=LIST)).split("\n")[:2] == [
        "service/one created",
        "secret/two created",
    ]
    assert _ok(kubectl("apply", "-f", "-", stdin=LIST)).split("\n")[:2] == [
        "service/one unchanged",
        "secret/two unchanged",
    ]
    assert api_server.get("secrets", "two", api_server.namespace) is not None
