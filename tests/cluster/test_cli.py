"""``python -m tests.cluster``'s own argument checks and ``purge --dry-run``: no cluster
is brought up (these run everywhere, without root)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.cluster import __main__ as cli
from tests.cluster.cleanup import OWNER_FILE
from tests.cluster.netns import PREFIX


@pytest.mark.parametrize(("nodes", "why"), [("0", "0 is outside 1..9"), ("10", "10 is outside"),
                                            ("two", "'two' is not an integer")])  # fmt: skip
def test_up_refuses_a_node_count_outside_1_to_9_before_anything_starts(
    nodes: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--nodes", nodes, "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert exited.value.code == 2
    assert f"argument --nodes: {why}" in capsys.readouterr().err


def test_up_refuses_a_kubeconfig_in_a_missing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent" / "kubeconfig"
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--nodes", "1", "--kubeconfig", str(missing)])
    assert exited.value.code == 2
    assert f"--kubeconfig {missing}: its directory does not exist" in capsys.readouterr().err


def test_up_refuses_a_proxy_mode_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """iptables and nftables only: ipvs needs IPVS, which this machine's kernel lacks."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--proxy-mode", "ipvs", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --proxy-mode: invalid choice: 'ipvs'" in err, err
    assert "'iptables', 'nftables'" in err, err


def test_purge_dry_run_lists_what_an_abandoned_cluster_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A work dir whose owner process is gone is listed with its leftovers and kept."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = _exited_pid()
    workdir = tmp_path / f"{PREFIX}zz99-test"
    workdir.mkdir()
    (workdir / OWNER_FILE).write_text(f"{gone}\n")
    alive = tmp_path / f"{PREFIX}zz98-test"
    alive.mkdir()
    (alive / OWNER_FILE).write_text(f"{os.getpid()}\n")
    assert cli.main(["purge", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would remove {PREFIX}zz99:" in out
    assert f"  directory {workdir}" in out
    assert "zz98" not in out, "a cluster whose owner lives was listed"
    assert workdir.is_dir(), "--dry-run removed something"


def _exited_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
