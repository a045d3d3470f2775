"""Messages users read name settings as users set them: the flag without ``--``
(``per-node-address-fallback``), which is also the Helm value ``settings.<name>`` and the
``NODE_IPAM_*`` variable's stem, never the Python field (``per_node_address_fallback``).

Scans every string of ``app/`` that can reach a user (Event notes, preview reasons and
warnings, admission messages, log lines and their field names, CLI help) for a setting's
Python name. Documentation strings are for readers of the code and are skipped, except
the CLI commands' docstrings, which typer prints as ``--help``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from app.config import Settings, effective

ROOT = Path(__file__).resolve().parents[1]
SNAKE_SETTINGS = sorted(name for name in Settings.model_fields if "_" in name)
"""Settings whose Python name differs from the flag (one-word names are the same)."""
PATTERN = re.compile(r"(?<!\w)(" + "|".join(SNAKE_SETTINGS) + r")(?!\w)")
LOG_CALLS = {"log_event", "debug", "info", "warning", "error", "exception", "log"}
HELP_FILES = {"app/cli.py"}
"""Files whose function docstrings are user-facing (typer turns them into ``--help``)."""


def _documentation(tree: ast.AST) -> set[int]:
    """ids of the string constants that are documentation: docstrings and the string
    statements documenting an attribute."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def offenders(source: str, *, path: str = "app/x.py") -> list[str]:
    """``path:line: text`` of each user-facing string in ``source`` that names a setting
    by its Python name, and of each log call passing one as a field name. A string that
    is exactly a setting's Python name is an identifier (a mapping key, a validator's
    field), not a message."""
    tree = ast.parse(source)
    skipped = _documentation(tree)
    if path in HELP_FILES:
        skipped -= {
            id(node.body[0].value)  # type: ignore[attr-defined]
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) is not None
        }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in skipped or node.value in SNAKE_SETTINGS:
                continue
            if PATTERN.search(node.value):
                found.append(f"{path}:{node.lineno}: {node.value.strip()[:120]!r}")
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called not in LOG_CALLS:
                continue
            for keyword in node.keywords:
                if keyword.arg in SNAKE_SETTINGS:
                    found.append(f"{path}:{node.lineno}: log field {keyword.arg}")
    return found


def test_no_user_facing_message_of_app_names_a_setting_by_its_python_name() -> None:
    found = [
        hit
        for file in sorted((ROOT / "app").rglob("*.py"))
        for hit in offenders(file.read_text(), path=file.relative_to(ROOT).as_posix())
    ]
    assert not found, "use the flag name (per-node-address-fallback):\n" + "\n".join(found)


def test_the_start_up_settings_line_uses_the_flag_names() -> None:
    logged = effective(Settings())
    assert "per-node-address-fallback" in logged and "default-lb-service-ipam" in logged
    assert not [name for name in logged if "_" in name]


@pytest.mark.parametrize(
    ("source", "path", "flagged"),
    [
        ('note = "option per_node_address_fallback changes this"\n', "app/x.py", 1),
        ('note = f"{n} hidden; per_node_address_fallback advertises them"\n', "app/x.py", 1),
        ("log_event(LOG, 'hazard', ip_mode=mode)\n", "app/x.py", 1),
        ("LOG.warning('x', extra={}, allowed_namespaces=1)\n", "app/x.py", 1),
        ('note = "setting per-node-address-fallback changes this"\n', "app/x.py", 0),
        ('flags = {"per_node_address_fallback": value}\n', "app/x.py", 0),
        ('def f():\n    """Reads ``per_node_address_fallback``."""\n', "app/x.py", 0),
        ('X = 1\n"""Bounded by ``not_ready_grace_seconds``."""\n', "app/x.py", 0),
        ('def preview():\n    """Honours ip_mode."""\n', "app/cli.py", 1),
        ('note = "NODE_IPAM_PER_NODE_ADDRESS_FALLBACK is set"\n', "app/x.py", 0),
    ],
    ids=[
        "Python name in a message",
        "Python name in an f-string",
        "Python name as a log_event field",
        "Python name as a logger field",
        "flag name in a message",
        "identifier as a mapping key",
        "function docstring",
        "attribute docstring",
        "CLI command help",
        "environment variable",
    ],
)
def test_the_scan_tells_messages_from_identifiers_and_documentation(
    source: str, path: str, flagged: int
) -> None:
    assert len(offenders(source, path=path)) == flagged
