"""``python -m tests.controlplane up``: one ``ready <url>`` line on stdout, a working admin
kubeconfig, and a clean stop (processes and temporary data gone) on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.controlplane.plane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.controlplane


@pytest.mark.usefixtures("control_plane")  # the binaries (or the tier's skip/fail reason)
def test_up_prints_ready_serves_and_cleans_up_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.controlplane", "up", "--kubeconfig", str(kubeconfig)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert re.fullmatch(r"ready https://127\.0\.0\.1:\d+\n", line), line
        url = line.split()[1]
        server = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "config", "view", "--minify", "--raw"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"server: {url}" in server
        readyz = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert readyz.stdout.strip() == "ok", readyz.stderr
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == ""  # nothing after the ready line
    logs = re.findall(r"^(etcd|kube-apiserver) log: (\S+)$", err, re.M)
    assert sorted(name for name, _ in logs) == ["etcd", "kube-apiserver"], err
    workdir = Path(logs[0][1]).parent
    assert workdir.name.startswith("node-ipam-controlplane-")
    assert not workdir.exists()


def test_a_server_that_dies_during_start_up_is_reported_with_its_log(
    control_plane: ControlPlane,
) -> None:
    plane = ControlPlane(
        control_plane.binaries, extra_apiserver_args=["--no-such-flag-for-this-test"]
    )
    with pytest.raises(RuntimeError) as err:
        plane.start()
    message = str(err.value)
    assert "kube-apiserver exited with status" in message
    assert "unknown flag: --no-such-flag-for-this-test" in message
    assert not plane.workdir.exists()
