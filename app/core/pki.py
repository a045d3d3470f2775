"""Certificate generation for the webhook's TLS: pure functions over ``cryptography``.

Mirrors open-policy-agent/cert-controller's rotator defaults (the one MetalLB uses): a
self-signed CA and a serving certificate signed by it, ECDSA P-256 keys, ``notBefore``
one hour in the past for clock skew, ExtKeyUsage ServerAuth. Nothing here touches files,
the network or metrics: :mod:`app.core.certificates` decides when to call these, and
:mod:`app.web.tls` writes and serves the results.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.core.selector import dns_subdomain_errors

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
CLOCK_SKEW = datetime.timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded bytes."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    def fingerprint(self) -> str:
        """SHA-256 fingerprint of the DER certificate, ``AA:BB:...`` (as ``openssl x509``)."""
        digest = self.certificate.fingerprint(hashes.SHA256())
        return ":".join(f"{b:02X}" for b in digest)


def generate_ca(
    *,
    common_name: str = "node-ipam-lb-ca",
    validity: datetime.timedelta = CA_VALIDITY,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """Generate a self-signed CA (ECDSA P-256, BasicConstraints CA:true, path length 0).

    ``validity`` counts from ``now`` (default: the current UTC time; pass it for
    deterministic tests); ``notBefore`` is one hour earlier to tolerate skew.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = now or datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def check_san(name: str) -> None:
    """Raise ValueError (naming ``name`` and why) unless it is an IP address or a DNS
    subdomain (apimachinery ``IsDNS1123Subdomain``; a wildcard ``*.`` first label
    allowed): what a user may ask a serving certificate to hold."""
    try:
        ipaddress.ip_address(name)
        return
    except ValueError:
        pass
    errors = dns_subdomain_errors(name.removeprefix("*.")) if name else ["must not be empty"]
    if errors:
        raise ValueError(
            f"DNS name {name!r}: Invalid value: not an IP address, and {'; '.join(errors)}"
        )


def generate_serving_cert(
    ca: KeyPair,
    dns_names: Sequence[str],
    validity: datetime.timedelta = SERVING_VALIDITY,
    *,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """Generate a serving certificate signed by ``ca`` for ``dns_names``.

    Valid from one hour before ``now`` (default: the current UTC time) for ``validity``,
    but never beyond the CA's own ``notAfter``. Each name that parses as an IP address
    becomes an IP SAN (so ``127.0.0.1`` works for local development), the others DNS
    SANs. The first name is the common name.

    Raises:
        ValueError: ``dns_names`` is empty.
    """
    if not dns_names:
        raise ValueError("dns_names: Required value: at least one name")
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("ca: Invalid value: the CA key must be an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_sans(dns_names)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def _sans(names: Sequence[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    return sans


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
