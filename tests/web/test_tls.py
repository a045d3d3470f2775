"""Certificate generation and reload of rotated certificate files without a restart."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from app.core import pki
from app.telemetry import metrics
from app.web import tls


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def handshake(context: ssl.SSLContext, ca_pem: bytes) -> bytes:
    """Serve one TLS handshake on 127.0.0.1 (asyncio, as uvicorn does) and return the
    DER certificate the client saw, verified against ``ca_pem`` for name 127.0.0.1."""

    async def run() -> bytes:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cadata=ca_pem.decode())
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
        assert isinstance(der, bytes)
        return der

    return asyncio.run(asyncio.wait_for(run(), timeout=20))


def der(pair: pki.KeyPair) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return pair.certificate.public_bytes(Encoding.DER)


def test_certs_generate_writes_ca_cert_and_private_key(tmp_path: Path) -> None:
    ca = tls.write_dev_certs(out_dir=tmp_path / "out", dns_names=["webhook.ns.svc", "127.0.0.1"])
    out = tmp_path / "out"
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert (out / "ca.crt").read_bytes() == ca.cert_pem
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["webhook.ns.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert not list(out.glob(".*")), "no temporary files left behind"


def test_serving_cert_needs_a_name() -> None:
    with pytest.raises(ValueError, match="dns_names"):
        pki.generate_serving_cert(pki.generate_ca(), [])


def test_context_refuses_tls_below_1_2() -> None:
    assert tls.server_context().minimum_version == ssl.TLSVersion.TLSv1_2


@dataclass
class Served:
    ca: pki.KeyPair
    first: pki.KeyPair
    cert_file: Path
    key_file: Path
    clock: Clock
    reloading: tls.ReloadingContext

    def rotate(self) -> pki.KeyPair:
        pair = pki.generate_serving_cert(self.ca, ["127.0.0.1"])
        tls.write_key_pair(pair, cert_path=self.cert_file, key_path=self.key_file)
        return pair


@pytest.fixture
def served(tmp_path: Path) -> Served:
    """Certificate files for 127.0.0.1 served by a ReloadingContext on a fake clock (5 s)."""
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    ca = pki.generate_ca()
    first = pki.generate_serving_cert(ca, ["127.0.0.1"])
    tls.write_key_pair(first, cert_path=cert_file, key_path=key_file)
    clock = Clock()
    reloading = tls.ReloadingContext(
        cert_file=cert_file, key_file=key_file, check_seconds=5, clock=clock
    )
    return Served(ca, first, cert_file, key_file, clock, reloading)


def test_rotated_files_are_served_on_the_next_handshake(served: Served) -> None:
    ca, first, clock, reloading = served.ca, served.first, served.clock, served.reloading
    assert handshake(reloading.context, ca.cert_pem) == der(first)

    second = served.rotate()
    assert handshake(reloading.context, ca.cert_pem) == der(first), "checked at most every 5 s"
    clock.now = 5
    assert handshake(reloading.context, ca.cert_pem) == der(second)
    assert handshake(reloading.context, ca.cert_pem) == der(second)
    assert reloading.reloads == 1


def test_half_written_files_keep_the_previous_certificate(served: Served) -> None:
    ca, clock, reloading = served.ca, served.clock, served.reloading
    served.cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ntrunc")
    clock.now = 10
    assert not reloading.maybe_reload()
    assert handshake(reloading.context, ca.cert_pem) == der(served.first)
    second = served.rotate()
    clock.now = 20
    assert reloading.maybe_reload()
    assert handshake(reloading.context, ca.cert_pem) == der(second)


def test_fingerprint_is_sha256_colon_hex() -> None:
    fingerprint = pki.generate_ca().fingerprint()
    assert len(fingerprint.split(":")) == 32


def test_generation_at_a_given_time_is_deterministic_in_its_dates() -> None:
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    ca = pki.generate_ca(validity=datetime.timedelta(days=10), now=now)
    serving = pki.generate_serving_cert(ca, ["a.example"], datetime.timedelta(days=30), now=now)
    assert ca.certificate.not_valid_before_utc == now - pki.CLOCK_SKEW
    assert serving.certificate.not_valid_before_utc == now - pki.CLOCK_SKEW
    assert serving.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc, (
        "a serving certificate never outlives its CA"
    )


def expiry_metric() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "node_ipam_lb_serving_certificate_expiry_timestamp_seconds"
    )
    assert value is not None
    return value


def test_expiry_metric_follows_the_served_certificate_files(tmp_path: Path) -> None:
    """Certificates from files (cert-manager, --tls-cert-file) set the expiry gauge on load
    and on every reload, not only self-managed ones (deploy/README.md alert)."""
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    ca = pki.generate_ca()
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    first = pki.generate_serving_cert(ca, ["127.0.0.1"], datetime.timedelta(days=90), now=start)
    tls.write_key_pair(first, cert_path=cert_file, key_path=key_file)
    metrics.CERTIFICATE_EXPIRY.set(0)
    clock = Clock()
    reloading = tls.ReloadingContext(
        cert_file=cert_file, key_file=key_file, check_seconds=5, clock=clock
    )
    assert expiry_metric() == first.certificate.not_valid_after_utc.timestamp()

    second = pki.generate_serving_cert(ca, ["127.0.0.1"], datetime.timedelta(days=30), now=start)
    tls.write_key_pair(second, cert_path=cert_file, key_path=key_file)
    clock.now = 5
    assert reloading.maybe_reload()
    assert expiry_metric() == second.certificate.not_valid_after_utc.timestamp()
