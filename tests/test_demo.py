"""``node-ipam-lb demo`` (issue 13, finding 1): one command starts the fake API server,
serve and both webhooks, applies the kind example, shows the addresses, a denied selector
and a live preview, then stops everything; all logs go to the file it names."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.kubectl import kubectl
from tests.preview.conftest import parse_table

ROOT = Path(__file__).resolve().parents[1]


def demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    kubectl()  # skip (or fail in CI) without kubectl
    return subprocess.Popen(
        [sys.executable, "-m", "app", "demo", "--api", "fake", "--workdir", str(tmp_path),
         "--timeout", "60", *args],
        cwd=tmp_path,  # not the checkout: the demo finds it by itself
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def assert_stopped_cleanly(tmp_path: Path, output: str) -> None:
    log = (tmp_path / "demo.log").read_text()
    assert "==> node-ipam-lb serve exited 0" in log
    assert "==> fake API server exited 0" in log
    assert log.index("node-ipam-lb serve exited") < log.index("fake API server exited")
    assert output.rstrip().endswith(f"stopped. Logs: {tmp_path / 'demo.log'}")
    port = re.search(r"--bind-address 127.0.0.1 --port (\d+)", output)
    assert port is not None
    assert f'"port":{port.group(1)}' in log, "serve's own log lines went to the log file"
    assert '"level":"info"' not in output, "no log line in the terminal"


def test_demo_once_shows_addresses_a_denial_and_a_live_preview(tmp_path: Path) -> None:
    process = demo(tmp_path, "--once")
    output, _ = process.communicate(timeout=180)
    assert process.returncode == 0, output
    assert output.startswith(f"node-ipam-lb demo: logs go to {tmp_path / 'demo.log'}\n")
    for line in (
        "validatingwebhookconfiguration.admissionregistration.k8s.io/node-ipam-lb created",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/node-ipam-lb created",
        "service/nginx-local created",
        "$ kubectl get svc -A",
    ):
        assert line in output.splitlines(), line
    table = output.split("$ kubectl get svc -A\n")[1].split("\n$ ")[0].splitlines()
    assert table[0].split()[:5] == ["NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP"]
    external = {row.split()[1]: row.split()[4] for row in table[1:]}
    # Every Service of the example has TCP/80: nginx-cluster owns it on its three
    # addresses and the others stay pending (port ownership, docs/design.md §4.9).
    assert external == {
        "nginx-cluster": "10.89.0.6,10.89.0.7,10.89.0.9",
        "nginx-local": "<pending>",
        "nginx-one-node": "<pending>",
        "nginx-two-nodes": "<pending>",
        "other-class": "<pending>",
    }
    assert re.search(
        r'admission webhook "validate.node-ipam-lb.io" denied the request: metadata.annotations'
        r"\[io.cilium.nodeipam/match-node-labels\]: Invalid value: ",
        output,
    )
    preview = output.split("$ node-ipam-lb preview -A -o wide")[1].splitlines()[1:7]
    rows = parse_table("\n".join(preview))
    assert list(rows[0]) == [
        "NAMESPACE", "NAME", "CLASS", "EXTERNAL-IP", "CURRENT", "CHANGE", "NODES", "REASON",
    ]  # fmt: skip
    assert {r["NAME"]: r["CHANGE"] for r in rows} == dict.fromkeys(external, "no")
    assert_stopped_cleanly(tmp_path, output)


@pytest.mark.slow
def test_demo_waits_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    process = demo(tmp_path)
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Stop it: press Ctrl-C"):
            break
    assert lines and lines[-1].startswith("Stop it: press Ctrl-C"), "".join(lines)
    time.sleep(1)
    assert process.poll() is None, "it waits"
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert_stopped_cleanly(tmp_path, "".join(lines) + rest)


def test_a_child_that_exits_is_reported_with_its_last_error_line(tmp_path: Path) -> None:
    # Before: "serve exited with status 2; see .../demo.log" and nothing else.
    from app.demo import Demo, DemoError

    run = Demo(workdir=tmp_path, out=io.StringIO())
    error = "node-ipam-lb serve: --bind-address 127.0.0.1 --port 1: cannot listen: in use"
    child = run.spawn("serve", [sys.executable, "-c", f"import sys; sys.exit({error!r})"])
    child.wait(30)
    with pytest.raises(DemoError) as err:
        run.check_alive()
    run.stop()
    assert str(err.value) == f"serve exited with status 1: {error}; see {tmp_path / 'demo.log'}"


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_a_timeout_that_is_not_positive_is_refused(timeout: str) -> None:
    result = CliRunner().invoke(cli, ["demo", "--timeout", timeout])
    assert result.exit_code == 2
    assert "--timeout: Invalid value" in result.output
