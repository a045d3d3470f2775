"""``python -m tests.fakeapi --port PORT --seed FILE`` prints its URL and serves the seed."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_standalone_server_prints_url_and_serves_seeded_objects_with_status() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakeapi",
            "--port",
            "0",
            "--seed",
            "tests/data/cases/kind-4node/cluster.yaml",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/api/v1/nodes/kind-worker", timeout=5) as resp:
            node = json.load(resp)
        with urllib.request.urlopen(f"{url}/api/v1/services", timeout=5) as resp:
            services = json.load(resp)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert node["status"]["addresses"] == [
        {"address": "10.89.0.6", "type": "InternalIP"},
        {"address": "kind-worker", "type": "Hostname"},
    ]
    assert node["metadata"]["uid"] == "36f675cc-81e7-4ef5-a8e2-5d940ed90475"
    assert {s["metadata"]["name"] for s in services["items"]} >= {"nginx-cluster", "nginx-local"}
    assert proc.returncode == 0


def test_standalone_server_rejects_a_missing_seed_file() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.fakeapi", "--port", "0", "--seed", "no/such/file.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "no/such/file.yaml" in result.stderr
