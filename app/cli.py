"""Command line: ``node-ipam-lb preview|serve|certs``.

Thin: each command parses flags, builds settings and calls into the package.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from app.core.options import LOAD_BALANCER_CLASS, MATCH_NODE_LABELS_ANNOTATION

cli = typer.Typer(
    name="node-ipam-lb",
    help="Publish node addresses as the ingress of LoadBalancer Services (io.cilium/node).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)


@cli.callback()
def _root() -> None:
    """node-ipam-lb: Cilium-compatible Node IPAM LoadBalancer."""


@cli.command()
def preview(
    filename: Annotated[
        list[str],
        typer.Option(
            "-f",
            "--filename",
            metavar="FILE",
            help="Cluster dump (kubectl get nodes,services,"
            "endpointslices -A -o yaml|json); '-' reads stdin. Repeatable.",
        ),
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml")] = "table",
    default_lb_service_ipam: Annotated[
        str, typer.Option(help="Who handles class-less Services: lbipam, nodeipam, none")
    ] = "lbipam",
    load_balancer_class: Annotated[
        str, typer.Option(help="Our loadBalancerClass")
    ] = LOAD_BALANCER_CLASS,
    match_node_labels_annotation: Annotated[
        str, typer.Option(help="Node selector annotation")
    ] = MATCH_NODE_LABELS_ANNOTATION,
    per_node_address_fallback: Annotated[
        bool,
        typer.Option(
            help="Nodes without an ExternalIP contribute their InternalIP (default off)",
            show_default=False,
        ),
    ] = False,
    exclude_not_ready_nodes: Annotated[
        bool,
        typer.Option(
            help="Drop nodes NotReady for longer than the grace period (default off)",
            show_default=False,
        ),
    ] = False,
    not_ready_grace_seconds: Annotated[
        float, typer.Option(help="NotReady grace period, seconds")
    ] = 60.0,
    ip_mode: Annotated[str, typer.Option(help="ipMode of the entries: VIP or Proxy")] = "VIP",
) -> None:
    """Show the ingress each Service of a cluster dump gets, offline (docs/design.md §8)."""
    from app.preview.run import run_preview

    settings = {
        "load_balancer_class": load_balancer_class,
        "default_lb_service_ipam": default_lb_service_ipam,
        "match_node_labels_annotation": match_node_labels_annotation,
        "per_node_address_fallback": per_node_address_fallback,
        "exclude_not_ready_nodes": exclude_not_ready_nodes,
        "not_ready_grace_seconds": not_ready_grace_seconds,
        "ip_mode": ip_mode,
    }
    code = run_preview(
        paths=filename, output=output, settings=settings, stdout=sys.stdout, stderr=sys.stderr
    )
    raise typer.Exit(code)


def _flag(help_text: str, *names: str) -> Any:
    return typer.Option(*names, help=help_text, show_default=False)


@cli.command()
def serve(
    kubeconfig: Annotated[Path | None, _flag("Kubeconfig file; default: in-cluster config")] = None,
    bind_address: Annotated[str | None, _flag("Listen address (default 0.0.0.0)")] = None,
    port: Annotated[int | None, _flag("HTTPS port (default 9443)")] = None,
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
        float | None, _flag("Lease validity; > renew deadline (default 15)")
    ] = None,
    renew_deadline_seconds: Annotated[
        float | None, _flag("Leader gives up after this long unrenewed (default 10)")
    ] = None,
    retry_period_seconds: Annotated[
        float | None, _flag("Lease renew/acquire period; x1.2 < renew deadline (default 2)")
    ] = None,
    watch_timeout_seconds: Annotated[
        int | None, _flag("Server-side timeout of each watch (default 300)")
    ] = None,
    request_timeout_seconds: Annotated[
        float | None, _flag("Timeout of each API request (default 10)")
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
    exclude_not_ready_nodes: Annotated[
        bool | None,
        _flag(
            "Drop nodes NotReady for longer than the grace period",
            "--exclude-not-ready-nodes/--no-exclude-not-ready-nodes",
        ),
    ] = None,
    not_ready_grace_seconds: Annotated[float | None, _flag("NotReady grace period")] = None,
    ip_mode: Annotated[str | None, _flag("ipMode of the entries: VIP or Proxy")] = None,
    workers: Annotated[int | None, _flag("Concurrent reconciles (default 4)")] = None,
    auth: Annotated[
        str | None, _flag("Preview and /metrics access: kubernetes or none (default by config)")
    ] = None,
    log_level: Annotated[str | None, _flag("debug, info, warning or error")] = None,
    max_connections: Annotated[
        int | None, _flag("Open connections at most; more are refused (default 512)")
    ] = None,
    request_head_timeout_seconds: Annotated[
        float | None, _flag("Close a connection whose request head is not in by then (default 5)")
    ] = None,
    idle_timeout_seconds: Annotated[
        float | None, _flag("Close a kept-alive connection idle this long (default 5)")
    ] = None,
    inflight_body_bytes: Annotated[
        int | None, _flag("Admission body bytes held at once (default 8 MiB)")
    ] = None,
    review_deadline_seconds: Annotated[
        float | None, _flag("Answer 503 for a review not decided by then (default 2)")
    ] = None,
    cluster_check_seconds: Annotated[
        float | None, _flag("Budget of the cluster-state warnings (default 0.25)")
    ] = None,
    max_access_reviews: Annotated[
        int | None, _flag("TokenReviews/SubjectAccessReviews in flight at most (default 8)")
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
    ca_validity_seconds: Annotated[float | None, _flag("CA lifetime (default 10 years)")] = None,
    cert_validity_seconds: Annotated[
        float | None, _flag("Serving certificate lifetime (default 1 year)")
    ] = None,
    cert_renew_before_seconds: Annotated[
        float | None, _flag("Renew this long before expiry (default 90 days)")
    ] = None,
    cert_check_interval_seconds: Annotated[
        float | None, _flag("Certificate and caBundle check period (default 30)")
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


def main() -> None:
    """Console-script entry point (``node-ipam-lb``)."""
    cli()
