"""The bundled real-cluster cases (tests/data/cases, copied from the team's shared cases)."""

from __future__ import annotations

from pathlib import Path

CASES = Path(__file__).resolve().parent / "data" / "cases"


def read_expected(case: Path) -> dict[str, list[str] | None]:
    """``expected.txt`` of a case: ``{"namespace/name": [ip, ...]}``, ``None`` for
    ``untouched`` (not managed, status left alone); ``#`` lines and blank lines skipped."""
    result: dict[str, list[str] | None] = {}
    for line in (case / "expected.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        result[key.strip()] = (
            None if value == "untouched" else [ip for ip in value.split(",") if ip]
        )
    return result
