"""``python -m tests.cluster up --nodes N --kubeconfig PATH`` / ``build``.

``up`` brings a real cluster up in network namespaces (README.md here; kube-proxy in
``--proxy-mode`` iptables, the default, or nftables), writes the admin
kubeconfig to PATH (it works from this namespace: kubectl, helm), prints ``ready <url>``
and ``client-netns <name>`` once every node is Ready, runs until SIGTERM/SIGINT, then
removes everything it made. ``build`` builds (or finds cached) the binaries and images.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path

from tests.cluster import PROXY_MODES
from tests.controlplane.__main__ import _on_signal, _Stop
from tests.controlplane.__main__ import cmd_build as cmd_controlplane_build


def cmd_build(args: argparse.Namespace) -> int:
    """The binaries and the three images: what ``python3 -m tests.controlplane build``
    builds (the same command)."""
    return cmd_controlplane_build(args)


def cmd_up(args: argparse.Namespace) -> int:
    """Start the cluster, write the kubeconfig, print the two lines, run until signalled."""
    from tests.cluster.cleanup import abandoned
    from tests.cluster.cluster import Cluster
    from tests.cluster.netns import ClusterError
    from tests.controlplane.build import ControlPlaneUnavailable

    left = abandoned()
    if left:
        print(
            f"cluster: {len(left)} cluster(s) whose owner died left things behind"
            f" ({', '.join(cluster_id for cluster_id, _ in left)}); this one uses another"
            " address range. Remove them with `python -m tests.cluster purge`"
            " (`--dry-run` lists them).",
            file=sys.stderr,
        )
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    cluster: Cluster | None = None
    code = 0
    try:
        started = time.monotonic()
        cluster = Cluster(args.nodes, keep_logs=args.keep_logs, proxy_mode=args.proxy_mode)
        cluster.start()
        shutil.copyfile(cluster.kubeconfig_path, args.kubeconfig)
        Path(args.kubeconfig).chmod(0o600)
        print(
            f"cluster: {args.nodes} nodes Ready in {time.monotonic() - started:.1f} s "
            f"(kube-proxy in {args.proxy_mode} mode); "
            f"kubeconfig {args.kubeconfig}; logs {cluster.log_dir}",
            file=sys.stderr,
        )
        for node in cluster.nodes:
            external = f" external {node.external_ipv4} {node.external_ipv6}"
            print(
                f"cluster: {node.name} netns {node.netns} {node.ipv4} {node.ipv6}"
                + (external if node.external_ipv4 else ""),
                file=sys.stderr,
            )
        dns, dns_port = cluster.dns_server
        print(
            f"cluster: DNS (CoreDNS) {dns}:{dns_port} (Pods: {cluster.dns_service_ip}); "
            f"zones {cluster.cluster_domain}, {cluster.external_zone} "
            f"(<service>.<namespace>.{cluster.external_zone}: the Service's ingress IPs)",
            file=sys.stderr,
        )
        print(f"ready {cluster.url}", flush=True)
        print(f"client-netns {cluster.client_netns}", flush=True)
        while True:
            dead = cluster.poll()
            if dead is not None:
                print(f"cluster: {dead}", file=sys.stderr)
                code = 1
                break
            time.sleep(1.0)
    except _Stop:
        code = 0
    except ControlPlaneUnavailable as err:
        print(f"cluster: {err}", file=sys.stderr)
        code = 2
    except ClusterError as err:
        print(f"cluster: {err}", file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if cluster is not None:
            stopping = time.monotonic()
            try:
                cluster.stop()
            except ClusterError as err:
                print(f"cluster: {err}", file=sys.stderr)
                code = code or 1
            print(f"cluster: removed in {time.monotonic() - stopping:.1f} s", file=sys.stderr)
    return code


def cmd_purge(args: argparse.Namespace) -> int:
    """Remove the remains of clusters whose owner process died (see purge_abandoned)."""
    from tests.cluster.cleanup import abandoned, leftovers, purge_abandoned

    if args.dry_run:
        for cluster_id, workdir in abandoned():
            print(f"would remove {cluster_id}:")
            for thing in leftovers(cluster_id, workdir):
                print(f"  {thing}")
        return 0
    for cluster_id in purge_abandoned():
        print(f"removed {cluster_id}")
    return 0


def node_count(text: str) -> int:
    """``--nodes``: an integer 1..9 (the last octet scheme of tests/cluster/README.md)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= 9:
        raise argparse.ArgumentTypeError(f"{value} is outside 1..9")
    return value


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build (or find cached) the binaries and images")
    p_build.add_argument("--interval", type=float, default=15.0, help="seconds between lines")
    p_build.set_defaults(func=cmd_build)
    p_up = sub.add_parser("up", help="run the cluster until SIGTERM/SIGINT")
    p_up.add_argument("--nodes", type=node_count, default=2, help="number of nodes (1-9)")
    p_up.add_argument("--kubeconfig", required=True, help="where to write the admin kubeconfig")
    p_up.add_argument("--keep-logs", type=Path, help="copy the logs here when stopping")
    p_up.add_argument(
        "--proxy-mode",
        choices=PROXY_MODES,
        default="iptables",
        help="kube-proxy's mode on every node and the control plane (default: iptables)",
    )
    p_up.set_defaults(func=cmd_up)
    p_purge = sub.add_parser("purge", help="remove what SIGKILLed clusters left behind")
    p_purge.add_argument("--dry-run", action="store_true", help="only list them")
    p_purge.set_defaults(func=cmd_purge)
    args = parser.parse_args(argv)
    if args.command == "up" and not Path(args.kubeconfig).resolve().parent.is_dir():
        parser.error(f"--kubeconfig {args.kubeconfig}: its directory does not exist")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
