"""``node-ipam-lb serve`` under Cilium's reconcile policy, for side-by-side benchmarks.

Cilium's Node IPAM controller (``operator/pkg/nodeipam``) enqueues every managed Service
on every Node event and writes the status on every reconcile. bench_cold_start and
bench_churn run ``serve`` through :func:`main` to measure what that policy costs with our
decision code (bench/README.md); the real Cilium controller is bench_peer's peer. The
product carries no switch for it: this module patches the two decisions before ``serve``
starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ENTRY = "from bench.cilium_policy import main; main()"
"""The ``python -c`` program that runs ``node-ipam-lb`` under this policy."""


def main() -> None:
    """``app.cli.main`` with Cilium's policy: every Node event enqueues every managed
    Service, every reconcile writes, and no watch event counts as our own write's echo."""
    from app import cli
    from app.controller import controller, reconciler
    from app.controller.cache import service_key

    def every_managed(*, managed: Iterable[Any], **_: Any) -> list[str]:
        return [service_key(s.namespace, s.name) for s in managed]

    controller.services_for_node_change = every_managed  # type: ignore[assignment]
    reconciler.status_differs = lambda *_: True  # type: ignore[assignment]
    reconciler.Reconciler.is_own_write = lambda self, old, new: False  # type: ignore[method-assign]
    cli.main()
