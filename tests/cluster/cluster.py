"""A real Kubernetes cluster on this machine, in network namespaces (see README.md here).

``Cluster(nodes=N).start()`` builds this topology (``<id>`` is a fresh ``nilb`` + 4 hex):

- ``<id>-seg``: one L2 segment, a bridge ``br0``; every other namespace has an ``eth0``
  on it, and the machine's own namespace one veth end ``<id>`` with the segment's
  ``.1`` and its connected route (nothing else is added there);
- ``<id>-cp``: etcd, kube-apiserver (``https://<seg>.2:6443``), kube-controller-manager,
  kube-scheduler and a kube-proxy (so kube-apiserver reaches webhooks through their
  Service's ClusterIP, as on a kubeadm control-plane node; its mode stated, as kubeadm
  does, in the ConfigMap ``kube-system/kube-proxy``, key ``config.conf``), routes to every
  pod CIDR;
  CoreDNS on ``<seg>.2:53``, the cluster DNS (the ``kube-dns`` Service ``10.96.0.10``,
  selectorless, whose EndpointSlice points at it; every kubelet's ``clusterDNS``), also
  answering ``<service>.<namespace>.lb.example.org`` with a Service's load-balancer
  ingress IPs (``k8s_external``);
- ``<id>-node-<i>``: containerd + runc, kubelet, kube-proxy (``proxy_mode``: iptables,
  the default, or nftables), the bridge + host-local CNI plugins chained with portmap
  (``hostPort``) on the pod CIDRs kube-controller-manager allocated
  (``10.244.<n>.0/24`` and ``fd00:10:244:<n>::/64``), routes to the other nodes' pod
  CIDRs; addresses ``<seg>.1<i>`` and ``<seg6>::1<i>``; the last node also has the
  ExternalIPs ``<seg>.20<i>``/``<seg6>::20<i>`` (as a cloud-controller-manager would
  report them: its kubelet runs with ``--cloud-provider=external``);
- ``<id>-client``: ``<seg>.100``/``<seg6>::100``, to send traffic from.

``stop()`` removes all of it: processes, mounts, cgroups, namespaces, veths, files.
:func:`leftovers` lists what is left of a run (the teardown test asserts nothing).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.cluster import PROXY_MODES
from tests.cluster.images import Images, build_images
from tests.controlplane.build import Binaries, build, cache_root
from tests.controlplane.plane import ControlPlane
from tests.support.processes import Server, tail

PREFIX = "nilb"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = Path("/run/netns")
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "portmap")  # the chain every node's CNI config runs
CNI_CACHE = Path("/var/lib/cni/results")
CONTAINER_LOGS = Path("/var/log/containers")
SHIM_SOCKETS = Path("/run/containerd/s")
POD_CIDRS = ("10.244.0.0/16", "fd00:10:244::/56")
SERVICE_CIDRS = ("10.96.0.0/16", "fd00:10:96::/108")
API_PORT = 6443
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
# kubelet writes these (container_manager_linux.go setupKernelTunables) unless they hold
# these values already; they are not per network namespace. Its mount namespace gets
# files with these values bound over them, so the machine's own stay as they are.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
MNT_DETACH = 2
OWNER_FILE = "owner.pid"  # in the work dir: the process that made the cluster


class ClusterError(RuntimeError):
    """A step of bringing the cluster up failed; the message says which and why."""


def _run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(args)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def _in_ns(netns: str, *args: str) -> list[str]:
    """``nsenter --net`` only (the mount namespace stays the machine's: kubelet's mounts
    must be visible to runc, which containerd starts there)."""
    return ["nsenter", f"--net={NETNS_DIR / netns}", "--", *args]


def _ns_run(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(*_in_ns(netns, *args), check=check)


class Member:
    """One network namespace on the segment: its name, addresses and interface."""

    def __init__(self, cluster_id: str, name: str, host_octet: int, v4_prefix: str) -> None:
        self.name = name
        self.netns = f"{cluster_id}-{name}"
        self.ipv4 = f"{v4_prefix}.{host_octet}"
        self.ipv6 = _canonical(f"{_v6_prefix(v4_prefix)}::{host_octet}")
        self.external_ipv4: str | None = None
        self.external_ipv6: str | None = None


def _canonical(address: str) -> str:
    """RFC 5952 text (``fd00:123:0::11`` -> ``fd00:123::11``), as the API shows it."""
    return str(ipaddress.ip_address(address))


def _v6_prefix(v4_prefix: str) -> str:
    """``10.123.7`` -> ``fd00:123:7``: the segment's IPv6 /64 mirrors its IPv4 /24."""
    _, second, third = v4_prefix.split(".")
    return f"fd00:{second}:{third}"


class Node(Member):
    """A node namespace and the processes and paths of its kubelet and runtime."""

    def __init__(self, cluster_id: str, index: int, v4_prefix: str, workdir: Path) -> None:
        super().__init__(cluster_id, f"node-{index}", 10 + index, v4_prefix)
        self.index = index
        self.dir = workdir / "nodes" / self.name
        self.cgroup_root = f"/{cluster_id}-{self.name}"
        self.socket = self.dir / "containerd.sock"
        self.kubelet_root = self.dir / "kubelet"
        self.pod_cidrs: list[str] = []
        self.processes: dict[str, Server] = {}
        self.error: BaseException | None = None
        self.small_images = threading.Event()
        self.importer = threading.Thread()


class Cluster:
    """The cluster; use as a context manager or call :meth:`start` / :meth:`stop`.

    After :meth:`start`: ``url`` (``https://<seg>.2:6443``), ``kubeconfig_path`` (admin,
    works from this namespace), ``client_netns``, ``nodes`` (:class:`Node`: ``name``,
    ``netns``, ``ipv4``/``ipv6``, ``external_ipv4``/``external_ipv6``, ``pod_cidrs``),
    ``plane`` (the :class:`~tests.controlplane.plane.ControlPlane`: ``kubectl()``,
    ``request()``, ``api_client()``), ``log_dir``; the cluster DNS: ``dns_server``
    (``(<seg>.2, 53)``, CoreDNS, reachable from the client namespace), ``dns_service_ip``
    (the ``kube-dns`` ClusterIP Pods use), ``cluster_domain``, ``external_zone`` and
    ``external_ttl`` (``<service>.<namespace>.<external_zone>`` answers a Service's
    ingress IPs: :meth:`external_name`); ``proxy_mode`` (every kube-proxy's ``mode``,
    :data:`PROXY_MODES`; also in the ConfigMap ``kube-system/kube-proxy``). Raises
    :class:`ClusterError` when a step fails (everything made so far is removed first).
    """

    def __init__(
        self,
        nodes: int = 2,
        *,
        binaries: Binaries | None = None,
        images: Images | None = None,
        node_monitor_grace_period: str = "10s",
        ready_timeout: float = 150.0,
        keep_logs: Path | None = None,
        proxy_mode: str = "iptables",
    ) -> None:
        if not 1 <= nodes <= 9:
            raise ValueError(f"nodes: {nodes} is outside 1..9")
        if proxy_mode not in PROXY_MODES:
            raise ValueError(f"proxy_mode: {proxy_mode!r} is not one of {PROXY_MODES}")
        self.node_count = nodes
        self.proxy_mode = proxy_mode
        self.binaries = binaries
        self.images = images
        self.node_monitor_grace_period = node_monitor_grace_period
        self.ready_timeout = ready_timeout
        self.keep_logs = keep_logs
        self.id = f"{PREFIX}{secrets.token_hex(2)}"
        self.workdir = Path()
        self.v4_prefix = ""
        self.host_if = self.id
        self.nodes: list[Node] = []
        self.cp: Member | None = None
        self.client: Member | None = None
        self.plane: ControlPlane | None = None
        self.url = ""
        self.kubeconfig_path = Path()
        self.client_netns = ""
        self.log_dir = Path()
        self.dns_server: tuple[str, int] = ("", DNS_PORT)
        self.dns_service_ip = DNS_SERVICE_IP
        self.cluster_domain = CLUSTER_DOMAIN
        self.external_zone = EXTERNAL_ZONE
        self.external_ttl = EXTERNAL_TTL
        self._servers: list[Server] = []
        self._netns: list[str] = []
        self._shim_sockets: set[Path] = set()
        self.timings: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Cluster:
        """Bring everything up and return once every node is Ready (see class doc)."""
        started = time.monotonic()
        binaries = self.binaries or build()
        images = self.images or build_images()
        self.binaries, self.images = binaries, images
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.id}-"))
        self.workdir.chmod(0o755)
        (self.workdir / OWNER_FILE).write_text(f"{os.getpid()}\n")
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir()
        try:
            self._network()
            self.timings["network"] = time.monotonic() - started
            # Each node's containerd imports the images while the control plane starts;
            # a kubelet starts once its node has the small ones (the sandbox image).
            for node in self.nodes:
                self._start_containerd(node)
                node.importer = threading.Thread(
                    target=self._containerd_images, args=(node, images), daemon=True
                )
                node.importer.start()
            self._control_plane(binaries)
            self.timings["control plane"] = time.monotonic() - started
            for node in self.nodes:
                while not node.small_images.wait(0.5):
                    if node.error is not None or not node.importer.is_alive():
                        break
                if node.error is not None:
                    raise node.error
                self._start_node(node, binaries)
            self._wire_pod_network()
            self._wait_ready()
            self.timings["nodes ready"] = time.monotonic() - started
            self._wait_dns_ready()
            self.timings["cluster DNS ready"] = time.monotonic() - started
            for node in self.nodes:
                node.importer.join()
                if node.error is not None:
                    raise node.error
            self.timings["images imported"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Remove everything :meth:`start` made (safe to call twice, and after a failed
        start); problems are collected and raised as one :class:`ClusterError` at the end,
        after every step has been tried."""
        problems: list[str] = []

        def attempt(what: str, step: Any, *args: Any) -> None:
            try:
                step(*args)
            except Exception as err:  # keep going: the next steps still have to run
                problems.append(f"{what}: {err}")

        for node in self.nodes:
            for name in ("kube-proxy", "kubelet", "kubelet-stopped"):
                server = node.processes.pop(name, None)
                if server is not None:
                    attempt(f"{node.name} {name}", server.stop, 10.0)
        for node in self.nodes:
            attempt(f"{node.name} containers", self._kill_cgroup_processes, node)
            server = node.processes.pop("containerd", None)
            if server is not None:
                attempt(f"{node.name} containerd", server.stop, 10.0)
            attempt(f"{node.name} shims", self._kill_shims, node)
        for server in reversed(self._servers):
            attempt(server.name, server.stop, 15.0)
        self._servers = []
        if self.plane is not None:
            attempt("control plane logs", self._copy_plane_logs)
            attempt("control plane", self.plane.stop)
            self.plane = None
        if self.workdir != Path():
            attempt("mounts", _unmount_under, self.workdir)
        for node in self.nodes:
            attempt(f"{node.name} cgroups", _remove_cgroups, node.cgroup_root)
        for netns in reversed(self._netns):
            attempt(f"netns {netns}", _run, "ip", "netns", "delete", netns)
        self._netns = []
        if _link_exists(self.host_if):
            attempt("host veth", _run, "ip", "link", "delete", self.host_if)
        attempt("files", self._remove_files)
        if self.keep_logs is not None and self.log_dir.is_dir():
            keep = self.keep_logs
            attempt("logs", lambda: shutil.copytree(self.log_dir, keep, dirs_exist_ok=True))
        if self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
        if problems:
            raise ClusterError("teardown: " + "; ".join(problems))

    # -- network -------------------------------------------------------------------------
    def _network(self) -> None:
        with _net_lock():
            self.v4_prefix = _free_segment()
            prefix = self.v4_prefix
            self.cp = Member(self.id, "cp", 2, prefix)
            self.client = Member(self.id, "client", 100, prefix)
            count = self.node_count
            self.nodes = [Node(self.id, i, prefix, self.workdir) for i in range(1, count + 1)]
            last = self.nodes[-1]
            last.external_ipv4 = f"{prefix}.{200 + last.index}"
            last.external_ipv6 = _canonical(f"{_v6_prefix(prefix)}::{200 + last.index}")
            seg = f"{self.id}-seg"
            self._add_netns(seg)
            _ns_run(seg, "ip", "link", "add", "br0", "type", "bridge")
            _ns_run(seg, "ip", "link", "set", "br0", "up")
            # The machine's end: an address and its connected route, nothing more.
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "host",
                 "netns", seg)  # fmt: skip
            _ns_run(seg, "ip", "link", "set", "host", "master", "br0", "up")
            _run("ip", "addr", "add", f"{prefix}.1/24", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
        for member in (self.cp, *self.nodes, self.client):
            self._add_netns(member.netns)
            _run("ip", "link", "add", "eth0", "netns", member.netns, "type", "veth", "peer",
                 "name", member.name, "netns", seg)  # fmt: skip
            _ns_run(seg, "ip", "link", "set", member.name, "master", "br0", "up")
            ns = member.netns
            _ns_run(ns, "ip", "link", "set", "lo", "up")
            _ns_run(ns, "ip", "addr", "add", f"{member.ipv4}/24", "dev", "eth0")
            _ns_run(ns, "ip", "-6", "addr", "add", f"{member.ipv6}/64", "dev", "eth0", "nodad")
            if member.external_ipv4 and member.external_ipv6:
                _ns_run(ns, "ip", "addr", "add", f"{member.external_ipv4}/24", "dev", "eth0")
                _ns_run(ns, "ip", "-6", "addr", "add", f"{member.external_ipv6}/64", "dev",
                        "eth0", "nodad")  # fmt: skip
            _ns_run(ns, "ip", "link", "set", "eth0", "up")
        # Locally started connections to a ClusterIP need a route for it before
        # kube-proxy's OUTPUT DNAT applies (kube-apiserver calling a webhook's Service):
        # the Service CIDRs point at eth0 (where a default route would send them).
        for member in (self.cp, *self.nodes):
            _ns_run(member.netns, "ip", "route", "add", SERVICE_CIDRS[0], "dev", "eth0")
            _ns_run(member.netns, "ip", "-6", "route", "add", SERVICE_CIDRS[1], "dev", "eth0")
        for node in self.nodes:
            for key in (
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
                "net.bridge.bridge-nf-call-iptables=1",
                "net.bridge.bridge-nf-call-ip6tables=1",
            ):
                _ns_run(node.netns, "sysctl", "-qw", key)
        self.client_netns = self.client.netns

    def _add_netns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._netns.append(name)

    def _wire_pod_network(self) -> None:
        """Wait for every Node's pod CIDRs, then write each node's CNI configuration and
        the routes to each node's pod CIDRs (via its address) in every other node
        namespace and in the control-plane one."""
        assert self.plane is not None and self.cp is not None
        deadline = time.monotonic() + self.ready_timeout
        pending = list(self.nodes)
        while pending:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"nodes {[n.name for n in pending]} got no pod CIDRs; logs in {self.log_dir}"
                )
            self._check_alive()
            for node in list(pending):
                status, body = self.plane.request("GET", f"/api/v1/nodes/{node.name}")
                if status == 200 and len(body["spec"].get("podCIDRs", [])) == 2:
                    node.pod_cidrs = list(body["spec"]["podCIDRs"])
                    if node.external_ipv4:
                        self._publish_external_ips(node, body)
                    self._write_cni(node)
                    pending.remove(node)
            time.sleep(0.3)
        for node in self.nodes:
            for other in self.nodes:
                if other is node:
                    continue
                _add_pod_routes(node.netns, other)
            _add_pod_routes(self.cp.netns, node)

    def _publish_external_ips(self, node: Node, body: dict[str, Any]) -> None:
        """What a cloud-controller-manager does for a ``--cloud-provider=external`` kubelet:
        set the Node's addresses (InternalIP and ExternalIP, both families, Hostname)
        and remove the ``node.cloudprovider.kubernetes.io/uninitialized`` taint."""
        assert self.plane is not None
        addresses = [
            {"type": "InternalIP", "address": node.ipv4},
            {"type": "InternalIP", "address": node.ipv6},
            {"type": "ExternalIP", "address": node.external_ipv4},
            {"type": "ExternalIP", "address": node.external_ipv6},
            {"type": "Hostname", "address": node.name},
        ]
        self._json_patch(f"/api/v1/nodes/{node.name}/status", "/status/addresses", addresses)
        taints = [
            t
            for t in body["spec"].get("taints", [])
            if t["key"] != "node.cloudprovider.kubernetes.io/uninitialized"
        ]
        self._json_patch(f"/api/v1/nodes/{node.name}", "/spec/taints", taints)

    def _json_patch(self, url: str, path: str, value: object) -> None:
        """Set ``path`` of the object at ``url`` to ``value`` (JSON patch ``add``, which
        replaces); raises :class:`ClusterError` on any status but 200."""
        assert self.plane is not None
        patch = [{"op": "add", "path": path, "value": value}]
        status, reply = self.plane.request(
            "PATCH", url, patch, content_type="application/json-patch+json"
        )
        if status != 200:
            raise ClusterError(f"PATCH {url} {path}: {status} {reply}")

    def _write_cni(self, node: Node) -> None:
        ranges = [[{"subnet": cidr}] for cidr in node.pod_cidrs]
        config = {
            "cniVersion": "1.0.0",
            "name": self.id,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": ranges,
                        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                        "dataDir": str(node.dir / "cni-ipam"),
                    },
                },
                # hostPort (containerd passes the Pod's port mappings): what kind chains.
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        conf_dir = node.dir / "cni" / "net.d"
        (conf_dir / ".10-bridge.conflist").write_text(json.dumps(config, indent=2))
        (conf_dir / ".10-bridge.conflist").rename(conf_dir / "10-bridge.conflist")

    # -- control plane -------------------------------------------------------------------
    def _control_plane(self, binaries: Binaries) -> None:
        assert self.cp is not None
        cp = self.cp
        self.plane = ControlPlane(
            binaries,
            host=cp.ipv4,
            secure_port=API_PORT,
            command_prefix=_in_ns(cp.netns),
            serving_ips=["10.96.0.1"],
            serving_dns_names=[
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            authorization_mode="Node,RBAC",
            service_cluster_ip_range=",".join(SERVICE_CIDRS),
            kubelet_client_certificate=True,
            extra_apiserver_args=[
                "--enable-admission-plugins=NodeRestriction",
                # kubectl logs/exec: no DNS here, so the Node's address, not its name.
                "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            ],
        )
        self.plane.start()
        self.url = self.plane.url
        self.kubeconfig_path = self.plane.kubeconfig_path
        for name in ("etcd", "kube-apiserver"):
            self._link_log(name, self.plane.log_paths[name])
        pki = self.plane.workdir / "pki"
        cm = self._kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        self._start(
            "kube-controller-manager",
            _in_ns(cp.netns, str(binaries.kube_controller_manager),
                   f"--kubeconfig={cm}", f"--authentication-kubeconfig={cm}",
                   f"--authorization-kubeconfig={cm}", "--leader-elect=false",
                   "--use-service-account-credentials=true",
                   f"--service-account-private-key-file={pki / 'sa.key'}",
                   f"--root-ca-file={pki / 'ca.crt'}", "--allocate-node-cidrs=true",
                   f"--cluster-cidr={','.join(POD_CIDRS)}", "--node-cidr-mask-size-ipv4=24",
                   "--node-cidr-mask-size-ipv6=64",
                   f"--service-cluster-ip-range={','.join(SERVICE_CIDRS)}",
                   "--configure-cloud-routes=false", "--node-monitor-period=1s",
                   f"--node-monitor-grace-period={self.node_monitor_grace_period}",
                   "--bind-address=127.0.0.1"),
        )  # fmt: skip
        sched = self._kubeconfig("kube-scheduler", "system:kube-scheduler")
        self._start(
            "kube-scheduler",
            _in_ns(cp.netns, str(binaries.kube_scheduler), f"--kubeconfig={sched}",
                   f"--authentication-kubeconfig={sched}", f"--authorization-kubeconfig={sched}",
                   "--leader-elect=false", "--bind-address=127.0.0.1"),
        )  # fmt: skip
        self._create("/api/v1/namespaces/kube-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system",
                         "labels": {"app": "kube-proxy"}},
            "data": {"config.conf": kube_proxy_config_conf(self.proxy_mode)},
        })  # fmt: skip
        self._start_kube_proxy(cp, self.workdir / "cp", "control-plane", binaries, self._servers)
        self._start_cluster_dns(binaries)

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

    def _create(self, collection: str, body: dict[str, Any]) -> None:
        """POST ``body`` to ``collection`` as admin; raises :class:`ClusterError` unless 201."""
        assert self.plane is not None
        status, reply = self.plane.request("POST", collection, body)
        if status != 201:
            raise ClusterError(f"POST {collection} {body['metadata']['name']}: {status} {reply}")

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

    def _kubeconfig(self, name: str, user: str, groups: Sequence[str] = ()) -> Path:
        assert self.plane is not None
        directory = self.workdir / "kubeconfigs"
        directory.mkdir(exist_ok=True)
        cert, key = self.plane.client_certificate(user, groups)
        return self.plane.write_kubeconfig(
            directory / f"{name}.kubeconfig", user=user, cert_pem=cert, key_pem=key
        )

    def _start(self, name: str, args: list[str], into: list[Server] | None = None) -> Server:
        server = Server(name, args, self.log_dir / f"{name}.log")
        (self._servers if into is None else into).append(server)
        server.start()
        return server

    def _link_log(self, name: str, path: Path) -> None:
        with contextlib.suppress(OSError):
            (self.log_dir / f"{name}.log").symlink_to(path)

    def _copy_plane_logs(self) -> None:
        """Replace the links to the control plane's logs by copies (its temp dir goes)."""
        for link in self.log_dir.glob("*.log"):
            if link.is_symlink():
                target = link.resolve()
                link.unlink()
                if target.is_file():
                    shutil.copyfile(target, link)

    def _start_kube_proxy(
        self, member: Member, directory: Path, hostname: str, binaries: Binaries,
        into: list[Server] | dict[str, Server],
    ) -> None:  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
        kubeconfig = self._kubeconfig(f"kube-proxy-{hostname}", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": hostname,
            "bindAddress": member.ipv4,
            "healthzBindAddress": "0.0.0.0:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "mode": self.proxy_mode,
            "clusterCIDR": ",".join(POD_CIDRS),
            # No sysctl outside this network namespace: nf_conntrack_max and the
            # hashsize are the machine's (maxPerCore/min 0: leave them); the timeouts
            # are per namespace but left as they are too.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
                "udpTimeout": "0s",
                "udpStreamTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False},
        }
        path = directory / "kube-proxy.json"
        path.write_text(json.dumps(config, indent=2))
        name = "kube-proxy" if isinstance(into, dict) else f"kube-proxy-{hostname}"
        server = Server(
            name,
            _in_ns(member.netns, str(binaries.kube_proxy), f"--config={path}"),
            self.log_dir / f"kube-proxy-{hostname}.log",
        )
        if isinstance(into, dict):
            into[name] = server
        else:
            into.append(server)
        server.start()

    # -- nodes ---------------------------------------------------------------------------
    def _start_containerd(self, node: Node) -> None:
        # containerd's root and state on a tmpfs: the native snapshotter copies every
        # image per container, and removing those files from disk took ~40 s at stop.
        (node.dir / "containerd").mkdir(parents=True)
        _run(
            "mount", "-t", "tmpfs", "-o", "size=4g,mode=0755", "tmpfs", str(node.dir / "containerd")
        )
        for sub in ("containerd/root", "containerd/state", "cni/net.d", "cni-ipam", "runc",
                    "logs", "kubelet", "opt"):  # fmt: skip
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        assert self.images is not None
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{node.dir / "containerd/root"}"
state = "{node.dir / "containerd/state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]
[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.socket}.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{node.dir / "opt"}"
[{cri}]
  sandbox_image = "{self.images.pause_ref}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        Root = "{node.dir / "runc"}"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{node.dir / "cni/net.d"}"
    max_conf_num = 1
"""
        path = node.dir / "containerd.toml"
        path.write_text(config)
        server = Server(
            "containerd",
            _in_ns(node.netns, "containerd", f"--config={path}"),
            self.log_dir / f"containerd-{node.name}.log",
        )
        node.processes["containerd"] = server
        server.start()

    def _containerd_images(self, node: Node, images: Images) -> None:
        """Wait for the node's containerd, then import every image (thread body)."""
        try:
            deadline = time.monotonic() + 60
            while not node.socket.exists():
                if node.processes["containerd"].exited() is not None or time.monotonic() > deadline:
                    log = node.processes["containerd"].log_path
                    raise ClusterError(f"{node.name}: containerd did not start:\n{tail(log)}")
                time.sleep(0.1)
            for archive, ref in images.archives():
                self._ctr(node, "images", "import", "--snapshotter", "native", str(archive))
                listed = self._ctr(node, "images", "list", "-q").stdout.split()
                if ref not in listed:
                    raise ClusterError(f"{node.name}: {archive} not imported as {ref}: {listed}")
                if ref == images.backend_ref:
                    node.small_images.set()
        except BaseException as err:
            node.error = err

    def _ctr(self, node: Node, *args: str) -> subprocess.CompletedProcess[str]:
        return _run("ctr", f"--address={node.socket}", "--namespace=k8s.io", *args, timeout=300)

    def _start_node(self, node: Node, binaries: Binaries) -> None:
        assert self.plane is not None
        _make_cgroups(node.cgroup_root)
        # kubelet mounts (projected tokens, emptyDirs) must reach runc in the machine's
        # mount namespace: its root dir is a shared mount that kubelet's private mount
        # namespace (below) propagates into.
        _run("mount", "--bind", str(node.kubelet_root), str(node.kubelet_root))
        _run("mount", "--make-shared", str(node.kubelet_root))
        pki = self.plane.workdir / "pki"
        kubeconfig = self._kubeconfig(
            f"kubelet-{node.name}", f"system:node:{node.name}", ["system:nodes"]
        )
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{node.socket}",
            "address": node.ipv4,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "nodeLeaseDurationSeconds": 8,
            "nodeStatusUpdateFrequency": "2s",
            "nodeStatusReportFrequency": "10s",
            "podLogsDir": str(node.dir / "logs"),
            "failSwapOn": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "serializeImagePulls": False,
            "shutdownGracePeriod": "0s",
            "maxPods": 60,
            # The node's own resolv.conf (dnsPolicy Default): none; ClusterFirst Pods get
            # `nameserver 10.96.0.10`, `search <ns>.svc.cluster.local svc.cluster.local
            # cluster.local`, `options ndots:5`.
            "resolvConf": "",
            "clusterDNS": [DNS_SERVICE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
        }
        config_path = node.dir / "kubelet.json"
        config_path.write_text(json.dumps(config, indent=2))
        node_ips = f"{node.ipv4},{node.ipv6}"
        kubelet = [
            str(binaries.kubelet),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node.kubelet_root}",
            f"--cert-dir={node.dir / 'kubelet-pki'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node_ips}",
            "--v=1",
        ]
        if node.external_ipv4:
            kubelet.append("--cloud-provider=external")
        fakes = self._fake_sysctls()
        script = (
            "mount --make-rprivate /proc\n"
            + "".join(f"mount --bind {fake} /proc/sys/{key}\n" for key, fake in fakes.items())
            + 'exec "$@"\n'
        )
        server = Server(
            "kubelet",
            _in_ns(node.netns, "unshare", "--mount", "--propagation", "unchanged", "--",
                   "sh", "-euc", script, "kubelet", *kubelet),
            self.log_dir / f"kubelet-{node.name}.log",
        )  # fmt: skip
        node.processes["kubelet"] = server
        server.start()
        self._start_kube_proxy(node, node.dir, node.name, binaries, node.processes)

    def stop_kubelet(self, node: Node) -> None:
        """SIGTERM the node's kubelet (its containers and kube-proxy keep running), as a
        node that stops reporting; :meth:`start_kubelet` starts it again."""
        server = node.processes["kubelet"]
        server.stop(15.0)
        node.processes["kubelet-stopped"] = node.processes.pop("kubelet")

    def start_kubelet(self, node: Node) -> None:
        """Start the kubelet that :meth:`stop_kubelet` stopped, with the same command line
        (its log continues in ``kubelet-<node>-restarted.log``)."""
        old = node.processes.pop("kubelet-stopped")
        server = Server("kubelet", old.args, self.log_dir / f"kubelet-{node.name}-restarted.log")
        node.processes["kubelet"] = server
        server.start()

    def container_pids(self, container_id: str) -> set[int]:
        """The processes of one container (``container_id`` as a Pod's
        ``status.containerStatuses[].containerID`` or bare), found by their cgroup (runc
        names the container's cgroup after its id); ``/proc/<pid>/ns/net`` of any of them is
        the Pod's network namespace. Raises ``LookupError`` when none is found."""
        bare = container_id.split("://", 1)[-1]
        pids: set[int] = set()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if bare in (proc / "cgroup").read_text():
                    pids.add(int(proc.name))
        if not pids:
            raise LookupError(f"no process in a cgroup of container {bare}")
        return pids

    def signal_container(self, container_id: str, sig: signal.Signals) -> set[int]:
        """Send ``sig`` to every process of one container: ``container_id`` as a Pod's
        ``status.containerStatuses[].containerID`` (``containerd://<id>``) or the bare id.
        Processes are found by their cgroup (runc names the container's cgroup after its
        id). SIGSTOP freezes a Pod as a hung process would (probes and webhook calls time
        out, its TCP connections stay open); SIGCONT resumes it. Returns the pids
        signalled; raises ``LookupError`` when none was found (wrong id, container gone)."""
        pids = self.container_pids(container_id)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def _fake_sysctls(self) -> dict[str, Path]:
        directory = self.workdir / "sysctl"
        fakes: dict[str, Path] = {}
        for key, value in KUBELET_SYSCTLS.items():
            with contextlib.suppress(OSError):
                if (Path("/proc/sys") / key).read_text().strip() == value:
                    continue
            fake = directory / key.replace("/", ".")
            fake.parent.mkdir(exist_ok=True)
            fake.write_text(value + "\n")
            fakes[key] = fake
        return fakes

    def _wait_ready(self) -> None:
        assert self.plane is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            self._check_alive()
            status, body = self.plane.request("GET", "/api/v1/nodes")
            ready = set()
            if status == 200:
                for item in body["items"]:
                    for cond in item["status"].get("conditions", []):
                        if cond["type"] == "Ready" and cond["status"] == "True":
                            ready.add(item["metadata"]["name"])
            if ready >= {node.name for node in self.nodes}:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"nodes not Ready after {self.ready_timeout:.0f} s (Ready: {sorted(ready)}); "
                    f"logs in {self.log_dir}"
                )
            time.sleep(0.5)

    def _check_alive(self) -> None:
        """Raise :class:`ClusterError` with the log tail of a process that has exited."""
        servers = [*self._servers]
        for node in self.nodes:
            servers += [s for name, s in node.processes.items() if name != "kubelet-stopped"]
        for server in servers:
            code = server.exited()
            if code is not None:
                raise ClusterError(
                    f"{server.name} ({server.log_path.name}) exited with {code}:\n"
                    f"{tail(server.log_path)}"
                )

    def poll(self) -> str | None:
        """Name of a process that has exited since start (its log's name), else ``None``."""
        try:
            self._check_alive()
        except ClusterError as err:
            return str(err).splitlines()[0]
        if self.plane is not None and (dead := self.plane.poll()) is not None:
            return dead
        return None

    # -- stopping ------------------------------------------------------------------------
    def _kill_cgroup_processes(self, node: Node) -> None:
        """SIGKILL every process left in the node's cgroups (its containers)."""
        left = _kill_until_gone(lambda: _cgroup_pids(node.cgroup_root))
        if left:
            raise ClusterError(f"{node.name}: processes left in its cgroups: {sorted(left)}")

    def _kill_shims(self, node: Node) -> None:
        """SIGKILL the node's containerd-shim-runc-v2 processes (started with
        ``-address <its socket>``) and remove their sockets, which containerd 1.6 keeps in
        ``/run/containerd/s/<sha256(address/namespace/id)>`` (runtime/v2/shim/util_unix.go)."""
        for pid, argv in _processes_mentioning(str(node.socket)):
            if Path(argv[0]).name.startswith("containerd-shim"):
                opts = dict(zip(argv[1::2], argv[2::2], strict=False))
                ns, shim_id = opts.get("-namespace", ""), opts.get("-id", "")
                digest = hashlib.sha256(f"{node.socket}/{ns}/{shim_id}".encode()).hexdigest()
                self._shim_sockets.add(SHIM_SOCKETS / digest)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for socket_path in self._shim_sockets:
            with contextlib.suppress(FileNotFoundError):
                socket_path.unlink()

    def _remove_files(self) -> None:
        """Outside the work dir: kubelet's ``/var/log/containers`` links to our pod logs
        and libcni's result cache entries of our network and of our sandboxes' loopback."""
        if CONTAINER_LOGS.is_dir() and self.workdir != Path():
            for link in CONTAINER_LOGS.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and str(os.readlink(link)).startswith(str(self.workdir)):
                        link.unlink()
        for entry in _cni_cache_entries(self.id, self.workdir):
            entry.unlink(missing_ok=True)


# -- helpers -------------------------------------------------------------------------------


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


def kube_proxy_config_conf(mode: str) -> str:
    """``config.conf`` of the ConfigMap ``kube-system/kube-proxy``: where kubeadm states
    the ``KubeProxyConfiguration`` every kube-proxy runs (and node-ipam-lb reads its
    ``mode``, docs/design.md §4.10). Here only what all of ours share: each kube-proxy
    runs a file of its own (its kubeconfig, hostname and bind address differ)."""
    return (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
        "kind: KubeProxyConfiguration\n"
        f"mode: {mode}\n"
        f"clusterCIDR: {','.join(POD_CIDRS)}\n"
    )


def _http_200(host: str, port: int, path: str) -> bool:
    """Whether ``GET http://host:port/path`` answers 200 within a second."""
    conn = http.client.HTTPConnection(host, port, timeout=1.0)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


@contextlib.contextmanager
def _net_lock() -> Iterator[None]:
    """Serialize the choice of a free segment between concurrent clusters."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".cluster-network.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _free_segment() -> str:
    """The first ``10.123.<k>`` (/24) no route of this namespace overlaps."""
    routes = _run("ip", "-4", "route", "show", "table", "all").stdout
    taken = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "prohibit", "blackhole"):
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.ip_network(word if word != "default" else "0.0.0.0/0", False))
    for k in range(256):
        candidate = ipaddress.ip_network(f"10.123.{k}.0/24")
        if not any(candidate.overlaps(net) for net in taken if net.prefixlen > 0):
            return f"10.123.{k}"
    raise ClusterError("no free 10.123.<k>.0/24 segment")


def _add_pod_routes(netns: str, via: Node) -> None:
    v4 = [c for c in via.pod_cidrs if ":" not in c]
    v6 = [c for c in via.pod_cidrs if ":" in c]
    for cidr in v4:
        _ns_run(netns, "ip", "route", "replace", cidr, "via", via.ipv4)
    for cidr in v6:
        _ns_run(netns, "ip", "-6", "route", "replace", cidr, "via", via.ipv6)


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, ``systemd``, ``unified``)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return [p for p in sorted(CGROUP_ROOT.iterdir()) if p.is_dir() and not p.is_symlink()]


def _make_cgroups(cgroup_root: str) -> None:
    """Create the kubelet's ``cgroupRoot`` in every v1 hierarchy (kubelet checks that it
    exists); cpuset needs its cpus and mems copied from the parent before use."""
    for hierarchy in _hierarchies():
        if hierarchy.name == "unified":
            continue
        path = hierarchy / cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((hierarchy / name).read_text())


def _kill_until_gone(find: Callable[[], set[int]], *, tries: int = 50) -> set[int]:
    """SIGKILL the processes ``find()`` returns until it returns none (every 0.1 s, at
    most ``tries`` times); returns what is still there (empty when all are gone)."""
    pids = find()
    for _ in range(tries):
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        pids = find()
    return pids


def _cgroup_pids(cgroup_root: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        top = hierarchy / cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        # A cgroup can go while it is walked (runc removes a stopped container's).
        with contextlib.suppress(OSError):
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in procs.read_text().split())
    return pids


def _remove_cgroups(cgroup_root: str) -> None:
    """rmdir the tree under every hierarchy, deepest first."""
    for hierarchy in _hierarchies():
        top = hierarchy / cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        try:
            found = [p for p in top.rglob("*") if p.is_dir()]
        except OSError:  # a cgroup went while walking: walk again
            found = [p for p in top.rglob("*") if p.is_dir()]
        dirs = sorted(found, key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            for _ in range(20):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise ClusterError(f"cannot remove cgroup {path}")


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or under ``path`` in this mount namespace (``/proc/self/mountinfo``,
    octal escapes decoded)."""
    prefix = str(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


def _unmount_under(path: Path) -> None:
    """Lazily unmount everything at or under ``path``, deepest first, until none is left."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(20):
        points = _mounts_under(path)
        if not points:
            return
        for point in sorted(set(points), key=lambda p: -p.count("/")):
            libc.umount2(point.encode(), MNT_DETACH)
    raise ClusterError(f"mounts left under {path}: {_mounts_under(path)}")


def _processes_mentioning(text: str) -> list[tuple[int, list[str]]]:
    """``(pid, argv)`` of every process whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in raw:
            argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
            found.append((int(entry.name), argv))
    return found


def missing_prerequisites() -> str | None:
    """Why a cluster cannot run on this machine (not root, a tool or the CNI plugins
    missing), or ``None``. The binaries and images are another matter:
    :func:`tests.controlplane.build.find_binaries`, :func:`tests.cluster.images.find_images`."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, mounts, cgroups)"
    tools = ("containerd", "runc", "ctr", "nsenter", "unshare", "ip", "iptables-restore", "nft")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    missing += [
        f"{CNI_BIN}/{plugin} (containernetworking-plugins)"
        for plugin in CNI_PLUGINS
        if not (CNI_BIN / plugin).exists()
    ]
    if missing:
        return "missing: " + ", ".join(missing) + " (.ci/run installs them with apt-get)"
    return None


def leftovers(cluster_id: str, workdir: Path) -> list[str]:
    """What is left on this machine of the cluster ``cluster_id`` whose work dir was
    ``workdir``: processes naming either, mounts under the work dir, network namespaces
    and links named ``<id>…``, cgroups ``/<id>-…`` in any hierarchy, files under the work
    dir, ``/var/log/containers`` links into it and libcni cache entries of its network.
    One string per thing; empty after a clean :meth:`Cluster.stop`."""
    found = [f"process {pid}: {' '.join(argv)[:200]}" for pid, argv in
             _processes_mentioning(str(workdir)) if pid != os.getpid()]  # fmt: skip
    found += [f"process {pid}: {' '.join(argv)[:200]}" for pid, argv in
              _processes_mentioning(f"{cluster_id}-") if pid != os.getpid()]  # fmt: skip
    found += [f"mount {point}" for point in _mounts_under(workdir)]
    if NETNS_DIR.is_dir():
        found += [f"netns {p.name}" for p in NETNS_DIR.iterdir() if p.name.startswith(cluster_id)]
    found += [f"link {p.name}" for p in Path("/sys/class/net").iterdir()
              if p.name.startswith(cluster_id)]  # fmt: skip
    for hierarchy in _hierarchies():
        found += [f"cgroup {p}" for p in hierarchy.glob(f"{cluster_id}-*")]
    if workdir.exists():
        found.append(f"directory {workdir}")
    if CONTAINER_LOGS.is_dir():
        for link in CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(os.readlink(link)).startswith(str(workdir)):
                    found.append(f"log link {link}")
    found += [f"cni cache {p}" for p in _cni_cache_entries(cluster_id, workdir)]
    return found


def _cni_cache_entries(cluster_id: str, workdir: Path) -> list[Path]:
    """libcni's cache entries (``/var/lib/cni/results``) of one cluster: those of its own
    network (``<id>-…``) and containerd's loopback ones (``cni-loopback-<sandbox>-lo``,
    one per Pod sandbox; containerd removes it only when it tears the sandbox down, which
    a stopped cluster never does), recognised by the sandbox's network namespace path
    under ``workdir`` in the cached result."""
    if not CNI_CACHE.is_dir():
        return []
    found = list(CNI_CACHE.glob(f"{cluster_id}-*"))
    if not workdir.is_absolute():  # no work dir yet: "." would match every entry
        return found
    needle = f'"{workdir}/'.encode()
    for entry in CNI_CACHE.glob("cni-loopback-*"):
        with contextlib.suppress(OSError):
            if needle in entry.read_bytes():
                found.append(entry)
    return found


def abandoned() -> list[tuple[str, Path]]:
    """``(cluster id, work dir)`` of every cluster whose owner died without stopping it:
    its work dir ``<tmp>/<id>-*`` names, in ``owner.pid``, a process that no longer
    exists (see :func:`purge_abandoned`, :func:`leftovers`)."""
    found = []
    for workdir in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}????-*")):
        try:
            pid = int((workdir / OWNER_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if not Path(f"/proc/{pid}").exists():
            found.append((workdir.name.split("-", 1)[0], workdir))
    return found


def purge_abandoned(*, dry_run: bool = False) -> list[str]:
    """Remove what is left of clusters whose owner died without stopping them (a
    SIGKILLed ``up`` or test run: its children die with it, PR_SET_PDEATHSIG, but
    mounts, cgroups, namespaces and the work dir stay). A cluster counts as abandoned
    when its work dir ``<tmp>/<id>-*`` names, in ``owner.pid``, a process that no longer
    exists; clusters with a live owner are never touched. Returns the ids handled."""
    handled = []
    for cluster_id, workdir in abandoned():
        handled.append(cluster_id)
        if dry_run:
            continue
        roots = {"/" + top.name for h in _hierarchies() for top in h.glob(f"{cluster_id}-*")}

        def remaining(workdir: Path = workdir, roots: set[str] = roots) -> set[int]:
            # The containers (under their shims, which outlive the owner) and the shims.
            pids = {pid for root in roots for pid in _cgroup_pids(root)}
            return pids | ({pid for pid, _ in _processes_mentioning(str(workdir))} - {os.getpid()})

        _kill_until_gone(remaining)
        _unmount_under(workdir)
        for root in roots:
            _remove_cgroups(root)
        if CONTAINER_LOGS.is_dir():
            for link in CONTAINER_LOGS.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(str(workdir)):
                        link.unlink()
        if NETNS_DIR.is_dir():
            for netns in NETNS_DIR.glob(f"{cluster_id}-*"):
                _run("ip", "netns", "delete", netns.name, check=False)
        if _link_exists(cluster_id):
            _run("ip", "link", "delete", cluster_id, check=False)
        for entry in _cni_cache_entries(cluster_id, workdir):
            entry.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return handled
