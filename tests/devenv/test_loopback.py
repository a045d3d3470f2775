"""``python -m tests.devenv --api fake``: the walk-through on loopback starts the fake API
server, serve and both webhooks, applies the kind example, shows the addresses, a denied
selector and a live preview, then stops everything; all logs go to the file it names.
(Formerly the product's ``node-ipam-lb demo``, issue 13 finding 1; moved out of the
product, issue 31.)"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devenv import __main__ as devenv
from tests.devenv.session import DevEnvError, Session
from tests.kubectl import kubectl
from tests.preview.conftest import parse_table

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def walkthrough(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m tests.devenv --api fake ...`` running; stopped (SIGTERM, then SIGKILL)
    if the test leaves it running, so a failed test leaves no process behind."""
    kubectl()  # skip (or fail in CI) without kubectl
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.devenv", "--api", "fake", "--workdir", str(tmp_path),
         "--timeout", "60", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def assert_stopped_cleanly(tmp_path: Path, output: str) -> None:
    log = (tmp_path / "devenv.log").read_text()
    assert "==> node-ipam-lb serve exited 0" in log
    assert "==> fake API server exited 0" in log
    assert log.index("node-ipam-lb serve exited") < log.index("fake API server exited")
    assert output.rstrip().endswith(f"stopped. Logs: {tmp_path / 'devenv.log'}")
    port = re.search(r"--bind-address 127.0.0.1 --port (\d+)", output)
    assert port is not None
    assert f'"port":{port.group(1)}' in log, "serve's own log lines went to the log file"
    assert '"level":"info"' not in output, "no log line in the terminal"


@pytest.mark.timeout(240)
def test_once_shows_addresses_a_denial_and_a_live_preview(tmp_path: Path) -> None:
    with walkthrough(tmp_path, "--once") as process:
        output, _ = process.communicate(timeout=180)
    assert process.returncode == 0, output
    assert output.startswith(f"devenv: logs go to {tmp_path / 'devenv.log'}\n")
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
@pytest.mark.timeout(240)
def test_it_waits_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    # Before: now and then Ctrl-C never stopped it (threading.Event.set() in the signal
    # handler deadlocked against Event.wait() in the main thread; session.Flag).
    with walkthrough(tmp_path) as process:
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
    run = Session(workdir=tmp_path, out=io.StringIO())
    error = "node-ipam-lb serve: --bind-address 127.0.0.1 --port 1: cannot listen: in use"
    child = run.spawn("serve", [sys.executable, "-c", f"import sys; sys.exit({error!r})"])
    child.wait(30)
    with pytest.raises(DevEnvError) as err:
        run.check_alive()
    run.stop()
    assert str(err.value) == f"serve exited with status 1: {error}; see {tmp_path / 'devenv.log'}"


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_a_timeout_that_is_not_positive_is_refused(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        devenv.main(["--api", "fake", "--timeout", timeout])
    assert exited.value.code == 2
    assert "argument --timeout: " in capsys.readouterr().err
