"""Shared by the end-to-end modules (test_e2e*.py): ``node-ipam-lb serve`` run on the host
as deploy/'s ServiceAccount against the real kube-apiserver, and bounded waits.

``serve`` gets a TokenRequest token of ServiceAccount ``node-ipam-lb/node-ipam-lb`` (what
``kubectl apply -k deploy/`` creates), so the real RBAC authorizer judges every call it
makes with deploy/'s roles.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.controlplane.plane import ControlPlane
from tests.support.ports import free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "node-ipam-lb"  # deploy/base's namespace, ServiceAccount and Lease name
CLASS = "io.cilium/node"
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"
WAIT = 30.0


def tls(ca: Path) -> ssl.SSLContext:
    """A client TLS context trusting only ``ca`` (httpx deprecates ``verify=<path>``)."""
    return ssl.create_default_context(cafile=str(ca))


def ready(url: str, ca: Path) -> bool:
    """``GET /readyz`` answers 200 over TLS verified against ``ca``."""
    if not ca.exists():
        return False
    try:
        return httpx.get(f"{url}/readyz", verify=tls(ca), timeout=2).status_code == 200
    except (httpx.HTTPError, ssl.SSLError):
        return False


def apply_deploy(plane: ControlPlane) -> None:
    """``kubectl apply -k deploy/`` (idempotent: every e2e module may do it)."""
    applied = plane.kubectl("apply", "-k", str(DEPLOY), check=False)
    assert applied.returncode == 0, applied.stdout + applied.stderr


def start_serve(
    plane: ControlPlane,
    workdir: Path,
    name: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str, Path, Path]:
    """``python -m app serve`` as deploy/'s ServiceAccount; returns (process, url, ca, log).
    ``env`` is added to this process's environment (e.g. ``POD_NAME``, the base of the
    leader-election identity)."""
    token = plane.token_for(NAMESPACE, NAMESPACE)
    kubeconfig = plane.write_kubeconfig(workdir / f"{name}.kubeconfig", user=NAMESPACE, token=token)
    port = free_port()
    ca = workdir / f"{name}-ca.crt"
    log = workdir / f"{name}.log"
    args = [
        sys.executable,
        "-m",
        "app",
        "serve",
        "--kubeconfig",
        str(kubeconfig),
        "--bind-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--ca-bundle-out",
        str(ca),
        "--leader-election-namespace",
        NAMESPACE,
        # The health-probe listener defaults to :8081: a second replica (or another test
        # run's serve) would exit with "cannot listen". Tests probe /readyz on --port.
        *(
            ()
            if any(a.startswith("--health-probe-bind-address") for a in extra)
            else ("--health-probe-bind-address", "0")
        ),
        *extra,
    ]
    # TMPDIR: serve's own temporary directory (its generated TLS files) is under the
    # test's work dir, so a replica the test SIGKILLs leaves nothing in /tmp.
    environment = {**os.environ, "TMPDIR": str(workdir), **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=environment
        )
    return process, f"https://127.0.0.1:{port}", ca, log


def wait_ready(process: subprocess.Popen[bytes], url: str, ca: Path, log: Path) -> None:
    """Until ``serve`` answers ``/readyz``; fails with its log's tail if it exits."""

    def up() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        return ready(url, ca)

    wait_for("serve answers /readyz", up)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def warnings(log: Path) -> str:
    """serve's warning and error log lines (a refused call shows there with its status)."""
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(line for line in lines if '"level":"info"' not in line)[-3000:]


def refused(log: Path) -> list[str]:
    """serve's log lines about a call the API server refused with a 4xx (403 = an RBAC gap
    in deploy/, 422 = an object the real server rejects)."""
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if '"level":"info"' not in line and '"status":4' in line]
