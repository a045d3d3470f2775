"""Readiness that means "in force": the shell around :func:`app.core.cabundle.in_force`.

A replica is Ready only once both webhook configurations' ``caBundle`` verifies the
certificate it serves, so ``helm install --wait``, ``kubectl rollout status`` and a
rolling upgrade count a replica only when kube-apiserver can actually call it
(docs/design.md §5, Health). The precedent is cert-manager's chart, whose
``startupapicheck`` post-install hook Job (``cmctl check api --wait``: a dry-run create
that only its webhook answers) holds ``helm install`` until the webhook, with the CA
cainjector wrote, is in force; here readiness itself says it, so ``kubectl rollout status``
and the kustomize install get the same guarantee.

A verified ``caBundle`` is not yet "in force": kube-apiserver reaches the webhook through
its Service, whose new endpoint the node's kube-proxy programs up to a sync period later,
and until then ``failurePolicy: Ignore`` admits (measured on tests/cluster: the first
apply after ``helm install --wait`` admitted). So once the bundle verifies, the replica
makes one **admission probe** (:func:`admission_probe`, ``admission_probe_namespace``):
a dry-run create of a Service with a malformed selector, which only our webhook refuses;
Ready once it is refused, and again after every time the bundle stopped verifying. The
probe is answered by whichever replica kube-proxy picks: the webhook Service lists Ready
replicas only (deploy/: no ``publishNotReadyAddresses``), so kube-apiserver never calls a
replica that is not Ready, nor a terminating one while another is ready
(app/web/draining.py; with none ready, kube-proxy falls back to the serving terminating
ones, KEP-1669). When no other replica is there to answer (a fresh install) the **Lease
holder alone** is Ready on the ``caBundle`` (``bootstrap``, :class:`CaBundleReadiness`;
the rule is ``app.server._lone_lease_holder``'s); the others wait for its denial, so
``helm install --wait`` (every replica Ready) still returns only once kube-apiserver
reaches one. RBAC without ``create services`` there (or no such
namespace): one WARNING, and readiness rests on the ``caBundle`` alone.

Cost: the probes never call the API server. A daemon thread reads the two configurations
(two GETs by name, each bounded by :data:`READ_TIMEOUT_SECONDS`) every
``cert_check_interval_seconds`` while in force, every :data:`NOT_READY_FIRST_SECONDS`
(doubling to :data:`NOT_READY_MAX_SECONDS`) while not, and at once on :meth:`CaBundleReadiness.wake`
(the certificate sync calls it after writing ``caBundle`` or new files); ``/readyz`` reads
the last verdict.

No deadlock: nothing here writes, and nothing that writes waits for it. The Lease holder
writes ``caBundle`` (:class:`app.web.certsync.CertSync`) whether or not it is Ready, and
leader election does not look at readiness; cert-manager's cainjector does not either.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from app.config import Settings
from app.core.cabundle import Verdict, in_force, served_chain
from app.kube.client import ApiError, WebhookKind
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.readiness")

WEBHOOK_KINDS: tuple[WebhookKind, ...] = (
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
)
READ_TIMEOUT_SECONDS = 5.0
"""Longest one GET of a webhook configuration may take (with ``request_timeout_seconds``
if shorter): one kubelet readiness period."""
NOT_READY_FIRST_SECONDS = 1.0
"""First pause between two reads while not in force; it doubles up to the next one."""
NOT_READY_MAX_SECONDS = 5.0
"""Longest pause between two reads while not in force: one kubelet readiness period, so a
bundle written by cainjector (or the leader) is seen within ~5 s."""
ALONE_WARNING_SECONDS = 60.0
"""How long a replica Ready on the ``caBundle`` alone (``bootstrap``) probes without a
refusal before it warns that kube-apiserver does not reach it."""
NOT_CHECKED = Verdict(False, "webhook caBundle not checked yet")
PROBE_SERVICE_NAME = "node-ipam-lb-admission-probe"
PROBE_SELECTOR = "node-ipam-lb.io/admission-probe in ("
"""A selector apimachinery refuses (``found '', expected: identifier``): our validating
webhook denies every Service of our class that carries it (docs/design.md §7)."""


class ServiceCreator(Protocol):
    """What the admission probe calls (:class:`app.kube.client.KubernetesAPI`)."""

    def dry_run_create_service(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Service with ``dryRun=All``. Errors: ApiError."""
        ...


def probe_service(namespace: str, *, load_balancer_class: str, annotation: str) -> dict[str, Any]:
    """The Service the admission probe sends (never stored: ``dryRun=All``): a LoadBalancer
    of our class in ``namespace`` whose ``annotation`` holds :data:`PROBE_SELECTOR`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": PROBE_SERVICE_NAME,
            "namespace": namespace,
            "annotations": {annotation: PROBE_SELECTOR},
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": load_balancer_class,
            "ports": [{"name": "probe", "port": 1, "protocol": "TCP"}],
        },
    }


def admission_probe(
    api: ServiceCreator, *, namespace: str, load_balancer_class: str, annotation: str
) -> Verdict | None:
    """Whether kube-apiserver, right now, refuses what our validating webhook refuses: a
    dry-run create of :func:`probe_service` (the check ``cmctl check api`` makes for
    cert-manager's webhook). The webhook's ``failurePolicy: Ignore`` admits while
    kube-apiserver cannot reach it (no endpoint programmed by its node's kube-proxy yet,
    a ``caBundle`` it has not loaded yet), and a verified ``caBundle`` cannot see that.

    Returns ``Verdict(True, ...)`` when the webhook denied it, ``Verdict(False, why)`` when
    the server admitted it or the call failed, and ``None`` when the probe cannot be made
    here: RBAC refuses the create (403 without a webhook's denial) or the namespace does not
    exist (404) -- readiness then rests on the ``caBundle`` alone, and the caller logs it.
    """
    body = probe_service(namespace, load_balancer_class=load_balancer_class, annotation=annotation)
    try:
        api.dry_run_create_service(namespace=namespace, body=body)
    except ApiError as err:
        if "denied the request" in err.reason and annotation in err.reason:
            return Verdict(True, "")
        if err.status in (403, 404):
            return None
        return Verdict(False, f"admission probe (dry-run Service in {namespace}) failed: {err}")
    return Verdict(
        False,
        f"kube-apiserver admitted a dry-run Service with a malformed selector in namespace"
        f" {namespace}: it does not reach the webhook yet (failurePolicy Ignore: the webhook"
        " Service's endpoints not programmed yet, or the caBundle not loaded yet), or the"
        " webhooks' namespaceSelector skips that namespace (--admission-probe-namespace)",
    )


class WebhookReader(Protocol):
    """What the check reads (:class:`app.kube.client.KubernetesAPI`). Errors: ApiError."""

    def read_webhook_configuration(self, kind: WebhookKind, *, name: str) -> dict[str, Any] | None:
        """GET a webhook configuration; ``None`` when it does not exist."""
        ...


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CaBundleReadiness:
    """The cached "in force" verdict of one replica, refreshed on a daemon thread.

    ``api`` reads the configurations named ``name``; ``served`` returns the PEM this
    replica presents in its next TLS handshake (:meth:`app.web.tls.ReloadingContext.
    served_certificate`); ``interval`` (seconds) is the re-check period while in force;
    ``clock`` is aware UTC (tests pass a fake one); ``probe`` is the admission probe
    (:func:`admission_probe`), ``None`` without one. ``bootstrap`` is asked when the probe
    is not refused: given the ``(namespace, name)`` of the Services the two configurations
    call, it returns why this replica may be Ready without a refusal (it holds the Lease
    and no other replica is an endpoint kube-proxy would pick, so none could refuse:
    readiness is what puts one there), or ``None`` when the probe's verdict stands. Ready
    that way, the replica keeps probing on the not-ready schedule until the first refusal
    (then the webhook is in force, logged), warning once after
    :data:`ALONE_WARNING_SECONDS` without one (kube-apiserver does not reach it).
    """

    def __init__(
        self,
        *,
        api: WebhookReader,
        name: str,
        served: Callable[[], bytes],
        interval: float,
        clock: Callable[[], datetime.datetime] = _utc_now,
        probe: Callable[[], Verdict | None] | None = None,
        bootstrap: Callable[[frozenset[tuple[str, str]]], str | None] | None = None,
    ) -> None:
        self.api = api
        self.name = name
        self.served = served
        self.interval = interval
        self.clock = clock
        self.probe = probe
        self.bootstrap = bootstrap
        self._alone_since: datetime.datetime | None = None
        self._alone_warned = False
        self._probed = False
        self._verdict = NOT_CHECKED
        self._checked = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        api: WebhookReader,
        served: Callable[[], bytes],
        bootstrap: Callable[[frozenset[tuple[str, str]]], str | None] | None = None,
    ) -> CaBundleReadiness | None:
        """The check the settings call for, or ``None`` when readiness does not depend on a
        caBundle (the rule, docs/design.md §5, Health):

        - ``webhook`` false: ``serve`` answers no admission request, there is nothing to be
          in force (the chart then installs no webhook configuration either);
        - no ``tls_cert_file``: the certificate is generated at start-up and its CA written
          to ``--ca-bundle-out``; whoever reads that file registers the webhook, not us
          (development, tests).

        Otherwise the check runs; a configuration that does not exist is not waited for
        (:func:`app.core.cabundle.in_force`). ``bootstrap``: see the class."""
        if not settings.webhook or settings.tls_cert_file is None:
            return None
        probe = None
        namespace = settings.admission_probe_namespace
        if namespace and hasattr(api, "dry_run_create_service"):
            creator: Any = api

            def probe() -> Verdict | None:
                return admission_probe(
                    creator,
                    namespace=namespace,
                    load_balancer_class=settings.load_balancer_class,
                    annotation=settings.match_node_labels_annotation,
                )

        return cls(
            api=api,
            name=settings.webhook_configuration_name,
            served=served,
            interval=settings.cert_check_interval_seconds,
            probe=probe,
            bootstrap=bootstrap,
        )

    def ready(self) -> tuple[bool, str]:
        """``(True, "")``, or ``(False, reason)`` from the last check. Reads one attribute:
        never blocks, never calls the API; safe from any thread (``/readyz``)."""
        verdict = self._verdict
        return (True, "") if verdict.ready else (False, verdict.reason)

    @property
    def verdict(self) -> Verdict:
        """The last verdict (:data:`NOT_CHECKED` before the first check)."""
        return self._verdict

    def check(self) -> Verdict:
        """Read both configurations and the served certificate, decide, keep and return the
        verdict. An API error keeps the previous verdict (a replica in force stays Ready
        through an API server outage: kube-apiserver still calls it); before the first
        successful read the error is the reason. Never raises ApiError."""
        try:
            configurations = {
                f"{kind}/{self.name}": self.api.read_webhook_configuration(kind, name=self.name)
                for kind in WEBHOOK_KINDS
            }
        except ApiError as err:
            if not self._checked:
                self._set(Verdict(False, f"cannot read the webhook configurations: {err}"))
            else:
                log_event(
                    LOG, "webhook caBundle check failed", level=logging.WARNING, error=str(err)
                )
            return self._verdict
        try:
            chain = served_chain(self.served())
        except (OSError, ValueError) as err:
            verdict = Verdict(False, f"cannot read the serving certificate: {err}")
        else:
            verdict = in_force(configurations, chain=chain, now=self.clock())
        if not verdict.ready:
            self._probed = False
            self._alone_since = None
        elif self.probe is not None and not self._probed and any(configurations.values()):
            probed = self.probe()
            if probed is None:
                log_event(
                    LOG,
                    "admission probe not possible",
                    level=logging.WARNING,
                    reason="no permission to create (dry run) Services in the probe namespace,"
                    " or no such namespace: readiness rests on the caBundle alone",
                )
                self._probed = True
            elif probed.ready:
                if self._alone_since is not None:
                    log_event(LOG, "admission probe refused: the webhook is in force")
                self._probed = True
                self._alone_since = None
            elif (alone := self._bootstrap(configurations)) is not None:
                self._alone(alone, probed)
            else:
                verdict = probed
                self._alone_since = None
        self._checked = True
        self._set(verdict)
        return verdict

    @property
    def alone(self) -> bool:
        """Ready on the ``caBundle`` alone (``bootstrap``), no refusal seen yet."""
        return self._alone_since is not None

    def _alone(self, reason: str, probed: Verdict) -> None:
        """Stay Ready without a refusal (``bootstrap`` said why); log it once, and warn once
        when that has lasted :data:`ALONE_WARNING_SECONDS`."""
        now = self.clock()
        if self._alone_since is None:
            self._alone_since, self._alone_warned = now, False
            log_event(
                LOG,
                "admission probe not refused: Ready on the caBundle alone",
                level=logging.INFO,
                reason=reason,
                probe=probed.reason,
            )
        elif (
            not self._alone_warned
            and (now - self._alone_since).total_seconds() >= ALONE_WARNING_SECONDS
        ):
            self._alone_warned = True
            log_event(
                LOG,
                "admission probe still not refused: kube-apiserver does not reach this replica",
                level=logging.WARNING,
                seconds=round((now - self._alone_since).total_seconds()),
                reason=probed.reason,
                hint="check NetworkPolicies and the CNI between kube-apiserver and this Pod",
            )

    def _bootstrap(self, configurations: Mapping[str, dict[str, Any] | None]) -> str | None:
        """``bootstrap``'s answer for the Services the configurations call; ``None`` without
        ``bootstrap`` or when a webhook calls a ``url`` (no Service, nothing to read)."""
        if self.bootstrap is None:
            return None
        services: set[tuple[str, str]] = set()
        for configuration in configurations.values():
            for webhook in (configuration or {}).get("webhooks") or ():
                config = webhook.get("clientConfig") if isinstance(webhook, Mapping) else None
                service = config.get("service") if isinstance(config, Mapping) else None
                if not isinstance(service, Mapping):
                    return None
                namespace, name = service.get("namespace"), service.get("name")
                if not (isinstance(namespace, str) and isinstance(name, str)):
                    return None
                services.add((namespace, name))
        return self.bootstrap(frozenset(services)) if services else None

    def _set(self, verdict: Verdict) -> None:
        previous, self._verdict = self._verdict, verdict
        if verdict != previous:
            log_event(
                LOG,
                "webhook in force" if verdict.ready else "webhook not in force",
                level=logging.INFO if verdict.ready else logging.WARNING,
                reason=verdict.reason,
            )

    def start(self) -> None:
        """Check at once, then as the module docstring says, on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="cabundle-check", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Check now instead of at the end of the pause; returns at once."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits at most ``timeout`` seconds)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def healthy(self) -> tuple[bool, str]:
        """``(False, why)`` when the check thread is not running (for ``/healthz``: a dead
        thread would freeze the verdict), else ``(True, "")``."""
        if self._thread is None or not self._thread.is_alive():
            return False, "webhook caBundle check is not running"
        return True, ""

    def _loop(self) -> None:
        pause = NOT_READY_FIRST_SECONDS
        while not self._stop.is_set():
            try:
                ready = self.check().ready
            except Exception as err:  # keep the thread alive: a dead one freezes the verdict
                LOG.exception("webhook caBundle check failed: %s", err)
                ready = False
            if ready and not self.alone:
                pause, delay = NOT_READY_FIRST_SECONDS, self.interval
            else:
                delay, pause = pause, min(pause * 2, NOT_READY_MAX_SECONDS)
            self._wake.wait(delay)
            self._wake.clear()
