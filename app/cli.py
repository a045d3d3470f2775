"""Command line: ``node-ipam-lb preview|serve|certs``.

Thin: each command parses flags, builds settings and calls into the package.
"""

from __future__ import annotations

import typer

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


def main() -> None:
    """Console-script entry point (``node-ipam-lb``)."""
    cli()
