#!/usr/bin/env sh
# Regenerate the image's lock files (hashes for every distribution of every pinned
# version) for the image's Python: 3.11 on linux x86_64 (glibc, manylinux_2_28).
# Needs uv (`pip install uv`); run from anywhere. tests/deploy/test_lock.py checks that
# requirements.lock covers exactly pyproject.toml's runtime dependencies.
set -eu
cd "$(dirname "$0")/../.."
for spec in "pyproject.toml requirements.lock" "deploy/image/build-requirements.in build-requirements.lock"; do
  set -- $spec
  uv pip compile "$1" --generate-hashes --python-version 3.11 \
    --python-platform x86_64-manylinux_2_28 \
    --custom-compile-command "deploy/image/lock.sh" -o "deploy/image/$2"
done
