"""Self-managed certificates against the fake API server (real HTTP, real kubernetes client).

What an operator sees: the Secret appears once and every replica uses it; the webhook
configurations get the CA, also after an apply wiped it; a certificate close to expiry is
renewed and served without a restart; a corrupt Secret is replaced with a clear log line.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from app.core.certificates import CA_CERT, TLS_CERT, read_ca
from app.core.pki import generate_serving_cert
from app.kube.client import KubernetesAPI
from app.telemetry.metrics import REGISTRY
from app.web.app import create_app
from app.web.certsync import STALE_AFTER_CHECKS, CertSync, CertSyncError
from app.web.tls import ReloadingContext
from tests.deploy.certdata import DAY, POLICY, b64, good_pair, secret
from tests.deploy.rbac import Authorizer, Request
from tests.deploy.render import WEBHOOK_CONFIGURATION, find, render
from tests.deploy.tlsprobe import OneShotServer, presented_certificate
from tests.fakeapi.server import FakeApiServer
from tests.web.conftest import AppClient

NS, NAME = POLICY.namespace, POLICY.secret_name
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
STORE = {kind: f"{kind.lower()}s.admissionregistration.k8s.io" for kind in KINDS}

Replica = Callable[..., CertSync]


@pytest.fixture
def replica(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[Replica]:
    """Build CertSync replicas against the fake API, each with its own TLS directory and
    User-Agent (so the request log tells them apart)."""
    made: list[CertSync] = []
    fake_api.seed([find(render("deploy"), "Namespace", NS)])

    def make(name: str = "pod-a", *, leader: bool = False) -> CertSync:
        client = fake_api.client()
        client.user_agent = name
        (tmp_path / name).mkdir()
        sync = CertSync(
            api=KubernetesAPI(client, request_timeout=5),
            policy=POLICY,
            cert_file=tmp_path / name / "tls.crt",
            key_file=tmp_path / name / "tls.key",
            is_leader=lambda: leader,
            interval=3600,
        )
        made.append(sync)
        return sync

    yield make
    for sync in made:
        sync.stop()


def stored_secret(fake_api: FakeApiServer) -> dict[str, Any]:
    stored = fake_api.get("secrets", NAME, NS)
    assert stored is not None, "no Secret stored"
    return stored


def writes(fake_api: FakeApiServer, verb: str, resource: str = "secrets") -> list[str]:
    """User-Agents of the requests with ``verb`` on ``resource``."""
    return [
        r["user_agent"]
        for r in fake_api.request_log()
        if r["verb"] == verb and r["resource"] == resource
    ]


def seed_webhook_configurations(fake_api: FakeApiServer) -> None:
    objects = render("deploy")
    fake_api.seed([find(objects, kind, WEBHOOK_CONFIGURATION) for kind in KINDS])


def ca_bundles(fake_api: FakeApiServer) -> list[str | None]:
    bundles = []
    for kind in KINDS:
        stored = fake_api.get(STORE[kind], WEBHOOK_CONFIGURATION)
        assert stored is not None
        bundles += [w["clientConfig"].get("caBundle") for w in stored["webhooks"]]
    return bundles


def test_secret_is_created_once_and_reused_by_a_second_replica(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    first, second = replica("pod-a"), replica("pod-b")
    first.bootstrap(timeout=5)
    second.bootstrap(timeout=5)
    assert writes(fake_api, "create") == ["pod-a"]
    assert writes(fake_api, "update") == []
    assert first.cert_file.read_bytes() == second.cert_file.read_bytes()
    assert first.key_file.read_bytes() == second.key_file.read_bytes()
    served = base64.b64decode(stored_secret(fake_api)["data"][TLS_CERT])
    assert first.cert_file.read_bytes() == served
    assert oct(first.key_file.stat().st_mode & 0o777) == "0o600"


def test_replicas_racing_to_create_the_secret_agree_on_one(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    first, second = replica("pod-a"), replica("pod-b")
    first.bootstrap(timeout=5)
    # pod-b read "not found" just before pod-a's create landed: its create gets 409.
    fake_api.fail(method="GET", path=f"/api/v1/namespaces/{NS}/secrets/{NAME}", status=404)
    second.bootstrap(timeout=5)
    assert writes(fake_api, "create") == ["pod-a", "pod-b"]
    assert second.cert_file.read_bytes() == first.cert_file.read_bytes()


def test_ca_is_injected_into_both_webhook_configurations_and_put_back_after_a_wipe(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    seed_webhook_configurations(fake_api)
    follower, leader = replica("pod-a"), replica("pod-b", leader=True)
    follower.bootstrap(timeout=5)
    follower.sync()
    assert ca_bundles(fake_api) == [None, None], "only the leader writes"
    leader.bootstrap(timeout=5)
    leader.sync()
    ca = stored_secret(fake_api)["data"][CA_CERT]
    assert ca_bundles(fake_api) == [ca, ca]
    # `kubectl apply` of the manifests (which carry no caBundle) with a replace wipes it.
    seed_webhook_configurations(fake_api)
    assert ca_bundles(fake_api) == [None, None]
    leader.sync()
    assert ca_bundles(fake_api) == [ca, ca]
    patches = writes(fake_api, "patch", "mutatingwebhookconfigurations")
    leader.sync()
    assert writes(fake_api, "patch", "mutatingwebhookconfigurations") == patches, "no-op sync"
    assert writes(fake_api, "update") == []


def test_a_replica_that_becomes_leader_writes_the_ca_bundle_when_woken(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    """The loop checks at once on start and again on :meth:`CertSync.wake` (called at the
    start of a leadership term), not only every interval (here one hour)."""
    seed_webhook_configurations(fake_api)
    leading = threading.Event()
    sync = replica("pod-a")
    sync.is_leader = leading.is_set
    sync.bootstrap(timeout=5)
    # Counted before start(): the loop's first check may come before the next line runs.
    reads = len(writes(fake_api, "get"))
    sync.start()
    deadline = time.monotonic() + 5
    while len(writes(fake_api, "get")) == reads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(writes(fake_api, "get")) > reads, "no check at start"
    assert ca_bundles(fake_api) == [None, None], "a standby wrote caBundle"
    leading.set()
    sync.wake()
    ca = stored_secret(fake_api)["data"][CA_CERT]
    deadline = time.monotonic() + 5
    while ca_bundles(fake_api) != [ca, ca] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ca_bundles(fake_api) == [ca, ca], "wake() did not run a check"


def test_certificate_close_to_expiry_is_renewed_and_served_without_restart(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    ca, _ = good_pair()
    short = generate_serving_cert(ca, POLICY.dns_names, datetime.timedelta(hours=1))
    fake_api.seed([secret(ca=ca, serving=short)])
    follower, leader = replica("pod-a"), replica("pod-b", leader=True)
    follower.bootstrap(timeout=5)  # due, but still valid: a follower does not renew
    assert writes(fake_api, "update") == []
    reloading = ReloadingContext(
        cert_file=follower.cert_file, key_file=follower.key_file, check_seconds=0
    )
    server = OneShotServer(reloading.context)
    try:
        before = presented_certificate(port=server.port, ca_pem=ca.cert_pem)
        assert before == short.certificate
        leader.sync()  # the leader renews
        assert writes(fake_api, "update") == ["pod-b"]
        follower.sync()  # the follower picks the new pair up from the Secret
        after = presented_certificate(port=server.port, ca_pem=ca.cert_pem)
    finally:
        server.close()
    assert after != before
    assert after.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > 29 * DAY
    assert read_ca(stored_secret(fake_api)["data"])[0] == ca, "renewal keeps the CA"
    expiry = "node_ipam_lb_serving_certificate_expiry_timestamp_seconds"
    assert REGISTRY.get_sample_value(expiry) == after.not_valid_after_utc.timestamp()
    renewals = REGISTRY.get_sample_value(
        "node_ipam_lb_certificate_writes_total", {"action": "renew", "result": "success"}
    )
    assert renewals is not None and renewals >= 1


def test_a_certificate_of_a_ca_that_cabundle_does_not_trust_is_not_served_while_the_old_is_valid(
    fake_api: FakeApiServer, replica: Replica, caplog: pytest.LogCaptureFixture
) -> None:
    """The Secret moved to a new CA (someone replaced it; the leader has not written the new
    caBundle yet): a replica whose served certificate is still valid keeps it, since
    kube-apiserver could not verify the new one, logs why once, and asks for a check at the
    end of the hand-over. With no valid certificate to keep, it takes the new one at once."""
    old_ca, old_serving = good_pair()
    fake_api.seed([secret(ca=old_ca, serving=old_serving)])
    seed_webhook_configurations(fake_api)
    leader = replica("pod-a", leader=True)
    leader.bootstrap(timeout=5)
    leader.sync()  # caBundle = old CA
    follower = replica("pod-b")
    follower.bootstrap(timeout=5)
    served = follower.cert_file.read_bytes()
    new_ca, new_serving = good_pair()
    stored = stored_secret(fake_api)
    fake_api.seed([{**secret(ca=new_ca, serving=new_serving), "metadata": stored["metadata"]}])
    with caplog.at_level(logging.INFO, logger="node_ipam_lb.certs"):
        for _ in range(3):
            follower.sync()
    assert follower.cert_file.read_bytes() == served
    waits = [r for r in caplog.records if "waits for caBundle" in r.getMessage()]
    assert len(waits) == 1, [r.getMessage() for r in caplog.records]
    assert "is not signed by a CA in caBundle" in waits[0].__dict__["fields"]["reason"]
    assert follower._recheck_in is not None and follower._recheck_in > 0
    fresh = replica("pod-c")
    fresh.bootstrap(timeout=5)  # nothing served yet: the Secret's pair at once
    assert fresh.cert_file.read_bytes() == new_serving.cert_pem


CORRUPT = [
    ("ca.crt is not a certificate", {CA_CERT: b64(b"garbage")},
     "has no usable CA: ca.crt: Invalid value: not a PEM certificate"),
    ("ca.crt is not base64", {CA_CERT: "%%%"}, "ca.crt: Invalid value: not base64"),
    ("tls.crt is missing", {TLS_CERT: ""},
     "no usable serving certificate: tls.crt: Required value"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "logged"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT]
)
def test_corrupt_secret_is_replaced_with_a_clear_log_line(
    fake_api: FakeApiServer,
    replica: Replica,
    caplog: pytest.LogCaptureFixture,
    overrides: dict[str, str],
    logged: str,
) -> None:
    ca, serving = good_pair()
    fake_api.seed([secret(ca=ca, serving=serving, overrides=overrides)])
    sync = replica("pod-a")
    with caplog.at_level(logging.WARNING, logger="node_ipam_lb.certs"):
        sync.bootstrap(timeout=5)
    (line,) = [r.getMessage() for r in caplog.records if "certificate Secret" in r.getMessage()]
    assert logged in line
    assert f"Secret {NS}/{NAME}" in line
    assert writes(fake_api, "update") == ["pod-a"]
    assert sync.cert_file.read_bytes() == base64.b64decode(
        stored_secret(fake_api)["data"][TLS_CERT]
    )


def test_unreachable_api_at_start_up_fails_with_the_reason_after_retrying(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    fake_api.fail(method="GET", path="/api/v1/namespaces/*/secrets/*", status=503, times=100)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    with pytest.raises(CertSyncError, match=f"no usable certificate in Secret {NS}/{NAME}"):
        replica("pod-a").bootstrap(timeout=0, sleep=sleep, monotonic=lambda: now[0])
    assert fake_api.requests()["get secrets"] == 1
    with pytest.raises(CertSyncError, match="after 4s: 503"):
        replica("pod-b").bootstrap(timeout=4, sleep=sleep, monotonic=lambda: now[0])
    assert sleeps == [0.5, 1.0, 2.0]
    assert fake_api.requests()["get secrets"] == 1 + 4


def test_precreated_empty_secret_is_filled_without_create_permission(
    fake_api: FakeApiServer, replica: Replica
) -> None:
    objects = render("deploy/overlays/precreated-secret")
    fake_api.seed([find(objects, "Secret", NAME)])
    seed_webhook_configurations(fake_api)
    leader = replica("pod-a", leader=True)
    leader.bootstrap(timeout=5)
    leader.sync()
    assert writes(fake_api, "create") == []
    assert writes(fake_api, "update") == ["pod-a"]
    stored = stored_secret(fake_api)
    assert stored["type"] == "Opaque", "the type of a Secret cannot change"
    assert leader.cert_file.read_bytes() == base64.b64decode(stored["data"][TLS_CERT])
    auth = Authorizer.for_service_account(objects, namespace=NS, name="node-ipam-lb")
    assert auth.denied(map(Request.from_record, fake_api.request_log())) == []


def test_self_managed_mode_is_off_without_a_secret_name_and_needs_the_tls_files() -> None:
    never: Callable[[], bool] = lambda: False  # noqa: E731
    api: Any = object()
    assert CertSync.from_settings(Settings(), api=api, is_leader=never) is None
    with pytest.raises(ValueError, match="--cert-secret-name needs --tls-cert-file"):
        CertSync.from_settings(Settings(cert_secret_name=NAME), api=api, is_leader=never)
    with pytest.raises(ValueError, match="cert-renew-before: Invalid value"):
        CertSync.from_settings(
            Settings(
                cert_secret_name=NAME,
                tls_cert_file=Path("tls.crt"),
                tls_private_key_file=Path("tls.key"),
                cert_validity_seconds=60,
                cert_renew_before_seconds=120,
            ),
            api=api,
            is_leader=never,
        )


def test_read_only_certificate_volume_at_start_up_is_a_clear_error(
    fake_api: FakeApiServer, replica: Replica, tmp_path: Path
) -> None:
    sync = replica("pod-a", leader=True)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    sync.cert_file = blocker / "tls.crt"  # writing it raises NotADirectoryError (OSError)
    with pytest.raises(
        CertSyncError, match=f"cannot write the certificate to --tls-cert-file {blocker}"
    ):
        sync.bootstrap(timeout=5)


def offline_sync(**kwargs: Any) -> CertSync:
    """A leader's CertSync whose API is never called (tests that replace ``sync``)."""
    api: Any = object()
    files = {"cert_file": Path("tls.crt"), "key_file": Path("tls.key")}
    return CertSync(api=api, policy=POLICY, is_leader=lambda: True, **files, **kwargs)


def test_certificate_check_keeps_running_after_an_unexpected_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sync = offline_sync(interval=0.01)
    calls: list[int] = []
    recovered = threading.Event()

    def flaky_sync() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise OSError(28, "No space left on device")
        recovered.set()

    sync.sync = flaky_sync  # type: ignore[method-assign]
    sync.start()
    try:
        assert recovered.wait(10), "the check thread died on the first error"
        assert sync.healthy() == (True, "")
    finally:
        sync.stop()
    failures = [r for r in caplog.records if r.message.startswith("certificate check failed")]
    assert len(failures) >= 2
    assert failures[0].exc_info is not None, "logged without the traceback"
    assert sync.healthy() == (False, "certificate sync is not running")


def test_healthz_fails_when_certificate_sync_stopped_succeeding() -> None:
    now = [0.0]
    sync = offline_sync(interval=30, monotonic=lambda: now[0])
    app = create_app(Settings(), background=[sync])
    assert sync.healthy() == (False, "certificate sync is not running")
    sync.start()
    with AppClient(app) as client:
        assert client.get("/healthz").text == "ok\n"
        assert sync.stale_after == max(
            STALE_AFTER_CHECKS * 30, sync.policy.renew_before.total_seconds() / 2
        )
        now[0] += STALE_AFTER_CHECKS * 30 + 1
        assert client.get("/healthz").text == "ok\n", "an API outage alone must not restart"
        now[0] = sync.stale_after + 1
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.text == (
            f"unhealthy: certificate sync has not succeeded for {sync.stale_after + 1:.0f}s\n"
        )
    assert sync.healthy() == (False, "certificate sync is not running"), "not stopped on shutdown"
