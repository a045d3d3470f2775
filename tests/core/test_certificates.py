"""Self-managed certificates, the pure part: what a Secret needs, what gets written.

Times are the real "now" plus an offset (the certificates are real and start now), so the
cases read like the calendar an operator sees: "25 days into a 30-day certificate".
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest
from cryptography import x509

from app.core.certificates import (
    CA_CERT,
    CA_KEY,
    TLS_CERT,
    TLS_KEY,
    CertPolicy,
    Decision,
    ca_bundle_patch,
    decide,
    issue,
    read_ca,
    read_serving,
)
from app.core.pki import generate_ca, generate_serving_cert
from tests.deploy.certdata import DAY, POLICY, b64, good_pair, secret

NOW = datetime.datetime.now(datetime.UTC)


def _ca_and_serving() -> dict[str, Any]:
    return secret(ca=(pair := good_pair())[0], serving=pair[1])


def _other_ca_signed() -> dict[str, Any]:
    ca, _ = good_pair()
    _, serving = good_pair()
    return secret(ca=ca, serving=serving)


def _wrong_names() -> dict[str, Any]:
    ca = generate_ca()
    return secret(ca=ca, serving=generate_serving_cert(ca, ["node-ipam-lb-webhook.default.svc"]))


def _swapped_tls_key() -> dict[str, Any]:
    ca, serving = good_pair()
    _, other = good_pair()
    return secret(ca=ca, serving=serving, overrides={TLS_KEY: b64(other.key_pem)})


def _swapped_ca_key() -> dict[str, Any]:
    ca, serving = good_pair()
    other = generate_ca()
    return secret(ca=ca, serving=serving, overrides={CA_KEY: b64(other.key_pem)})


def _serving_cert_as_ca() -> dict[str, Any]:
    ca, serving = good_pair()
    data = secret(ca=ca, serving=serving)
    data["data"][CA_CERT], data["data"][CA_KEY] = b64(serving.cert_pem), b64(serving.key_pem)
    return data


def _short_lived_ca() -> dict[str, Any]:
    ca, serving = good_pair(ca_validity=15 * DAY)
    return secret(ca=ca, serving=serving)


CASES: list[tuple[str, Callable[[], dict[str, Any] | None], datetime.timedelta, str, str]] = [
    ("no Secret yet", lambda: None, 0 * DAY, "create", "does not exist"),
    ("fresh certificates are kept", _ca_and_serving, 0 * DAY, "keep", "valid until"),
    ("20 days into a 30-day certificate: kept", _ca_and_serving, 19 * DAY, "keep", "valid"),
    ("25 days into a 30-day certificate: renewed", _ca_and_serving, 25 * DAY, "renew",
     "within the renewal window"),
    ("expired serving certificate is reissued", _ca_and_serving, 31 * DAY, "reissue", "expired"),
    ("CA past its expiry starts over", _ca_and_serving, 366 * DAY, "replace", "CA expired"),
    ("CA within the renewal window is rotated", _short_lived_ca, 6 * DAY, "rotate",
     "CA expires"),
    ("Secret with no data starts over", lambda: secret(ca=None, serving=None), 0 * DAY,
     "replace", "ca.crt: Required value"),
    ("Secret whose data is not a map starts over",
     lambda: {"metadata": {"name": "x"}, "data": ["junk"]}, 0 * DAY, "replace", "Required"),
    ("ca.crt that is not base64 starts over",
     lambda: secret(ca=generate_ca(), serving=None, overrides={CA_CERT: "%%%"}), 0 * DAY,
     "replace", "ca.crt: Invalid value: not base64"),
    ("ca.crt that is not PEM starts over",
     lambda: secret(ca=generate_ca(), serving=None, overrides={CA_CERT: b64(b"hello")}),
     0 * DAY, "replace", "ca.crt: Invalid value: not a PEM certificate"),
    ("ca.key of another CA starts over", _swapped_ca_key, 0 * DAY, "replace",
     "ca.key: Invalid value: does not match ca.crt"),
    ("a serving certificate used as CA starts over", _serving_cert_as_ca, 0 * DAY, "replace",
     "not a CA certificate"),
    ("missing tls.crt is reissued", lambda: secret(ca=generate_ca(), serving=None), 0 * DAY,
     "reissue", "tls.crt: Required value"),
    ("tls.key of another certificate is reissued", _swapped_tls_key, 0 * DAY, "reissue",
     "tls.key: Invalid value: does not match tls.crt"),
    ("serving certificate for another Service is reissued", _wrong_names, 0 * DAY, "reissue",
     "not valid for node-ipam-lb-webhook.node-ipam-lb.svc"),
    ("serving certificate from another CA is reissued", _other_ca_signed, 0 * DAY, "reissue",
     "not signed by the CA"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "offset", "action", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(
    make: Callable[[], dict[str, Any] | None], offset: datetime.timedelta, action: str, reason: str
) -> None:
    decision = decide(make(), policy=POLICY, now=NOW + offset)
    assert decision.action == action, decision.reason
    assert reason in decision.reason
    assert "node-ipam-lb/node-ipam-lb-webhook-tls" in decision.reason
    assert decision.urgent is (action in ("create", "replace", "reissue"))


def _data(secret_data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(secret_data[key])


@pytest.mark.parametrize("action", ["create", "replace"])
def test_starting_over_issues_a_secret_that_is_then_kept(action: str) -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    data = issue(Decision(action, "test"), secret=None, policy=POLICY, now=NOW)  # type: ignore[arg-type]
    after = datetime.datetime.now(datetime.UTC)
    assert set(data) == {CA_CERT, CA_KEY, TLS_CERT, TLS_KEY}
    assert decide(secret(ca=None, serving=None, overrides=data), policy=POLICY, now=NOW).action == (
        "keep"
    )
    serving = read_serving(data).certificate
    assert before <= serving.not_valid_after_utc - 30 * DAY <= after


@pytest.mark.parametrize("action", ["renew", "reissue"])
def test_renewal_keeps_the_ca_and_replaces_the_serving_certificate(action: str) -> None:
    before = _ca_and_serving()
    data = issue(Decision(action, "test"), secret=before, policy=POLICY, now=NOW)  # type: ignore[arg-type]
    assert (data[CA_CERT], data[CA_KEY]) == (before["data"][CA_CERT], before["data"][CA_KEY])
    assert data[TLS_CERT] != before["data"][TLS_CERT]
    assert data[TLS_KEY] != before["data"][TLS_KEY]
    after = secret(ca=None, serving=None, overrides=data)
    assert decide(after, policy=POLICY, now=NOW).action == "keep"


def test_ca_rotation_keeps_the_old_ca_trusted_until_it_expires() -> None:
    before = _short_lived_ca()
    old_ca, _ = read_ca(before["data"])
    data = issue(Decision("rotate", "test"), secret=before, policy=POLICY, now=NOW + 6 * DAY)
    bundle = x509.load_pem_x509_certificates(_data(data, CA_CERT))
    assert len(bundle) == 2
    assert bundle[1] == old_ca.certificate
    new_ca, _ = read_ca(data)
    assert bundle[0] == new_ca.certificate != old_ca.certificate
    read_serving(data).certificate.verify_directly_issued_by(new_ca.certificate)
    # The next rotation keeps only the CA it replaces: the first one is gone.
    later = issue(
        Decision("rotate", "test"),
        secret=secret(ca=None, serving=None, overrides=data),
        policy=POLICY,
        now=NOW + 16 * DAY,
    )
    later_bundle = x509.load_pem_x509_certificates(_data(later, CA_CERT))
    assert later_bundle[1:] == [new_ca.certificate]
    assert old_ca.certificate not in later_bundle


def test_keep_issues_nothing() -> None:
    with pytest.raises(ValueError, match="'keep' issues nothing"):
        issue(Decision("keep", "fine"), secret=_ca_and_serving(), policy=POLICY, now=NOW)


def test_renewal_window_longer_than_the_certificate_is_a_startup_error() -> None:
    with pytest.raises(ValueError, match="cert-renew-before: Invalid value"):
        CertPolicy(
            namespace="n",
            secret_name="s",
            service_name="svc",
            webhook_configuration_name="w",
            serving_validity=DAY,
            renew_before=2 * DAY,
        )


def _configuration(*bundles: str | None) -> dict[str, Any]:
    webhooks = []
    for index, bundle in enumerate(bundles):
        client: dict[str, Any] = {"service": {"name": "node-ipam-lb-webhook"}}
        if bundle is not None:
            client["caBundle"] = bundle
        webhooks.append({"name": f"hook-{index}.node-ipam-lb.io", "clientConfig": client})
    return {"kind": "ValidatingWebhookConfiguration", "webhooks": webhooks}


CA_PEM = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
WANTED = b64(CA_PEM)

BUNDLE_CASES = [
    ("freshly applied configuration gets the CA", (None, None), 2),
    ("caBundle wiped by an apply is put back", ("", WANTED), 1),
    ("stale CA is replaced", ("b2xk", "b2xk"), 2),
    ("configuration already right is left alone", (WANTED, WANTED), 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("bundles", "patched"), [c[1:] for c in BUNDLE_CASES], ids=[c[0] for c in BUNDLE_CASES]
)
def test_ca_bundle_patch(bundles: tuple[str | None, ...], patched: int) -> None:
    configuration = _configuration(*bundles)
    ops = ca_bundle_patch(configuration, ca_bundle=CA_PEM)
    assert len([op for op in ops if op["op"] == "add"]) == patched
    fixed = jsonpatch.apply_patch(configuration, ops)
    assert [w["clientConfig"]["caBundle"] for w in fixed["webhooks"]] == [WANTED] * len(bundles)
    assert ca_bundle_patch(fixed, ca_bundle=CA_PEM) == []


def test_ca_bundle_patch_fails_rather_than_writing_into_a_reordered_webhook() -> None:
    configuration = _configuration(None, WANTED)
    ops = ca_bundle_patch(configuration, ca_bundle=CA_PEM)
    configuration["webhooks"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(configuration, ops)
