"""kube-proxy's mode from kubeadm's ConfigMap and the ipvs hazard (docs/design.md §4.10)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.kubeproxy import ipvs_hazard, proxy_mode


def config_map(text: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.conf": text}}


KUBEADM = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clusterCIDR: 10.244.0.0/16
mode: {mode}
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("ipvs", "ipvs"), ("nftables", "nftables"), ("iptables", "iptables"), ('""', "iptables")],
)
def test_the_mode_of_a_kubeadm_config_map(mode: str, expected: str) -> None:
    assert proxy_mode(config_map(KUBEADM.format(mode=mode))) == expected


@pytest.mark.parametrize(
    "obj",
    [
        None,
        {},
        {"data": None},
        config_map(None),
        config_map("mode: ipvs"),  # not a KubeProxyConfiguration
        config_map("kind: KubeProxyConfiguration\nmode: userspace-ish\n"),
        config_map("{ not yaml"),
        config_map("kind: KubeProxyConfiguration\nmode: ipvs\n" + "#" * (1 << 20)),
    ],
)
def test_anything_else_is_unknown_never_an_error(obj: Any) -> None:
    assert proxy_mode(obj) is None


def test_only_ipvs_with_vip_is_a_hazard() -> None:
    warning = ipvs_hazard("ipvs", "VIP")
    assert warning is not None and "kube-ipvs0" in warning and "Proxy" in warning
    assert ipvs_hazard("ipvs", "Proxy") is None
    assert ipvs_hazard("iptables", "VIP") is None
    assert ipvs_hazard(None, "VIP") is None
