"""What a cluster leaves and how it is removed (README.md here, "Clean-up"): cgroups,
mounts, processes, CNI cache entries; :func:`leftovers` of a run, the clusters whose owner
is gone (:func:`abandoned`) and :func:`purge_abandoned`."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.cluster.netns import NETNS_DIR, PREFIX, ClusterError, _link_exists, _run

CGROUP_ROOT = Path("/sys/fs/cgroup")


CNI_CACHE = Path("/var/lib/cni/results")


CONTAINER_LOGS = Path("/var/log/containers")


SHIM_SOCKETS = Path("/run/containerd/s")


MNT_DETACH = 2


OWNER_FILE = "owner.pid"  # in the work dir: the process that made the cluster


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
