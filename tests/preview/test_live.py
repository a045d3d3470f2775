"""``preview`` without ``-f`` reads the live cluster through the kubeconfig (issue 13, finding
7): the same selection code and the same output as on a dump of that cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeapi.server import FakeApiServer
from tests.kubectl import kubectl
from tests.preview.conftest import KIND_4NODE, parse_table, preview

CLUSTER = str(KIND_4NODE / "cluster.yaml")


@pytest.fixture
def live(fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    fake_api.seed(files=[CLUSTER])
    monkeypatch.setenv("KUBECONFIG", str(fake_api.kubeconfig_path))
    return fake_api


@pytest.mark.parametrize("output", ["table", "wide", "json", "yaml"])
def test_live_output_equals_the_output_on_a_dump(live: FakeApiServer, output: str) -> None:
    run = preview("-o", output)
    assert run.code == 0, run.stderr
    assert run.stdout == preview("-f", CLUSTER, "-o", output).stdout


def test_kubeconfig_flag_all_namespaces_and_one_name(
    live: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG")
    flag = ["--kubeconfig", str(live.kubeconfig_path)]
    assert len(parse_table(preview(*flag, "-A").stdout)) == 5
    live.reset_requests()
    run = preview(*flag, "nginx-local", "-o", "wide")
    assert [r["NAME"] for r in parse_table(run.stdout)] == ["nginx-local"]
    requests = live.requests()
    # Listed cluster-wide, the one named shown: port ownership reads every Service.
    assert requests.get("list services") == 1 and "get services" not in requests
    assert requests.get("list endpointslices") == 1


def test_the_default_namespace_is_the_kubeconfig_contexts(
    live: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.write_text(
        live.kubeconfig_path.read_text().replace("namespace: default", "namespace: kube-system")
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    run = preview()
    assert (run.code, run.stdout) == (0, "")
    assert run.stderr == "No resources found in kube-system namespace.\n"
    assert len(parse_table(preview("-n", "default").stdout)) == 5
    missing = preview("nginx-local")
    assert missing.code == 1
    assert 'services "nginx-local" not found in namespace "kube-system"' in missing.stderr


def test_an_api_error_is_one_line_naming_the_server(live: FakeApiServer) -> None:
    live.fail(method="GET", path="/api/v1/nodes", status=403, message="nodes is forbidden")
    run = preview()
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr == f"error: {live.url}: 403: nodes is forbidden\n"


def test_kubectl_runs_it_as_the_node_ipam_plugin(live: FakeApiServer) -> None:
    """``kubectl node-ipam ...`` runs the ``kubectl-node_ipam`` console script on PATH."""
    script = Path(sys.executable).with_name("kubectl-node_ipam")
    assert script.is_file(), "pyproject.toml installs the kubectl-node_ipam script"
    env = {**os.environ, "PATH": f"{script.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [kubectl(), "node-ipam", "preview", "nginx-one-node", "-o", "wide"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [row] = parse_table(done.stdout)
    # Alone it would get 10.89.0.7; previewed by name it still meets the Service that
    # owns TCP/80 there (docs/design.md §4.9), as the controller would.
    assert (row["NAME"], row["EXTERNAL-IP"], row["CHANGE"]) == ("nginx-one-node", "<pending>", "no")
    taken = "TCP/80 on 10.89.0.7: owned by Service default/nginx-cluster; use another port"
    assert taken in row["REASON"]
