"""``/preview`` and ``/metrics`` behind ``--auth kubernetes`` on a real kube-apiserver.

``serve`` runs as deploy/'s ServiceAccount, so its own TokenReviews and
SubjectAccessReviews need deploy/'s ``tokenreviews``/``subjectaccessreviews`` ``create``
(deploy/base/rbac-controller.yaml); the real authenticator judges each bearer token and
the real RBAC authorizer decides each request against deploy/'s reader ClusterRoles
(deploy/base/rbac-readers.yaml: ``node-ipam-lb-metrics-reader`` = ``get /metrics``,
``node-ipam-lb-preview`` = ``get, post /preview, /preview/*``) as bound here, the way
deploy/README.md ("Metrics", "Preview in a cluster") tells an operator to bind them.
The app asks for the non-resource URL = request path, verb = lower-cased method
(app/web/auth.py, controller-runtime's metrics filter).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.controller.support import distinct_port
from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import (
    CLASS,
    apply_deploy,
    refused,
    start_serve,
    stop,
    tls,
    wait_ready,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

METRICS_READER = "node-ipam-lb-metrics-reader"
PREVIEW = "node-ipam-lb-preview"


@dataclass
class Server:
    plane: ControlPlane
    url: str
    ca: Path
    log: Path
    process: subprocess.Popen[bytes]
    namespace: str  # the clients' ServiceAccounts and a LoadBalancer Service "web" live here

    def get(self, path: str, token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.get(f"{self.url}{path}", headers=headers, verify=tls(self.ca), timeout=10)

    def post(self, path: str, token: str, body: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        return httpx.post(
            f"{self.url}{path}", headers=headers, content=body, verify=tls(self.ca), timeout=10
        )

    def account(self, name: str, clusterrole: str | None = None) -> str:
        """A ServiceAccount ``name`` in :attr:`namespace`, bound (ClusterRoleBinding) to
        ``clusterrole`` when given, as ``kubectl create clusterrolebinding`` does; returns a
        TokenRequest token. Waits until the real authorizer allows it (``kubectl auth
        can-i``), since serve caches a denial for 30 s."""
        self.plane.kubectl("create", "serviceaccount", name, "-n", self.namespace)
        if clusterrole is not None:
            subject = f"{self.namespace}:{name}"
            binding = f"{self.namespace}-{name}"
            self.plane.kubectl(
                "create",
                "clusterrolebinding",
                binding,
                f"--clusterrole={clusterrole}",
                f"--serviceaccount={subject}",
            )
            user = f"system:serviceaccount:{subject}"
            path = "/metrics" if clusterrole == METRICS_READER else "/preview"

            def allowed() -> bool:
                got = self.plane.kubectl("auth", "can-i", "get", path, "--as", user, check=False)
                return got.stdout.strip() == "yes"

            wait_for(f"RBAC lets {user} get {path}", allowed)
        return self.plane.token_for(self.namespace, name)


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    apply_deploy(control_plane)
    namespace = f"access-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", namespace)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": namespace},
        # A port of its own: the real API server is shared by every module (§4.9).
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "ports": [{"port": distinct_port(namespace, "web")}],
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(service))
    workdir = tmp_path_factory.mktemp("access")
    # Outside a Pod --auth defaults to none: ask for kubernetes as a Pod gets it. No
    # reconciler and no Lease: this module is about access only.
    process, url, ca, log = start_serve(
        control_plane, workdir, "access", "--auth", "kubernetes", "--no-reconciler"
    )
    try:
        wait_ready(process, url, ca, log)
        yield Server(control_plane, url, ca, log, process, namespace)
    finally:
        stop(process)


def _status(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.text[:300]


def test_no_token_and_a_token_the_server_rejects_get_401(server: Server) -> None:
    assert server.get("/metrics", None).status_code == 401
    rejected = server.get("/metrics", "not-a-token-the-api-server-issued")
    assert _status(rejected)[0] == 401, _status(rejected)
    assert rejected.headers["WWW-Authenticate"] == "Bearer"
    # A well-formed ServiceAccount JWT signed by another issuer's key is no better.
    forged = server.get(f"/preview/{server.namespace}/web", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln")
    assert forged.status_code == 401, _status(forged)


def test_an_authenticated_account_bound_to_nothing_gets_403(server: Server) -> None:
    token = server.account("nobody")
    for path in ("/metrics", "/preview", f"/preview/{server.namespace}/web"):
        got = server.get(path, token)
        assert _status(got)[0] == 403, (path, _status(got))
        assert f"system:serviceaccount:{server.namespace}:nobody" in got.text


def test_the_metrics_reader_role_opens_metrics_and_not_preview(server: Server) -> None:
    token = server.account("scraper", METRICS_READER)
    metrics = server.get("/metrics", token)
    assert _status(metrics)[0] == 200, _status(metrics)
    assert "node_ipam_lb_build_info" in metrics.text
    for path in ("/preview", f"/preview/{server.namespace}/web"):
        assert _status(server.get(path, token))[0] == 403, path


def test_the_preview_role_opens_preview_and_not_metrics(server: Server) -> None:
    token = server.account("operator", PREVIEW)
    live = server.get(f"/preview/{server.namespace}/web", token)
    assert _status(live)[0] == 200, _status(live)
    item = live.json()
    assert (item["namespace"], item["name"], item["managed"]) == (server.namespace, "web", True)
    listed = server.get(f"/preview/{server.namespace}", token)
    assert _status(listed)[0] == 200, _status(listed)
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "draft", "namespace": server.namespace},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS},
    }
    posted = server.post("/preview", token, json.dumps(manifest))
    assert _status(posted)[0] == 200, _status(posted)
    assert _status(server.get("/metrics", token))[0] == 403


def test_serve_was_allowed_every_review_it_made(server: Server) -> None:
    """serve's own TokenReviews/SubjectAccessReviews run as deploy/'s ServiceAccount: a
    missing ``create`` in deploy/'s ClusterRole would show as a 403 in its log (and a
    503 to every client above)."""
    token = server.account("probe", METRICS_READER)
    assert _status(server.get("/metrics", token))[0] == 200
    text = server.log.read_text(errors="replace")
    refusals = refused(server.log) + [
        line for line in text.splitlines() if "access review failed" in line
    ]
    assert not refusals, "\n".join(refusals[:20])
    assert server.process.poll() is None
