"""TLS for the webhook server: certificate generation and a reloading server context.

Generation mirrors open-policy-agent/cert-controller's rotator defaults (the one MetalLB
uses): a self-signed CA and a serving certificate signed by it, ECDSA P-256 keys,
``notBefore`` one hour in the past for clock skew, ExtKeyUsage ServerAuth. The
functions are reusable by in-cluster Secret-based management (``generate_ca``,
``generate_serving_cert``). :class:`ReloadingContext` serves certificate files and picks
up new ones written to disk without a restart (cert-manager / kubelet Secret rotation).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app import metrics

log = logging.getLogger("node_ipam_lb.tls")

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
CLOCK_SKEW = datetime.timedelta(hours=1)
RELOAD_CHECK_SECONDS = 5.0


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


def write_key_pair(pair: KeyPair, *, cert_path: Path, key_path: Path) -> None:
    """Write ``pair`` atomically (temp file + rename), the key with mode 0600."""
    _write_atomic(cert_path, pair.cert_pem, mode=0o644)
    _write_atomic(key_path, pair.key_pem, mode=0o600)


def write_dev_certs(*, out_dir: Path, dns_names: Sequence[str]) -> KeyPair:
    """``certs generate``: write ``ca.crt``, ``tls.crt``, ``tls.key`` (0600) into ``out_dir``.

    Returns the CA (its key is not written: development certificates are re-generated,
    not renewed).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    ca = generate_ca()
    serving = generate_serving_cert(ca, dns_names)
    _write_atomic(out_dir / "ca.crt", ca.cert_pem, mode=0o644)
    write_key_pair(serving, cert_path=out_dir / "tls.crt", key_path=out_dir / "tls.key")
    return ca


def server_context() -> ssl.SSLContext:
    """A server-side context: TLS 1.2 minimum, no client certificates (DESIGN.md §7)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class ReloadingContext:
    """Serve ``cert_file``/``key_file`` and reload them when they change on disk.

    :attr:`context` is handed to uvicorn once. Its ``sni_callback`` runs on every
    ClientHello; at most every ``check_seconds`` (default :data:`RELOAD_CHECK_SECONDS`,
    measured with ``clock``) it compares the files'
    (mtime, size, inode) and, when they changed, loads them into a fresh context that the
    handshake in progress and all later ones switch to. A half-written or mismatched pair
    is logged and the previous certificate is kept until the next check. Every load sets
    ``node_ipam_lb_serving_certificate_expiry_timestamp_seconds`` to the served
    certificate's ``notAfter``.

    Raises (constructor):
        ssl.SSLError, OSError: the initial files cannot be loaded.
    """

    def __init__(
        self,
        *,
        cert_file: Path,
        key_file: Path,
        check_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cert_file = cert_file
        self._key_file = key_file
        self._check_seconds = RELOAD_CHECK_SECONDS if check_seconds is None else check_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._next_check = clock() + self._check_seconds
        self.context = self._load()
        self.context.sni_callback = self._on_client_hello
        self._current = self.context
        self.reloads = 0

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stats = (os.stat(self._cert_file), os.stat(self._key_file))
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)

    def _load(self) -> ssl.SSLContext:
        cert_pem = self._cert_file.read_bytes()
        context = server_context()
        context.load_cert_chain(certfile=self._cert_file, keyfile=self._key_file)
        _record_expiry(cert_pem)
        return context

    def maybe_reload(self) -> bool:
        """Reload when the check interval has passed and the files changed; True if reloaded."""
        with self._lock:
            now = self._clock()
            if now < self._next_check:
                return False
            self._next_check = now + self._check_seconds
            try:
                stamp = self._file_stamp()
                if stamp == self._stamp:
                    return False
                self._current = self._load()
            except (OSError, ssl.SSLError) as err:
                log.error("keeping the previous TLS certificate: cannot load new files: %s", err)
                return False
            self._stamp = stamp
            self.reloads += 1
            log.info("reloaded TLS certificate from %s", self._cert_file)
            return True

    def _on_client_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: object
    ) -> None:
        self.maybe_reload()
        if self._current is not self.context:
            connection.context = self._current


def _record_expiry(cert_pem: bytes) -> None:
    """Set the serving-certificate expiry gauge to the leaf's ``notAfter`` (Unix seconds),
    whoever wrote the file (generated at start-up, cert-manager, certsync)."""
    try:
        leaf = x509.load_pem_x509_certificates(cert_pem)[0]
    except (ValueError, IndexError) as err:  # loaded by OpenSSL, so only a race gets here
        log.warning("cannot read the serving certificate's expiry: %s", err)
        return
    metrics.CERTIFICATE_EXPIRY.set(leaf.not_valid_after_utc.timestamp())


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


def _write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
