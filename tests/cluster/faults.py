"""Node faults on the real cluster (tests/cluster): one place for what the health-check
scenarios do to a node (docs/design.md §4.11, issue 30).

- :func:`cut_network`: the node's namespace drops every packet in and out on its segment
  interface (nftables ``inet`` table with drop policies, loopback and the node's own Pods'
  bridge untouched), as a pulled cable or a dead switch port would: the Node object stays
  Ready until the node lifecycle controller's grace period runs out, while nothing reaches
  the node. Routes and addresses stay as they are, so removing the table restores it.
- :func:`stopped_kube_proxy`: SIGTERM the node's kube-proxy (its rules stay in the
  kernel, as they do when kube-proxy crashes), start it again with the same command line.
- :func:`isolate_pod_port`: in a Pod's own network namespace, drop what it sends to a TCP
  port (here kube-proxy's healthz, 10256) on any address: the controller's own vantage
  point broken while every node is fine.

Everything is an ``nft`` table of its own (named ``nilb_fault_*``) in a namespace this run
created (a node's, or a Pod's), removed on exit even when the test fails; nothing touches
the machine's own namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.cluster.cluster import Cluster
from tests.cluster.netns import NETNS_DIR, Node, nft_table
from tests.support.processes import Server

CUT_TABLE = "nilb_fault_cut"
ISOLATE_TABLE = "nilb_fault_isolate"


@contextlib.contextmanager
def cut_network(node: Node) -> Iterator[None]:
    """Drop everything on the node's segment interface ``eth0`` (in, out and forwarded)
    while the block runs; restored on exit."""
    chains = """
  chain input { type filter hook input priority -300; iifname "eth0" drop; }
  chain output { type filter hook output priority -300; oifname "eth0" drop; }
  chain forward {
    type filter hook forward priority -300; iifname "eth0" drop; oifname "eth0" drop;
  }"""
    with nft_table(NETNS_DIR / node.netns, CUT_TABLE, chains):
        yield


@contextlib.contextmanager
def stopped_kube_proxy(cluster: Cluster, node: Node) -> Iterator[None]:
    """The node's kube-proxy stopped (SIGTERM) while the block runs; started again with
    the same command line on exit (its log continues in ``kube-proxy-<node>-restarted.log``)."""
    server = node.processes["kube-proxy"]
    server.stop(15.0)
    try:
        yield
    finally:
        restarted = Server(
            "kube-proxy", server.args, cluster.log_dir / f"kube-proxy-{node.name}-restarted.log"
        )
        node.processes["kube-proxy"] = restarted
        restarted.start()


@contextlib.contextmanager
def isolate_pod_port(cluster: Cluster, container_id: str, port: int) -> Iterator[None]:
    """In the Pod's own network namespace (the one of ``container_id``'s processes), drop
    every TCP packet it sends to ``port`` on any address, both families, while the block
    runs: what a NetworkPolicy denying that egress, or a broken Pod network, does to the
    Pod alone."""
    pid = min(cluster.container_pids(container_id))
    chains = f"  chain output {{ type filter hook output priority -300; tcp dport {port} drop; }}"
    with nft_table(Path(f"/proc/{pid}/ns/net"), ISOLATE_TABLE, chains):
        yield
