"""``python -m tests.controlplane build`` / ``up --kubeconfig PATH``.

``build`` needs only the standard library (and ``go`` when the binaries are not cached);
``up`` needs the project's virtualenv (``cryptography``).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from tests.controlplane import build as builder


class _Stop(Exception):
    """Raised from the SIGTERM/SIGINT handler to unwind into the clean-up path."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def cmd_build(args: argparse.Namespace) -> int:
    """Build or find the binaries (kube-apiserver with the cluster's commands and CoreDNS,
    etcd, helm, prometheus and promtool, the Cilium peer of tests/peers/cilium) and
    tests/cluster's images; print their paths and versions."""
    from tests.cluster.images import build_images
    from tests.peers.cilium import build as cilium  # the differential tests' peer

    try:
        binaries = builder.build(interval=args.interval)
        print(f"cache: {binaries.directory}")
        for path in (
            binaries.kube_apiserver,
            binaries.etcd,
            binaries.kube_controller_manager,
            binaries.kube_scheduler,
            binaries.kubelet,
            binaries.kube_proxy,
        ):
            print(f"{path}: {builder.binary_version(path)}")
        print(f"{binaries.coredns}: {builder.binary_version(binaries.coredns, '-version')}")
        helm = builder.build_helm(interval=args.interval)
        print(f"{helm}: {builder.binary_version(helm, 'version', '--short')}")
        prometheus = builder.build_prometheus(interval=args.interval)
        for path in (prometheus.prometheus, prometheus.promtool):
            print(f"{path}: {builder.binary_version(path, '--version')}")
        peer = cilium.build_peer(interval=args.interval)
        print(f"{peer}: {builder.binary_version(peer)}")
        # tests/cluster's images (pause, backend, the project's own): cached like the rest.
        images = build_images()
        for archive, ref in images.archives():
            print(f"{archive}: {ref}")
    except builder.ControlPlaneUnavailable as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Start the pair, write the kubeconfig, print ``ready <url>``, run until signalled."""
    from tests.controlplane.plane import ControlPlane, ControlPlaneStartError

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    plane: ControlPlane | None = None
    try:
        binaries = builder.build()
        started = time.monotonic()
        plane = ControlPlane(binaries, keep=args.keep)
        plane.start()
        for name, path in plane.log_paths.items():
            print(f"{name} log: {path}", file=sys.stderr)
        shutil.copyfile(plane.kubeconfig_path, args.kubeconfig)
        Path(args.kubeconfig).chmod(0o600)
        print(
            f"controlplane: ready in {time.monotonic() - started:.1f} s; "
            f"kubeconfig {args.kubeconfig}",
            file=sys.stderr,
        )
        print(f"ready {plane.url}", flush=True)
        while True:
            dead = plane.poll()
            if dead is not None:
                print(f"controlplane: {dead} exited; log {plane.log_paths[dead]}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except _Stop:
        return 0
    except builder.ControlPlaneUnavailable as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    except ControlPlaneStartError as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if plane is not None:
            plane.stop()
            if args.keep:
                print(f"controlplane: kept {plane.workdir}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser(
        "build", help="build (or find cached) kube-apiserver, etcd, helm and the Cilium peer"
    )
    p_build.add_argument(
        "--interval", type=float, default=15.0, help="seconds between progress lines"
    )
    p_build.set_defaults(func=cmd_build)
    p_up = sub.add_parser("up", help="run etcd + kube-apiserver until SIGTERM/SIGINT")
    p_up.add_argument("--kubeconfig", required=True, help="where to write the admin kubeconfig")
    p_up.add_argument("--keep", action="store_true", help="keep the data, PKI and logs dir")
    p_up.set_defaults(func=cmd_up)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
