"""app.core.status.ingress_differs: write only on change, never loop on API defaulting."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.status import ingress_differs

A = {"ip": "10.0.0.1", "ipMode": "VIP"}
B = {"ip": "10.0.0.2", "ipMode": "VIP"}

CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None, bool]] = [
    ("identical lists", [A, B], [A, B], False),
    (
        "stored without ipMode reads back as VIP (API server default)",
        [A],
        [{"ip": "10.0.0.1"}],
        False,
    ),
    (
        "Proxy differs from defaulted VIP",
        [{"ip": "10.0.0.1", "ipMode": "Proxy"}],
        [{"ip": "10.0.0.1"}],
        True,
    ),
    ("empty desired equals absent ingress", [], None, False),
    ("empty desired equals empty stored", [], [], False),
    ("new IP", [A, B], [A], True),
    ("removed IP", [A], [A, B], True),
    ("same IPs in another order differ (we write one canonical order)", [A, B], [B, A], True),
    (
        "a hostname entry from another controller differs",
        [A],
        [{"hostname": "lb.example.com"}],
        True,
    ),
    ("empty hostname equals absent hostname", [A], [{**A, "hostname": ""}], False),
    ("empty ports equal absent ports", [A], [{**A, "ports": []}], False),
    ("port status differs", [A], [{**A, "ports": [{"port": 80, "protocol": "TCP"}]}], True),
    ("something to clear", [], [A], True),
]


@pytest.mark.parametrize(
    ("desired", "stored", "differs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_ingress_differs(
    desired: list[dict[str, Any]], stored: list[dict[str, Any]] | None, differs: bool
) -> None:
    assert ingress_differs(desired, stored) is differs
