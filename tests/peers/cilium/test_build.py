"""The peer's build key (no Go needed): its own cache directory, keyed by its files."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.controlplane import build as builder
from tests.peers.cilium import build


def test_version_comes_from_go_mod() -> None:
    assert build.cilium_version() == "v1.20.2"
    assert build.cache_key().startswith("cilium-nodeipam-v1.20.2-")


def test_key_is_its_own_and_covers_main_go(tmp_path: Path) -> None:
    assert build.cache_key() not in (builder.cache_key(), builder.helm_cache_key())
    files = ("go.mod", "go.sum", "main.go")
    copy = tmp_path / "go"
    copy.mkdir()
    for name in files:
        shutil.copy(build.MODULE / name, copy / name)
    key = builder.tool_cache_key(build.NAME, "v1.20.2", copy, files)
    assert key == build.cache_key()
    (copy / "main.go").write_text((copy / "main.go").read_text() + "\n// edited\n")
    assert builder.tool_cache_key(build.NAME, "v1.20.2", copy, files) != key
    # helm's key is what it was before the peer's (build_tool) existed
    assert builder.helm_cache_key() == builder.tool_cache_key(
        "helm", builder.helm_version(), builder.HELM_MODULE
    )
