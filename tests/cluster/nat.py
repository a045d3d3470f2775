"""A 1:1 NAT in front of one node of the real cluster (tests/cluster): what a cloud's
public address is (an AWS Elastic IP, a GCE external IP; deploy/README.md "Nodes behind a
1:1 NAT", issue 37): an address that is on none of the node's interfaces, listed as the
Node's ``ExternalIP``, rewritten to its InternalIP on the way in.

:func:`one_to_one_nat` adds a namespace ``<id>-nat`` on the cluster's segment (a router at
``<seg>.250`` / ``<seg6>::250``) with forwarding on and one ``nft`` table there: packets to
the public addresses are DNATed to the node's InternalIPs (both families) and, so that the
answers come back through it, SNATed to the router's own address (on this one L2 segment
the node would otherwise answer the client directly, from its InternalIP, and the client
would drop an answer from an address it did not ask; a cloud puts its NAT on the return
path by routing instead). The client namespace gets a host route to each public address
via the router, and the Node's ``status.addresses`` list the public addresses as its
ExternalIPs (:meth:`Cluster.set_node_addresses`; only the last node, whose kubelet runs
with ``--cloud-provider=external``, keeps what is written there).

Everything is in namespaces this run created (the router's, the client's, the segment's
bridge port); on exit, even when the block fails, the Node's addresses are written back,
the client's routes deleted and the router's namespace removed (its veth pair with it);
:meth:`Cluster.stop` removes the namespace too if the process dies first, and
:func:`~tests.cluster.cleanup.leftovers` names it (``<id>-nat``) if anything is left.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from tests.cluster.cluster import Cluster
from tests.cluster.netns import NETNS_DIR, Node, nft_table

PUBLIC_IPV4 = "203.0.113.10"
"""RFC 5737 TEST-NET-3: on no interface of this machine or the cluster."""
PUBLIC_IPV6 = "2001:db8::10"
"""RFC 3849 documentation prefix: on no interface either."""
ROUTER_OCTET = 250
NAT_TABLE = "nilb_nat"


def _ip(netns: str, *args: str, check: bool = True) -> None:
    result = subprocess.run(
        ["nsenter", f"--net={NETNS_DIR / netns}", "--", *args],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} in {netns}: {result.stderr.strip()}")


def nat_rules(public: tuple[str, str], private: tuple[str, str]) -> str:
    """The router's ``nft`` chains (``table inet``): DNAT ``public`` (IPv4, IPv6) to
    ``private`` (the node's InternalIPs) before routing, and masquerade what was DNATed
    after it (the answers return through the router, whose conntrack entry undoes both)."""
    (pub4, pub6), (priv4, priv6) = public, private
    return f"""
  chain prerouting {{
    type nat hook prerouting priority dstnat;
    ip daddr {pub4} dnat ip to {priv4}
    ip6 daddr {pub6} dnat ip6 to {priv6}
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; ct status dnat masquerade
  }}"""


@contextlib.contextmanager
def one_to_one_nat(
    cluster: Cluster, node: Node, *, public: tuple[str, str] = (PUBLIC_IPV4, PUBLIC_IPV6)
) -> Iterator[tuple[str, str]]:
    """While the block runs, ``node`` sits behind a 1:1 NAT whose public addresses
    ``public`` (IPv4, IPv6; by default the documentation-range ``PUBLIC_IPV4`` and
    ``PUBLIC_IPV6``) are its ExternalIPs (module docstring); yields ``public``.

    ``node`` must be the cluster's last node (the one whose addresses kubelet leaves to a
    cloud provider): its ``external_ipv4``/``external_ipv6`` are replaced for the block and
    restored, and its Node's addresses written back, on exit. Raises ``ValueError`` for
    another node, :class:`~tests.cluster.netns.ClusterError` or ``RuntimeError`` when a
    step fails (what was made so far is removed first)."""
    if node is not cluster.nodes[-1]:
        raise ValueError(
            f"node: {node.name} is not {cluster.nodes[-1].name}, the one node whose "
            "addresses kubelet leaves to a cloud provider (--cloud-provider=external)"
        )
    saved = (node.external_ipv4, node.external_ipv6)
    router = cluster.add_member("nat", ROUTER_OCTET)
    routes: list[list[str]] = []
    try:
        for key in ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"):
            _ip(router.netns, "sysctl", "-qw", key)
        for address, via, family in ((public[0], router.ipv4, "-4"),
                                     (public[1], router.ipv6, "-6")):  # fmt: skip
            route = ["ip", family, "route", "add", address, "via", via]
            _ip(cluster.client_netns, *route)
            routes.append(route)
        rules = nat_rules(public, (node.ipv4, node.ipv6))
        with nft_table(NETNS_DIR / router.netns, NAT_TABLE, rules):
            node.external_ipv4, node.external_ipv6 = public
            try:
                cluster.set_node_addresses(node)
                yield public
            finally:
                node.external_ipv4, node.external_ipv6 = saved
                cluster.set_node_addresses(node)
    finally:
        for route in routes:
            _ip(cluster.client_netns, *route[:3], "del", *route[4:], check=False)
        cluster.remove_member(router)
