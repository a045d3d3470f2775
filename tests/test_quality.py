"""Lint, strict typing and the layering contracts run as part of the test suite (one command).

The import contracts live in ``pyproject.toml`` (``[tool.importlinter]``); docs/design.md §9
says what each layer may import.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def imports_of_test_modules(source: str) -> list[str]:
    """The imports in ``source`` that name a test module (a dotted component ``test_*``) or
    import a ``test_*`` name from a module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(part.startswith("test_") for name in modules for part in name.split(".")):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_imports_a_test_module() -> None:
    """What test modules share lives in helper modules beside them, ``conftest.py`` or
    tests.support (tests/support/README.md), never in a ``test_*`` module that another
    imports (import-linter's wildcards replace whole module names, so this check is here)."""
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")])
        if (hits := imports_of_test_modules(path.read_text()))
    }
    assert found == {}


def test_the_check_for_imported_test_modules_sees_every_form() -> None:
    source = (
        "import tests.core.test_x\n"
        "from tests.web.test_auth import FakeReviews\n"
        "from tests.cluster import test_cluster_live as live\n"
        "from . import test_y\n"
        "from tests.web.support import FakeReviews\n"
    )
    assert [hit.split(":")[0] for hit in imports_of_test_modules(source)] == [
        "line 1",
        "line 2",
        "line 3",
        "line 4",
    ]


# -- the product runs no test code (issue 31) ----------------------------------------------
# lint-imports forbids app -> tests/bench imports (pyproject.toml); this also catches what an
# import contract cannot see: a module name or path handed to a subprocess or importlib
# ("-m", "tests.fakeapi"; ROOT / "tests" / "fakeapi"). Docstrings and comments may cite tests.
NOT_PRODUCT = ("tests", "bench")
NAMED = re.compile(r"(?<![\w.-])(?:tests|bench)(?:[./]\w|$)")


def references_to_test_code(source: str) -> list[str]:
    """``line: what`` for every import of, and every string (not a docstring) naming,
    a module or path under ``tests/`` or ``bench/`` in Python ``source``."""
    tree = ast.parse(source)
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in documentation
            and (node.value in NOT_PRODUCT or NAMED.search(node.value))
        ):
            found.append(f"{node.lineno}: {node.value!r}")
            continue
        else:
            continue
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in NOT_PRODUCT]
    return found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import tests.fakeapi\n", ["1: import tests.fakeapi"]),
        ("from bench.procs import machine\n", ["1: import bench.procs"]),
        ('args = [sys.executable, "-m", "tests.fakeapi"]\n', ["1: 'tests.fakeapi'"]),
        ('path = ROOT / "tests" / "fakeapi"\n', ["1: 'tests'"]),
        ('importlib.import_module("tests.controlplane")\n', ["1: 'tests.controlplane'"]),
        (
            'cmd = f"python -m tests.controlplane up {x}"\n',
            ["1: 'python -m tests.controlplane up '"],
        ),
        ('def f():\n    """Checked by tests/core/test_x.py."""\n', []),
        ('X = 1\n"""Attribute docstring citing tests/test_docs.py."""\n', []),
        ("# see tests/test_user_messages.py\nx = 1\n", []),
        ('names = ["contests.x", "latest", "my_tests/x", "attests"]\n', []),
        ("from .tests import x\nimport testsuite\n", []),
    ],
)
def test_the_check_for_test_code_in_the_product_sees_imports_and_names(
    source: str, found: list[str]
) -> None:
    assert references_to_test_code(source) == found


def test_the_product_imports_or_launches_no_test_code() -> None:
    """app/ neither imports nor starts (``python -m tests...``) anything of tests/ or
    bench/: an installed ``node-ipam-lb`` has neither (tests/test_wheel.py)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "app").rglob("*.py"))
        for line in references_to_test_code(path.read_text())
    ]
    assert found == []


def test_runtime_dependencies_are_what_the_product_imports() -> None:
    """pyproject.toml's ``dependencies`` name exactly the distributions whose modules app/
    imports (test-only packages such as httpx and jsonpatch belong under ``[dev]``): a
    module imported but not declared breaks the wheel and the image the day a transitive
    dependency drops it; one declared but not imported bloats the image."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    imported: set[str] = set()
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported - set(sys.stdlib_module_names) if m not in ("app",)}
    distributions = metadata.packages_distributions()
    needed = {canonicalize_name(distributions[m][0]) for m in third_party}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    assert needed == declared, {
        "imported, not declared": sorted(needed - declared),
        "declared, not imported": sorted(declared - needed),
    }


def test_verdict_codes_are_spelled_in_one_place() -> None:
    """Every Node verdict code is a constant of app/core/codes.py; no other module of app/
    spells one as a string literal (docstrings aside), so a renamed code cannot leave a
    comparison that silently never matches."""
    import app.core.codes as codes

    spelled = {v for k, v in vars(codes).items() if k.isupper() and isinstance(v, str)}
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        if path.name == "codes.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in spelled
                and id(node) not in docstrings
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, found
