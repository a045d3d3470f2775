"""Build (or find in the cache) the Cilium peer: ``cilium-nodeipam``, Cilium's Node IPAM
LB controller (``operator/pkg/nodeipam.Cell``) composed in a small main of ours (``go/``).

Standard library only, like tests/controlplane/build.py, whose recipe, cache root, lock
and stamp it uses (:func:`tests.controlplane.build.build_tool`). Its own cache key
(``cilium-nodeipam-<cilium version>-<hash of go/go.mod, go/go.sum, recipe>``), so a
Cilium bump does not rebuild the control plane, nor the other way round. The main
package is ``go/main.go`` itself, so its edits are covered by the hash too.
"""

from __future__ import annotations

from pathlib import Path

from tests.controlplane import build as builder

MODULE = Path(__file__).resolve().parent / "go"
PACKAGE = "nodeipamlb.test/peers/cilium"  # go/go.mod's module: go/main.go
NAME = "cilium-nodeipam"
CILIUM_MODULE = "github.com/cilium/cilium"


def cilium_version() -> str:
    """The pinned ``github.com/cilium/cilium`` version, e.g. ``v1.20.2`` (from go/go.mod)."""
    return builder._require_version(MODULE / "go.mod", CILIUM_MODULE)


def cache_key() -> str:
    """``cilium-nodeipam-<version>-<hash>``: :func:`tests.controlplane.build.tool_cache_key`
    of go/, main.go included (it is ours, not pinned by go.sum)."""
    return builder.tool_cache_key(NAME, cilium_version(), MODULE, ("go.mod", "go.sum", "main.go"))


def find_peer() -> Path | None:
    """The cached ``cilium-nodeipam`` binary, or ``None`` when it is not built."""
    return builder.find_tool(cache_key(), NAME)


def build_peer(*, progress: builder.Progress | None = None, interval: float = 15.0) -> Path:
    """Return the cached ``cilium-nodeipam`` binary, building it first when missing
    (~8 CPU-minutes cold, a ~90 MB binary).

    Raises :class:`tests.controlplane.build.GoNotFound` or
    :class:`tests.controlplane.build.BuildFailed`.
    """
    return builder.build_tool(
        name=NAME,
        version=cilium_version(),
        key=cache_key(),
        module=MODULE,
        package=PACKAGE,
        ldflags=[],
        progress=progress or builder._stderr_progress,
        interval=interval,
    )
