"""Settings: one validated object built from flags and ``NODE_IPAM_*`` variables.

Names follow Cilium's settings where Cilium has one (``default-lb-service-ipam``,
``enable-node-ipam``). :class:`SelectionSettings` is the pure subset the selection
core reads; :class:`Settings` (pydantic-settings) is the whole process configuration
and is validated at start-up, so a typo such as ``default_lb_service_ipam=NodeIPAM``
is a start-up error rather than a silent no-op (docs/design.md §2;
docs/reference/cilium-node-ipam.md §12, weak spot 12).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.options import (
    LOAD_BALANCER_CLASS,
    MATCH_NODE_LABELS_ANNOTATION,
    DefaultLBServiceIPAM,
    IPMode,
    SelectionSettings,
)

LEADER_ELECTION_JITTER_FACTOR = 1.2
"""client-go ``leaderelection.JitterFactor``: retries are spread up to this factor."""

AuthMode = Literal["kubernetes", "none"]

API_SERVER_REQUEST_BODY_BYTES = 3 * 1024 * 1024
"""kube-apiserver's limit on a create/update request body (``MaxRequestBodyBytes``, 3 MiB)."""
ADMISSION_BODY_LIMIT = 2 * API_SERVER_REQUEST_BODY_BYTES + 64 * 1024
"""Largest AdmissionReview body ``/validate`` and ``/mutate`` read (6 MiB + 64 KiB): its
``object`` and ``oldObject`` are each at most what the API server accepts as a request
body, plus 64 KiB for the envelope (uid, kind, userInfo, options). Larger bodies get 413
(docs/design.md §7.1)."""


class Settings(BaseSettings):
    """Whole-process configuration; every field is also ``NODE_IPAM_<FIELD>``.

    ``serve`` flags map one-to-one onto these fields (``--default-lb-service-ipam`` →
    ``default_lb_service_ipam``), except ``cilium_compat_fanout`` (benchmarks only), which
    is set through its environment variable alone. Validation errors are raised as
    :class:`pydantic.ValidationError` at start-up and name the field; cross-field checks
    (leader-election and certificate timings) as a ``ValueError`` naming the settings.
    """

    model_config = SettingsConfigDict(env_prefix="NODE_IPAM_", extra="forbid")

    # Selection (Cilium names).
    enable_node_ipam: bool = True
    load_balancer_class: str = Field(default=LOAD_BALANCER_CLASS, min_length=1)
    default_lb_service_ipam: DefaultLBServiceIPAM = "lbipam"
    match_node_labels_annotation: str = MATCH_NODE_LABELS_ANNOTATION
    per_node_address_fallback: bool = False
    exclude_not_ready_nodes: bool = False
    not_ready_grace_seconds: float = Field(default=60.0, ge=0)
    ip_mode: IPMode = "VIP"

    # Process.
    kubeconfig: Path | None = None
    bind_address: str = "0.0.0.0"
    port: int = Field(default=9443, ge=1, le=65535)
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    ca_bundle_out: Path | None = None
    webhook: bool = True
    reconciler: bool = True
    leader_elect: bool = True
    leader_election_namespace: str = "node-ipam-lb"
    leader_election_id: str = "node-ipam-lb"
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)
    workers: int = Field(default=4, ge=1, le=64)
    watch_timeout_seconds: int = Field(default=300, ge=1, le=3600)
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    auth: AuthMode | None = None

    # Bounded cost per request (docs/design.md §7.1).
    max_connections: int = Field(default=512, ge=1, le=65536)
    request_head_timeout_seconds: float = Field(default=5.0, gt=0)
    idle_timeout_seconds: float = Field(default=5.0, gt=0)
    inflight_body_bytes: int = Field(default=8 * 1024 * 1024, ge=ADMISSION_BODY_LIMIT)
    review_deadline_seconds: float = Field(default=2.0, gt=0, lt=30)
    cluster_check_seconds: float = Field(default=0.25, gt=0)
    max_access_reviews: int = Field(default=8, ge=1, le=1024)

    # Self-managed webhook certificates (app/web/certsync.py): on when cert_secret_name is set.
    # The Secret holds CA + serving certificate for <webhook_service_name>.<namespace>.svc;
    # the CA goes into caBundle of the Mutating- and ValidatingWebhookConfiguration named
    # webhook_configuration_name; tls_cert_file/tls_private_key_file receive the pair.
    cert_secret_name: str | None = Field(default=None, min_length=1)
    cert_secret_namespace: str = Field(default="node-ipam-lb", min_length=1)
    webhook_service_name: str = Field(default="node-ipam-lb-webhook", min_length=1)
    webhook_configuration_name: str = Field(default="node-ipam-lb", min_length=1)
    ca_validity_seconds: float = Field(default=10 * 365 * 86400.0, gt=0)
    cert_validity_seconds: float = Field(default=365 * 86400.0, gt=0)
    cert_renew_before_seconds: float = Field(default=90 * 86400.0, gt=0)
    cert_check_interval_seconds: float = Field(default=30.0, gt=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Benchmark only (bench/bench_churn.py), no flag: model Cilium's policy (every Node event
    # enqueues every managed Service; a status write on every reconcile) for comparison.
    cilium_compat_fanout: bool = False

    @model_validator(mode="after")
    def _consistent_timings(self) -> Self:
        """Cross-field checks; the message names the settings.

        Leader election (client-go ``NewLeaderElector``): ``leaseDuration <= renewDeadline``
        and ``renewDeadline <= JitterFactor (1.2) * retryPeriod`` are errors, since a leader
        could then still act after another replica took over the Lease. Certificates: a
        check interval not shorter than ``cert_renew_before_seconds`` could let the
        certificate expire between two checks (docs/design.md §7).
        """
        lease, renew = self.lease_duration_seconds, self.renew_deadline_seconds
        retry = self.retry_period_seconds
        if lease <= renew:
            raise ValueError(
                f"lease-duration-seconds ({lease:g}) must be greater than"
                f" renew-deadline-seconds ({renew:g})"
            )
        if renew <= LEADER_ELECTION_JITTER_FACTOR * retry:
            raise ValueError(
                f"renew-deadline-seconds ({renew:g}) must be greater than"
                f" {LEADER_ELECTION_JITTER_FACTOR:g} x retry-period-seconds ({retry:g})"
            )
        interval, before = self.cert_check_interval_seconds, self.cert_renew_before_seconds
        if interval >= before:
            raise ValueError(
                f"cert-check-interval-seconds ({interval:g}) must be less than"
                f" cert-renew-before-seconds ({before:g}): the certificate could expire"
                " between two checks"
            )
        return self

    def selection(self) -> SelectionSettings:
        """Return the pure :class:`SelectionSettings` view of these settings."""
        return SelectionSettings(
            load_balancer_class=self.load_balancer_class,
            default_lb_service_ipam=self.default_lb_service_ipam,
            match_node_labels_annotation=self.match_node_labels_annotation,
            per_node_address_fallback=self.per_node_address_fallback,
            exclude_not_ready_nodes=self.exclude_not_ready_nodes,
            not_ready_grace_seconds=self.not_ready_grace_seconds,
            ip_mode=self.ip_mode,
        )
