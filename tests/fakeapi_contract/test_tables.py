"""Pure parts of the Table output: apimachinery's HumanDuration and Accept negotiation."""

from __future__ import annotations

import pytest

from tests.fakeapi.tables import human_duration, wants_table


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 120, "3h2m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (100 * 86400, "100d"),
        (3 * 365 * 86400 + 5 * 86400, "3y5d"),
        (-1, "<invalid>"),
    ],
)
def test_age_column_uses_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize(
    ("accept", "table"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True),
        ("application/json", False),
        ("application/json, application/json;as=Table;v=v1;g=meta.k8s.io", False),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", False),
    ],
    ids=["kubectl get", "plain client", "table not preferred", "only v1beta1 tables"],
)
def test_table_only_when_preferred(accept: str, table: bool) -> None:
    assert wants_table(accept) is table
