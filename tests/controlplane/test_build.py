"""build.py's CoreDNS (no Go build needed): a module and cache key of its own (so it moves
none of the Kubernetes binaries' dependencies), and it compiles in what tests/cluster's
Corefile uses."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cluster.dns import corefile_text
from tests.controlplane import build


def directives(main_go: Path) -> list[str]:
    """The plugin names in ``dnsserver.Directives = []string{...}`` of a Go file."""
    match = re.search(r"Directives = \[\]string\{(.*?)\}", main_go.read_text(), re.S)
    assert match is not None, main_go
    return re.findall(r'"([a-z0-9_]+)"', match.group(1))


def test_coredns_is_pinned_in_a_module_of_its_own() -> None:
    assert build.coredns_version() == "v1.15.0"
    module = re.search(r"^module (\S+)", (build.COREDNS_MODULE / "go.mod").read_text(), re.M)
    assert module is not None and module.group(1) == build.COREDNS_PACKAGE
    assert build.COREDNS_PACKAGE not in build.KUBE_PACKAGES
    kube = (build.KUBE_MODULE / "go.mod").read_text()
    assert "coredns" not in kube, "CoreDNS must not move the Kubernetes binaries' dependencies"


def test_the_cache_keys_cover_corednss_module_and_only_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "coredns"
    copy.mkdir()
    for name in ("go.mod", "go.sum", build.COREDNS_MAIN):
        shutil.copy(build.COREDNS_MODULE / name, copy / name)
    key, kube_key = build.coredns_cache_key(), build.cache_key()
    monkeypatch.setattr(build, "COREDNS_MODULE", copy)
    assert build.coredns_cache_key() == key
    main = copy / build.COREDNS_MAIN
    main.write_text(main.read_text() + "\n// edited\n")
    assert build.coredns_cache_key() != key
    assert build.cache_key() == kube_key, "a CoreDNS change rebuilds only CoreDNS"


def test_the_corefile_uses_only_compiled_in_plugins_in_corednss_order() -> None:
    """Every directive of the Corefile is in our main's ``Directives``, each of those has
    its plugin imported, and (with the module downloaded) they keep CoreDNS's own order."""
    main = build.COREDNS_MODULE / build.COREDNS_MAIN
    ours = directives(main)
    imported = re.findall(r'_ "github.com/coredns/coredns/plugin/([a-z0-9_]+)"', main.read_text())
    assert sorted(ours) == sorted(imported)
    text = corefile_text("10.0.0.2", Path("/kubeconfig"), "cluster.local", "lb.example.org", 5)
    used = {line.split()[0] for line in text.splitlines() if line.startswith("    ")}
    used -= {"kubeconfig", "ttl", "}"}  # settings inside a plugin's own block
    assert used <= set(ours), used - set(ours)
    assert {"forward", "loop"}.isdisjoint(ours)
    go = build.find_go()
    if go is None:
        pytest.skip("go not found: CoreDNS's own order not checked")
    listed = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", "github.com/coredns/coredns"],
        cwd=build.COREDNS_MODULE, env=build.go_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    upstream = Path(listed.stdout.strip(), "core/dnsserver/zdirectives.go")
    if listed.returncode != 0 or not upstream.is_file():
        pytest.skip(f"CoreDNS's module is not downloaded: {listed.stderr.strip()}")
    order = directives(upstream)
    assert ours == sorted(ours, key=order.index)
