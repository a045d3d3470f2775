"""``node-ipam-lb serve``: the imperative shell that wires settings, client, controller, app, TLS.

Start-up problems (a bad setting, no cluster configuration, unreadable certificates) raise
:class:`StartupError`, which the CLI prints as one line and exits 2: never a traceback.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from app.config import InvalidSettings, Settings, effective, from_flags, unknown_environment
from app.core import pki
from app.kube.client import ConnectError, connect
from app.telemetry.logs import configure, log_event
from app.web import tls
from app.web.app import create_app
from app.web.auth import AllowAll, Authorizer, KubernetesAuthorizer
from app.web.connections import CappedListener, protocol_class
from app.web.draining import Draining, catch_early_sigterm
from app.web.healthprobe import HEAD_DEADLINE_SECONDS, HealthProbeServer, start_health_probes

if TYPE_CHECKING:
    from app.web.certsync import CertSync
    from app.web.webhookready import CaBundleReadiness

log = logging.getLogger("node_ipam_lb.server")

GIL_SWITCH_INTERVAL_SECONDS = 0.001
"""``sys.setswitchinterval`` of ``serve`` (Python's default: 0.005). A thread that waits
for the GIL gets it after at most this long; the event loop gives the GIL up at every
socket read and write, so while a review thread runs Python for long (the cluster checks
of a 250 KB selector) each of a request's I/O steps waited up to 5 ms. Under attack 1 of
bench/README.md §6 (two runs each): ordinary review p99 72 and 100 ms → 42 and 69 ms,
``/healthz`` p99 41 and 45 ms → 19 and 19 ms. Shorter slices cost the busy thread a
little throughput (more of the attack's reviews were decided in time, not fewer)."""
GRACEFUL_SHUTDOWN_SECONDS = 10


class StartupError(Exception):
    """The process cannot start; ``str(err)`` names the setting and the reason."""


def settings_from(flags: Mapping[str, Any]) -> Settings:
    """Settings from the flags that were given (``None`` = not given) over ``NODE_IPAM_*``.

    Raises:
        StartupError: a value fails validation; the message names the flag and the
            environment variable, e.g. ``--default-lb-service-ipam
            (NODE_IPAM_DEFAULT_LB_SERVICE_IPAM): Input should be 'lbipam', ...``.
    """
    try:
        settings = from_flags(Settings, flags)
    except InvalidSettings as err:
        raise StartupError(str(err)) from err
    if (settings.tls_cert_file is None) != (settings.tls_private_key_file is None):
        raise StartupError(
            "invalid setting: --tls-cert-file and --tls-private-key-file must be given together"
        )
    return settings


def api_client_for(settings: Settings) -> tuple[Any, bool]:
    """The kubernetes ApiClient, found as controller-runtime's ``config.GetConfig`` finds
    it: ``--kubeconfig`` (``NODE_IPAM_KUBECONFIG``), else ``$KUBECONFIG``, else the
    in-cluster configuration, else ``~/.kube/config`` (:func:`app.kube.client.connect`,
    the one lookup ``preview`` uses too, in kubectl's order).

    Returns ``(api_client, in_cluster)``.

    Raises:
        StartupError: the kubeconfig cannot be loaded, or there is none and the process
            does not run in a Pod; the message names the setting.
    """
    try:
        found = connect(settings.kubeconfig, order="controller-runtime")
    except ConnectError as err:
        raise StartupError(str(err)) from err
    return found.api_client, found.in_cluster


def leader_identity() -> str:
    """Leader-election identity: Pod name (``POD_NAME``) or hostname, plus a random suffix
    so two processes on one host never share it (client-go uses hostname + ``_`` + UUID)."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:12]}"


def tls_context(settings: Settings, *, workdir: Path) -> tls.ReloadingContext:
    """The server TLS context: the given files (reloaded on change), or a self-signed CA and
    serving certificate generated into ``workdir`` (CA written to ``--ca-bundle-out``).

    Raises:
        StartupError: the files cannot be read or do not form a key pair.
    """
    cert_file, key_file = settings.tls_cert_file, settings.tls_private_key_file
    if cert_file is None or key_file is None:
        ca = pki.generate_ca()
        names = _self_signed_names(settings.bind_address)
        serving = pki.generate_serving_cert(ca, names)
        cert_file, key_file = workdir / "tls.crt", workdir / "tls.key"
        tls.write_key_pair(serving, cert_path=cert_file, key_path=key_file)
        log_event(
            log,
            "generated a self-signed serving certificate",
            level=logging.INFO,
            ca_sha256=ca.fingerprint(),
            dns_names=names,
            # A setting under its flag name, as users set it (tests/test_user_messages.py).
            **{"ca-bundle-out": str(settings.ca_bundle_out or "")},
        )
        if settings.ca_bundle_out is not None:
            try:
                settings.ca_bundle_out.write_bytes(ca.cert_pem)
            except OSError as err:
                raise StartupError(f"--ca-bundle-out {settings.ca_bundle_out}: {err}") from err
    elif settings.ca_bundle_out is not None:
        log.warning("--ca-bundle-out is ignored: the certificate comes from --tls-cert-file")
    try:
        return tls.ReloadingContext(cert_file=cert_file, key_file=key_file)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        raise StartupError(_key_pair_problem(cert_file, key_file, err)) from err


def _key_pair_problem(cert_file: Path, key_file: Path, err: Exception) -> str:
    """Which of the two files is wrong, and why (OpenSSL only says ``[SSL] PEM lib``)."""
    for flag, path, label, kind in (
        ("--tls-cert-file", cert_file, b"CERTIFICATE", "certificate"),
        ("--tls-private-key-file", key_file, b"PRIVATE KEY", "private key"),
    ):
        try:
            data = path.read_bytes()
        except OSError as read_err:
            return f"{flag} {path}: cannot read: {read_err.strerror or read_err}"
        if b"-----BEGIN " not in data or label + b"-----" not in data:
            return f"{flag} {path}: not a PEM {kind} (no -----BEGIN ...{label.decode()}----- block)"
    return (
        f"--tls-cert-file {cert_file}, --tls-private-key-file {key_file}: cannot load the"
        f" key pair: {err}"
    )


def build(
    settings: Settings,
    *,
    workdir: Path,
    connection: tuple[Any, bool] | None = None,
    draining: Draining | None = None,
) -> tuple[Any, Any, uvicorn.Config]:
    """Wire controller, app and uvicorn config (without running); returns
    ``(controller, app, config)``. A generated certificate and key go to ``workdir``
    (a private directory that must outlive the server). ``connection`` is what
    :func:`api_client_for` returned, when already called; ``draining`` the shutdown
    delay's flag that ``serve``'s signal handling sets (default a new one).

    Raises:
        StartupError: see :func:`api_client_for` and :func:`tls_context`.
    """
    from app.controller.controller import Controller
    from app.kube.client import KubernetesAPI

    api_client, in_cluster = connection or api_client_for(settings)
    auth = settings.auth or ("kubernetes" if in_cluster else "none")
    authorizer: Authorizer = (
        KubernetesAuthorizer(
            KubernetesAPI(api_client, request_timeout=settings.request_timeout_seconds),
            max_in_flight=settings.max_access_reviews,
        )
        if auth == "kubernetes"
        else AllowAll()
    )
    identity = leader_identity()
    controller = Controller(settings=settings, api_client=api_client, identity=identity)
    certs = _self_managed_certificates(
        settings, api_client=api_client, is_leader=controller.is_leader
    )
    if certs is not None:
        # caBundle is the leader's to write: write it as soon as this replica leads.
        controller.on_started_leading(certs.wake)
    reloading = tls_context(settings, workdir=workdir)
    in_force = _webhook_readiness(
        settings,
        api_client=api_client,
        served=reloading.served_certificate,
        bootstrap=_lone_lease_holder(
            controller,
            leader_elect=settings.leader_elect,
            pod=os.environ.get("POD_NAME") or socket.gethostname(),
        ),
    )
    if in_force is not None:
        # With no replica Ready, the new Lease holder may be Ready alone: check at once.
        controller.on_started_leading(in_force.wake)
        if certs is not None:
            # A caBundle or file write is checked at once, not at the next tick.
            certs.on_change(in_force.wake)
        in_force.start()
    app = create_app(
        settings,
        draining=draining,
        controller=controller,
        authorizer=authorizer,
        background=[task for task in (certs, in_force) if task is not None],
        readiness=[in_force] if in_force is not None else [],
        start_worker=True,
        kube_proxy_hazard=controller.kube_proxy_hazard,
        unhealthy=lambda: controller.health_view().unhealthy,
    )
    config = uvicorn.Config(
        app,
        host=settings.bind_address,
        port=settings.port,
        ssl_context_factory=lambda _config, _default: reloading.context,
        lifespan="on",
        log_config=None,
        access_log=settings.log_level == "debug",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        server_header=False,
        # Connection bounds (docs/design.md §7.1): the request-head deadline lives in the
        # protocol, the cap on open connections in the listener (see serve()).
        http=protocol_class(head_timeout=settings.request_head_timeout_seconds),
        timeout_keep_alive=settings.idle_timeout_seconds,  # type: ignore[arg-type]
    )
    log_event(
        log,
        "serving",
        level=logging.INFO,
        address=f"https://{settings.bind_address}:{settings.port}",
        identity=identity,
        auth=auth,
        webhook=settings.webhook,
        # A setting under its flag name, as users set it (tests/test_user_messages.py).
        **{"default-lb-service-ipam": settings.default_lb_service_ipam},
    )
    return controller, app, config


def run(flags: Mapping[str, Any]) -> None:
    """``serve``: settings from ``flags`` (None = not given) and env, then :func:`serve`.

    Unknown ``NODE_IPAM_*`` variables (:func:`app.config.unknown_environment`) are logged
    as warnings once logging is set up; when the settings are invalid they are added to
    the error, since a misspelt variable is a likely cause.

    Raises:
        StartupError: see :func:`settings_from` and :func:`build`.
    """
    unknown = unknown_environment()
    try:
        settings = settings_from(flags)
    except StartupError as err:
        if unknown:
            raise StartupError(f"{err}; note: {'; '.join(unknown)}") from err
        raise
    serve(settings, unknown_variables=unknown)


def listen(settings: Settings) -> socket.socket:
    """Bind and listen on ``bind_address:port`` (TCP, IPv6 when the address holds ``:``),
    before anything else starts, so a taken port fails start-up before any API write.

    Raises:
        StartupError: the address cannot be bound, naming ``--bind-address``/``--port``
            and the OS reason (``Address already in use``).
    """
    host, port = settings.bind_address, settings.port
    return _bind(host, port, flags=f"--bind-address {host} --port {port}")


def listen_health_probes(settings: Settings) -> socket.socket | None:
    """Bind and listen on ``--health-probe-bind-address`` (``None`` when it is ``0``); a
    host of ``""`` (``:8081``) is every address, IPv4 and IPv6 where the host has both, as
    Go's ``net.Listen`` binds it.

    Raises:
        StartupError: the address cannot be bound, naming the flag and the OS reason.
    """
    address = settings.health_probe_address()
    if address is None:
        return None
    host, port = address
    flags = f"--health-probe-bind-address {settings.health_probe_bind_address}"
    if host:
        return _bind(host, port, flags=flags)
    return _bind("::" if socket.has_dualstack_ipv6() else "0.0.0.0", port, flags=flags, backlog=64)


def _bind(host: str, port: int, *, flags: str, backlog: int = 2048) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an accepted connection only when the
    # socket's proto says TCP (base_events._set_nodelay), and uvicorn writes a response's
    # head and body in two sends; with Nagle on, the body waited for the client's delayed
    # ACK (40 ms on Linux) on every kept-alive request (bench/README.md, admission).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # and IPv4
        sock.bind((host, port))
        sock.listen(backlog)  # 2048: uvicorn's default backlog
    except OSError as err:
        sock.close()
        reason = err.strerror or str(err)
        if isinstance(err, socket.gaierror):  # not an IP: bind() took it for a host name
            reason = f"not a valid IP address ({reason})"
        elif err.errno == errno.EADDRNOTAVAIL:
            reason = f"not an address of this host ({reason})"
        elif err.errno == errno.EADDRINUSE:
            reason = f"{reason} (is another process using port {port}?)"
        raise StartupError(f"{flags}: cannot listen: {reason}") from err
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, *, unknown_variables: Sequence[str] = ()) -> None:
    """Run until SIGTERM/SIGINT; uvicorn's graceful shutdown runs the app lifespan's exit,
    which stops the controller (and releases the leader Lease when leader election is on).

    A SIGTERM before the server runs starts the shutdown delay (:mod:`app.web.draining`).
    Order: logging; one warning per unknown variable; one ``settings`` line with every
    effective setting; the cluster configuration (read only, no request); the listening
    socket (:func:`listen`) and the health-probe socket (:func:`listen_health_probes`); only
    then certificates, controller and app (:func:`build`), so a taken port exits before any
    API request, let alone a write. The health probes (:mod:`app.web.healthprobe`) are
    answered on their own thread from just before the main server starts until after it
    has shut down (controller-runtime's manager keeps them up while it stops, too).

    Raises:
        StartupError: see :func:`api_client_for`, :func:`listen` and :func:`build`.
    """
    configure(settings.log_level)
    draining = Draining()
    restore_sigterm = catch_early_sigterm(draining)  # until uvicorn's handlers take over
    try:
        _serve(settings, draining=draining, unknown_variables=unknown_variables)
    finally:
        restore_sigterm()


def _serve(settings: Settings, *, draining: Draining, unknown_variables: Sequence[str]) -> None:
    """:func:`serve` once logging and the early SIGTERM handler are in place."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    for warning in unknown_variables:
        log.warning(warning)
    log_event(log, "settings", **effective(settings))
    connection = api_client_for(settings)
    listener = CappedListener.wrap(listen(settings), limit=settings.max_connections)
    probes: HealthProbeServer | None = None
    try:
        health_socket = listen_health_probes(settings)
    except StartupError:
        listener.close()
        raise
    try:
        with tempfile.TemporaryDirectory(prefix="node-ipam-lb-tls-") as workdir:
            _, app, config = build(
                settings, workdir=Path(workdir), connection=connection, draining=draining
            )
            # Everything imported and built so far lives as long as the process: out of
            # the cyclic GC's reach, a full collection no longer walks those ~80,000
            # objects. Full collections during the first Lists paused every thread for
            # tens of ms, the webhook's p99 during a cold start among them
            # (bench/bench_peer.py's admission prober; figures in bench/README.md).
            gc.freeze()
            if health_socket is not None:
                probes = start_health_probes(
                    health_socket,
                    state=app.state.node_ipam,
                    deadline=min(settings.request_head_timeout_seconds, HEAD_DEADLINE_SECONDS),
                )
                health_socket = None  # the server owns it
                log_event(log, "serving health probes", address=_address_of(probes))
            _GracefulServer(config, draining=draining, delay=settings.shutdown_delay_seconds).run(
                sockets=[listener]
            )
    finally:
        if probes is not None:
            probes.stop()
        if health_socket is not None:
            health_socket.close()
        listener.close()


def _address_of(server: HealthProbeServer) -> str:
    host, port = server.socket.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _GracefulServer(uvicorn.Server):
    """uvicorn's server with the shutdown delay (:mod:`app.web.draining`) and exit 0 after a
    SIGTERM-triggered graceful shutdown.

    The first SIGTERM with ``delay`` > 0 sets ``draining`` (responses close their
    connections; one that came before the server ran was caught by
    :func:`app.web.draining.catch_early_sigterm`) and the graceful shutdown starts ``delay``
    seconds after it, at the first tick (0.1 s) after; meanwhile everything keeps running,
    the controller included (it stops, releasing the Lease, in the lifespan's exit). A second
    SIGTERM, or SIGINT, starts the shutdown at once. uvicorn re-raises a captured SIGTERM
    once shut down (exit status -15); a Pod that stopped as asked should not look like it
    was killed.
    """

    def __init__(self, config: uvicorn.Config, *, draining: Draining, delay: float) -> None:
        super().__init__(config)
        self._draining = draining
        self._delay = delay
        self._drain_announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._delay > 0 and not self._draining.is_set():
            self._draining.start()  # logged at the next tick, outside the signal handler
            return
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            self._captured_signals = [s for s in self._captured_signals if s != sig]

    async def on_tick(self, counter: int) -> bool:
        since = self._draining.since
        if since is not None and not self.should_exit:
            if not self._drain_announced:
                self._drain_announced = True
                log_event(
                    log,
                    "shutdown delay started: serving, closing each connection after its answer",
                    level=logging.INFO,
                    seconds=self._delay,
                )
            if time.monotonic() - since >= self._delay:
                self.should_exit = True
        return await super().on_tick(counter)


def _self_managed_certificates(
    settings: Settings, *, api_client: Any, is_leader: Callable[[], bool]
) -> CertSync | None:
    """With ``--cert-secret-name``: certificate from the Secret into the TLS files before
    the server starts, then kept current (app/web/certsync.py); returns the running
    :class:`app.web.certsync.CertSync` (``/healthz`` checks it), else ``None``.
    Raises :class:`StartupError`."""
    from app.kube.client import KubernetesAPI
    from app.web.certsync import CertSyncError, start_self_managed

    api = KubernetesAPI(api_client, request_timeout=settings.request_timeout_seconds)
    try:
        return start_self_managed(settings, api=api, is_leader=is_leader)
    except ValueError as err:
        raise StartupError(f"invalid setting: {err}") from err
    except CertSyncError as err:
        raise StartupError(str(err)) from err


def _webhook_readiness(
    settings: Settings,
    *,
    api_client: Any,
    served: Callable[[], bytes],
    bootstrap: Callable[[frozenset[tuple[str, str]]], str | None] | None = None,
) -> CaBundleReadiness | None:
    """``/readyz``'s "webhook in force" check (app/web/webhookready.py), not started, or
    ``None`` where readiness does not depend on a caBundle (``--webhook false``, or a
    generated certificate: :meth:`CaBundleReadiness.from_settings`)."""
    from app.kube.client import KubernetesAPI
    from app.web.webhookready import READ_TIMEOUT_SECONDS, CaBundleReadiness

    timeout = min(settings.request_timeout_seconds, READ_TIMEOUT_SECONDS)
    api = KubernetesAPI(api_client, request_timeout=timeout)
    return CaBundleReadiness.from_settings(settings, api=api, served=served, bootstrap=bootstrap)


def _lone_lease_holder(
    controller: Any, *, leader_elect: bool, pod: str
) -> Callable[[frozenset[tuple[str, str]]], str | None]:
    """The readiness check's ``bootstrap`` (app/web/webhookready.py): given the webhook
    Services ``(namespace, name)``, why this replica (Pod ``pod``) may be Ready although its
    admission probe was not refused, or ``None``. Only the Lease holder (any replica without
    leader election), only with the cluster cache synced, and only while no EndpointSlice
    of those Services has a Pod other than ``pod`` that is ready or serving (KEP-1672: the
    endpoints kube-proxy sends to, serving terminating ones when none is ready, KEP-1669):
    then no other replica can refuse the probe, and this one being Ready is what puts the
    webhook in force. One replica, so the others wait for a refusal. Endpoints that are not
    Pods (a hand-made EndpointSlice) are not counted."""

    def bootstrap(services: frozenset[tuple[str, str]]) -> str | None:
        if not controller.ready() or (leader_elect and not controller.is_leader()):
            return None
        for namespace, name in sorted(services):
            slices = controller.cache.endpoint_slices(namespace, name)
            if any(s.backends - {pod} for s in slices):
                return None
        names = ", ".join(f"{namespace}/{name}" for namespace, name in sorted(services))
        return (
            f"no other ready or serving endpoint in Service {names}: no other replica can"
            " refuse the probe, and this replica (the Lease holder) being Ready puts the"
            " webhook in force"
        )

    return bootstrap


def _self_signed_names(bind_address: str) -> list[str]:
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    for extra in (bind_address, os.environ.get("POD_IP", "")):
        if extra and extra not in ("0.0.0.0", "::") and extra not in names:
            names.append(extra)
    return names
