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
# pip's cache is fine here (every file is checked against the lock's sha256 anyway).
export PIP_DISABLE_PIP_VERSION_CHECK=1
step() { printf 'ok: %s\n' "$*"; }

# The build context the Dockerfile sees (.dockerignore: pyproject.toml, README.md, app/,
# the lock files), copied so no build output lands in the repository.
mkdir -p "$WORK/src"
cp -r "${ROOT}/pyproject.toml" "${ROOT}/README.md" "${ROOT}/app" "$WORK/src/"
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

# 4. The entrypoint as uid 65532, root filesystem read-only (deploy/image/ro-run.sh).
cp "$ROOT/examples/kind-4node/cluster.yaml" "$WORK/cluster.yaml"
chmod -R a+rX "$WORK"
if [ "$(id -u)" != 0 ]; then
  echo "note: not root: the uid 65532 / read-only root step is skipped" >&2
  exit 0
fi
in_image() { "$ROOT/deploy/image/ro-run.sh" / "$WORK/venv/bin:/usr/bin:/bin" "$WORK" -- "$@"; }
test "$(in_image id -u):$(in_image id -g)" = "65532:65532"
in_image node-ipam-lb serve --help > "$WORK/help.txt"
grep -q -- "--default-lb-service-ipam" "$WORK/help.txt"
step "serve --help as uid 65532 on a read-only root ($(wc -l < "$WORK/help.txt") lines)"
step "$(in_image node-ipam-lb --version) as uid 65532 on a read-only root"
in_image node-ipam-lb preview -f "$WORK/cluster.yaml" > "$WORK/preview.txt"
step "preview -f examples/kind-4node/cluster.yaml as uid 65532 on a read-only root:"
sed "s/^/    /" "$WORK/preview.txt"
