"""Ready means in force (app/web/webhookready.py), against the fake API server.

What an operator relies on: a replica is not Ready (``/readyz`` 503 saying what it waits
for, on the main port and the health-probe listener) until both webhook configurations'
caBundle verifies the certificate it serves; the Lease holder writes that caBundle without
waiting for its own readiness; a CA rotation keeps every replica Ready through the overlap;
without webhook configurations readiness does not wait; the probes never call the API.
"""

from __future__ import annotations

import base64
import datetime
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.core.cabundle import NOT_IN_FORCE
from app.core.certificates import CA_CERT
from app.core.pki import generate_ca, generate_serving_cert
from app.core.views import EndpointSliceView
from app.kube.client import ApiError, KubernetesAPI
from app.web import webhookready
from app.web.app import create_app
from app.web.certsync import HANDOVER_SECONDS, CertSync
from app.web.healthprobe import start_health_probes
from app.web.routes.deps import AppState
from app.web.tls import ReloadingContext, write_key_pair
from app.web.webhookready import NOT_CHECKED, CaBundleReadiness
from tests.controller.support import wait_until
from tests.deploy.certdata import DAY, POLICY, good_pair, secret
from tests.deploy.render import WEBHOOK_CONFIGURATION, find, render
from tests.fakeapi.server import FakeApiServer
from tests.web.conftest import AppClient

KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
STORE = {kind: f"{kind.lower()}s.admissionregistration.k8s.io" for kind in KINDS}
VALIDATING_PATH = (
    f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}"
)
WAITING = (
    f"not ready: {NOT_IN_FORCE}: validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}"
    " webhook validate.node-ipam-lb.io: no caBundle yet"
)


@dataclass
class Replica:
    """One replica's certificate sync and its readiness check, on its own files."""

    certs: CertSync
    readiness: CaBundleReadiness

    def readyz(self) -> httpx.Response:
        """``/readyz`` of an app wired like ``serve`` (cache synced: no controller)."""
        app = create_app(Settings(auth="none"), readiness=[self.readiness])
        with AppClient(app) as client:
            return client.get("/readyz")


Make = Callable[..., Replica]


@pytest.fixture
def replica(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[Make]:
    made: list[Replica] = []
    fake_api.seed([find(render("deploy"), "Namespace", POLICY.namespace)])

    def make(
        name: str = "pod-a",
        *,
        leader: bool = False,
        clock: Callable[[], datetime.datetime] | None = None,
        monotonic: Callable[[], float] | None = None,
        timeout: float = 5,
    ) -> Replica:
        client = fake_api.client()
        client.user_agent = name
        (tmp_path / name).mkdir()
        certs = CertSync(
            api=KubernetesAPI(client, request_timeout=5),
            policy=POLICY,
            cert_file=tmp_path / name / "tls.crt",
            key_file=tmp_path / name / "tls.key",
            is_leader=lambda: leader,
            interval=3600,
            **({"clock": clock} if clock else {}),
            **({"monotonic": monotonic} if monotonic else {}),
        )
        readiness = CaBundleReadiness(
            api=KubernetesAPI(client, request_timeout=timeout),
            name=WEBHOOK_CONFIGURATION,
            served=certs.cert_file.read_bytes,
            interval=3600,
        )
        made.append(Replica(certs, readiness))
        return made[-1]

    yield make
    for each in made:
        each.certs.stop()
        each.readiness.stop()


def seed_webhook_configurations(fake_api: FakeApiServer, ca_bundle: bytes | None = None) -> None:
    """deploy/'s two configurations, as `kubectl apply` leaves them (no caBundle), or with
    ``ca_bundle`` in every webhook (what cainjector or the chart's existing-secret writes)."""
    objects = [find(render("deploy"), kind, WEBHOOK_CONFIGURATION) for kind in KINDS]
    if ca_bundle is not None:
        for obj in objects:
            for hook in obj["webhooks"]:
                hook["clientConfig"]["caBundle"] = base64.b64encode(ca_bundle).decode()
    fake_api.seed(objects)


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def configuration_reads(fake_api: FakeApiServer) -> int:
    return sum(
        count
        for key, count in fake_api.requests().items()
        if key.startswith("get ") and key.endswith("webhookconfigurations")
    )


def test_not_ready_until_the_leader_writes_the_ca_bundle_then_ready(
    fake_api: FakeApiServer, replica: Make
) -> None:
    seed_webhook_configurations(fake_api)
    follower = replica("pod-a")
    follower.certs.bootstrap(timeout=5)  # serves the Secret's certificate from now on
    assert follower.readiness.verdict == NOT_CHECKED
    assert not follower.readiness.check().ready
    answer = follower.readyz()
    assert (answer.status_code, answer.text) == (
        503,
        WAITING + " (the Lease holder, or cert-manager's cainjector, writes it)\n",
    )
    # The kubelet probes the health-probe listener: the same answer there.
    app = create_app(Settings(auth="none"), readiness=[follower.readiness])
    state: AppState = app.state.node_ipam
    probes = start_health_probes(listening(), state=state, deadline=1)
    try:
        probed = httpx.get(f"http://127.0.0.1:{probes.port}/readyz", timeout=5)
    finally:
        probes.stop()
    assert (probed.status_code, probed.text) == (answer.status_code, answer.text)

    leader = replica("pod-b", leader=True)
    leader.certs.bootstrap(timeout=5)
    leader.certs.sync()  # the Lease holder writes the Secret's CA into both caBundles
    assert follower.readiness.check().ready
    assert (follower.readyz().status_code, follower.readyz().text) == (200, "ok\n")
    assert leader.readiness.check().ready


def test_the_lease_holder_writes_the_ca_bundle_without_waiting_for_its_own_readiness(
    fake_api: FakeApiServer, replica: Make
) -> None:
    """The deadlock this must never be: the leader's readiness waits for a caBundle that
    only the leader writes. Its certificate sync does not look at readiness (it writes
    while this replica says not ready), and tells the check, which looks again at once."""
    seed_webhook_configurations(fake_api)
    leader = replica("pod-a", leader=True)
    leader.certs.bootstrap(timeout=5)
    assert not leader.readiness.check().ready
    woken: list[str] = []
    leader.certs.on_change(lambda: woken.append("caBundle or files written"))
    leader.certs.sync()
    assert woken == ["caBundle or files written"]
    stored = fake_api.get("secrets", POLICY.secret_name, POLICY.namespace)
    assert stored is not None
    for kind in KINDS:
        configuration = fake_api.get(STORE[kind], WEBHOOK_CONFIGURATION)
        assert configuration is not None
        bundles = [w["clientConfig"]["caBundle"] for w in configuration["webhooks"]]
        assert bundles == [stored["data"][CA_CERT]]
    assert leader.readiness.check().ready
    leader.certs.sync()
    assert woken == ["caBundle or files written"], "a sync that wrote nothing wakes nothing"


def test_a_write_wakes_the_check_thread_at_once(
    fake_api: FakeApiServer, replica: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As serve wires it (``certs.on_change(readiness.wake)``): with the not-ready pause
    stretched to a minute, only the wake-up can make the leader Ready within seconds."""
    monkeypatch.setattr(webhookready, "NOT_READY_FIRST_SECONDS", 60.0)
    monkeypatch.setattr(webhookready, "NOT_READY_MAX_SECONDS", 60.0)
    seed_webhook_configurations(fake_api)
    leader = replica("pod-a", leader=True)
    leader.certs.bootstrap(timeout=5)
    leader.certs.on_change(leader.readiness.wake)
    leader.readiness.start()
    wait_until(lambda: leader.readiness.verdict != NOT_CHECKED, what="the first check")
    assert not leader.readiness.ready()[0]
    leader.certs.start()  # its first check at once: writes caBundle, then wakes the check
    wait_until(lambda: leader.readiness.ready()[0], timeout=10, what="the leader in force")
    assert leader.readiness.healthy() == (True, "")


def test_a_ca_rotation_keeps_every_replica_ready_through_the_overlap(
    fake_api: FakeApiServer, replica: Make
) -> None:
    """The leader rotates the CA and writes both CAs into caBundle; every replica keeps
    serving the old certificate for the hand-over (kube-apiserver's informer may not have
    the new caBundle yet), then takes the new one at its next check. Ready throughout."""
    ca, serving = good_pair(ca_validity=15 * DAY)  # the CA is due in 5 days (renew 10 days)
    fake_api.seed([secret(ca=ca, serving=serving)])
    seed_webhook_configurations(fake_api)
    now = [datetime.datetime.now(datetime.UTC)]
    ticks = [0.0]
    leader = replica("pod-a", leader=True, clock=lambda: now[0], monotonic=lambda: ticks[0])
    follower = replica("pod-b", clock=lambda: now[0], monotonic=lambda: ticks[0])
    for each in (leader, follower):
        each.certs.bootstrap(timeout=5)
    # The follower's check reads what its TLS server presents (reloaded as a handshake would).
    reloading = ReloadingContext(
        cert_file=follower.certs.cert_file, key_file=follower.certs.key_file, check_seconds=0
    )
    follower.readiness.served = reloading.served_certificate
    leader.certs.sync()
    assert leader.readiness.check().ready and follower.readiness.check().ready
    served_before = reloading.served_certificate()
    leader_before = leader.certs.cert_file.read_bytes()

    now[0] += 6 * DAY  # the CA is within its renewal window: the leader rotates it
    leader.certs.sync()
    stored = fake_api.get("secrets", POLICY.secret_name, POLICY.namespace)
    assert stored is not None
    assert base64.b64decode(stored["data"][CA_CERT]).count(b"BEGIN CERTIFICATE") == 2
    follower.certs.sync()
    assert leader.certs.cert_file.read_bytes() == leader_before, "the leader waits"
    assert reloading.served_certificate() == served_before, "the follower waits"
    assert leader.certs._recheck_in == HANDOVER_SECONDS
    for each in (leader, follower):
        assert each.readiness.check().ready, each.readiness.verdict  # the overlap

    ticks[0] += HANDOVER_SECONDS - 0.1
    leader.certs.sync()
    assert leader.certs.cert_file.read_bytes() == leader_before, "not before the hand-over"
    ticks[0] += 0.1
    leader.certs.sync()
    assert leader.certs.cert_file.read_bytes() != leader_before, "the leader serves the new one"
    assert reloading.served_certificate() == served_before, "the follower until its check"
    assert leader.readiness.check().ready, leader.readiness.verdict
    assert follower.readiness.check().ready, follower.readiness.verdict
    follower.certs.sync()  # its next tick: the new certificate, served at the next handshake
    assert reloading.served_certificate() != served_before
    assert follower.readiness.check().ready, follower.readiness.verdict


def test_a_replaced_secret_is_served_at_once_when_the_old_certificate_is_no_longer_trusted(
    fake_api: FakeApiServer, replica: Make
) -> None:
    """No overlap (an unusable Secret replaced, a new CA alone in caBundle): the old
    certificate is not trusted any more, so waiting for the hand-over would only keep the
    replica out of force longer; it takes the new one at its next check."""
    fake_api.seed([secret(ca=None, serving=None)])  # unusable: the leader replaces it
    seed_webhook_configurations(fake_api)
    _, old_serving = good_pair()
    follower = replica("pod-b", monotonic=lambda: 0.0)
    write_key_pair(old_serving, cert_path=follower.certs.cert_file,
                   key_path=follower.certs.key_file)  # fmt: skip
    leader = replica("pod-a", leader=True)
    leader.certs.bootstrap(timeout=5)
    leader.certs.sync()  # caBundle = the new CA only
    assert not follower.readiness.check().ready
    follower.certs.sync()
    assert follower.certs.cert_file.read_bytes() == leader.certs.cert_file.read_bytes()
    assert follower.readiness.check().ready, follower.readiness.verdict


def test_cert_manager_mode_is_ready_once_cainjector_writes_the_bundle(
    fake_api: FakeApiServer, tmp_path: Path
) -> None:
    """No certificate sync at all: kubelet projects the Secret, cainjector the CA."""
    ca, serving = good_pair()
    write_key_pair(serving, cert_path=tmp_path / "tls.crt", key_path=tmp_path / "tls.key")
    readiness = CaBundleReadiness(
        api=KubernetesAPI(fake_api.client(), request_timeout=5),
        name=WEBHOOK_CONFIGURATION,
        served=(tmp_path / "tls.crt").read_bytes,
        interval=3600,
    )
    seed_webhook_configurations(fake_api)
    assert not readiness.check().ready
    seed_webhook_configurations(fake_api, ca_bundle=generate_ca().cert_pem)  # a stale CA
    assert "is not signed by a CA in caBundle" in readiness.check().reason
    seed_webhook_configurations(fake_api, ca_bundle=ca.cert_pem)
    assert readiness.check().ready


def test_without_webhook_configurations_readiness_does_not_wait(
    fake_api: FakeApiServer, replica: Make
) -> None:
    alone = replica("pod-a", leader=True)
    alone.certs.bootstrap(timeout=5)
    verdict = alone.readiness.check()
    assert verdict.ready
    assert "not found: readiness does not wait for a caBundle" in verdict.reason
    assert (alone.readyz().status_code, alone.readyz().text) == (200, "ok\n")


def test_readiness_depends_on_a_ca_bundle_only_with_the_webhook_and_certificate_files() -> None:
    api: Any = object()  # never called: from_settings only decides
    served: Callable[[], bytes] = bytes
    files = {"tls_cert_file": Path("tls.crt"), "tls_private_key_file": Path("tls.key")}
    assert CaBundleReadiness.from_settings(Settings(), api=api, served=served) is None, (
        "a generated certificate (--ca-bundle-out): whoever reads the CA registers the webhook"
    )
    assert (
        CaBundleReadiness.from_settings(Settings(webhook=False, **files), api=api, served=served)
        is None
    ), "--no-webhook: no admission, nothing to be in force"
    check = CaBundleReadiness.from_settings(
        Settings(webhook_configuration_name="lb-hooks", cert_check_interval_seconds=20, **files),
        api=api,
        served=served,
    )
    assert check is not None
    assert (check.name, check.interval) == ("lb-hooks", 20)
    assert create_app(Settings(auth="none")).state.node_ipam.readiness == ()


def test_probes_read_the_cached_verdict_and_never_call_the_api(
    fake_api: FakeApiServer, replica: Make
) -> None:
    seed_webhook_configurations(fake_api)
    alone = replica("pod-a")
    alone.certs.bootstrap(timeout=5)
    alone.readiness.check()
    reads = configuration_reads(fake_api)
    assert reads == 2, "one check reads both configurations once"
    app = create_app(Settings(auth="none"), readiness=[alone.readiness])
    with AppClient(app) as client:
        answers = {client.get("/readyz").status_code for _ in range(50)}
    assert answers == {503}
    assert configuration_reads(fake_api) == reads


def test_api_errors_a_new_replica_says_why_a_ready_one_stays_ready(
    fake_api: FakeApiServer, replica: Make
) -> None:
    leader = replica("pod-a", leader=True, timeout=0.5)
    seed_webhook_configurations(fake_api)
    leader.certs.bootstrap(timeout=5)
    fake_api.fail(method="GET", path=VALIDATING_PATH, status=403, message="forbidden by RBAC")
    verdict = leader.readiness.check()
    assert not verdict.ready
    assert verdict.reason.startswith("cannot read the webhook configurations: 403")
    leader.certs.sync()
    assert leader.readiness.check().ready
    fake_api.fail(method="GET", path=VALIDATING_PATH, status=503, times=3)
    assert leader.readiness.check().ready, "an API outage does not take a replica in force out"
    # A read that hangs is bounded by the client's timeout (0.5 s here).
    fake_api.hold(method="GET", path=VALIDATING_PATH)
    try:
        started = time.monotonic()
        assert leader.readiness.check().ready
        assert time.monotonic() - started < 3
    finally:
        fake_api.release()


def test_the_check_thread_survives_an_unexpected_error(
    fake_api: FakeApiServer, replica: Make
) -> None:
    seed_webhook_configurations(fake_api)
    alone = replica("pod-a")
    calls: list[int] = []
    recovered = threading.Event()

    def flaky() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("bug")
        recovered.set()
        return generate_serving_cert(generate_ca(), POLICY.dns_names).cert_pem

    alone.readiness.served = flaky
    alone.readiness.start()
    assert recovered.wait(10), "the check thread died on the first error"
    assert alone.readiness.healthy() == (True, "")
    alone.readiness.stop()
    assert alone.readiness.healthy() == (False, "webhook caBundle check is not running")


# -- the admission probe: the caBundle verifies, but does kube-apiserver call the webhook? --


class _Creator:
    """A stub of ``dry_run_create_service``: raises ``error`` or answers; counts calls."""

    def __init__(self, error: ApiError | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def dry_run_create_service(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((namespace, body))
        if self.error is not None:
            raise self.error
        return body


ANNOTATION = "io.cilium.nodeipam/match-node-labels"
DENIED = ApiError(
    400,
    'admission webhook "validate.node-ipam-lb.io" denied the request: metadata.annotations'
    f"[{ANNOTATION}]: Invalid value: ...",
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (DENIED, True),
        (None, False),  # admitted: failurePolicy Ignore, the webhook not reached
        (ApiError(500, "etcdserver: request timed out"), False),
        (ApiError(0, "connection refused"), False),
        (ApiError(403, 'services is forbidden: cannot create resource "services"'), None),
        (ApiError(404, 'namespaces "default" not found'), None),
    ],
)
def test_the_admission_probe_is_ready_only_when_the_webhook_denies(
    error: ApiError | None, expected: bool | None
) -> None:
    api = _Creator(error)
    verdict = webhookready.admission_probe(
        api, namespace="default", load_balancer_class="io.cilium/node", annotation=ANNOTATION
    )
    assert (None if verdict is None else verdict.ready) == expected
    if verdict is not None and not verdict.ready:
        assert "default" in verdict.reason
    ((namespace, body),) = api.calls
    assert namespace == body["metadata"]["namespace"] == "default"
    assert body["spec"]["loadBalancerClass"] == "io.cilium/node"
    assert body["metadata"]["annotations"] == {ANNOTATION: webhookready.PROBE_SELECTOR}


def test_the_probe_selector_is_one_our_webhook_denies() -> None:
    from app.core.selector import SelectorError, parse

    with pytest.raises(SelectorError):
        parse(webhookready.PROBE_SELECTOR)


def bundled_leader(fake_api: FakeApiServer, replica: Make) -> Replica:
    """deploy/'s configurations and a Lease holder that wrote its CA into their caBundle."""
    seed_webhook_configurations(fake_api)
    leader = replica("pod-a", leader=True)
    leader.certs.bootstrap(timeout=5)
    leader.certs.sync()
    return leader


def test_a_verified_bundle_waits_for_the_probe_once_per_time_in_force(
    fake_api: FakeApiServer, replica: Make
) -> None:
    leader = bundled_leader(fake_api, replica)
    answers: list[webhookready.Verdict | None] = [
        webhookready.Verdict(False, "kube-apiserver admitted a dry-run Service"),
        webhookready.Verdict(True, ""),
    ]
    calls: list[int] = []

    def probe() -> webhookready.Verdict | None:
        calls.append(1)
        return answers.pop(0) if answers else webhookready.Verdict(True, "")

    leader.readiness.probe = probe
    first = leader.readiness.check()
    assert (first.ready, first.reason) == (False, "kube-apiserver admitted a dry-run Service")
    assert leader.readyz().status_code == 503
    assert leader.readiness.check().ready
    assert leader.readiness.check().ready
    assert len(calls) == 2, "in force: the probe is not repeated"
    # The bundle stops verifying (someone else's CA), then verifies again: probed again.
    for kind in KINDS:
        obj = fake_api.get(STORE[kind], WEBHOOK_CONFIGURATION)
        for hook in obj["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(generate_ca().cert_pem).decode()
        fake_api.seed([obj])
    assert not leader.readiness.check().ready
    leader.certs.sync()
    assert leader.readiness.check().ready
    assert len(calls) == 3


def test_without_permission_to_probe_readiness_rests_on_the_bundle(
    fake_api: FakeApiServer, replica: Make
) -> None:
    leader = bundled_leader(fake_api, replica)
    leader.readiness.probe = lambda: None
    assert leader.readiness.check().ready


def test_the_probe_through_the_fake_api_server_is_a_dry_run_that_is_admitted_unreached(
    fake_api: FakeApiServer,
) -> None:
    """deploy/'s webhooks point at a Service the fake API server cannot reach, and their
    failurePolicy is Ignore: the dry run is admitted (not ready), and nothing is stored."""
    seed_webhook_configurations(fake_api)
    fake_api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    api = KubernetesAPI(fake_api.client(), request_timeout=5)
    verdict = webhookready.admission_probe(
        api, namespace="default", load_balancer_class="io.cilium/node", annotation=ANNOTATION
    )
    assert verdict is not None and not verdict.ready
    assert "admitted" in verdict.reason
    assert api.read_service(namespace="default", name=webhookready.PROBE_SERVICE_NAME) is None


def test_the_probe_is_wired_from_the_settings() -> None:
    files = {"tls_cert_file": Path("tls.crt"), "tls_private_key_file": Path("tls.key")}
    api: Any = _Creator(DENIED)
    check = CaBundleReadiness.from_settings(Settings(**files), api=api, served=bytes)
    assert check is not None and check.probe is not None
    assert check.probe() == webhookready.Verdict(True, "")
    assert api.calls[0][0] == "default"
    off = CaBundleReadiness.from_settings(
        Settings(admission_probe_namespace="", **files), api=api, served=bytes
    )
    assert off is not None and off.probe is None
    with pytest.raises(ValueError, match=r"admission_probe_namespace|namespace name"):
        Settings(admission_probe_namespace="Not_A_Namespace", **files)


# -- no replica Ready: the Lease holder alone may be Ready on the bundle -------------------


ADMITTED = webhookready.Verdict(False, "kube-apiserver admitted a dry-run Service")


def test_an_unrefused_probe_makes_ready_only_where_bootstrap_says_so(
    fake_api: FakeApiServer, replica: Make
) -> None:
    """The probe admitted: Ready only when ``bootstrap`` gives a reason, asked with the
    Services deploy/'s configurations call. Ready that way, it keeps probing until the
    first refusal, and then no more while in force."""
    leader = bundled_leader(fake_api, replica)
    answers = [ADMITTED, ADMITTED, ADMITTED, webhookready.Verdict(True, "")]
    probes: list[int] = []
    leader.readiness.probe = lambda: probes.append(1) or answers.pop(0)
    asked: list[frozenset[tuple[str, str]]] = []
    reasons = [None, "no other ready or serving endpoint", "no other ready or serving endpoint"]
    leader.readiness.bootstrap = lambda services: asked.append(services) or reasons.pop(0)
    first = leader.readiness.check()
    assert (first.ready, first.reason) == (False, ADMITTED.reason)
    assert leader.readiness.check().ready and leader.readiness.alone
    assert leader.readiness.check().ready and leader.readiness.alone
    assert leader.readiness.check().ready and not leader.readiness.alone  # refused at last
    assert leader.readiness.check().ready
    assert asked == [frozenset({("node-ipam-lb", "node-ipam-lb-webhook")})] * 3
    assert len(probes) == 4, "probed until refused, then not again while in force"


def test_alone_without_a_refusal_for_a_minute_warns_once(
    fake_api: FakeApiServer, replica: Make, caplog: pytest.LogCaptureFixture
) -> None:
    leader = bundled_leader(fake_api, replica)
    now = [datetime.datetime.now(datetime.UTC)]
    leader.readiness.clock = lambda: now[0]
    leader.readiness.probe = lambda: ADMITTED
    leader.readiness.bootstrap = lambda services: "alone"
    with caplog.at_level("INFO", logger="node_ipam_lb.readiness"):
        for _ in range(4):
            assert leader.readiness.check().ready
            now[0] += datetime.timedelta(seconds=webhookready.ALONE_WARNING_SECONDS / 2)
    warnings = [r for r in caplog.records if "does not reach this replica" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"


def test_a_refused_probe_never_asks_bootstrap(fake_api: FakeApiServer, replica: Make) -> None:
    leader = bundled_leader(fake_api, replica)
    leader.readiness.probe = lambda: webhookready.Verdict(True, "")
    leader.readiness.bootstrap = lambda services: pytest.fail("asked although refused")
    assert leader.readiness.check().ready


def test_a_url_webhook_is_never_bootstrapped(fake_api: FakeApiServer, replica: Make) -> None:
    """A webhook called by ``url`` has no Service whose endpoints could be read: the
    probe's verdict stands."""
    leader = bundled_leader(fake_api, replica)
    obj = fake_api.get(STORE["ValidatingWebhookConfiguration"], WEBHOOK_CONFIGURATION)
    obj["webhooks"][0]["clientConfig"].pop("service")
    obj["webhooks"][0]["clientConfig"]["url"] = "https://webhook.example:9443/validate"
    fake_api.seed([obj])
    leader.readiness.probe = lambda: ADMITTED
    leader.readiness.bootstrap = lambda services: pytest.fail(f"asked for {services}")
    assert not leader.readiness.check().ready


@dataclass
class _Slices:
    """``ClusterCache.endpoint_slices`` from a dict (namespace, name) -> views."""

    slices: dict[tuple[str, str], list[EndpointSliceView]]

    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]:
        return self.slices.get((namespace, service_name), [])


@dataclass
class _Controller:
    cache: _Slices
    synced: bool = True
    leader: bool = True

    def ready(self) -> bool:
        return self.synced

    def is_leader(self) -> bool:
        return self.leader


def _slice(*pods: str) -> EndpointSliceView:
    """A slice of the webhook Service whose ready or serving endpoints are ``pods``."""
    return EndpointSliceView(
        namespace="node-ipam-lb",
        name="node-ipam-lb-webhook-x1",
        service_name="node-ipam-lb-webhook",
        ready_node_names=frozenset({"n1"} if pods else ()),
        backends=frozenset(pods),
    )


WEBHOOK = ("node-ipam-lb", "node-ipam-lb-webhook")
OWN = "node-ipam-lb-6c9f-a"


@pytest.mark.parametrize(
    ("controller", "leader_elect", "alone"),
    [
        (_Controller(_Slices({})), True, True),  # no slice at all: a fresh install
        (_Controller(_Slices({WEBHOOK: [_slice()]})), True, True),
        # Its own endpoint, Ready by the bootstrap: still alone (no flapping).
        (_Controller(_Slices({WEBHOOK: [_slice(OWN)]})), True, True),
        # Another replica, ready (or serving while terminating): it answers the probe.
        (_Controller(_Slices({WEBHOOK: [_slice(OWN, "node-ipam-lb-6c9f-b")]})), True, False),
        (_Controller(_Slices({}), leader=False), True, False),  # a follower waits for a denial
        (_Controller(_Slices({}), leader=False), False, True),  # no leader election: each
        (_Controller(_Slices({}), synced=False), True, False),  # no slices known yet
    ],
)
def test_only_the_lease_holder_with_no_ready_endpoint_is_ready_alone(
    controller: _Controller, leader_elect: bool, alone: bool
) -> None:
    from app.server import _lone_lease_holder

    reason = _lone_lease_holder(controller, leader_elect=leader_elect, pod=OWN)(
        frozenset({WEBHOOK})
    )
    assert (reason is not None) == alone
    if reason is not None:
        assert "node-ipam-lb/node-ipam-lb-webhook" in reason and "Lease holder" in reason
