"""``python -m tests.cluster up`` as the README documents it: one node, the two lines on
stdout, kubectl from this namespace, a Pod with a projected token and an emptyDir (so
kubelet mounts tmpfs and containerd a sandbox shm), then SIGTERM: the process exits 0
and nothing of the run is left (processes, mounts, cgroups, namespaces, veths, files)."""

from __future__ import annotations

import ctypes
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.cleanup import leftovers
from tests.cluster.images import Images
from tests.controlplane.build import Binaries

ROOT = Path(__file__).resolve().parents[2]
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "mounts", "namespace": "default"},
    "spec": {
        "containers": [
            {
                "name": "backend",
                "image": "localhost/node-ipam-lb-test/backend:1",
                "imagePullPolicy": "Never",
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
        "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
    },
}


def _terminate_with_parent() -> None:  # pragma: no cover - runs between fork and exec
    """``up`` gets SIGTERM (and cleans up) if this test run dies first."""
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


@pytest.mark.timeout(300)
def test_up_then_sigterm_leaves_nothing(
    control_plane_binaries: Binaries,
    cluster_images: Images,
    cluster_prerequisites: None,
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.cluster",
            "up",
            "--nodes",
            "1",
            "--kubeconfig",
            str(kubeconfig),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_terminate_with_parent,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        client = proc.stdout.readline()
        up_seconds = time.monotonic() - started
        if not ready.startswith("ready https://"):
            proc.terminate()
            pytest.fail(f"no ready line: {ready!r}\n{proc.communicate(timeout=60)[1]}")
        assert client.startswith("client-netns ")
        assert Path("/run/netns", client.split()[1]).exists()
        get = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert get.stdout.split() == ["node/node-1"]
        subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
            input=json.dumps(POD),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        subprocess.run(
            [
                "kubectl",
                f"--kubeconfig={kubeconfig}",
                "wait",
                "--for=condition=Ready",
                "pod/mounts",
                "--timeout=90s",
            ],
            capture_output=True,
            text=True,
            timeout=100,
            check=True,
        )
    finally:
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    print(f"\nmeasured: up (1 node) {up_seconds:.1f} s, down {time.monotonic() - stopping:.1f} s")
    assert proc.returncode == 0, stderr
    match = re.search(r"logs (/\S+)/logs", stderr)
    assert match, stderr
    workdir = Path(match.group(1))
    cluster_id = workdir.name.split("-")[0]
    assert leftovers(cluster_id, workdir) == []
