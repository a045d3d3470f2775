"""bench/bench_hostile.py runs its six attacks end to end at a tiny scale (correctness only:
each attack reaches ``serve`` and gets the answers the bounds promise; no timings)."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    blocks = [block for block in printed if not block.startswith("serve: ")]
    assert all("before:" in block and "now:" in block for block in blocks)
    probed = [block for block in printed if block.startswith("serve: ")]
    assert len(probed) == 2 and all("health-probe port http://127.0.0.1:" in b for b in probed)
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


def test_the_probes_run_in_a_process_of_their_own_and_return_their_figures() -> None:
    # A kubelet is never inside the attacker: the probe threads must not share the bench
    # process (and its GIL) with the attackers' threads.
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self._answer()

        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    target = bench_hostile.ProbeTarget(
        url=url, ca=Path("unused"), health_url=url + "/healthz", pid=os.getpid()
    )
    try:
        with bench_hostile.probing(target, period=0.01) as probe:
            time.sleep(0.5)
    finally:
        server.shutdown()
        server.server_close()
    assert probe.pid not in (0, os.getpid())
    assert probe.health and probe.ordinary
    assert probe.ordinary_status == {200: len(probe.ordinary)}
    assert probe.rss_peak_mb > 0  # this process's RSS, read from the other one
