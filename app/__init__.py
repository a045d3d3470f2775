"""node-ipam-lb: publish node addresses as the ingress of LoadBalancer Services.

Wire-compatible with Cilium's Node IPAM LB (``loadBalancerClass: io.cilium/node``,
annotation ``io.cilium.nodeipam/match-node-labels``). See README.md.
"""

__version__ = "0.1.0"
