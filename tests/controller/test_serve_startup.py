"""``node-ipam-lb serve`` start-up and shutdown order (issue 13, findings 4 and 5), as a real
process against the fake API server: a taken port exits before any API request; unknown
variables are warned about; the effective settings are logged once; without leader
election nothing speaks of a Lease."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.controller.support import wait_until
from tests.deploy.render import WEBHOOK_CONFIGURATION, find, render
from tests.fakeapi.server import FakeApiServer
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("node-ipam-lb")


def serve(server: FakeApiServer, port: int, *extra: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.Popen(
        [
            str(EXE),
            "serve",
            "--kubeconfig",
            str(server.kubeconfig_path),
            "--no-leader-elect",
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_taken_port_exits_before_any_api_request(fake_api: FakeApiServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = serve(fake_api, port, env={"NODE_IPAM_PER_NODE_ADRESS_FALLBACK": "true"})
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2, stderr
    assert f"--port {port}: cannot listen: Address already in use" in stderr
    assert fake_api.requests() == {}, "no list, no watch, no Event, no status write"
    lines = json_lines(stderr)
    [warning] = [line for line in lines if line["level"] == "warning"]
    assert "did you mean NODE_IPAM_PER_NODE_ADDRESS_FALLBACK?" in warning["msg"]
    [settings] = [line for line in lines if line["msg"] == "settings"]
    assert settings["port"] == port
    # Under the names users set them by: the flag without "--", the Helm value's name.
    assert settings["default-lb-service-ipam"] == "lbipam"
    assert settings["leader-elect"] is False
    assert settings["per-node-address-fallback"] is False


def test_without_leader_election_shutdown_speaks_of_no_lease(fake_api: FakeApiServer) -> None:
    port = free_port()
    process = serve(fake_api, port, "--no-webhook")
    try:

        def ready() -> bool:
            try:
                url = f"https://127.0.0.1:{port}/readyz"
                return httpx.get(url, verify=False, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=30, what="serve ready")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    messages = [line["msg"] for line in json_lines(stderr)]
    assert "stopping the controller" in messages
    assert messages.count("settings") == 1
    assert not [m for m in messages if "Lease" in m or "lease" in m], messages


def test_health_probes_answer_on_their_own_port_until_shutdown(fake_api: FakeApiServer) -> None:
    # controller-runtime's --health-probe-bind-address: plain HTTP, a listener of its own,
    # started and stopped with the process; a taken probe port is a start-up error too.
    port, probe_port = free_port(), free_port()
    process = serve(fake_api, port, "--health-probe-bind-address", f"127.0.0.1:{probe_port}")
    try:

        def ready() -> bool:
            try:
                url = f"http://127.0.0.1:{probe_port}/readyz"
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=30, what="readyz on the health-probe port")
        healthz = httpx.get(f"http://127.0.0.1:{probe_port}/healthz", timeout=2)
        assert (healthz.status_code, healthz.text) == (200, "ok\n")
        main = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)
        assert (main.status_code, main.text) == (200, "ok\n"), "still on the main port too"
        taken = serve(
            fake_api, free_port(), "--health-probe-bind-address", f"127.0.0.1:{probe_port}"
        )
        _, taken_err = taken.communicate(timeout=60)
        assert taken.returncode == 2
        assert f"--health-probe-bind-address 127.0.0.1:{probe_port}: cannot listen" in taken_err
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    [line] = [line for line in json_lines(stderr) if line["msg"] == "serving health probes"]
    assert line["address"] == f"http://127.0.0.1:{probe_port}"
    with socket.socket() as again:  # released on exit
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        again.bind(("127.0.0.1", probe_port))  # fails while anything still listens there
        again.listen()


def test_a_lone_lease_holder_writes_the_ca_bundle_and_then_reports_ready(
    fake_api: FakeApiServer, tmp_path: Path
) -> None:
    """Ready means in force (docs/design.md §5, Health), end to end and without deadlock:
    one replica with leader election and self-managed certificates, deploy/'s webhook
    configurations without caBundle. It must take the Lease, write caBundle while it is
    not Ready, and only then answer ``/readyz`` 200 on the health-probe port."""
    objects = render("deploy")
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    fake_api.seed(
        [find(objects, "Namespace", "node-ipam-lb")]
        + [find(objects, kind, WEBHOOK_CONFIGURATION) for kind in kinds]
    )
    port, probe_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            str(EXE),
            "serve",
            "--kubeconfig",
            str(fake_api.kubeconfig_path),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--health-probe-bind-address",
            f"127.0.0.1:{probe_port}",
            "--cert-secret-name",
            "node-ipam-lb-webhook-tls",
            "--tls-cert-file",
            str(tmp_path / "tls.crt"),
            "--tls-private-key-file",
            str(tmp_path / "tls.key"),
            # The fake API server cannot reach the webhook through its Service, so the
            # admission probe would be admitted for ever (failurePolicy Ignore): off here;
            # tests/web/test_webhookready.py and tests/cluster test it.
            "--admission-probe-namespace",
            "",
        ],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answers: list[str] = []
    try:

        def ready() -> bool:
            assert process.poll() is None, "serve exited"
            try:
                answer = httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2)
            except httpx.HTTPError:
                return False
            answers.append(answer.text)
            return answer.status_code == 200

        wait_until(ready, timeout=30, what="the Lease holder Ready")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    stored = fake_api.get("secrets", "node-ipam-lb-webhook-tls", "node-ipam-lb")
    assert stored is not None
    for kind in kinds:
        hooks = fake_api.get(f"{kind.lower()}s.admissionregistration.k8s.io", WEBHOOK_CONFIGURATION)
        assert hooks is not None
        assert {h["clientConfig"]["caBundle"] for h in hooks["webhooks"]} == {
            stored["data"]["ca.crt"]
        }
    assert answers[-1] == "ok\n"
    assert all(text.startswith("not ready: ") for text in answers[:-1]), answers
    messages = [line["msg"] for line in json_lines(stderr)]
    assert "CA written into caBundle" in messages
    assert messages.index("webhook in force") > messages.index("CA written into caBundle")
