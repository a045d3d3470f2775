"""The bundled real-cluster cases (tests/data/cases, copied from the team's shared cases)."""

from __future__ import annotations

from pathlib import Path

CASES = Path(__file__).resolve().parent / "data" / "cases"


def read_expected(case: Path, name: str = "expected.txt") -> dict[str, list[str] | None]:
    """``expected.txt`` of a case (what Cilium's Node IPAM publishes), or another file of
    the same form: ``{"namespace/name": [ip, ...]}``, ``None`` for ``untouched`` (not
    managed, status left alone); ``#`` lines and blank lines skipped."""
    result: dict[str, list[str] | None] = {}
    for line in (case / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        result[key.strip()] = (
            None if value == "untouched" else [ip for ip in value.split(",") if ip]
        )
    return result


OURS = "expected-port-ownership.txt"
"""What node-ipam-lb publishes for a case where it differs from Cilium on purpose by port
ownership (docs/design.md §4.9); each file says why. A case without one: ``expected.txt``."""


def read_ours(case: Path) -> dict[str, list[str] | None]:
    """What node-ipam-lb publishes for ``case`` (:data:`OURS` when the case has it, else
    ``expected.txt``), as :func:`read_expected` reads it."""
    return read_expected(case, OURS if (case / OURS).exists() else "expected.txt")
