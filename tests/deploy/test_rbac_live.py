"""`node-ipam-lb serve`, configured exactly like the rendered Deployment, against the fake
API server: every API request it makes must be allowed by the rendered RBAC.

One run per install variant (self-managed certificates; cert-manager), so neither the
code nor the manifests can grow a call or drop a permission without this failing. The
self-managed run also checks what an operator relies on: the webhook answers the API
server over TLS verified with the injected caBundle, a second replica reuses the Secret,
a renewal is served without restart, and a wiped caBundle comes back.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import pytest

from app.core.pki import generate_ca, generate_serving_cert
from app.web.tls import write_key_pair
from tests.controller.support import wait_until
from tests.deploy.rbac import Authorizer, Request
from tests.deploy.render import (
    NAMESPACE,
    SECRET_NAME,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SERVICE,
    container,
    find,
    render,
)
from tests.deploy.tlsprobe import presented_certificate
from tests.fakeapi.server import FakeApiServer
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests" / "data" / "cases" / "kind-4node" / "cluster.yaml"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
STORE = {kind: f"{kind.lower()}s.admissionregistration.k8s.io" for kind in KINDS}
TEST_AGENT = "deploy-test"  # User-Agent of this test's own requests (not checked)
SCRAPER = "system:serviceaccount:monitoring:prometheus"
ANNOTATION = "io.cilium.nodeipam/match-node-labels"


class Replica:
    """One `node-ipam-lb serve` process, configured from a rendered Deployment."""

    def __init__(self, *, objects: list[dict[str, Any]], fake_api: FakeApiServer, workdir: Path,
                 name: str, port: int, extra_env: dict[str, str]) -> None:  # fmt: skip
        self.name = name
        self.port = port
        workdir.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODE_IPAM_")}
        for item in container(objects)["env"]:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace":
                env[item["name"]] = NAMESPACE
            elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
                env[item["name"]] = name
        self.cert_file = workdir / Path(env["NODE_IPAM_TLS_CERT_FILE"]).name
        env.update(
            NODE_IPAM_TLS_CERT_FILE=str(self.cert_file),
            NODE_IPAM_TLS_PRIVATE_KEY_FILE=str(workdir / "tls.key"),
            NODE_IPAM_KUBECONFIG=str(fake_api.kubeconfig_path),
            NODE_IPAM_BIND_ADDRESS="127.0.0.1",
            NODE_IPAM_PORT=str(self.port),
            NODE_IPAM_HEALTH_PROBE_BIND_ADDRESS=f"127.0.0.1:{free_port()}",  # not :8081
            NODE_IPAM_AUTH="kubernetes",
            NODE_IPAM_CERT_CHECK_INTERVAL_SECONDS="0.2",
            NODE_IPAM_WATCH_TIMEOUT_SECONDS="5",
            **extra_env,
        )
        self.log = workdir / "stderr.log"
        with self.log.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from app.cli import main; main()", "serve"],
                cwd=ROOT,
                env=env,
                stdout=stderr,
                stderr=stderr,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@pytest.fixture
def start(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    replicas: list[Replica] = []

    def _start(
        objects: list[dict[str, Any]], name: str, port: int = 0, **extra_env: str
    ) -> Replica:
        replica = Replica(objects=objects, fake_api=fake_api, workdir=tmp_path / name,
                          name=name, port=port or free_port(), extra_env=extra_env)  # fmt: skip
        replicas.append(replica)
        return replica

    yield _start
    for replica in replicas:
        replica.stop()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def seed(fake_api: FakeApiServer, objects: list[dict[str, Any]], replica_port: int) -> None:
    """The cluster (kind-4node) plus the rendered namespace, webhook Service and webhooks."""
    fake_api.seed(files=[str(CLUSTER)])
    fake_api.seed(
        [find(objects, "Namespace", NAMESPACE), find(objects, "Service", WEBHOOK_SERVICE)]
        + [find(objects, kind, WEBHOOK_CONFIGURATION) for kind in KINDS]
    )
    port = find(objects, "Service", WEBHOOK_SERVICE)["spec"]["ports"][0]["port"]
    fake_api.map_service_port(
        namespace=NAMESPACE, name=WEBHOOK_SERVICE, port=port, local_port=replica_port
    )
    fake_api.add_token("scraper-token", username=SCRAPER)
    fake_api.allow_non_resource(user=SCRAPER, path="/metrics")


def client(fake_api: FakeApiServer) -> kubernetes.client.CoreV1Api:
    api_client = fake_api.client()
    api_client.user_agent = TEST_AGENT
    return kubernetes.client.CoreV1Api(api_client)


def ingress(fake_api: FakeApiServer, namespace: str, name: str) -> list[str]:
    stored = fake_api.get("services", name, namespace) or {}
    entries = stored.get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return [e.get("ip") for e in entries]


def ca_bundles(fake_api: FakeApiServer) -> list[str | None]:
    bundles = []
    for kind in KINDS:
        stored = fake_api.get(STORE[kind], WEBHOOK_CONFIGURATION) or {"webhooks": []}
        bundles += [w["clientConfig"].get("caBundle") for w in stored["webhooks"]]
    return bundles


def scrape_metrics(replica: Replica, ca_pem: bytes) -> httpx.Response:
    with httpx.Client(verify=_context(ca_pem), timeout=5) as http:
        return http.get(
            f"https://127.0.0.1:{replica.port}/metrics",
            headers={"Authorization": "Bearer scraper-token"},
        )


def _context(ca_pem: bytes) -> Any:
    import ssl

    context = ssl.create_default_context(cadata=ca_pem.decode())
    context.check_hostname = False  # dialled by IP; the chain is still verified
    return context


def assert_rbac_allows_every_request(
    fake_api: FakeApiServer, objects: list[dict[str, Any]]
) -> set[str]:
    """Check the process's recorded requests against the rendered RBAC; return what it did."""
    auth = Authorizer.for_service_account(objects, namespace=NAMESPACE, name="node-ipam-lb")
    requests = [
        Request.from_record(r) for r in fake_api.request_log() if r["user_agent"] != TEST_AGENT
    ]
    denied = auth.denied(requests)
    assert not denied, "the rendered RBAC would deny:\n" + "\n".join(denied)
    return {r.action for r in requests}


def test_self_managed_install_works_with_only_the_rendered_permissions(
    fake_api: FakeApiServer, start: Callable[..., Replica]
) -> None:
    objects = render("deploy")
    # A short serving certificate so the leader renews it while we watch (CA: 10 years).
    short = {"NODE_IPAM_CERT_VALIDITY_SECONDS": "12", "NODE_IPAM_CERT_RENEW_BEFORE_SECONDS": "8"}
    port = free_port()
    seed(fake_api, objects, port)
    first = start(objects, "pod-a", port, **short)

    # The webhook is reachable through the API server, verified with the injected caBundle.
    wait_until(
        lambda: all(ca_bundles(fake_api)) or not first.alive(), what="caBundle injected", timeout=20
    )
    assert first.alive(), first.output()
    secret = fake_api.get("secrets", SECRET_NAME, NAMESPACE)
    assert secret is not None
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    assert ca_bundles(fake_api) == [secret["data"]["ca.crt"]] * 2
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "typo", "annotations": {ANNOTATION: "role in (edge"}},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "io.cilium/node",
                 "ports": [{"port": 80}]},
    }  # fmt: skip
    with pytest.raises(kubernetes.client.ApiException) as denied:
        client(fake_api).create_namespaced_service("default", bad)
    assert ANNOTATION in str(denied.value.body), denied.value.body

    # The reconciler writes status; /metrics checks the bearer token with the API.
    wait_until(
        lambda: ingress(fake_api, "default", "nginx-cluster"), what="status written", timeout=20
    )
    assert scrape_metrics(first, ca_pem).status_code == 200

    # A second replica reuses the Secret: what it serves verifies with the same CA.
    second = start(objects, "pod-b", **short)
    wait_until(
        lambda: listening(second.port) or not second.alive(), what="pod-b serving", timeout=20
    )
    assert second.alive(), second.output()
    presented_certificate(port=second.port, ca_pem=ca_pem)
    creates = [
        r for r in fake_api.request_log() if r["verb"] == "create" and r["resource"] == "secrets"
    ]
    assert len(creates) == 1, "the Secret is created once"

    # The leader renews the short certificate; both replicas serve the new one, no restart.
    served = presented_certificate(port=first.port, ca_pem=ca_pem)
    renewed = wait_until(
        lambda: (c := presented_certificate(port=first.port, ca_pem=ca_pem)) != served and c,
        what="pod-a serving a renewed certificate",
        timeout=20,
    )
    assert renewed.not_valid_before_utc >= served.not_valid_before_utc
    wait_until(
        lambda: presented_certificate(port=second.port, ca_pem=ca_pem) not in (served,),
        what="pod-b serving a renewed certificate",
        timeout=20,
    )
    assert first.alive() and second.alive()

    # An apply that wipes caBundle is healed by the leader (which checks every 0.2 s here,
    # so the wiped state itself may be gone before it can be read: count the patches).
    def patches() -> int:
        counts = fake_api.requests()
        return sum(counts.get(f"patch {kind.lower()}s", 0) for kind in KINDS)

    before = patches()
    fake_api.seed([find(objects, kind, WEBHOOK_CONFIGURATION) for kind in KINDS])
    wait_until(
        lambda: patches() >= before + 2 and all(ca_bundles(fake_api)),
        what="caBundle re-injected",
        timeout=20,
    )

    first.stop()
    second.stop()
    seen = assert_rbac_allows_every_request(fake_api, objects)
    for expected in ("create secrets", "get secrets", "update secrets", "watch nodes",
                     "patch services/status", "patch mutatingwebhookconfigurations",
                     "patch validatingwebhookconfigurations", "create tokenreviews",
                     "create subjectaccessreviews", "update leases",
                     "get configmaps"):  # fmt: skip
        assert expected in seen, f"the run never did {expected!r}: {sorted(seen)}"


def test_cert_manager_install_works_with_only_the_rendered_permissions(
    fake_api: FakeApiServer, start: Callable[..., Replica], tmp_path: Path
) -> None:
    objects = render("deploy/overlays/cert-manager")
    ca = generate_ca()
    serving = generate_serving_cert(ca, [f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"])
    # What kubelet projects from the cert-manager Secret, there before the process starts.
    (tmp_path / "pod-a").mkdir()
    write_key_pair(serving, cert_path=tmp_path / "pod-a" / "tls.crt",
                   key_path=tmp_path / "pod-a" / "tls.key")  # fmt: skip
    port = free_port()
    seed(fake_api, objects, port)
    replica = start(objects, "pod-a", port)
    wait_until(
        lambda: ingress(fake_api, "default", "nginx-cluster") or not replica.alive(),
        what="status written",
        timeout=20,
    )
    assert replica.alive(), replica.output()
    assert scrape_metrics(replica, ca.cert_pem).status_code == 200
    replica.stop()
    seen = assert_rbac_allows_every_request(fake_api, objects)
    assert not any("secrets" in s for s in seen), seen
    # Read only (the readiness check): cainjector writes caBundle.
    assert {s for s in seen if "webhookconfigurations" in s} == {
        "get mutatingwebhookconfigurations",
        "get validatingwebhookconfigurations",
    }, seen
    assert "patch services/status" in seen
