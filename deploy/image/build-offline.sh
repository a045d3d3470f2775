#!/usr/bin/env bash
# Build the Dockerfile without a container daemon or a registry, and run the result as the
# Pod would. For a machine that reaches Debian's archive and PyPI but no container
# registry; needs root and Debian's `debootstrap` and `buildah` (apt-get install -y
# debootstrap buildah).
#
#   deploy/image/build-offline.sh [WORKDIR]      # default /tmp/node-ipam-lb-image
#
# 1. debootstrap a Debian 12 (bookworm) minbase with python3.11, python3.11-venv and
#    python-is-python3 (Python 3.11.2: the interpreter of python:3.11-slim-bookworm is
#    newer, the ABI and paths the Dockerfile relies on are the same), imported as
#    localhost/debian-python:3.11-bookworm (`buildah from scratch` + copy + commit);
# 2. `buildah bud --isolation chroot --storage-driver vfs` of the repository's Dockerfile
#    with --build-arg PYTHON_IMAGE=localhost/debian-python:3.11-bookworm, tagged
#    localhost/node-ipam-lb:<version>. Set EXTRA_CA_BUNDLE to a CA file to bind it over the
#    build's /etc/ssl/certs/ca-certificates.crt (for a TLS-intercepting proxy to PyPI);
# 3. mounts the image and runs its entrypoint as the Pod does (deploy/image/ro-run.sh:
#    uid/gid 65532, read-only root, tmpfs /tmp, the image's PATH): `node-ipam-lb serve
#    --help`, `--version`, `preview -f examples/kind-4node/cluster.yaml`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-/tmp/node-ipam-lb-image}"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${ROOT}/app/__init__.py")"
BASE="${BASE_IMAGE:-localhost/debian-python:3.11-bookworm}"  # made once, then reused
IMAGE="localhost/node-ipam-lb:${VERSION}"
B=(buildah --storage-driver vfs)
mkdir -p "$WORK"

if ! "${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-distutils,python-is-python3,ca-certificates \
    bookworm "$WORK/rootfs" http://deb.debian.org/debian
  chroot "$WORK/rootfs" apt-get clean
  ctr="$("${B[@]}" from scratch)"
  cp -a "$WORK/rootfs/." "$("${B[@]}" mount "$ctr")/"
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
  "${B[@]}" commit --rm "$ctr" "$BASE"
fi
echo "ok: base $BASE"

volumes=()
[ -n "${EXTRA_CA_BUNDLE:-}" ] && volumes=(-v "${EXTRA_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro")
"${B[@]}" bud --isolation chroot --layers=false "${volumes[@]}" \
  --build-arg "PYTHON_IMAGE=$BASE" -t "$IMAGE" -f "${ROOT}/Dockerfile" "$ROOT"
echo "ok: built $IMAGE ($("${B[@]}" inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}' "$IMAGE"))"

ctr="$("${B[@]}" from "$IMAGE")"
trap '"${B[@]}" rm "$ctr" >/dev/null' EXIT
rootfs="$("${B[@]}" mount "$ctr")"
image_path="$("${B[@]}" inspect --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed -n 's/^PATH=//p')"
mkdir -p "$WORK/share" && cp "${ROOT}/examples/kind-4node/cluster.yaml" "$WORK/share/" && chmod -R a+rX "$WORK/share"
in_image() { "${ROOT}/deploy/image/ro-run.sh" "$rootfs" "$image_path" "$WORK/share" -- "$@"; }
echo "ok: entrypoint as $(in_image id -u):$(in_image id -g), root read-only:"
in_image node-ipam-lb serve --help | head -3 | sed 's/^/    /'
echo "ok: $(in_image node-ipam-lb --version)"
in_image node-ipam-lb preview -f "$WORK/share/cluster.yaml" | sed 's/^/    /'
in_image python -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('pip', 'setuptools')))"
echo "ok: neither pip nor setuptools in the image"
