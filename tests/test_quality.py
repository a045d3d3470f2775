"""Lint, strict typing and the layering contracts run as part of the test suite (one command).

The import contracts live in ``pyproject.toml`` (``[tool.importlinter]``); docs/design.md §9
says what each layer may import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_is_clean() -> None:
    result = _run("ruff", "check", "app", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run("ruff", "format", "--check", "app", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_app() -> None:
    result = _run("mypy", "app")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_hold() -> None:
    """``lint-imports``: core is pure, only app.kube imports kubernetes, web and controller
    are independent and meet only in app.server."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout
