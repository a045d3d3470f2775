"""Helpers for driving ``node-ipam-lb preview`` through typer's CliRunner."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli

ROOT = Path(__file__).resolve().parents[2]
KIND_4NODE = ROOT / "examples" / "kind-4node"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def preview(*args: str, stdin: str | None = None) -> Run:
    result = CliRunner().invoke(cli, ["preview", *args], input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


def parse_table(text: str) -> list[dict[str, str]]:
    """Split a kubectl-style table by the header's column offsets."""
    lines = text.rstrip("\n").splitlines()
    header = lines[0]
    columns = list(re.finditer(r"\S+", header))
    names = [m.group() for m in columns]
    starts = [m.start() for m in columns]
    rows = []
    for line in lines[1:]:
        cells = [line[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


@pytest.fixture
def write(tmp_path: Path):  # type: ignore[no-untyped-def]
    def _write(text: str, name: str = "dump.yaml") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return _write
