"""bench/bench_hostile.py runs its six attacks end to end at a tiny scale (correctness only:
each attack reaches ``serve`` and gets the answers the bounds promise; no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import ADMISSION_BODY_LIMIT
from bench import bench_hostile

pytestmark = pytest.mark.slow

TINY = bench_hostile.Options(
    nodes=20,
    seconds=2.0,
    clients=3,
    selector_bytes=3000,
    malformed_bytes=3000,
    memory_clients=2,
    slow=6,
    slow_interval=0.5,
    slow_seconds=8.0,
    memo_selectors=30,
)


def test_every_attack_runs_against_serve_and_prints_before_and_now(tmp_path: Path) -> None:
    for sub in ("plain", "auth"):
        (tmp_path / sub).mkdir()
    printed: list[str] = []
    figures = bench_hostile.run(TINY, tmp_path, out=printed.append)
    assert set(figures) == set(bench_hostile.BEFORE)
    assert all("before:" in block and "now:" in block for block in printed)
    assert "200:" in figures["cpu"] and "ordinary review" in figures["cpu"]
    assert "/healthz" in figures["loop"]
    assert "413: " in figures["memory"]  # the 7.3 MB reviews
    assert "'closed by serve': 6" in figures["slow"]  # every slow head hit the deadline
    assert "30 distinct no-match selectors {200: 30}" in figures["memo"]
    assert "TokenReviews sent" in figures["auth"] and "401:" in figures["auth"]


def test_review_bodies_are_what_each_attack_says() -> None:
    ordinary = json.loads(bench_hostile.encode(bench_hostile.review_with(None)))
    assert ordinary["request"]["object"]["kind"] == "Service"
    padded = bench_hostile.encode(bench_hostile.review_with(None, pad=100_000))
    assert 100_000 <= len(padded) < 110_000
    near_cap = bench_hostile.encode(
        bench_hostile.review_with(None, pad=ADMISSION_BODY_LIMIT - 4096)
    )
    assert len(near_cap) <= ADMISSION_BODY_LIMIT
    assert bench_hostile.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
