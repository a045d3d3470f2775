"""kube-proxy's mode, where the cluster says it, and the hazard of ipvs (pure).

docs/design.md §4.10. kubeadm stores kube-proxy's configuration in the ConfigMap
``kube-system/kube-proxy``, key ``config.conf``: a ``KubeProxyConfiguration``
(``kubeproxy.config.k8s.io/v1alpha1``) whose ``mode`` is ``iptables``, ``ipvs``,
``nftables`` (Linux) or empty (the platform default: iptables on Linux). k3s, RKE2 and
managed clusters pass flags instead and have no such ConfigMap: the mode is then unknown.

In ``ipvs`` mode every node binds each load-balancer ingress address that is not its own
to the dummy interface ``kube-ipvs0`` (kube-proxy v1.35.4 ``pkg/proxy/ipvs/proxier.go``,
``shouldBind := !nodeAddressSet.Has(...)``; ``EnsureAddressBind``), so node B holds node
A's address in its ``local`` routing table and can no longer reach node A on it, except
on the load-balancer ports it then serves itself (kubernetes/kubernetes#127410, #114815,
PR #115019; k3s-io/k3s#2804). Publishing node addresses with ``ipMode: VIP`` there breaks
node-to-node traffic. ``ipMode: Proxy`` entries are skipped by every mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

CONFIG_MAP = ("kube-system", "kube-proxy")
"""``(namespace, name)`` of kubeadm's kube-proxy ConfigMap."""
CONFIG_KEY = "config.conf"
"""The ConfigMap key holding the ``KubeProxyConfiguration``."""
MODES = ("iptables", "ipvs", "nftables", "kernelspace")
MAX_CONFIG_BYTES = 1 << 20
"""A ``config.conf`` longer than this is not read (a ConfigMap holds at most 1 MiB)."""


def proxy_mode(config_map: Mapping[str, Any] | None) -> str | None:
    """kube-proxy's mode from kubeadm's ConfigMap object (``None``: no ConfigMap, no
    ``config.conf``, or a text that is not a ``KubeProxyConfiguration`` with a known
    mode). An empty or absent ``mode`` is ``iptables`` (kube-proxy's Linux default).

    Never raises on content: a malformed ConfigMap gives ``None`` (unknown).
    """
    if not isinstance(config_map, Mapping):
        return None
    data = config_map.get("data")
    text = data.get(CONFIG_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str) or len(text) > MAX_CONFIG_BYTES:
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(config, Mapping) or config.get("kind") != "KubeProxyConfiguration":
        return None
    mode = config.get("mode")
    if mode in (None, ""):
        return "iptables"
    return mode if mode in MODES else None


def ipvs_hazard(mode: str | None, ip_mode: str) -> str | None:
    """The warning for kube-proxy ``mode`` with our ``ip_mode`` (``VIP``/``Proxy``), or
    ``None`` when there is no hazard (or the mode is unknown)."""
    if mode != "ipvs" or ip_mode != "VIP":
        return None
    return (
        "kube-proxy runs in ipvs mode (ConfigMap kube-system/kube-proxy): with ipMode VIP"
        " every node binds the node addresses published for other nodes to kube-ipvs0, so"
        " nodes can no longer reach each other on those addresses (kubernetes/kubernetes"
        "#127410, #114815); set ip-mode to Proxy, or run kube-proxy in iptables or"
        " nftables mode (docs/design.md §4.10)"
    )
