"""The cluster DNS (README.md here, "Cluster DNS"): CoreDNS as a process in the control
plane's namespace, its Corefile, its RBAC and the ``kube-dns`` Service pointing at it."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.netns import ClusterError, _http_200, _in_ns
from tests.controlplane.build import Binaries

# Cluster DNS: CoreDNS in the control plane's namespace (README.md here says why not a Pod).
CLUSTER_DOMAIN = "cluster.local"


DNS_SERVICE_IP = "10.96.0.10"  # kubeadm's choice: the 10th address of the Service CIDR


DNS_PORT = 53


EXTERNAL_ZONE = "lb.example.org"  # k8s_external: <service>.<namespace>.<zone>


EXTERNAL_TTL = 5  # seconds, stated in the Corefile (also k8s_external's default)


COREDNS_HEALTH_PORT, COREDNS_READY_PORT = 8080, 8181
COREDNS_USER = "system:coredns"


# What CoreDNS's kubernetes plugin reads with `pods disabled` (the default) and no
# multicluster zone: it lists and watches Services, EndpointSlices and Namespaces.
COREDNS_RULES = [
    {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["list", "watch"]},
]  # fmt: skip


def corefile_text(address: str, kubeconfig: Path, domain: str, zone: str, ttl: int) -> str:
    """The Corefile: one server on port 53 for the cluster domain (``kubernetes``:
    Services and their endpoints; no Pod records) and the load-balancer zone
    (``k8s_external``: ``<service>.<namespace>.<zone>`` answers the Service's ingress IPs
    and externalIPs, with ``ttl`` stated); other names are refused (no ``forward``: no
    upstream here). ``cache 30`` as kubeadm's, capped by each record's TTL. ``health`` and
    ``ready`` listen on ``address`` (the control plane's), where :class:`Cluster` polls."""
    return f"""{domain}:{DNS_PORT} {zone}:{DNS_PORT} {{
    errors
    log
    health {address}:{COREDNS_HEALTH_PORT}
    ready {address}:{COREDNS_READY_PORT}
    cache 30
    k8s_external {zone} {{
        ttl {ttl}
    }}
    kubernetes {domain} {{
        kubeconfig {kubeconfig} controlplane
        ttl {ttl}
    }}
}}
"""


class ClusterDns:
    """The cluster DNS of a :class:`~tests.cluster.cluster.Cluster`: CoreDNS as a process
    in the control plane's namespace (README.md here, "Cluster DNS")."""

    def external_name(self, service: str, namespace: str) -> str:
        """``<service>.<namespace>.<external_zone>``: the name CoreDNS answers with the
        Service's ``status.loadBalancer.ingress`` IPs (and ``spec.externalIPs``)."""
        return f"{service}.{namespace}.{self.external_zone}"

    # -- cluster DNS ---------------------------------------------------------------------
    def _start_cluster_dns(self, binaries: Binaries) -> None:
        """CoreDNS as a process in the control plane's namespace, on ``<seg>.2:53``, with a
        client certificate of its own (``system:coredns``, bound to :data:`COREDNS_RULES`);
        the ``kube-dns`` Service (``10.96.0.10``, no selector) and an EndpointSlice for it
        pointing at that address, so Pods reach it through kube-proxy like any Service."""
        assert self.plane is not None and self.cp is not None
        cp = self.cp
        self._create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": COREDNS_USER}, "rules": COREDNS_RULES,
        })  # fmt: skip
        self._create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": COREDNS_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": COREDNS_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": COREDNS_USER}],
        })  # fmt: skip
        labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
        ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
        self._create("/api/v1/namespaces/kube-system/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {"clusterIP": DNS_SERVICE_IP, "ports": [
                {"name": name, "port": DNS_PORT, "targetPort": DNS_PORT, "protocol": protocol}
                for name, protocol in ports]},
        })  # fmt: skip
        self._create("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kube-dns-control-plane", "namespace": "kube-system",
                         "labels": {**labels, "kubernetes.io/service-name": "kube-dns",
                                    "endpointslice.kubernetes.io/managed-by": "tests.cluster"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [cp.ipv4], "conditions": {"ready": True}}],
            "ports": [{"name": name, "port": DNS_PORT, "protocol": protocol}
                      for name, protocol in ports],
        })  # fmt: skip
        kubeconfig = self._kubeconfig("coredns", COREDNS_USER)
        corefile = self.workdir / "cp" / "Corefile"
        corefile.parent.mkdir(parents=True, exist_ok=True)
        corefile.write_text(
            corefile_text(cp.ipv4, kubeconfig, CLUSTER_DOMAIN, EXTERNAL_ZONE, EXTERNAL_TTL)
        )
        self._start("coredns", _in_ns(cp.netns, str(binaries.coredns), "-conf", str(corefile)))
        self.dns_server = (cp.ipv4, DNS_PORT)

    def _wait_dns_ready(self, timeout: float = 60.0) -> None:
        """Until CoreDNS's ``ready`` endpoint answers 200 (its kubernetes plugin has
        listed Services, EndpointSlices and Namespaces)."""
        assert self.cp is not None
        deadline = time.monotonic() + timeout
        while not _http_200(self.cp.ipv4, COREDNS_READY_PORT, "/ready"):
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"CoreDNS not ready after {timeout:.0f} s; log {self.log_dir / 'coredns.log'}"
                )
            time.sleep(0.2)
