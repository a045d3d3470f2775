"""Self-managed webhook certificates: the pure decisions (no I/O, no clock of its own).

The design follows open-policy-agent/cert-controller's rotator (the one MetalLB uses;
docs/reference/kubernetes-conventions.md §11.1): a CA and a serving certificate for
``<service>.<namespace>.svc`` live in one Secret (keys ``ca.crt``, ``ca.key``, ``tls.crt``,
``tls.key``); the serving certificate is renewed ``renew_before`` ahead of its expiry; the
CA goes into ``caBundle`` of every webhook of our two webhook configurations. Unlike the
rotator, the Secret is created when missing, and a CA rotation keeps the previous CA in
``ca.crt`` (after the new one) so replicas still serving a certificate signed by it stay
trusted until they reload.

:func:`decide` says what a Secret needs; :func:`issue` builds the new Secret data;
:func:`ca_bundle_patch` says how to fix a webhook configuration. The shell that reads
and writes them is :mod:`app.web.certsync`.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from app.core.pki import KeyPair, generate_ca, generate_serving_cert

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"

Action = Literal["keep", "renew", "reissue", "rotate", "create", "replace"]
"""What a Secret needs:

- ``keep``: nothing;
- ``renew``: the serving certificate is valid but due (within ``renew_before``): new one, same CA;
- ``reissue``: the serving certificate is unusable (other names, other CA, wrong key,
  expired, unreadable) but the CA is fine: new one, same CA;
- ``rotate``: the CA is valid but due: new CA and serving certificate, old CA kept in the bundle;
- ``create``: no Secret;
- ``replace``: the CA is unusable (missing, unreadable, key mismatch, expired): start over.
"""

URGENT: frozenset[Action] = frozenset({"reissue", "create", "replace"})
"""Actions without which the Secret cannot be served at all (any replica may write them)."""


class CertificateError(ValueError):
    """Secret content that cannot be used; ``str(err)`` names the key and the reason."""


@dataclass(frozen=True, slots=True)
class CertPolicy:
    """Where the certificate lives and how long it lasts.

    ``dns_names`` are the serving certificate's names, the first being
    ``<service>.<namespace>.svc`` (the name the API server dials for a webhook Service).
    Durations are :class:`datetime.timedelta`.

    Raises:
        ValueError: ``renew_before`` is not shorter than ``serving_validity`` or
            ``ca_validity`` (the certificate would be due as soon as it is issued).
    """

    namespace: str
    secret_name: str
    service_name: str
    webhook_configuration_name: str
    ca_validity: datetime.timedelta = datetime.timedelta(days=3650)
    serving_validity: datetime.timedelta = datetime.timedelta(days=365)
    renew_before: datetime.timedelta = datetime.timedelta(days=90)

    def __post_init__(self) -> None:
        for field, validity in (
            ("cert-validity", self.serving_validity),
            ("ca-validity", self.ca_validity),
        ):
            if self.renew_before >= validity:
                raise ValueError(
                    f"cert-renew-before: Invalid value: {self.renew_before}: must be shorter"
                    f" than {field} ({validity})"
                )

    @property
    def dns_names(self) -> tuple[str, ...]:
        """``<service>.<namespace>.svc`` and its ``.cluster.local`` form."""
        name = f"{self.service_name}.{self.namespace}.svc"
        return (name, f"{name}.cluster.local")


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a Secret and why (a sentence for the log)."""

    action: Action
    reason: str

    @property
    def urgent(self) -> bool:
        """True when the Secret cannot be served as it is (see :data:`URGENT`)."""
        return self.action in URGENT


def _pem(data: Mapping[str, Any], key: str) -> bytes:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise CertificateError(f"{key}: Required value")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise CertificateError(f"{key}: Invalid value: not base64") from err


def _pair(
    data: Mapping[str, Any], cert_key: str, key_key: str
) -> tuple[KeyPair, list[x509.Certificate]]:
    cert_pem, key_pem = _pem(data, cert_key), _pem(data, key_key)
    try:
        certs = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as err:
        raise CertificateError(f"{cert_key}: Invalid value: not a PEM certificate") from err
    try:
        private = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as err:
        raise CertificateError(f"{key_key}: Invalid value: not an unencrypted PEM key") from err
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if certs[0].public_key().public_bytes(encoding, public) != private.public_key().public_bytes(
        encoding, public
    ):
        raise CertificateError(f"{key_key}: Invalid value: does not match {cert_key}")
    return KeyPair(
        cert_pem=certs[0].public_bytes(serialization.Encoding.PEM), key_pem=key_pem
    ), certs


def read_ca(data: Mapping[str, Any]) -> tuple[KeyPair, bytes]:
    """Parse ``ca.crt``/``ca.key`` of a Secret's ``data`` (base64 values).

    Returns the signing CA (first certificate of ``ca.crt``) and ``ca.crt`` as stored.

    Raises:
        CertificateError: a key is missing, not base64/PEM, the key does not match, the
            CA key is not ECDSA (what :func:`app.core.pki.generate_serving_cert` signs with) or
            the certificate is not a CA.
    """
    ca, _ = _pair(data, CA_CERT, CA_KEY)
    if not isinstance(
        serialization.load_pem_private_key(ca.key_pem, password=None), ec.EllipticCurvePrivateKey
    ):
        raise CertificateError(f"{CA_KEY}: Invalid value: not an ECDSA key")
    try:
        is_ca = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise CertificateError(f"{CA_CERT}: Invalid value: not a CA certificate")
    return ca, _pem(data, CA_CERT)


def read_serving(data: Mapping[str, Any]) -> KeyPair:
    """Parse ``tls.crt``/``tls.key`` (same rules and errors as :func:`read_ca`)."""
    serving, _ = _pair(data, TLS_CERT, TLS_KEY)
    return serving


def _remaining(cert: x509.Certificate, now: datetime.datetime) -> datetime.timedelta:
    return cert.not_valid_after_utc - now


def _serving_problem(
    serving: KeyPair, ca: KeyPair, policy: CertPolicy, now: datetime.datetime
) -> str | None:
    cert = serving.certificate
    try:
        names = set(
            cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName
            ).value.get_values_for_type(x509.DNSName)
        )
    except x509.ExtensionNotFound:
        names = set()
    missing = [n for n in policy.dns_names if n not in names]
    if missing:
        return f"{TLS_CERT}: not valid for {', '.join(missing)}"
    try:
        cert.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return f"{TLS_CERT}: not signed by the CA in {CA_CERT}"
    if now < cert.not_valid_before_utc:
        return f"{TLS_CERT}: not valid before {cert.not_valid_before_utc.isoformat()}"
    if now >= cert.not_valid_after_utc:
        return f"{TLS_CERT}: expired at {cert.not_valid_after_utc.isoformat()}"
    return None


def decide(
    secret: Mapping[str, Any] | None, *, policy: CertPolicy, now: datetime.datetime
) -> Decision:
    """Decide what the certificate Secret needs at ``now`` (timezone-aware UTC).

    ``secret`` is the Secret as the API returns it (``data`` values base64), or ``None``
    when it does not exist. Checks, in order: the CA (readable, key matches, valid, not
    within ``renew_before`` of expiry), then the serving certificate (readable, key
    matches, names, signed by the CA, valid, not due). Never raises on content.
    """
    where = f"Secret {policy.namespace}/{policy.secret_name}"
    if secret is None:
        return Decision("create", f"{where} does not exist")
    data = secret.get("data")
    if not isinstance(data, Mapping):
        data = {}
    try:
        ca, _ = read_ca(data)
    except CertificateError as err:
        return Decision("replace", f"{where} has no usable CA: {err}")
    ca_cert = ca.certificate
    if now >= ca_cert.not_valid_after_utc:
        return Decision(
            "replace", f"{where}: CA expired at {ca_cert.not_valid_after_utc.isoformat()}"
        )
    try:
        serving = read_serving(data)
    except CertificateError as err:
        return Decision("reissue", f"{where} has no usable serving certificate: {err}")
    problem = _serving_problem(serving, ca, policy, now)
    if problem is not None:
        return Decision("reissue", f"{where}: {problem}")
    due = f"within the renewal window ({policy.renew_before})"
    if _remaining(ca_cert, now) < policy.renew_before:
        expiry = ca_cert.not_valid_after_utc
        return Decision("rotate", f"{where}: CA expires at {expiry.isoformat()}, {due}")
    expiry = serving.certificate.not_valid_after_utc
    if _remaining(serving.certificate, now) < policy.renew_before:
        return Decision(
            "renew", f"{where}: serving certificate expires at {expiry.isoformat()}, {due}"
        )
    return Decision("keep", f"{where}: serving certificate valid until {expiry.isoformat()}")


def issue(
    decision: Decision,
    *,
    secret: Mapping[str, Any] | None,
    policy: CertPolicy,
    now: datetime.datetime,
) -> dict[str, str]:
    """Build the Secret ``data`` (base64 values) that carries out ``decision``.

    ``renew``/``reissue`` keep the CA and bundle of ``secret``; ``rotate`` puts a new CA
    first in ``ca.crt`` and keeps the old one after it while it is valid at ``now``;
    ``create``/``replace`` start over.

    Raises:
        ValueError: ``decision.action`` is ``keep`` (nothing to issue).
        CertificateError: ``renew``/``reissue``/``rotate`` on a Secret without a usable CA.
    """
    if decision.action == "keep":
        raise ValueError("decision: Invalid value: 'keep' issues nothing")
    data: Mapping[str, Any] = (secret or {}).get("data") or {}
    if decision.action in ("renew", "reissue"):
        ca, bundle = read_ca(data)
    else:
        ca = generate_ca(validity=policy.ca_validity)
        bundle = ca.cert_pem
        if decision.action == "rotate":
            old, _ = read_ca(data)
            if now < old.certificate.not_valid_after_utc:
                bundle = ca.cert_pem + old.cert_pem
    serving = generate_serving_cert(ca, policy.dns_names, policy.serving_validity)
    values = {
        CA_CERT: bundle,
        CA_KEY: ca.key_pem,
        TLS_CERT: serving.cert_pem,
        TLS_KEY: serving.key_pem,
    }
    return {key: base64.b64encode(value).decode("ascii") for key, value in values.items()}


def ca_bundle_patch(configuration: Mapping[str, Any], *, ca_bundle: bytes) -> list[dict[str, Any]]:
    """JSON Patch (RFC 6902) ops that set ``caBundle`` to ``ca_bundle`` in every webhook.

    ``configuration`` is a Mutating- or ValidatingWebhookConfiguration as the API returns
    it. Each webhook whose ``clientConfig.caBundle`` differs gets a ``test`` of its name
    (so a concurrent reorder fails the patch instead of writing into the wrong webhook)
    and an ``add`` of the value. Returns ``[]`` when every webhook already has it.
    """
    wanted = base64.b64encode(ca_bundle).decode("ascii")
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        client = webhook.get("clientConfig")
        if not isinstance(client, Mapping) or client.get("caBundle") == wanted:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.get("name")})
        ops.append(
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted}
        )
    return ops
