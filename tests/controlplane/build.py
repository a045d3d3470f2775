"""Build (or find in the cache) the kube-apiserver and etcd binaries the real-API tier runs.

Standard library only, so ``python3 -m tests.controlplane build`` works before any
virtualenv exists (``.ci/run`` runs it first).

The binaries are built from small Go modules in ``tests/controlplane/go/``:
``kube/`` (``k8s.io/kubernetes`` with every staging module mapped to its published tag),
``etcd/`` (``go.etcd.io/etcd/server/v3``) and, for tests/cluster's cluster DNS,
``coredns/`` (``github.com/coredns/coredns`` with a main of ours; a module and a cache
directory of its own, so it moves none of the Kubernetes binaries' dependencies). Their
versions are read from those ``go.mod`` files; nothing else pins them. Binaries land in a
cache directory outside the repository, keyed by the versions and a hash of the modules'
``go.mod``/``go.sum`` and of the build recipe below, so they are rebuilt only when one of
those changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TypeVar

GO_DIR = Path(__file__).resolve().parent / "go"
KUBE_MODULE = GO_DIR / "kube"
ETCD_MODULE = GO_DIR / "etcd"
HELM_MODULE = GO_DIR / "helm"
PROMETHEUS_MODULE = GO_DIR / "prometheus"
KUBE_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
# Built together with kube-apiserver by one `go build -o DIR/ ...` (they share most
# packages): the rest of a cluster, for tests/cluster (kubelet, kube-proxy on each node).
CLUSTER_COMMANDS = ("kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
KUBE_PACKAGES = (KUBE_PACKAGE, *(f"k8s.io/kubernetes/cmd/{name}" for name in CLUSTER_COMMANDS))
# CoreDNS for tests/cluster's cluster DNS: a main of ours (go/coredns/main.go: only the
# plugins its Corefile uses) in a module of its own (go/coredns/go.mod says why), built
# into a cache directory of its own (coredns-<version>-<hash>).
COREDNS_MODULE = GO_DIR / "coredns"
COREDNS_PACKAGE = "nodeipamlb.test/controlplane/coredns"
COREDNS_MAIN = "main.go"  # in COREDNS_MODULE; hashed into its cache key
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"  # the module's root package is etcd's main
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
PROMETHEUS_PACKAGES = (
    "github.com/prometheus/prometheus/cmd/prometheus",
    "github.com/prometheus/prometheus/cmd/promtool",
)
PROMETHEUS_TAGS = "remove_all_sd"
"""Prometheus' own build tag that leaves out every service discovery but file, HTTP and
static (its README, "Service discovery plugins"): the tests scrape static targets, and the
cloud SDKs would triple the build. No ``builtinassets``: the web UI is not embedded (the
HTTP API, all the tests use, is unaffected)."""

CACHE_ENV = "NODE_IPAM_CONTROL_PLANE_CACHE"
STANDARD_GO = "/usr/local/go/bin/go"
STAMP = "build-info.json"
# Bump when the flags below change in a way that should force a rebuild.
RECIPE = "2"
# Static, stripped, reproducible-path binaries: no cgo toolchain needed, a faster link.
GO_BUILD_FLAGS = ["-trimpath"]
BASE_LDFLAGS = ["-s", "-w"]

Progress = Callable[[str], None]
T = TypeVar("T")


class ControlPlaneUnavailable(RuntimeError):
    """The binaries are not cached and cannot be built here (the message says why)."""


class GoNotFound(ControlPlaneUnavailable):
    """No ``go`` command on PATH (nor in ``$NODE_IPAM_GO``)."""


class BuildFailed(ControlPlaneUnavailable):
    """``go build`` failed; the message carries the tail of its output."""


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Paths of a complete, cached build and the versions it was built from (the four
    cluster commands, from the same ``k8s.io/kubernetes`` build as kube-apiserver, and
    CoreDNS, from the same ``go build``, are used by tests/cluster only)."""

    directory: Path
    kube_apiserver: Path
    etcd: Path
    kubernetes_version: str
    etcd_version: str
    kube_controller_manager: Path
    kube_scheduler: Path
    kubelet: Path
    kube_proxy: Path
    coredns: Path
    coredns_version: str


def _require_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"{go_mod}: no requirement on {module}")
    return match.group(1)


def kubernetes_version() -> str:
    """The pinned ``k8s.io/kubernetes`` version, e.g. ``v1.35.4``."""
    return _require_version(KUBE_MODULE / "go.mod", "k8s.io/kubernetes")


def coredns_version() -> str:
    """The pinned ``github.com/coredns/coredns`` version, e.g. ``v1.15.0``."""
    return _require_version(COREDNS_MODULE / "go.mod", "github.com/coredns/coredns")


def coredns_cache_key() -> str:
    """``coredns-<version>-<hash>``; the hash covers its module's go.mod, go.sum, main.go
    and the build flags."""
    digest = hashlib.sha256(f"recipe={RECIPE} {GO_BUILD_FLAGS} {BASE_LDFLAGS}\n".encode())
    for name in ("go.mod", "go.sum", COREDNS_MAIN):
        digest.update(f"coredns/{name}\n".encode())
        digest.update((COREDNS_MODULE / name).read_bytes())
    return f"coredns-{coredns_version()}-{digest.hexdigest()[:12]}"


def find_coredns() -> Path | None:
    """The cached CoreDNS binary for the pinned version, or ``None``."""
    return find_tool(coredns_cache_key(), "coredns")


def etcd_version() -> str:
    """The pinned ``go.etcd.io/etcd/server/v3`` version, e.g. ``v3.6.16``."""
    return _require_version(ETCD_MODULE / "go.mod", "go.etcd.io/etcd/server/v3")


def helm_version() -> str:
    """The pinned ``helm.sh/helm/v3`` version, e.g. ``v3.19.5``."""
    return _require_version(HELM_MODULE / "go.mod", "helm.sh/helm/v3")


def helm_ldflags(version: str) -> list[str]:
    """The ``-X`` flags of helm's own Makefile (v3.19): its version, and the Kubernetes
    version that ``helm lint``/``template`` assume (``.Capabilities.KubeVersion``): the
    client-go minor + 1 major, as the Makefile computes it (v0.34.2 -> 1.34)."""
    client_go = _require_version(HELM_MODULE / "go.mod", "k8s.io/client-go")
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", client_go)
    if match is None:
        raise RuntimeError(f"unexpected k8s.io/client-go version {client_go!r}")
    major, minor = str(int(match.group(1)) + 1), match.group(2)
    flags = [
        f"-X helm.sh/helm/v3/internal/version.version={version}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor={major}", f"-X {pkg}.k8sVersionMinor={minor}"]
    return flags


def kube_ldflags(version: str) -> list[str]:
    """``-X`` flags that give the binary its real version (``/version`` says v0.0.0 without)."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", version)
    if match is None:
        raise RuntimeError(f"unexpected kubernetes version {version!r}")
    major, minor = match.groups()
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return flags


def cache_root() -> Path:
    """``$NODE_IPAM_CONTROL_PLANE_CACHE``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)
    ``/node-ipam-lb/control-plane``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "node-ipam-lb" / "control-plane"


def cache_key() -> str:
    """``<k8s version>-<etcd version>-<hash>``; the hash covers both modules' go.mod and
    go.sum and the build recipe, so any change to them selects a fresh directory."""
    digest = hashlib.sha256(f"recipe={RECIPE} {GO_BUILD_FLAGS} {BASE_LDFLAGS}\n".encode())
    for module in (KUBE_MODULE, ETCD_MODULE):
        for name in ("go.mod", "go.sum"):
            digest.update(f"{module.name}/{name}\n".encode())
            digest.update((module / name).read_bytes())
    return f"{kubernetes_version()}-{etcd_version()}-{digest.hexdigest()[:12]}"


def cache_dir() -> Path:
    """Directory holding the binaries for the pinned versions (may not exist yet)."""
    return cache_root() / cache_key()


def tool_cache_key(
    name: str, version: str, module: Path, files: tuple[str, ...] = ("go.mod", "go.sum")
) -> str:
    """``<name>-<version>-<hash>``: the cache key of one tool built from its own Go module
    (helm, the Cilium peer), so bumping it rebuilds neither the control plane nor another
    tool; the hash covers ``files`` of ``module`` (a main.go of ours too, where there is
    one) and the build recipe."""
    digest = hashlib.sha256(f"recipe={RECIPE} {GO_BUILD_FLAGS} {BASE_LDFLAGS}\n".encode())
    for file in files:
        digest.update(f"{module.name}/{file}\n".encode())
        digest.update((module / file).read_bytes())
    return f"{name}-{version}-{digest.hexdigest()[:12]}"


def find_tool(key: str, binary: str) -> Path | None:
    """``<cache>/<key>/<binary>`` when it is built, else ``None`` (a directory without its
    ``build-info.json`` stamp does not count)."""
    directory = cache_root() / key
    path = directory / binary
    if (directory / STAMP).is_file() and os.access(path, os.X_OK):
        return path
    return None


def helm_cache_key() -> str:
    """``helm-<version>-<hash>`` (:func:`tool_cache_key` of ``go/helm/``)."""
    return tool_cache_key("helm", helm_version(), HELM_MODULE)


def find_helm() -> Path | None:
    """The cached ``helm`` binary for the pinned version, or ``None`` when it is not built."""
    return find_tool(helm_cache_key(), "helm")


def find_binaries() -> Binaries | None:
    """The cached build for the pinned versions, or ``None`` when it is not complete."""
    directory = cache_dir()
    stamp = directory / STAMP
    kube, etcd = directory / "kube-apiserver", directory / "etcd"
    cluster = [directory / name for name in CLUSTER_COMMANDS]
    coredns = find_coredns()
    paths = (kube, etcd, *cluster)
    if coredns is None or not (stamp.is_file() and all(os.access(path, os.X_OK) for path in paths)):
        return None
    info = json.loads(stamp.read_text())
    return Binaries(
        directory, kube, etcd, info["kubernetes"], info["etcd"], *cluster, coredns,
        coredns_version(),
    )  # fmt: skip


def _kube_built(directory: Path) -> bool:
    """Whether ``directory`` holds a finished kube-apiserver/etcd/cluster build."""
    paths = [directory / name for name in ("kube-apiserver", "etcd", *CLUSTER_COMMANDS)]
    return (directory / STAMP).is_file() and all(os.access(p, os.X_OK) for p in paths)


def _require_go(target: Path) -> str:
    go = find_go()
    if go is None:
        raise GoNotFound(
            f"go not found on PATH; it is needed once to build the binaries into {target}"
        )
    return go


def find_go() -> str | None:
    """Path of the ``go`` command, or ``None``: ``$NODE_IPAM_GO`` if set, else ``go`` on
    PATH, else the standard install location ``/usr/local/go/bin/go``."""
    explicit = os.environ.get("NODE_IPAM_GO")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("go")
    if found is None and os.access(STANDARD_GO, os.X_OK):
        found = STANDARD_GO
    return found


def go_env() -> dict[str, str]:
    """Environment for every ``go`` command we run: module mode, committed go.sum only,
    no cgo, no toolchain switching (``GOTOOLCHAIN=local``), no go.work from a parent dir."""
    env = dict(os.environ)
    env.update(
        CGO_ENABLED="0",
        GO111MODULE="on",
        GOTOOLCHAIN="local",
        GOWORK="off",
        GOFLAGS="-mod=readonly -buildvcs=false",
    )
    return env


def _stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _count_deps(go: str, module: Path, packages: Sequence[str], tags: list[str]) -> int:
    result = subprocess.run(
        [go, "list", *tags, "-deps", *packages],
        cwd=module,
        env=go_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return len(result.stdout.split()) if result.returncode == 0 else 0


def _go_build(
    go: str,
    *,
    name: str,
    module: Path,
    package: str | Sequence[str],
    output: Path,
    ldflags: list[str],
    log: IO[str],
    progress: Progress,
    interval: float,
    tags: str = "",
) -> None:
    """Run ``go build -v`` and report compiled-package counts every ``interval`` seconds.

    Several packages (a sequence) are built by one ``go build -o DIR/ pkg1 pkg2`` (``output``
    is then the directory), so they share their compiled dependencies."""
    packages = [package] if isinstance(package, str) else list(package)
    target = str(output) if len(packages) == 1 else f"{output}/"
    tag_flags = ["-tags", tags] if tags else []
    listing = time.monotonic()
    progress(f"[{name}] listing packages (downloads missing modules first)")
    total = _count_deps(go, module, packages, tag_flags)
    progress(f"[{name}] {total} packages, listed in {_format_elapsed(time.monotonic() - listing)}")
    cmd = [
        go,
        "build",
        "-v",
        *GO_BUILD_FLAGS,
        *tag_flags,
        "-ldflags",
        " ".join(BASE_LDFLAGS + ldflags),
        "-o",
        target,
        *packages,
    ]
    log.write(f"$ (cd {module} && {' '.join(cmd)})\n")
    log.flush()
    start = time.monotonic()
    counts = {"packages": 0, "downloads": 0}
    tail: list[str] = []
    done = threading.Event()

    def report(final: bool = False) -> None:
        of_total = f" of {total}" if total else ""
        downloads = f", {counts['downloads']} modules downloaded" if counts["downloads"] else ""
        elapsed = _format_elapsed(time.monotonic() - start)
        if final:
            progress(
                f"[{name}] done in {elapsed}: compiled {counts['packages']}{of_total} "
                f"packages (the rest came from the Go build cache){downloads}"
            )
        else:
            progress(
                f"[{name}] {elapsed}: compiled {counts['packages']}{of_total} packages{downloads}"
            )

    def ticker() -> None:
        while not done.wait(interval):
            report()

    thread = threading.Thread(target=ticker, name=f"{name}-progress", daemon=True)
    with subprocess.Popen(
        cmd,
        cwd=module,
        env=go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        thread.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                stripped = line.strip()
                if stripped.startswith("go: downloading"):
                    counts["downloads"] += 1
                elif stripped and " " not in stripped and not stripped.startswith("#"):
                    counts["packages"] += 1  # `go build -v` names each package it compiles
                tail = [*tail[-39:], line.rstrip()]
            returncode = proc.wait()
        finally:
            done.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.flush()
    if returncode != 0:
        raise BuildFailed(
            f"go build of {name} failed (exit {returncode}); last lines:\n" + "\n".join(tail)
        )
    report(final=True)


def binary_version(path: Path, *args: str) -> str:
    """First line of ``<binary> --version`` (kube-apiserver: ``Kubernetes v1.35.4``;
    etcd: ``etcd Version: 3.6.16``), or of ``<binary> ARGS`` (helm: ``version --short``,
    ``v3.19.5``)."""
    result = subprocess.run(
        [str(path), *(args or ("--version",))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0].strip() if lines else f"(no output, exit {result.returncode})"


@contextlib.contextmanager
def _lock(root: Path, key: str) -> Iterator[None]:
    """Serialize builds of one key across processes (two pytest runs, CI and a shell)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(
    staging: Path, directory: Path, *, go: str, start: float, versions: dict[str, str]
) -> float:
    """Stamp a finished build in ``staging`` (``versions``, go version, recipe, build time)
    and move it to ``directory``, replacing what was there; returns the seconds since
    ``start`` (``time.monotonic``)."""
    elapsed = time.monotonic() - start
    go_version = subprocess.run(
        [go, "version"], capture_output=True, text=True, env=go_env(), check=False
    ).stdout.strip()
    info = {
        **versions,
        "go": go_version,
        "recipe": RECIPE,
        "build_seconds": round(elapsed, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / STAMP).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    return elapsed


def _build_tool(
    *,
    label: str,
    key: str,
    find: Callable[[], T | None],
    versions: dict[str, str],
    run: Callable[[str, Path, IO[str]], None],
    progress: Progress,
) -> T:
    """The build of one cached tool (helm; prometheus and promtool): return ``find()``,
    else, under the key's lock, build into ``<cache>/.<key>.partial`` with ``run(go,
    staging, log)``, stamp it with ``versions`` and move it to ``<cache>/<key>``. Output
    in ``<cache>/<key>.build.log``. Raises :class:`GoNotFound` or :class:`BuildFailed`."""
    found = find()
    if found is not None:
        return found
    root = cache_root()
    with _lock(root, key):
        found = find()
        if found is not None:
            return found
        go = find_go()
        if go is None:
            raise GoNotFound(
                f"go not found on PATH; it is needed once to build {label} into {root / key}"
            )
        directory, staging = root / key, root / f".{key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log_path = root / f"{key}.build.log"
        progress(f"building {label} into {directory}; full go output: {log_path}")
        start = time.monotonic()
        with open(log_path, "w") as log:
            run(go, staging, log)
        elapsed = _install(staging, directory, go=go, start=start, versions=versions)
        progress(f"built {label} in {_format_elapsed(elapsed)}")
    found = find()
    assert found is not None
    return found


def build_helm(*, progress: Progress = _stderr_progress, interval: float = 15.0) -> Path:
    """Return the cached ``helm`` binary, building it first when it is missing
    (:func:`build_tool`: same flags, locking and staging as :func:`build`; output in
    ``<cache>/<key>.build.log``).

    Raises :class:`GoNotFound` or :class:`BuildFailed` as :func:`build` does.
    """
    version = helm_version()
    return build_tool(
        name="helm",
        version=version,
        key=helm_cache_key(),
        module=HELM_MODULE,
        package=HELM_PACKAGE,
        ldflags=helm_ldflags(version),
        progress=progress,
        interval=interval,
    )


def prometheus_version() -> str:
    """The pinned ``github.com/prometheus/prometheus`` module version, e.g. ``v0.316.0``
    (Prometheus 3.16.0: module v0.3MM.P is release v3.MM.P)."""
    return _require_version(PROMETHEUS_MODULE / "go.mod", "github.com/prometheus/prometheus")


def prometheus_release(module_version: str) -> str:
    """The release a module version is (``v0.316.0`` -> ``3.16.0``), as Prometheus' own
    ``VERSION`` file says it."""
    match = re.fullmatch(r"v0\.3(\d\d)\.(\d+)", module_version)
    if match is None:
        raise RuntimeError(f"unexpected prometheus module version {module_version!r}")
    return f"3.{int(match.group(1))}.{match.group(2)}"


def prometheus_ldflags(module_version: str) -> list[str]:
    """The ``-X`` flags of Prometheus' ``.promu.yml`` that name the version (``prometheus
    --version`` and ``prometheus_build_info`` say it instead of an empty string)."""
    pkg = "github.com/prometheus/common/version"
    return [
        f"-X {pkg}.Version={prometheus_release(module_version)}",
        f"-X {pkg}.Branch=HEAD",
        f"-X {pkg}.BuildUser=node-ipam-lb-tests",
    ]


def prometheus_cache_key() -> str:
    """``prometheus-<version>-<hash>``: its own key, like :func:`helm_cache_key` (the hash
    covers the module's go.mod and go.sum, the tags and the build recipe)."""
    digest = hashlib.sha256(
        f"recipe={RECIPE} {GO_BUILD_FLAGS} {BASE_LDFLAGS} tags={PROMETHEUS_TAGS}\n".encode()
    )
    for name in ("go.mod", "go.sum"):
        digest.update(f"prometheus/{name}\n".encode())
        digest.update((PROMETHEUS_MODULE / name).read_bytes())
    return f"prometheus-{prometheus_version()}-{digest.hexdigest()[:12]}"


@dataclasses.dataclass(frozen=True)
class PrometheusBinaries:
    """The cached Prometheus server and promtool of the pinned version."""

    directory: Path
    prometheus: Path
    promtool: Path
    version: str


def find_prometheus() -> PrometheusBinaries | None:
    """The cached ``prometheus`` and ``promtool`` for the pinned version, or ``None`` when
    they are not built (a directory without its ``build-info.json`` stamp does not count)."""
    directory = cache_root() / prometheus_cache_key()
    server, promtool = directory / "prometheus", directory / "promtool"
    if (directory / STAMP).is_file() and all(os.access(p, os.X_OK) for p in (server, promtool)):
        return PrometheusBinaries(directory, server, promtool, prometheus_version())
    return None


def build_prometheus(
    *, progress: Progress = _stderr_progress, interval: float = 15.0
) -> PrometheusBinaries:
    """Return the cached Prometheus server and promtool, building both first (one ``go
    build -o DIR/``, tags :data:`PROMETHEUS_TAGS`) when they are missing; same flags,
    locking and staging as :func:`build`, output in ``<cache>/<key>.build.log``.

    Raises :class:`GoNotFound` or :class:`BuildFailed` as :func:`build` does.
    """
    version = prometheus_version()

    def run(go: str, staging: Path, log: IO[str]) -> None:
        _go_build(
            go,
            name="prometheus",
            module=PROMETHEUS_MODULE,
            package=PROMETHEUS_PACKAGES,
            output=staging,
            ldflags=prometheus_ldflags(version),
            log=log,
            progress=progress,
            interval=interval,
            tags=PROMETHEUS_TAGS,
        )

    return _build_tool(
        label=f"prometheus and promtool {version}",
        key=prometheus_cache_key(),
        find=find_prometheus,
        versions={"prometheus": version},
        run=run,
        progress=progress,
    )


def build_tool(
    *,
    name: str,
    version: str,
    key: str,
    module: Path,
    package: str,
    ldflags: list[str],
    progress: Progress = _stderr_progress,
    interval: float = 15.0,
) -> Path:
    """Return the cached binary ``<cache>/<key>/<name>``, building ``package`` of Go
    ``module`` into it first when it is missing (:func:`_build_tool`: same flags, locking,
    staging and stamp as :func:`build`; full output in ``<cache>/<key>.build.log``).
    ``version`` goes into the stamp and the progress lines.

    Raises :class:`GoNotFound` or :class:`BuildFailed` as :func:`build` does.
    """

    def run(go: str, staging: Path, log: IO[str]) -> None:
        _go_build(
            go,
            name=name,
            module=module,
            package=package,
            output=staging / name,
            ldflags=ldflags,
            log=log,
            progress=progress,
            interval=interval,
        )

    return _build_tool(
        label=f"{name} {version}",
        key=key,
        find=lambda: find_tool(key, name),
        versions={name: version},
        run=run,
        progress=progress,
    )


def build(
    *,
    progress: Progress = _stderr_progress,
    log_path: Path | None = None,
    interval: float = 15.0,
) -> Binaries:
    """Return the cached binaries, building them first when they are missing.

    ``progress`` receives human-readable status lines (default: stderr); the full
    ``go build -v`` output goes to ``log_path`` (default ``<cache>/<key>.build.log``).
    Raises :class:`GoNotFound` when a build is needed and there is no ``go``, and
    :class:`BuildFailed` when ``go build`` fails. Safe to call concurrently.
    """
    found = find_binaries()
    if found is not None:
        return found
    root, key = cache_root(), cache_key()
    with _lock(root, key):
        if not _kube_built(root / key):  # another process may have finished meanwhile
            go = _require_go(root / key)
            k8s, etcd = kubernetes_version(), etcd_version()
            directory = root / key
            staging = root / f".{key}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            kube_log = log_path or root / f"{key}.build.log"
            progress(
                f"building kube-apiserver ({', '.join(CLUSTER_COMMANDS)}) {k8s} and etcd {etcd} "
                f"into {directory}"
            )
            progress(f"full go output: {kube_log}")
            start = time.monotonic()
            with open(kube_log, "w") as log:
                _go_build(
                    go,
                    name="kubernetes",
                    module=KUBE_MODULE,
                    package=KUBE_PACKAGES,
                    output=staging,
                    ldflags=kube_ldflags(k8s),
                    log=log,
                    progress=progress,
                    interval=interval,
                )
                _go_build(
                    go,
                    name="etcd",
                    module=ETCD_MODULE,
                    package=ETCD_PACKAGE,
                    output=staging / "etcd",
                    ldflags=[],
                    log=log,
                    progress=progress,
                    interval=interval,
                )
            versions = {"kubernetes": k8s, "etcd": etcd}
            elapsed = _install(staging, directory, go=go, start=start, versions=versions)
            progress(f"built in {_format_elapsed(elapsed)}")
    build_tool(
        name="coredns",
        version=coredns_version(),
        key=coredns_cache_key(),
        module=COREDNS_MODULE,
        package=COREDNS_PACKAGE,
        ldflags=[],
        progress=progress,
        interval=interval,
    )
    found = find_binaries()
    assert found is not None
    return found
