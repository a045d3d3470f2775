"""Is the webhook in force (app/core/cabundle.py): does each webhook's caBundle verify the
certificate a replica serves, as kube-apiserver's TLS client would (Go's x509 Verify with
the bundle as its roots)? The cases an operator meets on install, rotation and upgrade."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.core.cabundle import NOT_IN_FORCE, chain_problem, in_force, served_chain
from app.core.pki import KeyPair, generate_ca, generate_serving_cert

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
NAMES = ["node-ipam-lb-webhook.node-ipam-lb.svc"]
VALIDATING = "validatingwebhookconfigurations/node-ipam-lb"
MUTATING = "mutatingwebhookconfigurations/node-ipam-lb"


def _key(pair: KeyPair) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _build(subject: str, *, issuer: KeyPair | None, ca: bool, days: float = 30) -> KeyPair:
    """A certificate for ``subject``, signed by ``issuer`` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    signer = _key(issuer) if issuer else key
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.certificate.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - DAY)
        .not_valid_after(NOW + days * DAY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(signer, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=key_pem)


OLD_CA = generate_ca(common_name="old-ca", validity=365 * DAY, now=NOW)
NEW_CA = generate_ca(common_name="new-ca", validity=365 * DAY, now=NOW)
OTHER_CA = generate_ca(common_name="someone-elses-ca", validity=365 * DAY, now=NOW)
EXPIRED_CA = generate_ca(common_name="expired-ca", validity=DAY, now=NOW - 30 * DAY)
OLD_CERT = generate_serving_cert(OLD_CA, NAMES, 30 * DAY, now=NOW)
NEW_CERT = generate_serving_cert(NEW_CA, NAMES, 30 * DAY, now=NOW)
EXPIRED_CERT = generate_serving_cert(OLD_CA, NAMES, DAY, now=NOW - 30 * DAY)
SELF_SIGNED = _build(NAMES[0], issuer=None, ca=False)  # cert-manager's selfSigned Issuer
INTERMEDIATE = _build("intermediate-ca", issuer=OLD_CA, ca=True)
BEHIND_INTERMEDIATE = _build(NAMES[0], issuer=INTERMEDIATE, ca=False)


def chain(*pairs: KeyPair) -> list[x509.Certificate]:
    return served_chain(b"".join(p.cert_pem for p in pairs))


def configuration(*bundles: bytes | str | None) -> dict[str, Any]:
    """A webhook configuration with one webhook per bundle (PEM bytes, raw text, None)."""
    webhooks = []
    for index, bundle in enumerate(bundles):
        client: dict[str, Any] = {"service": {"name": "node-ipam-lb-webhook", "path": "/x"}}
        if isinstance(bundle, bytes):
            client["caBundle"] = base64.b64encode(bundle).decode()
        elif isinstance(bundle, str):
            client["caBundle"] = bundle
        webhooks.append({"name": f"hook-{index}.node-ipam-lb.io", "clientConfig": client})
    return {"webhooks": webhooks}


def both(*bundles: bytes | str | None) -> dict[str, dict[str, Any] | None]:
    return {VALIDATING: configuration(*bundles), MUTATING: configuration(*bundles)}


# (name, configurations, served chain, ready, words of the reason)
CASES: list[tuple[str, dict[str, Any], Sequence[KeyPair], bool, str]] = [
    ("fresh install: the leader has not written caBundle yet",
     both(None), [OLD_CERT], False, "no caBundle yet"),
    ("the CA that signed the served certificate",
     both(OLD_CA.cert_pem), [OLD_CERT], True, "verifies the serving certificate"),
    ("someone else's CA (a stale bundle from an older install)",
     both(OTHER_CA.cert_pem), [OLD_CERT], False, "is not signed by a CA in caBundle"),
    ("CA rotation overlap: new and old CA, replica still serving the old certificate",
     both(NEW_CA.cert_pem + OLD_CA.cert_pem), [OLD_CERT], True, "verifies"),
    ("CA rotation overlap: new and old CA, replica serving the new certificate",
     both(NEW_CA.cert_pem + OLD_CA.cert_pem), [NEW_CERT], True, "verifies"),
    ("a replica serving a certificate from a CA the bundle no longer holds",
     both(NEW_CA.cert_pem), [OLD_CERT], False, "'CN=old-ca'"),
    ("cert-manager selfSigned Issuer: the leaf itself is the bundle",
     both(SELF_SIGNED.cert_pem), [SELF_SIGNED], True, "verifies"),
    ("an intermediate served after the leaf, the root in the bundle",
     both(OLD_CA.cert_pem), [BEHIND_INTERMEDIATE, INTERMEDIATE], True, "verifies"),
    ("an intermediate not served: the chain does not reach the bundle",
     both(OLD_CA.cert_pem), [BEHIND_INTERMEDIATE], False, "not signed by a CA in caBundle"),
    ("the only CA in the bundle expired",
     both(EXPIRED_CA.cert_pem), [_build(NAMES[0], issuer=EXPIRED_CA, ca=False)], False,
     "is not signed by a CA in caBundle"),
    ("the served certificate expired",
     both(OLD_CA.cert_pem), [EXPIRED_CERT], False, "the serving certificate expired"),
    ("caBundle that is not base64", both("%%%"), [OLD_CERT], False, "not base64"),
    ("caBundle that holds no certificate",
     both(b"not a certificate"), [OLD_CERT], False, "holds no PEM certificate"),
    ("one webhook of two without caBundle (the second was added by an upgrade)",
     both(OLD_CA.cert_pem, None), [OLD_CERT], False, "webhook hook-1.node-ipam-lb.io"),
    ("only the validating configuration exists, and trusts the certificate",
     {VALIDATING: configuration(OLD_CA.cert_pem), MUTATING: None}, [OLD_CERT], True,
     f"caBundle of {VALIDATING} verifies"),
    ("no webhook configuration at all (installed without them)",
     {VALIDATING: None, MUTATING: None}, [OLD_CERT], True,
     "not found: readiness does not wait for a caBundle"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("configurations", "served", "ready", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_in_force(
    configurations: dict[str, Any], served: Sequence[KeyPair], ready: bool, words: str
) -> None:
    verdict = in_force(configurations, chain=chain(*served), now=NOW)
    assert verdict.ready is ready, verdict.reason
    assert words in verdict.reason
    assert verdict.reason.startswith(NOT_IN_FORCE) is not ready


def test_the_reason_names_the_configuration_and_webhook_an_operator_would_fix() -> None:
    verdict = in_force(
        {VALIDATING: configuration(OLD_CA.cert_pem), MUTATING: configuration(None)},
        chain=chain(OLD_CERT),
        now=NOW,
    )
    assert verdict.reason == (
        f"{NOT_IN_FORCE}: {MUTATING} webhook hook-0.node-ipam-lb.io: no caBundle yet"
        " (the Lease holder, or cert-manager's cainjector, writes it)"
    )


def test_a_certificate_not_yet_valid_is_not_verified() -> None:
    later = generate_serving_cert(OLD_CA, NAMES, DAY, now=NOW + 10 * DAY)
    problem = chain_problem(OLD_CA.cert_pem, chain(later), now=NOW)
    assert problem is not None and "not valid before" in problem


def test_a_served_file_without_a_certificate_is_an_error() -> None:
    with pytest.raises(ValueError):
        served_chain(b"-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n")
