"""``python -m tests.devenv``: node-ipam-lb from clone to ``curl`` in one command.

Development tooling, like the ``make dev-env`` targets of kind-based Kubernetes projects;
nothing here is part of the product (``node-ipam-lb`` runs no code of ``tests/``).

    .venv/bin/python -m tests.devenv            # Ctrl-C removes everything
    .venv/bin/python -m tests.devenv --once     # show, then remove everything (scripts)

``--api`` picks where it runs:

- ``cluster``: the real cluster of tests/cluster on this machine (kubelet, containerd,
  kube-proxy per node, in network namespaces), node-ipam-lb installed with Helm exactly
  as deploy/README.md says, the kind example's Services with a backend, ``kubectl get
  svc -A`` with the EXTERNAL-IPs, a malformed selector denied by the webhook Pod,
  ``node-ipam-lb preview -A -o wide``, and an HTTP request from the client network
  namespace to every published address, answered by a backend Pod
  (tests/devenv/realcluster.py). Needs root, tests/cluster's packages and the binaries
  and images built once by ``python3 -m tests.controlplane build``;
- ``controlplane`` / ``fake``: a bare API server on loopback (a real kube-apiserver +
  etcd, or the fake one of tests/fakeapi) with ``node-ipam-lb serve`` on the host: the
  same steps up to the preview, no traffic (tests/devenv/loopback.py);
- ``auto`` (the default): ``cluster`` when it can run here; else it says why and the
  command that builds what is missing, and runs ``controlplane`` when its binaries are
  built, else ``fake``.

Each step is printed with the command it stands for; the output of every process goes to
the log files named first. The kubeconfig to use meanwhile is printed too. Exit status 0
when done (or stopped by Ctrl-C / SIGTERM), 1 when a step failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.cluster.__main__ import node_count
from tests.cluster.cluster import missing_prerequisites
from tests.cluster.images import find_images
from tests.controlplane.build import find_binaries, find_helm

BUILD_COMMAND = "python3 -m tests.controlplane build"
"""Builds (or finds cached) everything ``--api cluster`` needs (README.md, "Tests against
a real API server"); the project's image again after each change to what goes into it."""


def cluster_unavailable() -> tuple[list[str], bool]:
    """Why the real cluster cannot run here (empty: it can), and whether
    :data:`BUILD_COMMAND` would fix some of it (what tests/cluster/conftest.py checks:
    binaries, helm, the three images, root and the packages)."""
    reasons = []
    if find_binaries() is None:
        reasons.append("the Kubernetes binaries are not built")
    if find_helm() is None:
        reasons.append("helm is not built")
    if find_images() is None:
        reasons.append(
            "the images are not built (the project's own is keyed by app/, Dockerfile,"
            " pyproject.toml and deploy/image/: each change there needs a new one)"
        )
    buildable = bool(reasons)
    missing = missing_prerequisites()
    if missing is not None:
        reasons.append(missing)
    if shutil.which("kubectl") is None:
        reasons.append("kubectl is not on PATH")
    return reasons, buildable


def plan(api: str) -> tuple[str, list[str]]:
    """Where to run for ``--api api`` (``cluster``, ``controlplane``, ``auto`` = the control
    plane when it comes up, else the fake, or ``fake``) and what to say first. With
    ``api == "cluster"`` and the cluster unavailable the choice is ``""``: stop."""
    if api not in ("auto", "cluster"):
        return api, []
    reasons, buildable = cluster_unavailable()
    if not reasons:
        return "cluster", []
    lines = [f"devenv: the real cluster (tests/cluster) cannot run here: {'; '.join(reasons)}"]
    if buildable:
        cold = find_binaries() is None or find_helm() is None
        took = "~25 min cold, then cached" if cold else "the project's image: a few minutes"
        lines.append(f"  build it ({took}): {BUILD_COMMAND}")
    if os.geteuid() != 0:
        lines.append("  run it as root for the real cluster: sudo .venv/bin/python -m tests.devenv")
    if api == "cluster":
        return "", lines
    if find_binaries() is not None:
        lines.append("  meanwhile: a real control plane on loopback (--api controlplane)")
        return "auto", lines  # the fake one if the control plane does not come up
    lines.append("  meanwhile: the fake API server on loopback (--api fake)")
    return "fake", lines


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be greater than 0")
    return value


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.devenv",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--api",
        choices=("auto", "cluster", "controlplane", "fake"),
        default="auto",
        help="where to run: the real cluster, a real control plane or the fake API server"
        " on loopback, or auto (the cluster when it can run here, else the control plane"
        " when built, else the fake)",
    )
    parser.add_argument("--once", action="store_true", help="remove everything after showing")
    parser.add_argument(
        "--nodes", type=node_count, default=3, help="the cluster's nodes (1-9; --api cluster)"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="HTTPS port of serve on 127.0.0.1 (loopback; 0: any)"
    )
    parser.add_argument(
        "--workdir", type=Path, help="directory for the logs and kubeconfig (default: a new one)"
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=180.0, help="seconds each step may take (180)"
    )
    args = parser.parse_args(argv)
    where, lines = plan(args.api)
    for line in lines:
        print(line, flush=True)
    if not where:
        return 1
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="node-ipam-lb-devenv-"))
    if where == "cluster":
        from tests.devenv.realcluster import run_cluster

        return run_cluster(nodes=args.nodes, workdir=workdir, once=args.once, timeout=args.timeout)
    from tests.devenv.loopback import run_loopback

    return run_loopback(
        api=where,  # type: ignore[arg-type]
        port=args.port,
        workdir=workdir,
        once=args.once,
        timeout=args.timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
