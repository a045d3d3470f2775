"""Command line: ``node-ipam-lb preview|serve|certs``.

Thin: each command parses flags, builds settings and calls into the package.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from app.config import LOAD_BALANCER_CLASS

cli = typer.Typer(
    name="node-ipam-lb",
    help="Publish node addresses as the ingress of LoadBalancer Services (io.cilium/node).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
            help="Cluster dump (kubectl get nodes,services,"
            "endpointslices -A -o yaml|json); '-' reads stdin. Repeatable.",
        ),
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml")] = "table",
    default_lb_service_ipam: Annotated[
        str, typer.Option(help="Who handles class-less Services: lbipam, nodeipam, none")
    ] = "lbipam",
    load_balancer_class: Annotated[str, typer.Option()] = LOAD_BALANCER_CLASS,
    per_node_address_fallback: Annotated[
        bool, typer.Option(help="Nodes without an ExternalIP contribute their InternalIP")
    ] = False,
    exclude_not_ready_nodes: Annotated[
        bool, typer.Option(help="Drop nodes NotReady for longer than the grace period")
    ] = False,
    not_ready_grace_seconds: Annotated[float, typer.Option()] = 60.0,
    ip_mode: Annotated[str, typer.Option(help="ipMode of the entries: VIP or Proxy")] = "VIP",
) -> None:
    """Show the ingress each Service of a cluster dump gets, offline (DESIGN.md §8)."""
    from app.preview_cli import run_preview

    settings = {
        "load_balancer_class": load_balancer_class,
        "default_lb_service_ipam": default_lb_service_ipam,
        "per_node_address_fallback": per_node_address_fallback,
        "exclude_not_ready_nodes": exclude_not_ready_nodes,
        "not_ready_grace_seconds": not_ready_grace_seconds,
        "ip_mode": ip_mode,
    }
    code = run_preview(
        paths=filename, output=output, settings=settings, stdout=sys.stdout, stderr=sys.stderr
    )
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point (``node-ipam-lb``)."""
    cli()
