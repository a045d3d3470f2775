"""What stays in the product works from an installed wheel, outside the checkout (issue
31: ``node-ipam-lb demo`` needed the source tree's tests/).

``pip install`` of the project (its ``pyproject.toml``, ``README.md`` and ``app/``, copied
out of the checkout) into a fresh virtualenv, offline: built with ``--no-build-isolation``
by this environment's setuptools and wheel, ``--no-deps --no-index``, the dependencies
reached through a ``.pth`` file naming this environment's site-packages (``.pth`` files
there are not run, so the checkout's editable install stays out). Then every
``node-ipam-lb`` subcommand's ``--help`` and the README's offline preview of the kind
example, run from a directory outside the checkout.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from app.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "app")
EXAMPLE = ROOT / "examples" / "kind-4node" / "cluster.yaml"


def subcommands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of a click group (typer's: it carries its own click), e.g.
    ``("serve",)``, ``("certs", "generate")``."""
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if getattr(command, "commands", None):
            yield from subcommands(command, (*path, name))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin/`` of a fresh virtualenv holding the project installed from a wheel."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", str(source)],
        cwd=base, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"pip install failed (this environment needs setuptools and wheel: "
        f".venv/bin/pip install -e '.[dev]'):\n{done.stdout}{done.stderr}"
    )
    return venv / "bin"


def run(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed / "node-ipam-lb"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the checkout."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


@pytest.mark.timeout(300)
def test_the_installed_package_is_the_wheels_not_the_checkouts(
    installed: Path, elsewhere: Path
) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import app, app.cli; print(app.__file__)"],
        cwd=elsewhere, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout
    version = run(installed, elsewhere, "--version")
    assert version.returncode == 0, version.stderr
    from app import __version__

    assert version.stdout == f"node-ipam-lb {__version__}\n"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", [" ".join(p) for p in subcommands(typer.main.get_group(cli))])
def test_every_subcommand_has_help(installed: Path, elsewhere: Path, command: str) -> None:
    shown = run(installed, elsewhere, *command.split(), "--help")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(f"Usage: node-ipam-lb {command} "), shown.stdout


def test_the_subcommands_are_the_products_own() -> None:
    # issue 31: no "demo" (it started tests/fakeapi or tests.controlplane from the checkout).
    names = {" ".join(p) for p in subcommands(typer.main.get_group(cli))}
    assert names == {"serve", "preview", "certs", "certs generate"}


@pytest.mark.timeout(300)
def test_the_readmes_offline_preview_of_the_kind_example(installed: Path, elsewhere: Path) -> None:
    shutil.copy2(EXAMPLE, elsewhere / "cluster.yaml")
    done = run(installed, elsewhere, "preview", "-f", "cluster.yaml")
    assert done.returncode == 0, done.stderr
    readme = (ROOT / "README.md").read_text()
    command = "$ node-ipam-lb preview -f examples/kind-4node/cluster.yaml\n"
    assert done.stdout == readme.split(command, 1)[1].split("```", 1)[0]


@pytest.mark.timeout(300)
def test_the_kubectl_plugin_and_certs_generate_work(installed: Path, elsewhere: Path) -> None:
    plugin = subprocess.run(
        [str(installed / "kubectl-node_ipam"), "--help"],
        cwd=elsewhere, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plugin.returncode == 0 and plugin.stdout.startswith("Usage: kubectl node-ipam ")
    made = run(installed, elsewhere, "certs", "generate", "--dns-name", "localhost", "--out", "c")
    assert made.returncode == 0, made.stderr
    assert {p.name for p in (elsewhere / "c").iterdir()} == {"ca.crt", "tls.crt", "tls.key"}
