"""Self-managed webhook certificates on a real kube-apiserver (docs/design.md §7, deploy/
README.md "Certificates"): the replica that becomes the Lease holder writes the CA into
``caBundle`` at once, not one ``--cert-check-interval-seconds`` later.

Why it matters: the webhooks fail open (``failurePolicy: Ignore``). Until ``caBundle``
holds the CA, kube-apiserver cannot verify the webhook's certificate and admits every
malformed selector unchecked; a fresh ``helm install`` measured 26-69 s of that when the
leader waited for its first periodic check (30 s by default). Here the interval is one
hour and the Lease is held by a replica that is gone when ``serve`` starts, so the only
thing that can write ``caBundle`` within the wait is the start of the leadership term.

Own control plane: the test installs deploy/'s fixed names (namespace ``node-ipam-lb``,
webhook configurations ``node-ipam-lb``) and writes their ``caBundle``, which the shared
plane's other e2e modules point at their own ``serve``.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import NAMESPACE, apply_deploy, refused, start_serve, stop
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

SECRET = "node-ipam-lb-webhook-tls"  # deploy/'s --cert-secret-name
SERVICE = "node-ipam-lb-webhook"  # --webhook-service-name's default: the certificate's name
CONFIGURATIONS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4, 3, 1


def _get(plane: ControlPlane, *args: str) -> dict[str, Any] | None:
    got = plane.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def _ca_bundles(plane: ControlPlane) -> list[str | None]:
    bundles: list[str | None] = []
    for kind in CONFIGURATIONS:
        configuration = _get(plane, kind, NAMESPACE) or {"webhooks": []}
        bundles += [w["clientConfig"].get("caBundle") for w in configuration["webhooks"]]
    return bundles


def _readyz_as_the_api_server(url: str, ca_bundle: bytes) -> bool:
    """``GET /readyz`` over TLS as kube-apiserver calls a ``service:`` webhook: trusting only
    ``ca_bundle`` (PEM) and verifying the name ``<service>.<namespace>.svc``."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cadata=ca_bundle.decode())
    try:
        name = f"{SERVICE}.{NAMESPACE}.svc"
        with (
            socket.create_connection((parts.hostname, parts.port), timeout=2) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return tls.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:  # ssl.SSLError included: refused, not listening yet, not trusted
        return False


def test_the_new_lease_holder_writes_the_ca_bundle_at_once(
    own_control_plane: ControlPlane, tmp_path: Path
) -> None:
    plane = own_control_plane
    apply_deploy(plane)
    assert _ca_bundles(plane) and set(_ca_bundles(plane)) == {None}, "deploy/ carries no caBundle"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    gone = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAMESPACE, "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": "replica-gone_0",
            "leaseDurationSeconds": LEASE_DURATION,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(gone))
    process, url, _, log = start_serve(
        plane,
        tmp_path,
        "replica-new",
        f"--lease-duration-seconds={LEASE_DURATION}",
        f"--renew-deadline-seconds={RENEW_DEADLINE}",
        f"--retry-period-seconds={RETRY_PERIOD}",
        f"--cert-secret-name={SECRET}",
        f"--tls-cert-file={tmp_path / 'tls.crt'}",
        f"--tls-private-key-file={tmp_path / 'tls.key'}",
        "--cert-check-interval-seconds=3600",
        # A bare control plane has no kube-proxy: kube-apiserver cannot reach the webhook
        # through its Service, so the admission probe would keep /readyz at 503 (it is
        # tested where it can pass: tests/cluster, tests/web/test_webhookready.py).
        "--admission-probe-namespace=",
        env={"POD_NAME": "replica-new"},
    )
    try:
        secret = wait_for(
            "serve's bootstrap creates the certificate Secret",
            lambda: process.poll() is None and _get(plane, "secret", SECRET, "-n", NAMESPACE),
        )
        assert process.poll() is None, log.read_text()[-3000:]
        served = (tmp_path / "tls.crt").read_bytes()
        assert served == base64.b64decode(secret["data"]["tls.crt"]), "files != Secret"
        ca_pem = base64.b64decode(secret["data"]["ca.crt"])
        wait_for("/readyz verified by ca.crt", lambda: _readyz_as_the_api_server(url, ca_pem))

        def holder() -> str:
            lease = _get(plane, "lease", NAMESPACE, "-n", NAMESPACE) or {"spec": {}}
            return str(lease["spec"].get("holderIdentity") or "")

        wait_for("serve takes the expired Lease", lambda: holder().startswith("replica-new_"))
        expected = secret["data"]["ca.crt"]
        wait_for(
            "the new Lease holder writes ca.crt into every caBundle (interval 3600 s)",
            lambda: set(_ca_bundles(plane)) == {expected},
            timeout=15,
        )
        text = log.read_text()
        assert text.count("CA written into caBundle") == len(CONFIGURATIONS), text[-3000:]
        assert refused(log) == []
    finally:
        stop(process)
