#!/usr/bin/env bash
# Verify the image recipe without a container engine: the Dockerfile's install steps, run
# with this machine's python3.11 into a scratch directory, then the entrypoint as the
# image's user (uid/gid 65532) on a read-only root filesystem.
#
#   deploy/image/verify.sh            # needs python3.11, PyPI (or a pip mirror), root for
#                                     # the read-only/uid step (skipped with a note if not)
#
# Checks, in order (each prints "ok: ..." or exits non-zero):
#   1. the locked dependencies install with --require-hashes --no-deps (as the Dockerfile);
#   2. the app's wheel builds with the locked setuptools, without build isolation, and
#      installs with --no-deps; `pip check` finds nothing missing;
#   3. the installed distributions are exactly the lock's pins plus node-ipam-lb;
#   4. as uid 65532 with a read-only root filesystem (a private mount namespace:
#      `unshare --mount`, the root bind-mounted read-only, a fresh tmpfs on /tmp as the
#      Pod's emptyDir, HOME=/ as kubelet sets it for a user without a passwd entry):
#      `node-ipam-lb serve --help`, `node-ipam-lb --version` and
#      `node-ipam-lb preview -f examples/kind-4node/cluster.yaml`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
WORK="$(mktemp -d /tmp/node-ipam-image.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
step() { printf 'ok: %s\n' "$*"; }

# The build context the Dockerfile sees (.dockerignore: pyproject.toml, README.md, app/,
# the lock files), copied so no build output lands in the repository.
mkdir -p "$WORK/src"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/app" "$WORK/src/"
cp "$ROOT/deploy/image/requirements.lock" "$ROOT/deploy/image/build-requirements.lock" "$WORK/src/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +

"$PYTHON" -m venv --without-pip "$WORK/venv"
"$PYTHON" -m venv "$WORK/build"
PIP=("$WORK/build/bin/pip" --python "$WORK/venv/bin/python")
(cd "$WORK/src" && "${PIP[@]}" install -q --require-hashes --no-deps -r requirements.lock)
step "runtime lock installed with --require-hashes --no-deps"
(cd "$WORK/src" && "$WORK/build/bin/pip" install -q --require-hashes --no-deps -r build-requirements.lock)
step "build backend lock installed with --require-hashes --no-deps"
(cd "$WORK/src" && "$WORK/build/bin/pip" wheel -q --no-deps --no-build-isolation --wheel-dir "$WORK/dist" .)
"${PIP[@]}" install -q --no-deps "$WORK"/dist/*.whl
"${PIP[@]}" check
step "wheel $(basename "$WORK"/dist/*.whl) built and installed; pip check: no missing dependency"

# 3. Installed == lock (+ the app), compared by canonical name and version.
"$WORK/venv/bin/python" - "$WORK/src/requirements.lock" <<'PY'
import re, sys
from importlib import metadata
def canon(name): return re.sub(r"[-_.]+", "-", name).lower()
lock = {canon(n): v for n, v in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", open(sys.argv[1]).read(), re.M)}
installed = {canon(d.metadata["Name"]): d.version for d in metadata.distributions()}
app = installed.pop("node-ipam-lb", None)
assert app, "node-ipam-lb is not installed"
extra = sorted(set(installed) - set(lock)); missing = sorted(set(lock) - set(installed))
wrong = sorted(n for n in set(lock) & set(installed) if lock[n] != installed[n])
if extra or missing or wrong:
    sys.exit(f"installed != lock: extra {extra}, missing {missing}, other versions {wrong}")
print(f"ok: installed distributions == lock ({len(lock)} pins) + node-ipam-lb {app}")
PY

# 4. The entrypoint as uid 65532, root filesystem read-only.
cp "$ROOT/examples/kind-4node/cluster.yaml" "$WORK/cluster.yaml"
chmod -R a+rX "$WORK"
if [ "$(id -u)" != 0 ]; then
  echo "note: not root: the uid 65532 / read-only root step is skipped" >&2
  exit 0
fi
export WORK
unshare --mount --propagation private bash -euo pipefail -c '
  RO="$WORK/rootfs"
  mkdir -p "$RO"
  mount --rbind / "$RO"
  mount -o remount,bind,ro "$RO"
  mount -t tmpfs -o size=64m,mode=1777 tmpfs "$RO/tmp"
  # $WORK itself is under /tmp: bind it back (read-only) inside the new root.
  mkdir -p "$RO$WORK" && mount --bind "$WORK" "$RO$WORK" && mount -o remount,bind,ro "$RO$WORK"
  cd "$RO"
  if chroot "$RO" setpriv --reuid 65532 --regid 65532 --clear-groups touch /etc/probe 2>/dev/null \
     || chroot "$RO" touch /usr/probe 2>/dev/null; then
    echo "root filesystem is writable: the read-only check is void" >&2; exit 1
  fi
  echo "ok: root filesystem read-only, even for root, in this mount namespace"
  in_root() { chroot "$RO" env -i PATH="$WORK/venv/bin:/usr/bin:/bin" HOME=/ \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    setpriv --reuid 65532 --regid 65532 --clear-groups "$@"; }
  test "$(in_root id -u):$(in_root id -g)" = "65532:65532"
  in_root node-ipam-lb serve --help > "$RO/tmp/help.txt"
  grep -q -- "--default-lb-service-ipam" "$RO/tmp/help.txt"
  echo "ok: serve --help as uid 65532 ($(wc -l < "$RO/tmp/help.txt") lines)"
  echo "ok: $(in_root node-ipam-lb --version) as uid 65532"
  in_root node-ipam-lb preview -f "$WORK/cluster.yaml" > "$RO/tmp/preview.txt"
  echo "ok: preview -f examples/kind-4node/cluster.yaml as uid 65532:"
  sed "s/^/    /" "$RO/tmp/preview.txt"
'
