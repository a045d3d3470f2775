"""The Cilium peer itself: the pinned version, and Cilium's controller on the kind example
(examples/kind-4node, a dump of a real kind cluster) writing exactly expected.txt's rows,
the same rows node-ipam-lb's own tests hold it to (tests/controlplane/test_e2e.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cases import CASES, read_expected
from tests.controlplane.plane import ControlPlane
from tests.devenv import manifests
from tests.peers.cilium.build import cilium_version
from tests.peers.cilium.differential import Api, cilium_manages, ingress
from tests.peers.cilium.peer import CiliumNodeIpam, PeerError

pytestmark = pytest.mark.controlplane

VERSION = cilium_version()
KIND = CASES / "kind-4node"  # expected.txt of examples/kind-4node (the shared case)


def test_binary_reports_the_pinned_version(cilium_nodeipam: Path) -> None:
    out = subprocess.run(
        [str(cilium_nodeipam), "--version"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cilium", VERSION, "operator/pkg/nodeipam"]


def test_unknown_flag_is_refused(cilium_nodeipam: Path) -> None:
    out = subprocess.run(
        [str(cilium_nodeipam), "--no-such-flag"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert "unknown flag: --no-such-flag" in out.stderr


@pytest.mark.parametrize("version", [VERSION])
def test_cilium_writes_the_kind_example_rows(
    own_control_plane: ControlPlane, cilium_nodeipam: Path, tmp_path: Path, version: str
) -> None:
    """Cilium's controller, started as cilium-operator does (default ``lbipam``), on the
    kind example: every row of expected.txt, ``untouched`` ones never written."""
    plane = own_control_plane
    objects = manifests.example_objects()
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    plane.kubectl("apply", "-f", "-", input=listing)
    wanted = read_expected(KIND)
    managed = [
        f"{o['metadata']['namespace']}/{o['metadata']['name']}"
        for o in objects
        if o["kind"] == "Service" and cilium_manages(o, "lbipam")
    ]
    peer = CiliumNodeIpam(plane, binary=cilium_nodeipam, workdir=tmp_path)
    assert peer.version == version
    assert "--k8s-client-qps=100" in peer.args and "--k8s-client-burst=200" in peer.args
    with peer:
        peer.wait_quiet(managed)
        with Api(plane) as api:
            got = ingress(api, "default")
    assert peer.proc is None  # stopped
    for key, ips in wanted.items():
        entries = got[key.split("/", 1)[1]]
        if ips is None:
            assert entries == [], key
        else:
            assert [e["ip"] for e in entries] == ips, key
            assert {e.get("ipMode") for e in entries} == {"VIP"}  # the server's default
    plane.kubectl("delete", "-f", "-", "--wait=false", input=listing)


def test_stop_is_clean_and_a_dead_peer_is_reported(
    own_control_plane: ControlPlane, cilium_nodeipam: Path, tmp_path: Path
) -> None:
    peer = CiliumNodeIpam(own_control_plane, binary=cilium_nodeipam, workdir=tmp_path).start()
    proc = peer.proc
    assert proc is not None
    peer.stop()
    assert proc.returncode == 0, peer.log_path.read_text()[-2000:]
    broken = CiliumNodeIpam(own_control_plane, binary=cilium_nodeipam, workdir=tmp_path)
    broken.args[0] = f"--k8s-kubeconfig-path={tmp_path / 'missing'}"
    with pytest.raises(PeerError, match=r"cilium-nodeipam \(v\d+\.\d+\.\d+\)"):
        broken.start(timeout=30)


def _fake_peer(tmp_path: Path, lines: str) -> CiliumNodeIpam:
    """A CiliumNodeIpam whose binary is a script printing ``lines`` then sleeping."""
    import types

    script = tmp_path / "fake-peer"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\nexec sleep 60\n")
    script.chmod(0o755)
    plane = types.SimpleNamespace(kubeconfig_path=tmp_path / "kubeconfig", workdir=tmp_path)
    return CiliumNodeIpam(plane, binary=script)  # type: ignore[arg-type]


def test_a_failed_start_is_reported_at_once_not_after_the_timeout(tmp_path: Path) -> None:
    # At 5,000 Nodes Cilium's Node cache does not sync within controller-runtime's 2 min;
    # the hive logs the failure and the process stays up doing nothing.
    peer = _fake_peer(
        tmp_path,
        'time=x level=error msg=Failed module=controller-runtime error="failed to wait for'
        ' service-nodeipam caches to sync kind source: *v1.Node: timed out"',
    )
    with pytest.raises(PeerError, match="failed to wait for service-nodeipam caches to sync"):
        peer.start(timeout=30)
    assert peer.proc is None


def test_the_started_line_is_found_after_a_long_log(tmp_path: Path) -> None:
    filler = "\n".join(f'time=x level=info msg="Enqueued Service" n={i}' for i in range(20000))
    peer = _fake_peer(tmp_path, f'{filler}\ntime=x level=info msg="Starting workers"')
    try:
        assert peer.start(timeout=30) is peer
    finally:
        peer.stop()
