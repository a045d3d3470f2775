#!/usr/bin/env bash
# Run a command the way the Pod runs the image: as uid/gid 65532 (no supplementary
# groups), with the root filesystem read-only, a fresh writable tmpfs on /tmp (the Pod's
# emptyDir), HOME=/ (what kubelet sets for a uid without a passwd entry) and the image's
# environment. Needs root (a private mount namespace: `unshare --mount`).
#
#   deploy/image/ro-run.sh ROOTFS PATH_VALUE SHARE_DIR -- COMMAND [ARG...]
#
# ROOTFS: the root to run in (/ for this machine, or an image's mounted rootfs);
# PATH_VALUE: the PATH inside; SHARE_DIR: a host directory made visible read-only at the
# same path (under /tmp, which the tmpfs hides otherwise). Exits with COMMAND's status;
# exits 3 when the root turned out writable (the check would be void).
set -euo pipefail
[ "$#" -ge 5 ] && [ "$4" = "--" ] || { echo "usage: $0 ROOTFS PATH_VALUE SHARE_DIR -- COMMAND..." >&2; exit 2; }
ROOTFS="$1" RUN_PATH="$2" SHARE="$3"
shift 4
R="$(mktemp -d /tmp/ro-root.XXXXXX)"  # the mount point; removed afterwards
export ROOTFS RUN_PATH SHARE R
status=0
unshare --mount --propagation private bash -euo pipefail -c '
  mount --rbind "$ROOTFS" "$R"
  mount -o remount,bind,ro "$R"
  mountpoint -q "$R/proc" || mount -t proc proc "$R/proc"
  mountpoint -q "$R/dev" || mount --rbind /dev "$R/dev"
  mount -t tmpfs -o size=64m,mode=1777 tmpfs "$R/tmp"
  mkdir -p "$R$SHARE" && mount --bind "$SHARE" "$R$SHARE" && mount -o remount,bind,ro "$R$SHARE"
  if chroot "$R" touch /usr/.ro-probe 2>/dev/null; then
    echo "ro-run: $ROOTFS is writable; the read-only check would be void" >&2; exit 3
  fi
  exec chroot "$R" /usr/bin/env -i PATH="$RUN_PATH" HOME=/ PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 setpriv --reuid 65532 --regid 65532 --clear-groups "$@"
' ro-run "$@" || status=$?
rmdir "$R"
exit "$status"
