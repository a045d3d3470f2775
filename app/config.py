"""Settings: one validated object built from flags and ``NODE_IPAM_*`` variables.

Names follow Cilium's settings where Cilium has one (``default-lb-service-ipam``,
``enable-node-ipam``). :class:`SelectionSettings` is the pure subset the selection
core reads; :class:`Settings` (pydantic-settings) is the whole process configuration
and is validated at start-up, so a typo such as ``default_lb_service_ipam=NodeIPAM``
is a start-up error rather than a silent no-op (docs/design.md §2;
docs/reference/cilium-node-ipam.md §12, weak spot 12).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from app.core.options import (
    DEFAULT_RESERVED_NODE_PORTS,
    LOAD_BALANCER_CLASS,
    MATCH_NODE_LABELS_ANNOTATION,
    DefaultLBServiceIPAM,
    IPMode,
    SelectionSettings,
)
from app.core.ports import parse_port_ranges

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


ENV_PREFIX = "NODE_IPAM_"

DAY_SECONDS = 86400.0
"""Upper bound of the leader-election timings and of ``not_ready_grace_seconds``."""
REQUEST_SECONDS_MAX = 3600.0
"""Upper bound of the per-request timeouts (API requests, request heads, idle connections):
an hour is far past any useful wait, and larger values overflow the platform ``time_t``
in socket and SSL timeouts (``1e12`` made every API request fail)."""
CERT_SECONDS_MAX = 100 * 365 * DAY_SECONDS
"""Upper bound of the certificate lifetimes (100 years; X.509 dates end in 9999)."""


class SelectionConfig(BaseSettings):
    """The selection settings (docs/design.md §2, §4.7) from ``NODE_IPAM_*`` variables and
    keyword arguments (flags win): what ``preview`` reads, and the first fields of
    :class:`Settings`. All but ``host_port_pods`` (which Pods are read, not how they are
    judged) make up :meth:`selection`. Validation errors are
    :class:`pydantic.ValidationError` naming the field."""

    # allow_inf_nan=False: every float setting is finite ("inf", "nan" are errors naming it).
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", allow_inf_nan=False)

    # Selection (Cilium names).
    enable_node_ipam: bool = True
    load_balancer_class: str = Field(default=LOAD_BALANCER_CLASS, min_length=1)
    default_lb_service_ipam: DefaultLBServiceIPAM = "lbipam"
    match_node_labels_annotation: str = MATCH_NODE_LABELS_ANNOTATION
    per_node_address_fallback: bool = False
    address_types: str = "ExternalIP"
    exclude_not_ready_nodes: bool = False
    ignore_exclude_lb: bool = False
    not_ready_grace_seconds: float = Field(default=60.0, ge=0, le=DAY_SECONDS)
    ip_mode: IPMode = "VIP"
    # Port ownership (docs/design.md §4.9).
    reserved_node_ports: str = DEFAULT_RESERVED_NODE_PORTS
    reserved_port_exceptions: str = ""
    allowed_namespaces: str = ""
    # Which Pods hold node ports (docs/design.md §4.9, §10): true (the safe side) lists
    # and watches every Pod and keeps those that hold one (hostNetwork containerPorts and
    # any Pod's hostPorts); false lists spec.hostNetwork=true Pods only, so a hostPort
    # Pod's port can be published for a Service of another namespace. Not a selection
    # input: it decides what the informer, the live preview and a dump read.
    host_port_pods: bool = True

    def selection(self) -> SelectionSettings:
        """Return the pure :class:`SelectionSettings` view of these settings.

        Raises:
            ValueError: see :class:`SelectionSettings`.
        """
        return SelectionSettings(
            load_balancer_class=self.load_balancer_class,
            default_lb_service_ipam=self.default_lb_service_ipam,
            match_node_labels_annotation=self.match_node_labels_annotation,
            per_node_address_fallback=self.per_node_address_fallback,
            address_types=self.address_types,
            exclude_not_ready_nodes=self.exclude_not_ready_nodes,
            ignore_exclude_lb=self.ignore_exclude_lb,
            not_ready_grace_seconds=self.not_ready_grace_seconds,
            ip_mode=self.ip_mode,
            reserved_node_ports=self.reserved_node_ports,
            reserved_port_exceptions=self.reserved_port_exceptions,
            allowed_namespaces=self.allowed_namespaces,
        )


class Settings(SelectionConfig):
    """Whole-process configuration; every field is also ``NODE_IPAM_<FIELD>``.

    ``serve`` flags map one-to-one onto these fields (``--default-lb-service-ipam`` →
    ``default_lb_service_ipam``). Validation errors are raised as
    :class:`pydantic.ValidationError` at start-up and name the field; cross-field checks
    (leader-election and certificate timings) as a ``ValueError`` naming the settings.
    """

    # Process (the selection fields come from SelectionConfig).
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
    lease_duration_seconds: float = Field(default=15.0, gt=0, le=DAY_SECONDS)
    renew_deadline_seconds: float = Field(default=10.0, gt=0, le=DAY_SECONDS)
    retry_period_seconds: float = Field(default=2.0, gt=0, le=DAY_SECONDS)
    workers: int = Field(default=4, ge=1, le=64)
    watch_timeout_seconds: int = Field(default=300, ge=1, le=3600)
    request_timeout_seconds: float = Field(default=10.0, gt=0, le=REQUEST_SECONDS_MAX)
    auth: AuthMode | None = None
    # controller-runtime's flag: plain-HTTP /healthz and /readyz on a listener of their own.
    health_probe_bind_address: str = ":8081"

    # Bounded cost per request (docs/design.md §7.1).
    max_connections: int = Field(default=512, ge=1, le=65536)
    request_head_timeout_seconds: float = Field(default=5.0, gt=0, le=REQUEST_SECONDS_MAX)
    idle_timeout_seconds: float = Field(default=5.0, gt=0, le=REQUEST_SECONDS_MAX)
    # After SIGTERM, keep serving this long before the graceful shutdown (app/web/draining.py;
    # kube-apiserver's --shutdown-delay-duration). 0: shut down at once.
    shutdown_delay_seconds: float = Field(default=0.0, ge=0, le=REQUEST_SECONDS_MAX)
    inflight_body_bytes: int = Field(default=8 * 1024 * 1024, ge=ADMISSION_BODY_LIMIT)
    review_deadline_seconds: float = Field(default=2.0, gt=0, lt=30)
    cluster_check_seconds: float = Field(default=0.25, gt=0, lt=30)
    max_access_reviews: int = Field(default=8, ge=1, le=1024)

    # Self-managed webhook certificates (app/web/certsync.py): on when cert_secret_name is set.
    # The Secret holds CA + serving certificate for <webhook_service_name>.<namespace>.svc;
    # the CA goes into caBundle of the Mutating- and ValidatingWebhookConfiguration named
    # webhook_configuration_name; tls_cert_file/tls_private_key_file receive the pair.
    cert_secret_name: str | None = Field(default=None, min_length=1)
    cert_secret_namespace: str = Field(default="node-ipam-lb", min_length=1)
    webhook_service_name: str = Field(default="node-ipam-lb-webhook", min_length=1)
    webhook_configuration_name: str = Field(default="node-ipam-lb", min_length=1)
    ca_validity_seconds: float = Field(default=10 * 365 * 86400.0, gt=0, le=CERT_SECONDS_MAX)
    cert_validity_seconds: float = Field(default=365 * 86400.0, gt=0, le=CERT_SECONDS_MAX)
    cert_renew_before_seconds: float = Field(default=90 * 86400.0, gt=0, le=CERT_SECONDS_MAX)
    cert_check_interval_seconds: float = Field(default=30.0, gt=0, le=DAY_SECONDS)
    # Readiness (app/web/webhookready.py): a dry-run Service with a malformed selector is
    # created in this namespace and must be denied by our webhook; "" turns the probe off.
    admission_probe_namespace: str = Field(default="default", max_length=63)
    # Health-checked nodes (docs/design.md §4.11, app/controller/nodeprober.py): the Lease
    # holder probes kube-proxy's /healthz on every Node; off by default (Cilium does not).
    node_health_check: bool = False
    node_health_check_port: int = Field(default=10256, ge=1, le=65535)
    node_health_check_period_seconds: float = Field(default=5.0, ge=0.1, le=3600.0)
    node_health_check_timeout_seconds: float = Field(default=2.0, gt=0, le=60.0)
    node_health_check_failure_threshold: int = Field(default=3, ge=1, le=100)
    node_health_check_success_threshold: int = Field(default=2, ge=1, le=100)
    node_health_check_max_unhealthy_fraction: float = Field(default=0.5, gt=0, le=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("admission_probe_namespace")
    @classmethod
    def _probe_namespace(cls, value: str) -> str:
        if value and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value):
            raise ValueError(
                f"{value!r}: must be a namespace name (a DNS-1123 label), or empty to turn"
                " the probe off"
            )
        return value

    @field_validator("health_probe_bind_address")
    @classmethod
    def _health_probe_address(cls, value: str) -> str:
        """``host:port`` as Go's ``net.Listen`` takes it, or ``0`` (see
        :func:`parse_health_probe_bind_address`)."""
        parse_health_probe_bind_address(value)
        return value

    def health_probe_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the health-probe listener (``host`` ``""``: every address),
        ``None`` when ``health_probe_bind_address`` is ``0`` (disabled)."""
        return parse_health_probe_bind_address(self.health_probe_bind_address)

    def _reserve_health_check_port(self) -> None:
        """With health checks on, ``node-health-check-port``/TCP joins
        ``reserved-node-ports`` when no entry there covers it (docs/design.md §4.9,
        §4.11): the prober connects to ``nodeIP:port``, and a Service published on that
        port would have kube-proxy answer the health checks with its own endpoints, so
        any tenant could keep a failing node published. The effective settings (the
        start-up log line, the live preview's record) show the added entry.

        Raises:
            ValueError: ``reserved-node-ports`` does not parse (naming it).
        """
        if not self.node_health_check:
            return
        port = self.node_health_check_port
        ranges = parse_port_ranges(self.reserved_node_ports, flag="reserved-node-ports")
        if not any(r.covers("TCP", port) for r in ranges):
            entries = [self.reserved_node_ports] if self.reserved_node_ports else []
            self.reserved_node_ports = ",".join([*entries, f"{port}/TCP"])

    @model_validator(mode="after")
    def _consistent_timings(self) -> Self:
        """Cross-field checks; the message names the settings.

        Leader election (client-go ``NewLeaderElector``): ``leaseDuration <= renewDeadline``
        and ``renewDeadline <= JitterFactor (1.2) * retryPeriod`` are errors, since a leader
        could then still act after another replica took over the Lease. Certificates: a
        check interval not shorter than ``cert_renew_before_seconds`` could let the
        certificate expire between two checks (docs/design.md §7). Health checks: a probe
        timeout longer than the period (GCP and AWS refuse it too, §4.11); and, with health
        checks on, the probed port is reserved (:meth:`_reserve_health_check_port`).
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
        self._reserve_health_check_port()
        period = self.node_health_check_period_seconds
        timeout = self.node_health_check_timeout_seconds
        if timeout > period:
            raise ValueError(
                f"node-health-check-timeout-seconds ({timeout:g}) must not be greater than"
                f" node-health-check-period-seconds ({period:g}): a node that does not answer"
                " would stretch every round to the timeout (cloud load balancers require the"
                " same)"
            )
        return self


def parse_health_probe_bind_address(value: str) -> tuple[str, int] | None:
    """controller-runtime's ``--health-probe-bind-address``: ``0`` disables the listener;
    otherwise ``host:port`` as Go's ``net.Listen("tcp", ...)`` takes it (``:8081`` every
    address, ``127.0.0.1:8081``, ``[::1]:8081``; an IPv6 host in brackets; port 0-65535,
    0 = any free port).

    Returns ``(host, port)``, ``host`` without brackets (``""`` = every address), or ``None``.

    Raises:
        ValueError: not of that form, naming the reason (Go's ``net.SplitHostPort``
            reasons: ``missing port in address``, ``too many colons in address``, ...) but
            not the value, which the caller names with the flag.
    """
    if value == "0":
        return None
    if value.startswith("["):  # Go's net.SplitHostPort
        host, bracket, rest = value[1:].partition("]")
        if not bracket:
            raise ValueError("missing ']' in address")
        if not rest:
            raise ValueError("missing port in address ([::1]:8081)")
        if not rest.startswith(":") or "[" in host or "]" in rest:
            raise ValueError("unexpected text after the bracketed host ([::1]:8081)")
        port = rest[1:]
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError("missing port in address (host:port, :port or 0)")
        if ":" in host:
            raise ValueError(
                "too many colons in address: an IPv6 host must be in brackets ([::1]:8081)"
            )
        if "[" in host or "]" in host:
            raise ValueError("unexpected '[' or ']' in address")
    # ASCII digits only: str.isdigit() also takes "²" and "٨٠٨١" (int() takes the latter).
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"invalid port {port!r} (0-65535)")
    return host, int(port)


ConfigT = TypeVar("ConfigT", bound=SelectionConfig)


class InvalidSettings(ValueError):
    """Settings that fail validation; ``str(err)`` is one line naming every bad flag, its
    variable, the reason and the value given."""


def from_flags(config: type[ConfigT], flags: Mapping[str, Any]) -> ConfigT:
    """``config`` (:class:`Settings` or :class:`SelectionConfig`) from the flags that were
    given (``None`` = not given) over ``NODE_IPAM_*`` variables, then its selection view
    checked too.

    Raises:
        InvalidSettings: ``invalid setting: --default-lb-service-ipam
            (NODE_IPAM_DEFAULT_LB_SERVICE_IPAM): Input should be 'lbipam', ...: 'x'``;
            several problems are joined with ``; ``; a cross-field problem is its message.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    try:
        settings = config(**given)
        settings.selection()
    except ValidationError as err:
        problems = []
        for error in err.errors():
            if not error["loc"]:  # a cross-field check: its message names the settings
                problems.append(str(error["msg"]).removeprefix("Value error, "))
                continue
            field = str(error["loc"][0])
            flag = "--" + field.replace("_", "-")
            problems.append(
                f"{flag} ({ENV_PREFIX}{field.upper()}):"
                f" {str(error['msg']).removeprefix('Value error, ')}: {error.get('input')!r}"
            )
        raise InvalidSettings("invalid setting: " + "; ".join(problems)) from err
    except (SettingsError, ValueError) as err:
        raise InvalidSettings(f"invalid setting: {err}") from err
    return settings


TOOLING_VARIABLES = frozenset(
    {
        "NODE_IPAM_REQUIRE_CONTROL_PLANE",  # .ci/run: the real-API test tier must run
        "NODE_IPAM_REQUIRE_KUBECTL",  # tests: kubectl must be on PATH
        "NODE_IPAM_CONTROL_PLANE_CACHE",  # tests/controlplane: where binaries are cached
        "NODE_IPAM_GO",  # tests/controlplane: the go command to build with
    }
)
"""``NODE_IPAM_*`` variables of the repository's build and test tooling, not settings:
:func:`unknown_environment` does not warn about them (CI exports some of them)."""


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``NODE_IPAM_*`` variable that names no setting, in name order.

    pydantic-settings ignores such a variable, so a misspelt
    ``NODE_IPAM_PER_NODE_ADRESS_FALLBACK=true`` would silently do nothing. Each warning
    names the variable and, when one is close (``difflib.get_close_matches``, cutoff 0.6,
    compared without the prefix), the known variable it probably means. Variable names
    are compared case-insensitively, as pydantic-settings reads them. ``environ``
    defaults to ``os.environ``; values are never echoed (they may be secrets).
    """
    environ = os.environ if environ is None else environ
    known = [name.upper() for name in Settings.model_fields]
    warnings = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper.removeprefix(ENV_PREFIX) in known:
            continue
        if upper in TOOLING_VARIABLES:
            continue
        # Compared without the shared prefix, which would make every name look close.
        close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), known, n=1)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        warnings.append(f"environment variable {name} is not a node-ipam-lb setting{hint}")
    return warnings


PUBLISHED_SETTINGS = (
    *(f.name for f in dataclasses.fields(SelectionSettings) if f.init),
    "host_port_pods",
    "node_health_check",
)
"""The settings the Lease holder publishes on its record Lease for the live preview
(:mod:`app.core.published`, docs/design.md §8): those a decision reads. The fields of
:class:`SelectionSettings`; ``host_port_pods``, which decides which Pods hold ports
(§4.9); ``node_health_check``, which says whether the record's node-health decision is
in force (a record written while it was on outlives it)."""


def published(settings: Settings) -> dict[str, Any]:
    """The :data:`PUBLISHED_SETTINGS` of ``settings`` under their flag names, as
    :func:`effective` shows them (``{"allowed-namespaces": "team-a", ...}``)."""
    shown = effective(settings)
    names = [name.replace("_", "-") for name in PUBLISHED_SETTINGS]
    return {name: shown[name] for name in names}


def effective(settings: SelectionConfig) -> dict[str, Any]:
    """The settings as JSON-ready values (paths as text), for one start-up log line, each
    under the name users set it by: the ``serve`` flag without ``--``, which is also the
    Helm value ``settings.<name>`` (``per-node-address-fallback``, not the Python field
    ``per_node_address_fallback``).

    No field is a secret (tokens and keys are read from files whose *paths* are
    settings), so every field is shown.
    """
    return {
        name.replace("_", "-"): value for name, value in settings.model_dump(mode="json").items()
    }
