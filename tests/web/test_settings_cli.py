"""Settings that cannot mislead (issue 13, finding 4): unknown ``NODE_IPAM_*`` variables are
named with the closest known one, ``preview`` reads the same variables as ``serve``,
``--help`` shows every default, ``--version`` exists and agrees with the package."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import app
from app.cli import cli
from app.config import SelectionConfig, Settings, unknown_environment
from tests.core.builders import UNSET, node_obj, service_obj
from tests.preview.conftest import parse_table, preview
from tests.preview.support import Write, dump


@pytest.fixture
def write(tmp_path: Path) -> Write:
    def _write(text: str) -> str:
        path = tmp_path / "dump.yaml"
        path.write_text(text)
        return str(path)

    return _write


def test_version_comes_from_one_place() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"node-ipam-lb {app.__version__}"
    assert importlib.metadata.version("node-ipam-lb") == app.__version__


def test_an_unknown_variable_is_named_with_the_closest_setting() -> None:
    environ = {
        "NODE_IPAM_PER_NODE_ADRESS_FALLBACK": "true",
        "NODE_IPAM_ZZZ": "1",
        "NODE_IPAM_PORT": "1",
        "NODE_IPAM_REQUIRE_CONTROL_PLANE": "1",  # exported by .ci/run: tooling, not a setting
        "HOME": "/root",
    }
    assert unknown_environment(environ) == [
        "environment variable NODE_IPAM_PER_NODE_ADRESS_FALLBACK is not a node-ipam-lb"
        " setting; did you mean NODE_IPAM_PER_NODE_ADDRESS_FALLBACK?",
        "environment variable NODE_IPAM_ZZZ is not a node-ipam-lb setting",
    ]


def test_preview_warns_about_an_unknown_variable(
    write: Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_IPAM_PER_NODE_ADRESS_FALLBACK", "true")
    run = preview("-f", write(dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web"))))
    assert run.code == 0
    assert (
        "Warning: environment variable NODE_IPAM_PER_NODE_ADRESS_FALLBACK is not a"
        " node-ipam-lb setting; did you mean NODE_IPAM_PER_NODE_ADDRESS_FALLBACK?"
    ) in run.stderr


def test_preview_reads_the_selection_variables_and_flags_win(
    write: Write, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web", cls=UNSET)))
    monkeypatch.setenv("NODE_IPAM_DEFAULT_LB_SERVICE_IPAM", "nodeipam")
    assert parse_table(preview("-f", path).stdout)[0]["EXTERNAL-IP"] == "10.0.0.1"
    flagged = preview("-f", path, "--default-lb-service-ipam", "lbipam")
    assert parse_table(flagged.stdout)[0]["EXTERNAL-IP"] == "<not managed>"
    monkeypatch.setenv("NODE_IPAM_IP_MODE", "vip")
    bad = preview("-f", path)
    assert bad.code == 2
    assert "--ip-mode (NODE_IPAM_IP_MODE)" in bad.stderr


@pytest.mark.parametrize(("command", "config"), [("serve", Settings), ("preview", SelectionConfig)])
def test_help_shows_the_default_of_every_setting(command: str, config: type[Settings]) -> None:
    click_command = typer.main.get_command(cli).commands[command]  # type: ignore[attr-defined]
    flags = {p.name: p for p in click_command.params}
    settings = [name for name in config.model_fields if name in flags]
    assert len(settings) >= (30 if command == "serve" else 10)
    missing = [name for name in settings if not flags[name].show_default]
    assert not missing, f"--help shows no default for {missing}"
    shown = CliRunner().invoke(cli, [command, "--help"], terminal_width=400).stdout
    assert "[default: (9443)]" in shown or command == "preview"
    assert "[default: (lbipam)]" in shown
    assert "[default: (false)]" in shown


PREVIEW_WITHOUT = {"enable_node_ipam"}
"""Selection settings ``preview`` has no flag for: Cilium's on/off switch (a preview shows
what a running controller would do)."""


def test_preview_has_a_flag_for_every_selection_setting() -> None:
    # A selection setting added to SelectionConfig without a preview flag would make
    # preview disagree with serve (it still reads NODE_IPAM_*, but cannot be told).
    click_command = typer.main.get_command(cli).commands["preview"]  # type: ignore[attr-defined]
    flags = {p.name for p in click_command.params}
    assert set(SelectionConfig.model_fields) - PREVIEW_WITHOUT <= flags
    serve = typer.main.get_command(cli).commands["serve"]  # type: ignore[attr-defined]
    serve_help = {p.name: p.help for p in serve.params}
    for name in set(SelectionConfig.model_fields) - PREVIEW_WITHOUT:
        (param,) = [p for p in click_command.params if p.name == name]
        assert param.help == serve_help[name], f"--{name}: preview and serve describe it apart"


def test_help_shows_each_default_once() -> None:
    # Before: "(default 512)  [default: (512)]".
    shown = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=400).stdout
    assert "[default: (512)]" in shown
    assert re.search(r"\(default \d", shown) is None, shown


def test_the_kubectl_plugin_names_itself_as_kubectl_runs_it() -> None:
    script = Path(sys.executable).with_name("kubectl-node_ipam")
    assert script.is_file(), "pyproject.toml installs the kubectl-node_ipam script"
    done = subprocess.run(
        [str(script), "preview", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: kubectl node-ipam preview "), done.stdout
    assert "kubectl-node_ipam" not in done.stdout


@pytest.mark.parametrize(
    ("overrides", "reserved"),
    [
        # Health checks on a port no entry covers: it joins the reserved ports.
        ({"node_health_check": True, "node_health_check_port": 9876}, "22,9876/TCP"),
        ({"node_health_check": True, "reserved_node_ports": ""}, "10256/TCP"),
        # Already covered (any protocol, or a range), or health checks off: unchanged.
        ({"node_health_check": True, "node_health_check_port": 22}, "22"),
        ({"node_health_check": True, "reserved_node_ports": "10000-11000/TCP"}, None),
        ({"node_health_check": False, "node_health_check_port": 9876}, "22"),
    ],
)
def test_the_health_checked_port_is_reserved(
    overrides: dict[str, object], reserved: str | None
) -> None:
    """A Service published on the probed port would have kube-proxy answer the health
    checks with its own endpoints (docs/design.md §4.11): with health checks on, the
    port is reserved, in the decision and in the effective settings."""
    fields: dict[str, object] = {"reserved_node_ports": "22", **overrides}
    settings = Settings(**fields)  # type: ignore[arg-type]
    expected = fields["reserved_node_ports"] if reserved is None else reserved
    assert settings.reserved_node_ports == expected
    port = settings.node_health_check_port
    policy = settings.selection().ports
    assert any(r.covers("TCP", port) for r in policy.reserved) == bool(
        settings.node_health_check or port == 22
    )
