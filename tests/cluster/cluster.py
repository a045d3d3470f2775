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
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.cluster import PROXY_MODES
from tests.cluster.cleanup import (
    CONTAINER_LOGS,
    OWNER_FILE,
    _cni_cache_entries,
    _remove_cgroups,
    _unmount_under,
)
from tests.cluster.dns import (
    CLUSTER_DOMAIN,
    DNS_PORT,
    DNS_SERVICE_IP,
    EXTERNAL_TTL,
    EXTERNAL_ZONE,
    ClusterDns,
)
from tests.cluster.images import Images, build_images
from tests.cluster.netns import (
    POD_CIDRS,
    PREFIX,
    ClusterError,
    Member,
    Node,
    _add_pod_routes,
    _canonical,
    _free_segment,
    _in_ns,
    _link_exists,
    _net_lock,
    _ns_run,
    _run,
    _v6_prefix,
)
from tests.cluster.nodes import CNI_BIN, CNI_PLUGINS, NodeProcesses, kube_proxy_config_conf
from tests.controlplane.build import Binaries, build
from tests.controlplane.plane import ControlPlane
from tests.support.processes import Server, tail

SERVICE_CIDRS = ("10.96.0.0/16", "fd00:10:96::/108")


API_PORT = 6443


class Cluster(ClusterDns, NodeProcesses):
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
            self._attach(member)
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

    def _attach(self, member: Member) -> None:
        """Create the member's namespace, its ``eth0`` on the segment's bridge, its
        addresses (and ExternalIPs, when it has them) and loopback."""
        seg = f"{self.id}-seg"
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

    def add_member(self, name: str, host_octet: int) -> Member:
        """One more namespace ``<id>-<name>`` on the running cluster's segment, at
        ``<seg>.<host_octet>`` and ``<seg6>::<host_octet>`` (e.g. a router a test puts in
        front of a node: tests/cluster/nat.py). :meth:`stop` removes it with the others;
        :meth:`remove_member` removes it before. Raises :class:`ClusterError` when a step
        fails (the name or the address taken)."""
        member = Member(self.id, name, host_octet, self.v4_prefix)
        self._attach(member)
        return member

    def remove_member(self, member: Member) -> None:
        """Delete the namespace of a member :meth:`add_member` made (its veth pair goes
        with it); nothing happens when it is already gone."""
        if member.netns in self._netns:
            self._netns.remove(member.netns)
            _run("ip", "netns", "delete", member.netns)

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
        self.set_node_addresses(node)
        taints = [
            t
            for t in body["spec"].get("taints", [])
            if t["key"] != "node.cloudprovider.kubernetes.io/uninitialized"
        ]
        self._json_patch(f"/api/v1/nodes/{node.name}", "/spec/taints", taints)

    def set_node_addresses(self, node: Node) -> None:
        """Write the Node's ``status.addresses`` from ``node``: InternalIPs ``ipv4``/``ipv6``,
        ExternalIPs ``external_ipv4``/``external_ipv6`` (those set), Hostname; what a
        cloud-controller-manager reports. Only the last node's kubelet
        (``--cloud-provider=external``) leaves them as written: kubelet sets a node's
        addresses itself unless an external provider already did
        (``pkg/kubelet/nodestatus``). Raises :class:`ClusterError` when the PATCH fails."""
        addresses = [{"type": "InternalIP", "address": node.ipv4},
                     {"type": "InternalIP", "address": node.ipv6}]  # fmt: skip
        for external in (node.external_ipv4, node.external_ipv6):
            if external:
                addresses.append({"type": "ExternalIP", "address": external})
        addresses.append({"type": "Hostname", "address": node.name})
        self._json_patch(f"/api/v1/nodes/{node.name}/status", "/status/addresses", addresses)

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

    def _create(self, collection: str, body: dict[str, Any]) -> None:
        """POST ``body`` to ``collection`` as admin; raises :class:`ClusterError` unless 201."""
        assert self.plane is not None
        status, reply = self.plane.request("POST", collection, body)
        if status != 201:
            raise ClusterError(f"POST {collection} {body['metadata']['name']}: {status} {reply}")

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
