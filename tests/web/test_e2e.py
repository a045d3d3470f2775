"""End to end: ``node-ipam-lb serve`` over TLS behind the fake API server's admission chain.

One ``serve`` subprocess (the real CLI, flags and SIGTERM) is shared by the module; its
webhooks are registered with the caBundle it wrote; ``kubectl`` talks to the fake API.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controller.support import distinct_port
from tests.fakeapi.server import FakeApiServer
from tests.kubectl import kubectl as kubectl_path
from tests.support.ports import free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests/data/cases/kind-4node/cluster.yaml"
ANNOTATION = "io.cilium.nodeipam/match-node-labels"
pytestmark = pytest.mark.slow


class Serve:
    """A ``node-ipam-lb serve`` subprocess and an HTTPS client that trusts its CA."""

    def __init__(
        self,
        fake: FakeApiServer,
        tmp: Path,
        *,
        health_probe: str = "0",
        extra: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.ca_file = tmp / "ca.crt"
        self.log = (tmp / "serve.log").open("w+")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODE_IPAM_")}
        env["NODE_IPAM_RETRY_PERIOD_SECONDS"] = "1"  # env and flags mix
        env["TMPDIR"] = str(tmp)  # serve's temp dir: nothing left in /tmp after a kill
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from app.cli import main; main()",
                "serve",
                "--kubeconfig",
                str(fake.kubeconfig_path),
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(self.port),
                # no health-probe listener by default: :8081 may be another serve's here
                "--health-probe-bind-address",
                health_probe,
                "--ca-bundle-out",
                str(self.ca_file),
                "--default-lb-service-ipam",
                "nodeipam",
                "--leader-election-namespace",
                "default",
                "--auth",
                "kubernetes",
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"https://127.0.0.1:{self.port}"
        wait_for(f"serve to be ready\n{self.output()}", self._ready, timeout=60, interval=0.05)
        self.http = httpx.Client(base_url=self.url, verify=self.context(), timeout=10)

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"serve exited with {self.process.returncode}\n{self.output()}")
        if not self.ca_file.exists():
            return False
        try:
            with httpx.Client(verify=self.context(), timeout=2) as client:
                return client.get(f"{self.url}/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def webhook_configurations(url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    bundle = base64.b64encode(ca_pem).decode()
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["services"],
        }
    ]

    def hook(kind: str, path: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "node-ipam-lb"},
            "webhooks": [
                {
                    "name": f"{path.strip('/')}.node-ipam-lb.io",
                    "clientConfig": {"url": f"{url}{path}", "caBundle": bundle},
                    "rules": rules,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        }

    return [
        hook("MutatingWebhookConfiguration", "/mutate"),
        hook("ValidatingWebhookConfiguration", "/validate"),
    ]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.seed(files=[str(CLUSTER)])
        yield server


@pytest.fixture(scope="module")
def serve(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    process = Serve(fake, tmp_path_factory.mktemp("serve"))
    try:
        yield process
    finally:
        process.stop()
        process.log.close()


@pytest.fixture(scope="module")
def kubectl(fake: FakeApiServer, serve: Serve, tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary = kubectl_path()
    tmp = tmp_path_factory.mktemp("kubectl")

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, "--kubeconfig", str(fake.kubeconfig_path), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp,
        )

    configs = webhook_configurations(serve.url, serve.ca_file.read_bytes())
    applied = run(
        "apply",
        "--validate=false",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": configs}),
    )
    assert applied.returncode == 0, applied.stderr
    return run


def manifest(name: str, *, selector: str | None = None, cls: str | None = None) -> str:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if selector is not None:
        metadata["annotations"] = {ANNOTATION: selector}
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        # A port of its own: not the example's 80, which nginx-cluster owns on every
        # node, nor another test's (port ownership, docs/design.md §4.9).
        "ports": [{"port": distinct_port("default", name)}],
        "selector": {"app": "nginx"},
    }
    if cls is not None:
        spec["loadBalancerClass"] = cls
    return json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec})


def test_kubectl_apply_of_a_malformed_selector_fails_with_our_message(kubectl: Any) -> None:
    result = kubectl(
        "apply", "--validate=false", "-f", "-", stdin=manifest("bad", selector="role in (edge")
    )
    assert result.returncode != 0
    expected = (
        f'denied the request: metadata.annotations[{ANNOTATION}]: Invalid value: "role in (edge": '
    )
    assert expected in result.stderr


def test_kubectl_apply_of_a_risky_service_succeeds_with_warnings(kubectl: Any) -> None:
    result = kubectl(
        "apply",
        "--validate=false",
        "-f",
        "-",
        stdin=manifest("everywhere", selector="", cls="io.cilium/node"),
    )
    assert result.returncode == 0, result.stderr
    assert f"Warning: {ANNOTATION} is empty: it selects every eligible node" in result.stderr
    result = kubectl(
        "apply",
        "-f",
        "-",
        stdin=manifest("nowhere", selector="kubernetes.io/hostname=gpu-1", cls="io.cilium/node"),
    )
    assert result.returncode == 0, result.stderr
    assert f"Warning: {ANNOTATION} matches no node now" in result.stderr


def test_class_less_service_comes_back_with_our_class(kubectl: Any) -> None:
    result = kubectl("apply", "--validate=false", "-f", "-", stdin=manifest("classless"))
    assert result.returncode == 0, result.stderr
    got = kubectl("get", "service", "classless", "-o", "json")
    assert json.loads(got.stdout)["spec"]["loadBalancerClass"] == "io.cilium/node"


def test_defaulted_service_gets_node_ingress_from_the_reconciler(
    kubectl: Any, fake: FakeApiServer
) -> None:
    kubectl(
        "apply",
        "--validate=false",
        "-f",
        "-",
        stdin=manifest("web", selector="kubernetes.io/hostname=kind-worker2"),
    )

    def ingress() -> Any:
        stored = fake.get("services", "web", "default") or {}
        return stored.get("status", {}).get("loadBalancer", {}).get("ingress")

    got = wait_for("status.loadBalancer.ingress", ingress, timeout=30, interval=0.05)
    assert [(e["ip"], e["ipMode"]) for e in got] == [("10.89.0.7", "VIP")]
    # Each entry records the Service's ports (docs/design.md §4.9).
    [stored] = [fake.get("services", "web", "default")]
    assert got[0]["ports"] == [
        {"port": p["port"], "protocol": p.get("protocol", "TCP")} for p in stored["spec"]["ports"]
    ]


def test_preview_over_https_needs_a_token_reviewed_by_the_api_server(
    serve: Serve, fake: FakeApiServer
) -> None:
    fake.add_token("scraper-token", username="system:serviceaccount:monitoring:prometheus")
    fake.add_token("viewer-token", username="jane")
    fake.allow_non_resource(user="jane", path="/preview/default/nginx-one-node")
    fake.allow_non_resource(user="system:serviceaccount:monitoring:prometheus", path="/metrics")

    def get(path: str, token: str | None = None) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return serve.http.get(path, headers=headers)

    assert get("/preview/default/nginx-one-node").status_code == 401
    assert get("/preview/default/nginx-one-node", "forged").status_code == 401
    assert get("/preview/default/nginx-one-node", "scraper-token").status_code == 403
    item = get("/preview/default/nginx-one-node", "viewer-token").json()
    assert item["name"] == "nginx-one-node" and item["managed"] is True
    # Its selector picks kind-worker2, where nginx-cluster owns TCP/80 (§4.9).
    assert [n["name"] for n in item["nodes"] if n["code"] == "PortInUse"] == ["kind-worker2"]
    metrics = get("/metrics", "scraper-token")
    assert metrics.status_code == 200
    assert "controller_runtime_webhook_requests_total" in metrics.text
    assert get("/metrics", "viewer-token").status_code == 403
    assert get("/healthz").status_code == 200


def test_serve_stops_cleanly_on_sigterm(serve: Serve, fake: FakeApiServer) -> None:
    """Runs last in this module: SIGTERM → graceful shutdown, exit 0, Lease released."""
    assert serve.stop() == 0, serve.output()
    lease = fake.get("leases.coordination.k8s.io", "node-ipam-lb", "default")
    assert lease is not None
    assert not lease["spec"].get("holderIdentity"), lease


def test_serve_keeps_answering_for_the_shutdown_delay(fake: FakeApiServer, tmp_path: Path) -> None:
    """``--shutdown-delay-seconds 3`` (app/web/draining.py): after SIGTERM the process keeps
    its Lease and keeps answering, old connections and new ones, ``Connection: close`` on
    each answer and ``/readyz`` unchanged on both ports; then it shuts down gracefully,
    exit 0, Lease released. Runs after the module's ``serve`` stopped (its own Lease name)."""
    probe_port = free_port()
    lease_name = "node-ipam-lb-drain"
    serve = Serve(
        fake,
        tmp_path,
        health_probe=f"127.0.0.1:{probe_port}",
        extra=["--shutdown-delay-seconds", "3", "--leader-election-id", lease_name],
    )
    try:
        kept = serve.http.get("/healthz")  # opens the kept-alive connection
        assert kept.status_code == 200 and "connection" not in kept.headers

        def holder() -> str:
            lease = fake.get("leases.coordination.k8s.io", lease_name, "default")
            return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

        wait_for("serve to hold its Lease", lambda: holder() != "", timeout=30, interval=0.1)
        serve.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        wait_for(
            "the shutdown delay to start",
            lambda: "shutdown delay started" in serve.output(),
            timeout=2.5,
            interval=0.05,
        )
        during = serve.http.get("/healthz")  # the kept-alive connection, still answered
        assert during.status_code == 200 and during.headers["connection"] == "close"
        with httpx.Client(verify=serve.context(), timeout=5) as fresh:  # a new connection
            ready = fresh.get(f"{serve.url}/readyz")
        assert ready.status_code == 200 and ready.headers["connection"] == "close"
        probe = httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2)
        assert (probe.status_code, probe.text) == (200, "ok\n")
        assert serve.process.poll() is None and holder() != ""
        assert serve.process.wait(timeout=30) == 0, serve.output()
        took = time.monotonic() - signalled
        assert 3.0 <= took < 20, took
        assert holder() == "", "the Lease is released at the end, as without a delay"
    finally:
        serve.stop()
        serve.log.close()


def test_a_second_sigterm_ends_the_shutdown_delay(fake: FakeApiServer, tmp_path: Path) -> None:
    """A second SIGTERM during a long delay starts the graceful shutdown at once (as SIGINT
    does): an operator's ``kill`` is never ignored for a minute."""
    serve = Serve(
        fake,
        tmp_path,
        extra=["--shutdown-delay-seconds", "120", "--leader-election-id", "node-ipam-lb-drain2"],
    )
    try:
        serve.process.send_signal(signal.SIGTERM)
        wait_for(
            "the shutdown delay to start",
            lambda: "shutdown delay started" in serve.output(),
            timeout=5,
            interval=0.05,
        )
        signalled = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(timeout=30) == 0, serve.output()
        assert time.monotonic() - signalled < 20
    finally:
        serve.stop()
        serve.log.close()


def test_in_process_server_without_auth_reloads_rotated_certificates(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--auth none`` (default with a kubeconfig) and certificate files rotated on disk."""
    import uvicorn
    from cryptography.hazmat.primitives.serialization import Encoding

    from app import server
    from app.config import Settings
    from app.core import pki
    from app.web import tls

    monkeypatch.setattr(tls, "RELOAD_CHECK_SECONDS", 0.0)
    ca = pki.generate_ca()
    first = pki.generate_serving_cert(ca, ["127.0.0.1"])
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    tls.write_key_pair(first, cert_path=cert_file, key_path=key_file)
    settings = Settings(
        kubeconfig=fake.kubeconfig_path,
        bind_address="127.0.0.1",
        port=free_port(),
        tls_cert_file=cert_file,
        tls_private_key_file=key_file,
        leader_elect=False,
        webhook=False,
    )
    _, _, config = server.build(settings, workdir=tmp_path)
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{settings.port}"
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())

    def served_cert() -> bytes:
        with (
            socket.create_connection(("127.0.0.1", settings.port), timeout=5) as raw,
            client.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
        ):
            der = conn.getpeercert(binary_form=True)
            assert der is not None
            return der

    try:
        wait_for("in-process server", lambda: uv.started, timeout=30, interval=0.05)
        with httpx.Client(base_url=url, verify=client, timeout=10) as http:
            wait_for(
                "ready", lambda: http.get("/readyz").status_code == 200, timeout=30, interval=0.05
            )
            item = http.get("/preview/default/nginx-two-nodes").json()
            # Its selector picks these two; nginx-cluster owns TCP/80 there (§4.9).
            assert [n["name"] for n in item["nodes"] if n["code"] == "PortInUse"] == [
                "kind-worker",
                "kind-worker2",
            ]
            assert http.get("/metrics").status_code == 200
            assert http.post("/validate", json={}).status_code == 404, "--no-webhook"
        assert served_cert() == first.certificate.public_bytes(Encoding.DER)
        second = pki.generate_serving_cert(ca, ["127.0.0.1"])
        tls.write_key_pair(second, cert_path=cert_file, key_path=key_file)
        assert served_cert() == second.certificate.public_bytes(Encoding.DER)
    finally:
        uv.should_exit = True
        thread.join(30)
    assert not thread.is_alive()
