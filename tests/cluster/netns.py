"""The cluster's network (README.md here, "Topology"): commands run in the machine's and
in a network namespace, the members of the segment (:class:`Member`, :class:`Node`) and
their addresses, the lock under which a cluster takes a free /24, pod routes, and an
``nft`` table held in one of the run's namespaces (:func:`nft_table`: faults.py, nat.py)."""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import ipaddress
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.controlplane.build import cache_root
from tests.support.processes import Server

PREFIX = "nilb"


NETNS_DIR = Path("/run/netns")


POD_CIDRS = ("10.244.0.0/16", "fd00:10:244::/56")


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


@contextlib.contextmanager
def nft_table(netns: Path, table: str, chains: str) -> Iterator[None]:
    """Add ``table inet <table> { <chains> }`` in the network namespace at ``netns`` (a
    named namespace's file or ``/proc/<pid>/ns/net``: one this run created, never the
    machine's) while the block runs; deleted on exit even when the block fails. Raises
    ``RuntimeError`` with nft's message and the script when nft refuses it."""
    enter = ["nsenter", f"--net={netns}", "--", "nft"]
    script = f"table inet {table} {{\n{chains}\n}}\n"
    result = subprocess.run(
        [*enter, "-f", "-"], input=script, capture_output=True, text=True, timeout=30
    )
    if result.returncode != 0:
        raise RuntimeError(f"nft in {netns}: {result.stderr.strip()}\n{script}")
    try:
        yield
    finally:
        subprocess.run(
            [*enter, "delete", "table", "inet", table],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
