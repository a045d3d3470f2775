"""The container images tests/cluster imports into every node's containerd (no registry).

Standard library only, so ``python3 -m tests.controlplane build`` can make them before any
virtualenv exists. Three OCI image archives, each cached outside the repository under
:func:`tests.controlplane.build.cache_root` and keyed by a hash of what goes into it:

- ``pause`` (the pod sandbox, containerd's ``sandbox_image``) and ``backend`` (the HTTP
  server behind the test Services): static Go programs from ``go/images/`` (standard
  library only), each packed as a one-layer image by :func:`write_oci_archive`;
- the project's own image, built by ``deploy/image/build-offline.sh`` (debootstrap +
  buildah, as deploy/README.md documents for machines without a registry) and written
  with ``buildah push … oci-archive:…`` under the name the chart's default values
  resolve to: ``node-ipam-lb:<version>``, which containerd normalizes to
  ``docker.io/library/node-ipam-lb:<version>``.

Each directory gets ``build-info.json`` last; a directory without it is not used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.controlplane.build import (
    BASE_LDFLAGS,
    GO_BUILD_FLAGS,
    STAMP,
    BuildFailed,
    GoNotFound,
    Progress,
    _format_elapsed,
    _install,
    _lock,
    _stderr_progress,
    cache_root,
    find_go,
    go_env,
)

ROOT = Path(__file__).resolve().parents[2]
IMAGES_MODULE = Path(__file__).resolve().parent / "go" / "images"
RECIPE = "1"
PAUSE_IMAGE = "localhost/node-ipam-lb-test/pause:1"
BACKEND_IMAGE = "localhost/node-ipam-lb-test/backend:1"
# What goes into the project's image (the Dockerfile's COPY lines and the script itself),
# except README.md: it only becomes the wheel's long description (package metadata), and
# hashing it would rebuild the image (minutes) on every documentation edit.
PRODUCT_INPUTS = (
    "Dockerfile",
    "pyproject.toml",
    "app",
    "deploy/image/requirements.lock",
    "deploy/image/build-requirements.lock",
    "deploy/image/build-offline.sh",
    "deploy/image/ro-run.sh",
)
LAYER = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


@dataclasses.dataclass(frozen=True)
class Images:
    """OCI archives (``ctr images import`` input) and the references they carry."""

    pause: Path
    backend: Path
    product: Path
    pause_ref: str
    backend_ref: str
    product_ref: str
    """``docker.io/library/node-ipam-lb:<version>``: what kubelet asks containerd for when
    the chart's ``image.repository`` is ``node-ipam-lb`` and the tag its appVersion."""

    def archives(self) -> list[tuple[Path, str]]:
        """``(archive, reference)`` for each image."""
        return [
            (self.pause, self.pause_ref),
            (self.backend, self.backend_ref),
            (self.product, self.product_ref),
        ]


def product_version() -> str:
    """``app/__init__.py``'s ``__version__`` (the image tag and the chart's appVersion)."""
    for line in (ROOT / "app" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("app/__init__.py: no __version__")


def product_ref() -> str:
    """The fully qualified reference containerd stores the project's image under."""
    return f"docker.io/library/node-ipam-lb:{product_version()}"


def _hash_paths(digest: hashlib._Hash, paths: Iterable[Path]) -> None:
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(f"{file.relative_to(ROOT)}\n".encode())
            digest.update(file.read_bytes())


def small_images_key() -> str:
    """``cluster-images-<hash>``: the Go module's files and this recipe."""
    digest = hashlib.sha256(f"recipe={RECIPE} {GO_BUILD_FLAGS} {BASE_LDFLAGS}\n".encode())
    _hash_paths(digest, [IMAGES_MODULE])
    return f"cluster-images-{digest.hexdigest()[:12]}"


def product_image_key() -> str:
    """``node-ipam-lb-image-<version>-<hash>``: every file the image is built from."""
    digest = hashlib.sha256(f"recipe={RECIPE}\n".encode())
    _hash_paths(digest, [ROOT / name for name in PRODUCT_INPUTS])
    return f"node-ipam-lb-image-{product_version()}-{digest.hexdigest()[:12]}"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_oci_archive(
    path: Path, *, binary: Path, name: str, reference: str, user: str = "65532:65532"
) -> None:
    """Write an OCI image-layout tar at ``path``: one uncompressed layer holding
    ``binary`` as ``/<name>`` (mode 0755, owner root, mtime 0), a config whose entrypoint
    is ``/<name>`` running as ``user``, the manifest, and ``index.json`` naming it
    ``reference`` (annotations ``io.containerd.image.name`` and
    ``org.opencontainers.image.ref.name``, which ``ctr images import`` reads). Layout per
    the OCI image spec v1.1 (its image layout, manifest and config chapters)."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        data = binary.read_bytes()
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        layer.addfile(info, io.BytesIO(data))
    layer_bytes = layer_buf.getvalue()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [f"/{name}"], "User": user, "Env": ["PATH=/"]},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer_bytes)]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": _sha(config), "size": len(config)},
            "layers": [{"mediaType": LAYER, "digest": _sha(layer_bytes), "size": len(layer_bytes)}],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": reference,
                        "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (layer_bytes, config, manifest):
        files[f"blobs/sha256/{_sha(blob).split(':', 1)[1]}"] = blob
    with tarfile.open(path, mode="w") as archive:
        for dirname in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            archive.addfile(info)
        for filename, content in files.items():
            info = tarfile.TarInfo(filename)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            archive.addfile(info, io.BytesIO(content))


def _complete(directory: Path, *names: str) -> bool:
    return (directory / STAMP).is_file() and all((directory / n).is_file() for n in names)


def find_images() -> Images | None:
    """The cached archives, or ``None`` when one of them is not built."""
    small = cache_root() / small_images_key()
    product = cache_root() / product_image_key()
    if not (_complete(small, "pause.tar", "backend.tar") and _complete(product, "image.tar")):
        return None
    return Images(
        small / "pause.tar",
        small / "backend.tar",
        product / "image.tar",
        PAUSE_IMAGE,
        BACKEND_IMAGE,
        product_ref(),
    )


def _build_small(progress: Progress) -> None:
    root, key = cache_root(), small_images_key()
    directory = root / key
    if _complete(directory, "pause.tar", "backend.tar"):
        return
    with _lock(root, key):
        if _complete(directory, "pause.tar", "backend.tar"):
            return
        go = find_go()
        if go is None:
            raise GoNotFound("go not found on PATH; it is needed once to build the test images")
        staging = root / f".{key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        start = time.monotonic()
        cmd = [
            go,
            "build",
            *GO_BUILD_FLAGS,
            "-ldflags",
            " ".join(BASE_LDFLAGS),
            "-o",
            f"{staging / 'bin'}/",
            "./pause",
            "./backend",
        ]
        result = subprocess.run(
            cmd, cwd=IMAGES_MODULE, env=go_env(), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise BuildFailed(f"go build of the test images failed:\n{result.stderr[-4000:]}")
        write_oci_archive(
            staging / "pause.tar", binary=staging / "bin" / "pause", name="pause",
            reference=PAUSE_IMAGE,
        )  # fmt: skip
        write_oci_archive(
            staging / "backend.tar", binary=staging / "bin" / "backend", name="backend",
            reference=BACKEND_IMAGE,
        )  # fmt: skip
        shutil.rmtree(staging / "bin")
        elapsed = _install(staging, directory, go=go, start=start, versions={"images": key})
        progress(f"built the pause and backend images in {_format_elapsed(elapsed)}")


@contextlib.contextmanager
def _removing(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _build_product(progress: Progress) -> None:
    root, key = cache_root(), product_image_key()
    directory = root / key
    if _complete(directory, "image.tar"):
        return
    with _lock(root, key):
        if _complete(directory, "image.tar"):
            return
        missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
        if missing or os.geteuid() != 0:
            raise BuildFailed(
                "the project's image needs root and Debian's buildah and debootstrap "
                f"(missing: {', '.join(missing) or 'root'}); .ci/run installs them"
            )
        staging = root / f".{key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log_path = root / f"{key}.build.log"
        env = dict(os.environ)
        # A TLS-intercepting proxy to PyPI: the build-offline.sh hook for its CA.
        bundle = env.get("PIP_CERT") or env.get("SSL_CERT_FILE")
        if bundle and Path(bundle).is_file() and "EXTRA_CA_BUNDLE" not in env:
            env["EXTRA_CA_BUNDLE"] = bundle
        progress(f"building the project's image (deploy/image/build-offline.sh); log {log_path}")
        start = time.monotonic()
        version = product_version()
        # The script's own checks run the image as uid 65532: its work dir must be
        # readable by that user (the cache root under /root is not).
        work = Path(tempfile.mkdtemp(prefix="node-ipam-lb-image-"))
        work.chmod(0o755)
        with open(log_path, "w") as log, _removing(work):
            steps = [
                [str(ROOT / "deploy/image/build-offline.sh"), str(work)],
                [
                    "buildah",
                    "--storage-driver",
                    "vfs",
                    "push",
                    f"localhost/node-ipam-lb:{version}",
                    f"oci-archive:{staging / 'image.tar'}:{product_ref()}",
                ],
            ]
            for cmd in steps:
                log.write(f"$ {' '.join(cmd)}\n")
                log.flush()
                code = subprocess.run(
                    cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False
                ).returncode
                if code != 0:
                    raise BuildFailed(
                        f"{cmd[0]} failed (exit {code}); log {log_path}:\n"
                        + "\n".join(log_path.read_text().splitlines()[-30:])
                    )
        # The stamp's "go" is empty without go (nothing of this build needs it).
        versions = {"image": version, "reference": product_ref()}
        elapsed = _install(
            staging, directory, go=find_go() or "true", start=start, versions=versions
        )
        progress(f"built the project's image in {_format_elapsed(elapsed)}")


def build_images(*, progress: Progress = _stderr_progress) -> Images:
    """Return the cached image archives, building the missing ones first.

    Raises :class:`tests.controlplane.build.GoNotFound` (no ``go``) or
    :class:`tests.controlplane.build.BuildFailed` (a build step failed, or the project's
    image cannot be built here: not root, no buildah/debootstrap). Safe to call
    concurrently (file locks per cache key)."""
    _build_small(progress)
    _build_product(progress)
    found = find_images()
    assert found is not None
    return found
