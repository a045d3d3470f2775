"""``/metrics`` (issue 13, finding 6): no ``*_created`` twin families, and ``process_*``."""

from __future__ import annotations

from tests.web.conftest import AppClient


def test_no_created_families_and_process_metrics(client: AppClient) -> None:
    client.post("/validate", json={})  # make sure some counters have samples
    text = client.get("/metrics").text
    assert "controller_runtime_webhook_requests_total" in text
    assert "_created" not in text
    for family in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ):
        assert f"\n{family} " in text, family
