"""Self-managed webhook certificates, the shell: Secret, caBundle and files (docs/design.md §7).

Turned on by ``cert_secret_name`` (``--cert-secret-name``). :meth:`CertSync.bootstrap`
runs before the server starts: it reads the Secret, creates it when missing or replaces
it when unusable, and writes ``tls.crt``/``tls.key`` to the files the server's
:class:`app.web.tls.ReloadingContext` serves. Then :meth:`CertSync.start` re-checks every
``cert_check_interval_seconds`` on a daemon thread:

- every replica copies the Secret's current pair to its files (the server reloads them,
  so a renewal is served without a restart), but while the certificate it serves is still
  valid, only once both configurations' ``caBundle`` has trusted the new one for
  :data:`HANDOVER_SECONDS` (the hand-over, below);
- the leader alone renews a serving certificate or CA that is due, replaces an unusable
  Secret, and writes the CA into ``caBundle`` of both webhook configurations whenever it
  is missing or different (healing a ``kubectl apply`` or Helm upgrade that wiped it).

Writes are compare-and-swap: create fails with 409 when another replica created the
Secret first, replace carries the read ``resourceVersion``; on 409 the Secret is read
again and decided anew. That is what makes the start-up exception safe: before any
replica leads, every one may *create* a missing Secret or replace an *unusable* one,
and exactly one write wins.

The hand-over: kube-apiserver reads webhook configurations through an informer, so a
``caBundle`` patch reaches its webhook client some time after the write (under a second
when idle, seconds on a loaded control plane). A replica that switched to a certificate of
a rotated CA right after the patch was measured being called by a kube-apiserver that
still trusted only the old CA: the handshake failed and, with ``failurePolicy: Ignore``,
a malformed selector was admitted (seen on tests/cluster). The old certificate
stays valid and trusted through the overlap, so nothing is lost by serving it a little
longer; a replica with no usable certificate (first start, expired or expiring within the
hand-over, or one ``caBundle`` no longer trusts, as after an unusable Secret was replaced)
takes the new one at once, as there is nothing better to serve.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from app.config import Settings
from app.core.cabundle import in_force, served_chain
from app.core.certificates import (
    CA_CERT,
    CertificateError,
    CertPolicy,
    Decision,
    ca_bundle_patch,
    decide,
    issue,
    read_serving,
)
from app.kube.client import ApiError, CertificateAPI, WebhookKind
from app.telemetry import metrics
from app.telemetry.logs import log_event
from app.web.tls import write_key_pair

LOG = logging.getLogger("node_ipam_lb.certs")

WEBHOOK_KINDS: tuple[WebhookKind, ...] = (
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
)
CONFLICT_RETRIES = 3
BOOTSTRAP_TIMEOUT_SECONDS = 60.0
STALE_AFTER_CHECKS = 10
""":meth:`CertSync.healthy` fails once no check succeeded for this many check intervals."""
HANDOVER_SECONDS = 10.0
"""How long both configurations' ``caBundle`` must have trusted a new certificate (as this
replica saw it) before the replica serves it in place of a still valid one: kube-apiserver's
webhook-configuration informer lag, with room for a loaded control plane (module
docstring)."""

Writes = Literal["all", "urgent", "none"]
"""Which decisions a caller may carry out: leader, start-up, or a non-leader's tick."""


class CertSyncError(Exception):
    """The certificate could not be made available; ``str(err)`` says what and why."""


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertSync:
    """Keeps the Secret, the two ``caBundle`` fields and the served files in step.

    ``is_leader`` is :meth:`app.controller.controller.Controller.is_leader`; ``clock`` returns an
    aware UTC datetime (tests pass a fake one); ``monotonic`` (seconds) times
    :meth:`healthy`. Errors from the API are :class:`app.kube.client.ApiError`; bad Secret
    content never raises, it is replaced.
    """

    def __init__(
        self,
        *,
        api: CertificateAPI,
        policy: CertPolicy,
        cert_file: Path,
        key_file: Path,
        is_leader: Callable[[], bool],
        interval: float,
        clock: Callable[[], datetime.datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        handover_seconds: float = HANDOVER_SECONDS,
    ) -> None:
        self.api = api
        self.policy = policy
        self.cert_file = cert_file
        self.key_file = key_file
        self.is_leader = is_leader
        self.interval = interval
        self.clock = clock
        self.monotonic = monotonic
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_success = monotonic()
        self._listeners: list[Callable[[], None]] = []
        self.handover_seconds = handover_seconds
        self._trusted: tuple[bytes, float] | None = None
        """The new certificate waiting for its hand-over, and since when (monotonic) both
        ``caBundle`` were seen trusting it."""
        self._recheck_in: float | None = None
        """Seconds until the next check must run to finish a hand-over (``None``: no wait)."""

    @classmethod
    def from_settings(
        cls, settings: Settings, *, api: CertificateAPI, is_leader: Callable[[], bool]
    ) -> CertSync | None:
        """The :class:`CertSync` the settings ask for, or ``None`` (``cert_secret_name`` unset).

        Raises:
            ValueError: the TLS file settings are missing, or the durations are
                inconsistent (see :class:`app.core.certificates.CertPolicy`); the message names
                the setting.
        """
        if settings.cert_secret_name is None:
            return None
        if settings.tls_cert_file is None or settings.tls_private_key_file is None:
            raise ValueError(
                "--cert-secret-name needs --tls-cert-file and --tls-private-key-file: the"
                " files (on a writable volume) where the certificate is written and served"
            )
        policy = CertPolicy(
            namespace=settings.cert_secret_namespace,
            secret_name=settings.cert_secret_name,
            service_name=settings.webhook_service_name,
            webhook_configuration_name=settings.webhook_configuration_name,
            ca_validity=datetime.timedelta(seconds=settings.ca_validity_seconds),
            serving_validity=datetime.timedelta(seconds=settings.cert_validity_seconds),
            renew_before=datetime.timedelta(seconds=settings.cert_renew_before_seconds),
        )
        return cls(
            api=api,
            policy=policy,
            cert_file=settings.tls_cert_file,
            key_file=settings.tls_private_key_file,
            is_leader=is_leader,
            interval=settings.cert_check_interval_seconds,
        )

    def ensure_secret(self, *, writes: Writes) -> dict[str, Any] | None:
        """Read the Secret and carry out what :func:`app.core.certificates.decide` says, as far
        as ``writes`` allows. Returns the Secret now stored (``None``: missing, not ours
        to create).

        Raises:
            ApiError: the API failed, or a conflict persisted over several re-reads.
        """
        policy = self.policy
        for _ in range(CONFLICT_RETRIES):
            secret = self.api.read_secret(namespace=policy.namespace, name=policy.secret_name)
            now = self.clock()
            decision = decide(secret, policy=policy, now=now)
            allowed = writes == "all" or (writes == "urgent" and decision.urgent)
            if decision.action == "keep" or not allowed:
                return secret
            try:
                return self._write(decision, secret=secret, now=now)
            except ApiError as err:
                if err.status != 409:
                    raise
                log_event(LOG, "certificate Secret changed meanwhile; reading it again")
        raise ApiError(409, f"Secret {policy.namespace}/{policy.secret_name} kept changing")

    def _write(
        self, decision: Decision, *, secret: dict[str, Any] | None, now: datetime.datetime
    ) -> dict[str, Any]:
        policy = self.policy
        data = issue(decision, secret=secret, policy=policy, now=now)
        log_event(
            LOG,
            f"{decision.action} certificate Secret: {decision.reason}",
            level=logging.WARNING if decision.action in ("replace", "reissue") else logging.INFO,
            action=decision.action,
            secret=f"{policy.namespace}/{policy.secret_name}",
        )
        try:
            written = self._store(data, secret=secret)
        except ApiError:
            metrics.CERTIFICATE_WRITES.labels(decision.action, "error").inc()
            raise
        metrics.CERTIFICATE_WRITES.labels(decision.action, "success").inc()
        return written

    def _store(self, data: dict[str, str], *, secret: dict[str, Any] | None) -> dict[str, Any]:
        policy = self.policy
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": policy.secret_name,
                    "namespace": policy.namespace,
                    "labels": {"app.kubernetes.io/managed-by": "node-ipam-lb"},
                },
                "type": "kubernetes.io/tls",
                "data": data,
            }
            return self.api.create_secret(namespace=policy.namespace, body=body)
        # Same object, same type (immutable) and resourceVersion: a compare-and-swap.
        return self.api.replace_secret(
            namespace=policy.namespace, name=policy.secret_name, body={**secret, "data": data}
        )

    def write_files(self, secret: dict[str, Any] | None) -> bool:
        """Copy the Secret's serving pair to the served files when it differs; True if so.

        While the served certificate stays valid longer than ``handover_seconds`` and is
        trusted by both webhook configurations' ``caBundle``, the new pair is written only
        after that ``caBundle`` has verified it too for ``handover_seconds``
        (two GETs per check while it waits; the module docstring says why); meanwhile the
        next check is due at the end of the wait. A configuration that does not exist does
        not count (:func:`app.core.cabundle.in_force`).

        Raises:
            CertificateError: the Secret has no usable serving pair (files untouched).
            ApiError: reading a webhook configuration failed (files untouched).
        """
        self._recheck_in = None
        if secret is None:
            raise CertificateError(f"Secret {self.policy.secret_name} does not exist")
        pair = read_serving(secret.get("data") or {})
        if _read(self.cert_file) == pair.cert_pem and _read(self.key_file) == pair.key_pem:
            self._trusted = None
            return False
        if self._served_valid_for() > self.handover_seconds:
            wait = self._handover_wait(pair.cert_pem)
            if wait > 0:
                self._recheck_in = wait
                return False
        self._trusted = None
        write_key_pair(pair, cert_path=self.cert_file, key_path=self.key_file)
        expiry = pair.certificate.not_valid_after_utc
        metrics.CERTIFICATE_EXPIRY.set(expiry.timestamp())
        log_event(
            LOG, "serving certificate written", file=str(self.cert_file), expires=expiry.isoformat()
        )
        return True

    def _served_valid_for(self) -> float:
        """Seconds the served certificate stays valid (0: none, unreadable or not valid
        now). One that would expire within the hand-over is not kept for it."""
        try:
            leaf = served_chain(_read(self.cert_file) or b"")[0]
        except ValueError:
            return 0.0
        now = self.clock()
        if now < leaf.not_valid_before_utc:
            return 0.0
        return max((leaf.not_valid_after_utc - now).total_seconds(), 0.0)

    def _handover_wait(self, cert_pem: bytes) -> float:
        """Seconds left before ``cert_pem`` may be served (0: now)."""
        name = self.policy.webhook_configuration_name
        configurations = {
            f"{kind}/{name}": self.api.read_webhook_configuration(kind, name=name)
            for kind in WEBHOOK_KINDS
        }
        if not any(configurations.values()):
            return 0.0  # no webhook configured: no API server calls to break
        served = served_chain(_read(self.cert_file) or b"")
        if not in_force(configurations, chain=served, now=self.clock()).ready:
            return 0.0  # what is served is not trusted either: nothing to keep
        verdict = in_force(configurations, chain=served_chain(cert_pem), now=self.clock())
        if not verdict.ready:
            if self._trusted is None or self._trusted[0] != cert_pem:
                log_event(
                    LOG,
                    "new serving certificate waits for caBundle to trust it",
                    reason=verdict.reason,
                )
            self._trusted = (cert_pem, float("inf"))
            return self.handover_seconds
        now = self.monotonic()
        if self._trusted is None or self._trusted[0] != cert_pem or self._trusted[1] > now:
            self._trusted = (cert_pem, now)
            log_event(
                LOG,
                "caBundle trusts the new serving certificate; serving it after the hand-over",
                seconds=self.handover_seconds,
            )
        return max(0.0, self._trusted[1] + self.handover_seconds - now)

    def inject_ca_bundle(self, secret: dict[str, Any]) -> int:
        """Write ``ca.crt`` into every webhook's ``caBundle`` of both configurations where
        it is missing or different. Returns the number of configurations patched; a
        configuration that does not exist (yet) is skipped.

        Raises:
            ApiError: reading or patching failed (422: a webhook moved meanwhile).
        """
        ca_bundle = base64.b64decode(secret["data"][CA_CERT])
        name = self.policy.webhook_configuration_name
        patched = 0
        for kind in WEBHOOK_KINDS:
            configuration = self.api.read_webhook_configuration(kind, name=name)
            if configuration is None:
                continue
            ops = ca_bundle_patch(configuration, ca_bundle=ca_bundle)
            if ops:
                try:
                    self.api.patch_webhook_configuration(kind, name=name, patch=ops)
                except ApiError:
                    metrics.CERTIFICATE_WRITES.labels("cabundle", "error").inc()
                    raise
                metrics.CERTIFICATE_WRITES.labels("cabundle", "success").inc()
                log_event(LOG, "CA written into caBundle", configuration=f"{kind}/{name}")
                patched += 1
        return patched

    def sync(self) -> None:
        """One check: the leader decides and writes, every replica updates its files.

        Raises:
            ApiError, CertificateError: see :meth:`ensure_secret`, :meth:`write_files`.
        """
        leader = self.is_leader()
        secret = self.ensure_secret(writes="all" if leader else "none")
        patched = 0
        if leader and secret is not None:
            # caBundle first: after a CA rotation it must trust the new CA before any
            # replica serves a certificate signed by it.
            patched = self.inject_ca_bundle(secret)
        if self.write_files(secret) or patched:
            for callback in self._listeners:
                callback()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (no arguments, on the sync thread: it must return at once)
        after a :meth:`sync` that wrote ``caBundle`` or new files: the readiness check
        (:meth:`app.web.webhookready.CaBundleReadiness.wake`) then looks again at once
        instead of at its next tick."""
        self._listeners.append(callback)

    def bootstrap(
        self,
        *,
        timeout: float = BOOTSTRAP_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Make a usable certificate available in the files before the server starts.

        Retries API errors with backoff (0.5 s doubling to 8 s) while the next attempt
        still starts within ``timeout`` seconds (``sleep``/``monotonic``: fake time in tests).

        Raises:
            CertSyncError: no usable certificate within ``timeout``; says why. The files
                cannot be written (``OSError``: read-only volume, disk full): at once,
                naming the files.
        """
        deadline = monotonic() + timeout
        delay = 0.5
        while True:
            try:
                self.write_files(self.ensure_secret(writes="urgent"))
                self._last_success = self.monotonic()
                return
            except (ApiError, CertificateError) as err:
                problem = str(err)
            except OSError as err:
                raise CertSyncError(
                    f"cannot write the certificate to --tls-cert-file {self.cert_file} /"
                    f" --tls-private-key-file {self.key_file}: {err}"
                ) from err
            if monotonic() + delay > deadline:
                raise CertSyncError(
                    f"no usable certificate in Secret {self.policy.namespace}/"
                    f"{self.policy.secret_name} after {timeout:.0f}s: {problem}"
                )
            log_event(LOG, "certificate not ready; retrying", level=logging.WARNING, error=problem)
            sleep(delay)
            delay = min(delay * 2, 8.0)

    def start(self) -> None:
        """Run :meth:`sync` at once, then every ``interval`` seconds, on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="cert-sync", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next check now instead of at the end of the interval; returns at once.

        The controller calls it when this replica becomes the Lease holder
        (:meth:`app.controller.controller.Controller.on_started_leading`): the leader alone
        writes ``caBundle``, and until it does the API server cannot verify the webhook's
        certificate and, with ``failurePolicy: Ignore``, admits everything unchecked. A
        fresh install must not wait one ``cert_check_interval_seconds`` (30 s) for that."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits at most ``timeout`` seconds)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stale_after(self) -> float:
        """Seconds without a successful check after which :meth:`healthy` fails: the
        longer of :data:`STALE_AFTER_CHECKS` check intervals and half the renewal window.

        ``/healthz`` is the liveness probe, and a restart does not cure an API server
        outage, so an ordinary outage must not restart every replica; only a sync that has
        been failing long enough to put the served certificate at risk does (with the
        defaults: 45 days, leaving 45 days before the certificate expires)."""
        half_window = self.policy.renew_before.total_seconds() / 2
        return max(STALE_AFTER_CHECKS * self.interval, half_window)

    def healthy(self) -> tuple[bool, str]:
        """``(True, "")``, or ``(False, reason)`` when the check thread is not running or
        no check succeeded for :attr:`stale_after` seconds (the served certificate may
        then expire unnoticed). For ``/healthz``."""
        if self._thread is None or not self._thread.is_alive():
            return False, "certificate sync is not running"
        age = self.monotonic() - self._last_success
        if age > self.stale_after:
            return False, f"certificate sync has not succeeded for {age:.0f}s"
        return True, ""

    def _loop(self) -> None:
        """Check at once, then every ``interval`` seconds, and whenever :meth:`wake` is
        called; after a failure retry sooner, from 1 s doubling up to ``interval``. Any
        error is logged and the loop goes on: an exception must never end the thread (the
        certificate would expire unnoticed)."""
        delay = 0.0
        failures = 0
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
            except (ApiError, CertificateError) as err:
                log_event(LOG, "certificate check failed", level=logging.WARNING, error=str(err))
            except Exception as err:  # any other error: keep the thread alive (docstring)
                LOG.exception("certificate check failed: %s", err)
            else:
                self._last_success = self.monotonic()
                failures, delay = 0, min(self.interval, self._recheck_in or self.interval)
                continue
            failures += 1
            delay = min(self.interval, 2.0 ** (failures - 1))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def start_self_managed(
    settings: Settings, *, api: CertificateAPI, is_leader: Callable[[], bool]
) -> CertSync | None:
    """``serve``'s entry point: when ``cert_secret_name`` is set, bootstrap the certificate
    into the TLS files (blocking, up to :data:`BOOTSTRAP_TIMEOUT_SECONDS`) and start the
    periodic check; otherwise do nothing and return ``None``.

    Raises:
        ValueError: inconsistent settings (see :meth:`CertSync.from_settings`).
        CertSyncError: no usable certificate could be made available.
    """
    certs = CertSync.from_settings(settings, api=api, is_leader=is_leader)
    if certs is None:
        return None
    certs.bootstrap()
    certs.start()
    return certs
