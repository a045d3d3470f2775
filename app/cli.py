"""Command line: ``node-ipam-lb preview|serve|certs`` (also ``kubectl node-ipam ...``).

Thin: each command parses flags, builds settings and calls into the package.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from app import __version__
from app.config import SelectionConfig, Settings

F = TypeVar("F", bound=Callable[..., Any])

cli = typer.Typer(
    name="node-ipam-lb",
    help="Publish node addresses as the ingress of LoadBalancer Services (io.cilium/node).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)


# Port ownership (docs/design.md §4.9): the same help on serve and preview.
RESERVED_NODE_PORTS_HELP = (
    "Ports never published on a node address (the node's own): PORT or FIRST-LAST,"
    " optionally /TCP, /UDP or /SCTP, comma-separated; empty reserves none"
)
RESERVED_PORT_EXCEPTIONS_HELP = (
    "Reserved ports granted to one Service each: NAMESPACE/NAME:PORTS, separated by ';',"
    " several PORTS joined by '+', e.g. infra/bastion:22"
)
ALLOWED_NAMESPACES_HELP = "Namespaces whose Services may get node addresses, comma-separated"
HOST_PORT_PODS_HELP = (
    "Port ownership honours every Pod's hostPort (lists and watches all Pods); off:"
    " hostNetwork Pods only, and a Service may take a hostPort Pod's port"
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"node-ipam-lb {__version__}")
        raise typer.Exit()


@cli.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the version and exit.",
            show_default=False,
        ),
    ] = False,
) -> None:
    """node-ipam-lb: Cilium-compatible Node IPAM LoadBalancer."""


def _shown(value: object) -> str:
    """A settings default as ``--help`` shows it (``true``/``false`` like the env form)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "none" if value is None else str(value)


def _settings_defaults(config: type[SelectionConfig]) -> Callable[[F], F]:
    """Show each flag's default in ``--help`` from the one place defaults live: the
    pydantic-settings model ``config`` (flags default to ``None`` = "not given", so the
    environment can still fill them)."""

    def decorate(command: F) -> F:
        # Evaluate the (postponed) annotations once and keep them, so typer reads the very
        # Option objects set here.
        hints = typing.get_type_hints(command, include_extras=True)
        command.__annotations__ = hints
        for name, hint in hints.items():
            field = config.model_fields.get(name)
            options = list(getattr(hint, "__metadata__", ()))
            if field is None or not options or not hasattr(options[0], "show_default"):
                continue
            if isinstance(options[0].show_default, str):  # the command's own wording
                continue
            options[0].show_default = _shown(field.default)
        return command

    return decorate


@cli.command()
@_settings_defaults(SelectionConfig)
def preview(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[NAME|NAMESPACE/NAME]...",
            help="Services to show (default: every Service in the namespace)",
            show_default=False,
        ),
    ] = None,
    filename: Annotated[
        list[str] | None,
        typer.Option(
            "-f",
            "--filename",
            metavar="FILE",
            help="Cluster dump (kubectl get nodes,services,endpointslices -A -o yaml|json,"
            " and in a file of its own kubectl get pods -A -o json, of which the Pods that"
            " hold node ports are kept; with NodeAddressPools, kubectl get"
            " namespaces,nodeaddresspools.node-ipam-lb.io -o yaml); '-' reads stdin."
            " Repeatable. Without it the live"
            " cluster is read.",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "-n",
            "--namespace",
            help="Only this namespace (default: the kubeconfig context's, else default;"
            " with -f: every namespace of the dump)",
            show_default=False,
        ),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("-A", "--all-namespaces", help="Every namespace")
    ] = False,
    output: Annotated[
        str, typer.Option("-o", "--output", help="table, wide, json or yaml")
    ] = "table",
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Kubeconfig of the live cluster (default: $KUBECONFIG, ~/.kube/config,"
            " in-cluster)",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(help="Kubeconfig context (default: its current-context)", show_default=False),
    ] = None,
    default_lb_service_ipam: Annotated[
        str | None, typer.Option(help="Who handles class-less Services: lbipam, nodeipam, none")
    ] = None,
    load_balancer_class: Annotated[str | None, typer.Option(help="Our loadBalancerClass")] = None,
    match_node_labels_annotation: Annotated[
        str | None, typer.Option(help="Node selector annotation")
    ] = None,
    per_node_address_fallback: Annotated[
        bool | None,
        typer.Option(
            "--per-node-address-fallback/--no-per-node-address-fallback",
            help="Nodes without an ExternalIP contribute their InternalIP",
        ),
    ] = None,
    address_types: Annotated[
        str | None,
        typer.Option(
            help="Node addresses published: ExternalIP, InternalIP or ExternalIP,InternalIP"
        ),
    ] = None,
    ignore_exclude_lb: Annotated[
        bool | None,
        typer.Option(
            "--ignore-exclude-lb/--no-ignore-exclude-lb",
            help="Publish nodes labelled exclude-from-external-load-balancers too",
        ),
    ] = None,
    exclude_not_ready_nodes: Annotated[
        bool | None,
        typer.Option(
            "--exclude-not-ready-nodes/--no-exclude-not-ready-nodes",
            help="Drop nodes NotReady for longer than the grace period",
        ),
    ] = None,
    not_ready_grace_seconds: Annotated[
        float | None, typer.Option(help="NotReady grace period, seconds")
    ] = None,
    ip_mode: Annotated[str | None, typer.Option(help="ipMode of the entries: VIP or Proxy")] = None,
    reserved_node_ports: Annotated[str | None, typer.Option(help=RESERVED_NODE_PORTS_HELP)] = None,
    reserved_port_exceptions: Annotated[
        str | None,
        typer.Option(help=RESERVED_PORT_EXCEPTIONS_HELP, show_default="none"),
    ] = None,
    allowed_namespaces: Annotated[
        str | None,
        typer.Option(help=ALLOWED_NAMESPACES_HELP, show_default="every namespace"),
    ] = None,
    host_port_pods: Annotated[
        bool | None,
        typer.Option("--host-port-pods/--no-host-port-pods", help=HOST_PORT_PODS_HELP),
    ] = None,
    leader_election_namespace: Annotated[
        str,
        typer.Option(help="Live: the controller's namespace, where its record Lease is"),
    ] = Settings.model_fields["leader_election_namespace"].default,
    leader_election_id: Annotated[
        str,
        typer.Option(
            help="Live: the controller's leader-election id; its settings and node health"
            " are read from the Lease <id>-node-health"
        ),
    ] = Settings.model_fields["leader_election_id"].default,
) -> None:
    """Show the ingress each Service gets and why, from a dump or the live cluster
    (docs/design.md §8). Live, it decides with the running controller's settings and node
    health; settings flags (also NODE_IPAM_* variables, as for serve) are then a what-if."""
    from app.config import ENV_PREFIX, InvalidSettings, from_flags, unknown_environment
    from app.core.dump import DumpError
    from app.core.nodehealth import NO_UNHEALTHY
    from app.core.published import RECORD_SUFFIX
    from app.preview.run import EXIT_UNUSABLE, parse_scope, run_preview

    for warning in unknown_environment():
        typer.echo(f"Warning: {warning}", err=True)
    flags = {
        "load_balancer_class": load_balancer_class,
        "default_lb_service_ipam": default_lb_service_ipam,
        "match_node_labels_annotation": match_node_labels_annotation,
        "per_node_address_fallback": per_node_address_fallback,
        "exclude_not_ready_nodes": exclude_not_ready_nodes,
        "ignore_exclude_lb": ignore_exclude_lb,
        "address_types": address_types,
        "not_ready_grace_seconds": not_ready_grace_seconds,
        "ip_mode": ip_mode,
        "reserved_node_ports": reserved_node_ports,
        "reserved_port_exceptions": reserved_port_exceptions,
        "allowed_namespaces": allowed_namespaces,
        "host_port_pods": host_port_pods,
    }
    unhealthy, notes = NO_UNHEALTHY, list[str]()
    try:
        config = from_flags(SelectionConfig, flags)
        live = None
        if not filename:
            from app.preview.controllerview import resolve
            from app.preview.live import LiveCluster

            live = LiveCluster(kubeconfig=kubeconfig, context=context)
            view = live.controller(
                namespace=leader_election_namespace, name=leader_election_id + RECORD_SUFFIX
            )
            given = {
                name: f"--{name.replace('_', '-')}"
                if flags.get(name) is not None
                else f"{ENV_PREFIX}{name.upper()}"
                for name in config.model_fields_set
            }
            config, notes = resolve(config, view, given=given)
            live.host_port_pods, unhealthy = config.host_port_pods, view.unhealthy
        settings = config.selection()
        scope = parse_scope(
            names or [],
            namespace=namespace,
            all_namespaces=all_namespaces,
            default=live.namespace if live is not None else None,
        )
    except (InvalidSettings, DumpError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(EXIT_UNUSABLE) from err
    code = run_preview(
        paths=filename or [],
        output=output,
        settings=settings,
        stdout=sys.stdout,
        stderr=sys.stderr,
        scope=scope,
        source=(lambda: live.read(scope)) if live is not None else None,
        host_port_pods=config.host_port_pods,
        unhealthy=unhealthy,
        controller_notes=notes,
    )
    raise typer.Exit(code)


def _flag(help_text: str, *names: str, default: str | bool = False) -> Any:
    """A ``serve`` flag; its shown default comes from :class:`Settings` unless ``default``
    (a text) says it better."""
    return typer.Option(*names, help=help_text, show_default=default)


@cli.command()
@_settings_defaults(Settings)
def serve(
    kubeconfig: Annotated[
        Path | None,
        _flag(
            "Kubeconfig file",
            default="$KUBECONFIG, else in-cluster config, else ~/.kube/config",
        ),
    ] = None,
    bind_address: Annotated[str | None, _flag("Listen address")] = None,
    port: Annotated[int | None, _flag("HTTPS port")] = None,
    tls_cert_file: Annotated[
        Path | None, _flag("Serving certificate (PEM), reloaded on change")
    ] = None,
    tls_private_key_file: Annotated[Path | None, _flag("Its private key (PEM)")] = None,
    ca_bundle_out: Annotated[
        Path | None, _flag("Write the generated self-signed CA here (for caBundle)")
    ] = None,
    webhook: Annotated[
        bool | None, _flag("Serve /validate and /mutate", "--webhook/--no-webhook")
    ] = None,
    reconciler: Annotated[
        bool | None, _flag("Write Service status", "--reconciler/--no-reconciler")
    ] = None,
    leader_elect: Annotated[
        bool | None, _flag("Lease-based leader election", "--leader-elect/--no-leader-elect")
    ] = None,
    leader_election_namespace: Annotated[str | None, _flag("Namespace of the Lease")] = None,
    leader_election_id: Annotated[str | None, _flag("Name of the Lease")] = None,
    lease_duration_seconds: Annotated[
        float | None, _flag("Lease validity, seconds; > renew deadline")
    ] = None,
    renew_deadline_seconds: Annotated[
        float | None, _flag("Leader gives up after this long unrenewed, seconds")
    ] = None,
    retry_period_seconds: Annotated[
        float | None, _flag("Lease renew/acquire period, seconds; x1.2 < renew deadline")
    ] = None,
    watch_timeout_seconds: Annotated[
        int | None, _flag("Server-side timeout of each watch, seconds")
    ] = None,
    request_timeout_seconds: Annotated[
        float | None, _flag("Timeout of each API request, seconds")
    ] = None,
    enable_node_ipam: Annotated[
        bool | None,
        _flag(
            "Handle Services at all (Cilium's switch)", "--enable-node-ipam/--no-enable-node-ipam"
        ),
    ] = None,
    default_lb_service_ipam: Annotated[
        str | None, _flag("Who handles class-less Services: lbipam, nodeipam, none")
    ] = None,
    load_balancer_class: Annotated[str | None, _flag("Our loadBalancerClass")] = None,
    match_node_labels_annotation: Annotated[str | None, _flag("Node selector annotation")] = None,
    per_node_address_fallback: Annotated[
        bool | None,
        _flag(
            "Nodes without an ExternalIP contribute their InternalIP",
            "--per-node-address-fallback/--no-per-node-address-fallback",
        ),
    ] = None,
    address_types: Annotated[
        str | None,
        _flag("Node addresses published: ExternalIP, InternalIP or ExternalIP,InternalIP"),
    ] = None,
    ignore_exclude_lb: Annotated[
        bool | None,
        _flag(
            "Publish nodes labelled exclude-from-external-load-balancers too",
            "--ignore-exclude-lb/--no-ignore-exclude-lb",
        ),
    ] = None,
    exclude_not_ready_nodes: Annotated[
        bool | None,
        _flag(
            "Drop nodes NotReady for longer than the grace period",
            "--exclude-not-ready-nodes/--no-exclude-not-ready-nodes",
        ),
    ] = None,
    not_ready_grace_seconds: Annotated[
        float | None, _flag("NotReady grace period, seconds")
    ] = None,
    ip_mode: Annotated[str | None, _flag("ipMode of the entries: VIP or Proxy")] = None,
    reserved_node_ports: Annotated[str | None, _flag(RESERVED_NODE_PORTS_HELP)] = None,
    reserved_port_exceptions: Annotated[
        str | None, _flag(RESERVED_PORT_EXCEPTIONS_HELP, default="none")
    ] = None,
    allowed_namespaces: Annotated[
        str | None, _flag(ALLOWED_NAMESPACES_HELP, default="every namespace")
    ] = None,
    host_port_pods: Annotated[
        bool | None, _flag(HOST_PORT_PODS_HELP, "--host-port-pods/--no-host-port-pods")
    ] = None,
    workers: Annotated[int | None, _flag("Concurrent reconciles")] = None,
    auth: Annotated[
        str | None,
        _flag(
            "Preview and /metrics access: kubernetes or none",
            default="kubernetes in a Pod, else none",
        ),
    ] = None,
    log_level: Annotated[str | None, _flag("debug, info, warning or error")] = None,
    health_probe_bind_address: Annotated[
        str | None, _flag("Plain-HTTP /healthz and /readyz listener, host:port; 0 disables it")
    ] = None,
    max_connections: Annotated[
        int | None, _flag("Open connections at most; more are refused")
    ] = None,
    request_head_timeout_seconds: Annotated[
        float | None, _flag("Close a connection whose request head is not in by then, seconds")
    ] = None,
    idle_timeout_seconds: Annotated[
        float | None, _flag("Close a kept-alive connection idle this long, seconds")
    ] = None,
    shutdown_delay_seconds: Annotated[
        float | None,
        _flag("After SIGTERM, keep serving this long before shutting down, seconds"),
    ] = None,
    inflight_body_bytes: Annotated[
        int | None, _flag("Admission body bytes held at once", default="8388608 = 8 MiB")
    ] = None,
    review_deadline_seconds: Annotated[
        float | None, _flag("Answer 503 for a review not decided by then, seconds")
    ] = None,
    cluster_check_seconds: Annotated[
        float | None, _flag("Budget of the cluster-state warnings, seconds")
    ] = None,
    max_access_reviews: Annotated[
        int | None, _flag("TokenReviews/SubjectAccessReviews in flight at most")
    ] = None,
    cert_secret_name: Annotated[
        str | None,
        _flag("Self-managed webhook certificate kept in this Secret (needs --tls-cert-file)"),
    ] = None,
    cert_secret_namespace: Annotated[str | None, _flag("Namespace of that Secret")] = None,
    webhook_service_name: Annotated[str | None, _flag("Service the certificate is for")] = None,
    webhook_configuration_name: Annotated[
        str | None, _flag("Mutating/ValidatingWebhookConfiguration that gets the caBundle")
    ] = None,
    ca_validity_seconds: Annotated[float | None, _flag("CA lifetime, seconds (10 years)")] = None,
    cert_validity_seconds: Annotated[
        float | None, _flag("Serving certificate lifetime, seconds (1 year)")
    ] = None,
    cert_renew_before_seconds: Annotated[
        float | None, _flag("Renew this long before expiry, seconds (90 days)")
    ] = None,
    cert_check_interval_seconds: Annotated[
        float | None, _flag("Certificate and caBundle check period, seconds")
    ] = None,
    admission_probe_namespace: Annotated[
        str | None,
        _flag(
            "Readiness: a dry-run Service with a malformed selector in this namespace must be"
            " denied by the webhook; '' turns the probe off",
            default="default",
        ),
    ] = None,
    node_health_check: Annotated[
        bool | None,
        _flag(
            "Publish only nodes whose kube-proxy /healthz answers (the Lease holder probes)",
            "--node-health-check/--no-node-health-check",
        ),
    ] = None,
    node_health_check_port: Annotated[
        int | None, _flag("kube-proxy's healthz port on every node")
    ] = None,
    node_health_check_period_seconds: Annotated[
        float | None,
        _flag("Seconds between two probe rounds (longer with over 500 x period nodes)"),
    ] = None,
    node_health_check_timeout_seconds: Annotated[
        float | None, _flag("A probe not answered by then fails, seconds")
    ] = None,
    node_health_check_failure_threshold: Annotated[
        int | None, _flag("Failed probes in a row before a node leaves")
    ] = None,
    node_health_check_success_threshold: Annotated[
        int | None, _flag("Good probes in a row before it comes back")
    ] = None,
    node_health_check_max_unhealthy_fraction: Annotated[
        float | None,
        _flag("More than this fraction of nodes failing at once: keep the last set (1: off)"),
    ] = None,
) -> None:
    """Run the webhook, reconciler and preview API over HTTPS (every flag is also NODE_IPAM_*)."""
    flags = dict(locals())
    from app.server import StartupError, run

    try:
        run(flags)
    except StartupError as err:
        typer.echo(f"node-ipam-lb serve: {err}", err=True)
        raise typer.Exit(2) from err


certs = typer.Typer(help="Certificate tooling for development (see certs/README.md).")
cli.add_typer(certs, name="certs")


@certs.command("generate")
def certs_generate(
    dns_name: Annotated[
        list[str],
        typer.Option(
            "--dns-name", metavar="NAME", help="DNS name or IP of the server. Repeatable."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for ca.crt, tls.crt, tls.key")],
) -> None:
    """Write a self-signed CA and a serving certificate signed by it (key mode 0600)."""
    from app.web.tls import write_dev_certs

    try:
        ca = write_dev_certs(out_dir=out, dns_names=dns_name)
    except (OSError, ValueError) as err:
        typer.echo(f"node-ipam-lb certs generate: {err}", err=True)
        raise typer.Exit(2) from err
    typer.echo(f"wrote {out / 'ca.crt'}, {out / 'tls.crt'}, {out / 'tls.key'}")
    typer.echo(f"CA SHA-256 fingerprint: {ca.fingerprint()}")


PLUGIN_SCRIPT = "kubectl-node_ipam"
"""The kubectl plugin's file name: ``kubectl node-ipam`` runs it (kubectl maps ``-`` in
the command to ``_`` in the file name)."""


def main() -> None:
    """Console-script entry point (``node-ipam-lb``, and ``kubectl-node_ipam`` as which
    usage lines read ``kubectl node-ipam``, the command the user typed)."""
    invoked = Path(sys.argv[0]).name if sys.argv else ""
    cli(prog_name="kubectl node-ipam" if invoked.startswith(PLUGIN_SCRIPT) else None)


if __name__ == "__main__":  # python -m app.cli, as python -m app
    main()
