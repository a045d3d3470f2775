"""Fixtures of the Cilium peer's tests: ``differential`` (two dual-stack control planes,
Cilium's controller on one, ``serve`` on the other; module-scoped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.build import Binaries
from tests.peers.cilium.differential import Differential


@pytest.fixture(scope="module")
def differential(
    control_plane_binaries: Binaries,
    cilium_nodeipam: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Differential]:
    """A started :class:`Differential` for the module (~15 s to start both planes)."""
    workdir = tmp_path_factory.mktemp("differential")
    with Differential(workdir, binaries=control_plane_binaries, peer=cilium_nodeipam) as diff:
        yield diff
