"""Is the webhook in force: does ``caBundle`` verify the certificate we serve (pure)?

kube-apiserver calls a webhook over TLS and trusts exactly the PEM certificates in that
webhook's ``clientConfig.caBundle`` (``k8s.io/apiserver/pkg/util/webhook``: the bundle
becomes the ``RootCAs`` of a ``crypto/tls`` client). Until a bundle that verifies the
served certificate is there, every call fails, and with ``failurePolicy: Ignore`` the
request is admitted unchecked. So a replica is *in force* only when every webhook of our
two configurations carries a bundle that verifies the certificate it presents; that is
what ``/readyz`` waits for (docs/design.md §5, Health).

Verification is Go's ``x509.Certificate.Verify`` as far as it matters here: a chain from
the served leaf, through the intermediates served with it, to a bundle certificate
(or the leaf itself in the bundle, as a self-signed cert-manager certificate is), every
certificate on it valid at ``now``. Names are not checked: the certificate's names are
decided where it is issued (:func:`app.core.certificates.decide`, cert-manager's
``Certificate.spec.dnsNames``).
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

NOT_IN_FORCE = "webhook caBundle does not yet verify the serving certificate"
"""The start of every not-ready reason (``/readyz`` prints it after ``not ready:``)."""

MAX_CHAIN = 8
"""Longest chain followed: the served leaf plus intermediates (Go has no fixed bound)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ready`` and the sentence saying why (for ``/readyz`` and the log)."""

    ready: bool
    reason: str


def served_chain(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a served PEM file, leaf first (what the TLS handshake sends).

    Raises:
        ValueError: no PEM certificate in ``pem``.
    """
    certificates = x509.load_pem_x509_certificates(pem)  # ValueError when there is none
    if not certificates:
        raise ValueError("no PEM certificate")
    return certificates


def chain_problem(
    ca_bundle: bytes, chain: Sequence[x509.Certificate], *, now: datetime.datetime
) -> str | None:
    """Why the PEM ``ca_bundle`` does not verify ``chain`` (leaf first) at ``now`` (aware
    UTC), or ``None`` when it does. Never raises: an unreadable bundle is a reason."""
    try:
        roots = x509.load_pem_x509_certificates(ca_bundle)
    except ValueError:
        return "caBundle holds no PEM certificate"
    leaf = chain[0]
    if now < leaf.not_valid_before_utc:
        return f"the serving certificate is not valid before {leaf.not_valid_before_utc}"
    if now >= leaf.not_valid_after_utc:
        return f"the serving certificate expired at {leaf.not_valid_after_utc}"
    der = serialization.Encoding.DER
    anchors = {root.public_bytes(der) for root in roots if _valid(root, now)}
    current, intermediates = leaf, list(chain[1:])
    for _ in range(MAX_CHAIN):
        if current.public_bytes(der) in anchors:
            return None
        if any(_valid(root, now) and _signed(current, by=root) for root in roots):
            return None
        issuer = next((c for c in intermediates if _valid(c, now) and _signed(current, by=c)), None)
        if issuer is None:
            break
        intermediates.remove(issuer)
        current = issuer
    return (
        f"the serving certificate (issuer {leaf.issuer.rfc4514_string()!r}) is not signed by"
        f" a CA in caBundle ({', '.join(repr(r.subject.rfc4514_string()) for r in roots)})"
    )


def _valid(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def _signed(cert: x509.Certificate, *, by: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(by)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def in_force(
    configurations: Mapping[str, Mapping[str, Any] | None],
    *,
    chain: Sequence[x509.Certificate],
    now: datetime.datetime,
) -> Verdict:
    """Whether every webhook of ``configurations`` trusts ``chain`` (leaf first) at ``now``.

    ``configurations`` maps ``<resource>/<name>`` (``validatingwebhookconfigurations/
    node-ipam-lb``) to the object as the API returns it (``caBundle`` base64), or ``None``
    when it does not exist. A configuration that does not exist does not count (the
    webhook is off, or installed without one: nothing to wait for); when none exists the
    verdict is ready and says so. Otherwise each of its webhooks must carry a bundle that
    verifies the chain (:func:`chain_problem`); the first one that does not is the reason.
    Never raises.
    """
    found = {key: obj for key, obj in configurations.items() if obj is not None}
    if not found:
        names = ", ".join(configurations)
        return Verdict(True, f"{names} not found: readiness does not wait for a caBundle")
    for key, configuration in found.items():
        webhooks = configuration.get("webhooks") or []
        for webhook in webhooks:
            problem = _webhook_problem(webhook, chain=chain, now=now)
            if problem is not None:
                name = webhook.get("name") if isinstance(webhook, Mapping) else None
                return Verdict(False, f"{NOT_IN_FORCE}: {key} webhook {name}: {problem}")
    return Verdict(True, f"caBundle of {', '.join(found)} verifies the serving certificate")


def _webhook_problem(
    webhook: Any, *, chain: Sequence[x509.Certificate], now: datetime.datetime
) -> str | None:
    client = webhook.get("clientConfig") if isinstance(webhook, Mapping) else None
    encoded = client.get("caBundle") if isinstance(client, Mapping) else None
    if not encoded:
        return "no caBundle yet (the Lease holder, or cert-manager's cainjector, writes it)"
    try:
        bundle = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return "caBundle is not base64"
    return chain_problem(bundle, chain, now=now)
