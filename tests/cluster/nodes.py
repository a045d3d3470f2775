"""The processes of the cluster's nodes (README.md here, "Topology"): containerd + runc,
kubelet and kube-proxy in each node's namespace, the CNI configuration, the images
imported, the containers they run."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.cluster.cleanup import (
    SHIM_SOCKETS,
    _cgroup_pids,
    _kill_until_gone,
    _make_cgroups,
    _processes_mentioning,
)
from tests.cluster.dns import CLUSTER_DOMAIN, DNS_SERVICE_IP
from tests.cluster.images import Images
from tests.cluster.netns import POD_CIDRS, ClusterError, Member, Node, _in_ns, _run
from tests.controlplane.build import Binaries
from tests.support.processes import Server, tail

CNI_BIN = Path("/usr/lib/cni")


CNI_PLUGINS = ("bridge", "host-local", "portmap")  # the chain every node's CNI config runs


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


class NodeProcesses:
    """The processes of a :class:`~tests.cluster.cluster.Cluster`'s nodes: containerd,
    kubelet, kube-proxy, and the containers they run."""

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
