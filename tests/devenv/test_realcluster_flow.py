"""The real-cluster walk-through's order and teardown, with the cluster and each step
replaced by a recorder (the walk-through itself on a real cluster:
tests/cluster/test_devenv_live.py): the cluster is always removed with its own
``stop()``, after a failed step, on Ctrl-C (SIGINT raises ``_Stop``) and with ``--once``,
and the signal handlers are put back."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import pytest

from tests.cluster.netns import ClusterError
from tests.controlplane.__main__ import _Stop
from tests.devenv import realcluster
from tests.devenv.session import DevEnvError

STEPS = ("install_chart", "apply_example", "show_result", "curl")


class Recorded:
    """What happened, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []


class FakeNode:
    def __init__(self, index: int) -> None:
        self.name = f"node-{index}"
        self.ipv4, self.ipv6 = f"10.123.0.1{index}", f"fd00:123::1{index}"
        self.external_ipv4 = self.external_ipv6 = None


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Recorded:
    record = Recorded()

    class FakeCluster:
        fail_start: BaseException | None = None

        def __init__(self, nodes: int, *, keep_logs: Path) -> None:
            record.events.append(f"Cluster({nodes})")
            self.id, self.url, self.client_netns = "nilb0000", "https://10.123.0.2:6443", "c"
            self.workdir = tmp_path / "nilb0000-x"
            self.kubeconfig_path = tmp_path / "admin.kubeconfig"
            self.kubeconfig_path.write_text("admin")
            self.nodes = [FakeNode(i) for i in range(1, nodes + 1)]

        def start(self) -> None:
            record.events.append("start")
            if FakeCluster.fail_start is not None:
                raise FakeCluster.fail_start

        def stop(self) -> None:
            record.events.append("stop")

        def poll(self) -> str | None:
            raise _Stop("SIGINT")  # Ctrl-C while it waits

    def step(name: str):  # type: ignore[no-untyped-def]
        def run(*args: object) -> None:
            record.events.append(name)
            failing = getattr(record, "fail", None)
            if failing is not None and failing[0] == name:
                raise failing[1]

        return run

    monkeypatch.setattr(realcluster, "Cluster", FakeCluster)
    monkeypatch.setattr(realcluster, "find_helm", lambda: Path("/cache/helm"))
    for name in STEPS:
        monkeypatch.setattr(realcluster, name, step(name))
    record.cluster = FakeCluster  # type: ignore[attr-defined]
    return record


def walk(tmp_path: Path, *, once: bool) -> tuple[int, str]:
    out = io.StringIO()
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    code = realcluster.run_cluster(nodes=2, workdir=tmp_path / "w", once=once, out=out)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    return code, out.getvalue()


def test_once_runs_every_step_in_order_then_removes_the_cluster(
    recorded: Recorded, tmp_path: Path
) -> None:
    code, out = walk(tmp_path, once=True)
    assert code == 0, out
    assert recorded.events == ["Cluster(2)", "start", *STEPS, "stop"]
    assert (tmp_path / "w" / "kubeconfig").read_text() == "admin"
    assert "$ python -m tests.cluster up --nodes 2 --kubeconfig " in out
    assert "  cluster nilb0000: 2 nodes Ready in " in out
    assert "--once: stopping now." in out and "removing the cluster ..." in out


def test_ctrl_c_while_it_waits_removes_the_cluster_and_exits_0(
    recorded: Recorded, tmp_path: Path
) -> None:
    code, out = walk(tmp_path, once=False)
    assert code == 0, out
    assert recorded.events[-1] == "stop"
    assert "Stop it: press Ctrl-C" in out


@pytest.mark.parametrize(
    ("failing", "error", "code"),
    [
        ("install_chart", DevEnvError("helm install failed (exit 1)"), 1),
        ("curl", DevEnvError("http://10.123.0.12:80/ did not answer"), 1),
        ("apply_example", _Stop("SIGTERM"), 0),
    ],
)
def test_a_failed_or_interrupted_step_still_removes_the_cluster(
    recorded: Recorded, tmp_path: Path, failing: str, error: BaseException, code: int
) -> None:
    recorded.fail = (failing, error)  # type: ignore[attr-defined]
    got, out = walk(tmp_path, once=True)
    assert got == code, out
    assert recorded.events[-2:] == [failing, "stop"]
    if code:
        assert f"devenv: {error}" in out


def test_a_cluster_that_does_not_come_up_is_reported_and_removed(
    recorded: Recorded, tmp_path: Path
) -> None:
    recorded.cluster.fail_start = ClusterError("nodes not Ready after 150 s")  # type: ignore[attr-defined]
    code, out = walk(tmp_path, once=True)
    assert code == 1
    assert "devenv: nodes not Ready after 150 s" in out
    assert recorded.events == ["Cluster(2)", "start", "stop"]
