"""Faults on the real control plane: kube-apiserver SIGKILLed mid cold start, etcd
restarted under changes, etcd compaction between the pages of a List, API Priority and
Fairness throttling, a webhook SIGSTOPped during ``kubectl apply``; and the fault hooks
themselves.

One audited control plane for the module (``AUDIT_CONTROLLERS``: the API server's audit
log says who wrote which status when, and who held the Lease then). Each scenario makes a
fresh world (namespace, Nodes, Services, EndpointSlices) and two ``serve`` replicas with
leader election, changes Nodes, Services and EndpointSlices while the fault happens, and
checks: nothing lost (every managed Service's status equals ``preview`` on a dump of the
cluster), no status write to an unmanaged Service, none by a replica not holding the
Lease, none that repeats the previous one. ``python -m bench.bench_faults`` runs these and
the slow ones (a 20 s outage, idle-watch compaction, certificate loss) and
prints the figures.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import faults, faultworld
from tests.controlplane.build import Binaries
from tests.controlplane.plane import AUDIT_CONTROLLERS, ControlPlane
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

CONTINUE_EXPIRED = "The provided continue parameter is too old to display a consistent list"


@pytest.fixture(scope="module")
def plane(control_plane_binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(control_plane_binaries, audit_policy=AUDIT_CONTROLLERS) as plane:
        yield plane


def _clean(result: dict[str, Any], *, warming_until: float = 0.0) -> None:
    """The invariants every scenario keeps. ``warming_until``: seconds into the world
    until which a 403 is the restarted API server's (it serves before its RBAC caches
    are synced and before ``/readyz``), not a gap in deploy/'s roles."""
    details = json.dumps(result["details"], indent=1)
    assert result["lost"] == 0, details
    assert result["unmanaged"] == 0, details
    assert result["not_leader"] == 0, details
    assert result["double"] == 0, details
    late = [at for at in result["details"]["refused_at"] if at > warming_until]
    assert not late, details
    assert result["changes"] > 0


# -- the hooks -----------------------------------------------------------------------------


def test_apiserver_restart_keeps_address_data_and_credentials(plane: ControlPlane) -> None:
    plane.kubectl("create", "namespace", "hooks")
    plane.kubectl("create", "serviceaccount", "hooks", "-n", "hooks")
    token = plane.token_for("hooks", "hooks")
    url = plane.url
    pid = plane.pids()["kube-apiserver"]
    took = plane.restart_apiserver(kill=True)
    assert plane.url == url and plane.pids()["kube-apiserver"] != pid
    assert took > 0
    assert plane.kubectl("get", "namespace", "hooks").returncode == 0  # etcd kept
    status, body = plane.request("GET", "/api/v1/namespaces/hooks", token=token)
    assert status == 403, body  # authenticated (same signing key), not authorized
    assert "system:serviceaccount:hooks:hooks" in body["message"]


def test_compaction_expires_old_revisions_and_a_continue_token(plane: ControlPlane) -> None:
    """The real 410 of a List continued after compaction; the fake answers the same
    (tests/fakeapi/watch.py)."""
    for i in range(3):
        plane.kubectl("create", "namespace", f"compact-{i}")
    status, page = plane.request("GET", "/api/v1/namespaces?limit=1")
    assert status == 200
    token = page["metadata"]["continue"]
    old = plane.etcd_revision()
    revision = plane.compact_etcd()
    assert revision > old
    with pytest.raises(RuntimeError, match="required revision has been compacted"):
        plane.etcd("/v3/kv/range", {"key": base64.b64encode(b"a").decode(), "revision": old})
    # The watch cache drops its List snapshots once its compactor polls (<= 15 s).
    answer: dict[str, Any] = {}

    def expired() -> bool:
        code, body = plane.request("GET", f"/api/v1/namespaces?limit=1&continue={token}")
        answer.update(code=code, body=body)
        return code == 410

    wait_for("the continue token expires", expired, timeout=30)
    body = answer["body"]
    assert (body["reason"], body["code"]) == ("Expired", 410)
    assert body["message"].startswith(CONTINUE_EXPIRED)


def test_apf_rejects_with_retry_after(plane: ControlPlane) -> None:
    """What API Priority and Fairness answers beyond a level's seats: 429, plain text,
    Retry-After (the fake's injected 429 is the same: test_faults.py in
    tests/fakeapi_contract)."""
    plane.kubectl("create", "namespace", "apf")
    plane.kubectl("create", "serviceaccount", "apf", "-n", "apf")
    token = plane.token_for("apf", "apf")
    plane.throttle("system:serviceaccount:apf:apf", resources=[("", "nodes")], shares=0)
    try:
        answers: list[tuple[int, Any]] = []

        def burst() -> bool:
            threads = [
                threading.Thread(
                    target=lambda: answers.append(
                        plane.request("GET", "/api/v1/nodes", token=token)
                    )
                )
                for _ in range(24)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return any(code == 429 for code, _ in answers)

        wait_for("a 429 in a burst of concurrent requests", burst, timeout=30)
        rejected = [body for code, body in answers if code == 429]
        assert rejected[0] == "Too many requests, please try again later.\n"
    finally:
        plane.unthrottle()


# -- scenarios -------------------------------------------------------------------------------


def test_apiserver_sigkill_mid_cold_start_back_after_2s(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """SIGKILL at the first status write of a cold start, back 2 s later (plus its own
    start-up): the replicas' watches break, the new server's watch cache does not know
    their resourceVersions (410, re-list), the leader cannot renew; nothing lost."""
    result = faults.run_scenario(
        "apiserver SIGKILL, back after 2 s",
        plane,
        tmp_path,
        faults.apiserver_kill(2.0),
        services=24,
        converge_timeout=60,
    )
    _clean(result, warming_until=result["ready_at_s"] + 1.0)
    assert result["status_writes"] >= 24


def test_etcd_restart_under_changes_loses_nothing(plane: ControlPlane, tmp_path: Path) -> None:
    """etcd SIGTERMed and started again on a converged world while changes go on:
    kube-apiserver holds the leader's Lease renew until etcd answers, longer than the
    renew deadline, so the leader's term lapses by its own clock and the changes it saw
    meanwhile were not enqueued. The late renew must start a new term (a full resync),
    not resume the old one: before that fix 3 runs in 6 kept a stale status for good."""
    result = faults.run_scenario(
        "etcd restart", plane, tmp_path, faults.etcd_restart, services=24, warm=True
    )
    _clean(result)
    assert result["down_s"] > 2.0, "etcd was not down long enough to hold a renew"


def test_throttled_cold_start_waits_for_retry_after(plane: ControlPlane, tmp_path: Path) -> None:
    """A cold start of 48 Services with 16 workers while APF gives the controller three
    seats and rejects the rest: 429s, each retried no sooner than its Retry-After (1 s),
    every status right at the end."""
    plane.throttle(faultworld.SA_USER)
    try:
        result = faults.run_scenario(
            "APF throttling, cold start",
            plane,
            tmp_path,
            faults.throttled,
            services=48,
            extra=("--workers=16",),
            converge_timeout=60,
        )
    finally:
        plane.unthrottle()
    _clean(result)
    assert result["codes"].get(429, 0) >= 1, result["codes"]
    assert result["min_retry_gap_s"] is not None
    assert result["min_retry_gap_s"] >= 0.95  # Retry-After: 1 (server clock, ms precision)


def test_a_list_compacted_between_pages_is_listed_again(plane: ControlPlane) -> None:
    """The informer's initial List (pages of 2 Nodes) is held after page 1 while a Node
    is created and etcd compacted: page 2 gets the real 410 Expired, the informer lists
    again from the start, and its cache holds every Node, the new one included."""
    listed = faults.list_compacted_between_pages(plane, "page")
    assert [e.status for e in listed.errors] == [410]
    assert listed.errors[0].reason.startswith(CONTINUE_EXPIRED)
    assert listed.lists == 1  # the interrupted List never replaced the cache
    assert {*listed.names, listed.late} <= listed.held


def test_a_stopped_webhook_times_out_is_ignored_and_the_reconciler_reports(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """deploy/'s webhooks (failurePolicy Ignore, timeoutSeconds 3) pointed at replica a;
    a is SIGSTOPped: ``kubectl apply`` of a malformed selector is answered after ~3 s and
    admitted, the leader (b, or a's successor) reports InvalidNodeSelector and writes no
    status; with a running again the next apply is denied."""
    seen = faults.webhook_stopped(plane, tmp_path)
    assert seen.admitted.returncode == 0, seen.admitted.stderr
    assert seen.took_s >= 3.0, seen.took_s
    # The API server gave up on each webhook after timeoutSeconds (3 s) and ignored it.
    assert seen.took_s < 3 * 2 + 10, seen.took_s
    assert not seen.status.get("loadBalancer"), seen.status
    got = seen.denied
    assert got.returncode != 0 and "denied the request" in got.stderr, got.stderr
    figures = seen.figures
    assert not figures["not_leader"] and not figures["double"], figures["not_leader"]
    # The leader writes no ingress for it, only our NodesServing condition (reason
    # InvalidNodeSelector, docs/design.md §5).
    bad = [
        json.loads(body)
        for _, _, key, body, _ in figures["writes"]
        if key.endswith("/bad-selector")
    ]
    assert all("loadBalancer" not in (b or {}).get("status", {}) for b in bad), bad
    assert all(
        c.get("reason") == "InvalidNodeSelector"
        for b in bad
        for c in (b or {}).get("status", {}).get("conditions", [])
    ), bad
