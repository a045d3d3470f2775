"""Certificate Secrets for the certificate tests, built with app.web.tls (real keys)."""

from __future__ import annotations

import base64
import datetime
from typing import Any

from app.core.certificates import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, CertPolicy
from app.core.pki import KeyPair, generate_ca, generate_serving_cert

DAY = datetime.timedelta(days=1)

POLICY = CertPolicy(
    namespace="node-ipam-lb",
    secret_name="node-ipam-lb-webhook-tls",
    service_name="node-ipam-lb-webhook",
    webhook_configuration_name="node-ipam-lb",
    ca_validity=365 * DAY,
    serving_validity=30 * DAY,
    renew_before=10 * DAY,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def secret(
    *,
    ca: KeyPair | None,
    serving: KeyPair | None,
    ca_bundle: bytes | None = None,
    overrides: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Secret as the API returns it, with base64 ``data`` from the given pairs."""
    data: dict[str, str] = {}
    if ca is not None:
        data[CA_CERT] = b64(ca_bundle if ca_bundle is not None else ca.cert_pem)
        data[CA_KEY] = b64(ca.key_pem)
    if serving is not None:
        data[TLS_CERT] = b64(serving.cert_pem)
        data[TLS_KEY] = b64(serving.key_pem)
    data.update(overrides or {})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": POLICY.secret_name, "namespace": POLICY.namespace},
        "type": "kubernetes.io/tls",
        "data": data,
    }


def good_pair(
    *, ca_validity: datetime.timedelta = 365 * DAY, validity: datetime.timedelta = 30 * DAY
) -> tuple[KeyPair, KeyPair]:
    """A CA and a serving certificate for POLICY's names, valid from now."""
    ca = generate_ca(validity=ca_validity)
    return ca, generate_serving_cert(ca, POLICY.dns_names, validity)
