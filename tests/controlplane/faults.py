"""Fault scenarios on the real control plane, shared by ``test_faults.py`` and
``bench/bench_faults.py``; the world they run in is faultworld.py.

A :class:`~tests.controlplane.faultworld.World` is one control plane (audited with
:data:`AUDIT_CONTROLLERS`), deploy/ applied, a namespace of Nodes, Services (some
``externalTrafficPolicy: Local`` with EndpointSlices) and one Service of another class,
and ``serve`` replicas with leader election. :class:`Changes` makes a bounded loop of
changes to Nodes, Services and EndpointSlices as the admin while a fault happens.
:meth:`World.figures` reads the API server's audit log and the cluster:

- ``lost``: managed Services whose stored ingress is not what ``preview`` computes on a
  dump of the cluster (``app.preview.run.preview_dump``, the controller's own rules);
- ``unmanaged``: status writes by the controller to a Service it does not manage;
- ``not_leader``: status writes by a replica that did not hold the Lease at that moment
  (the last successful Lease write before the request names another holder, or is older
  than the Lease duration);
- ``double``: a status write with the same body as the one before it on that Service
  (a write that changed nothing);
- request counts of the controller's ServiceAccount (by status code).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.controller.cache import ClusterCache
from app.controller.informer import Informer
from app.core.views import node_view
from app.kube.client import ApiError, Kind, KubernetesAPI
from tests.controlplane.faultworld import Changes, World, delete_nodes, new_world
from tests.controlplane.plane import ControlPlane
from tests.devenv import manifests
from tests.support.waiting import wait_for


class PausingAPI:
    """``KubernetesAPI`` whose first List stops after its first page: ``between(token)``
    runs there (compaction), then the List goes on with the old continue token."""

    def __init__(self, api: KubernetesAPI, between: Any) -> None:
        self._api, self._between = api, between
        self.paused = False
        self.errors: list[ApiError] = []

    def list_page(
        self,
        kind: Kind,
        *,
        limit: int,
        continue_token: str | None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        try:
            page = self._api.list_page(
                kind, limit=limit, continue_token=continue_token, field_selector=field_selector
            )
        except ApiError as err:
            self.errors.append(err)
            raise
        token = page.get("metadata", {}).get("continue")
        if token and not self.paused:
            self.paused = True
            self._between(token)
        return page

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str | None = None,
    ) -> Any:
        return self._api.watch(
            kind,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            field_selector=field_selector,
        )


@dataclass
class StoppedWebhook:
    """What :func:`webhook_stopped` saw: the ``kubectl apply`` of a malformed selector
    made while the webhook replica was SIGSTOPped (``admitted``, taking ``took_s``), the
    seconds from SIGCONT until the ``InvalidNodeSelector`` Event (``reported_s``), that
    Service's stored ``status``, the next malformed apply (``denied``) and the audit
    figures of :meth:`World.figures`."""

    admitted: subprocess.CompletedProcess[str]
    took_s: float
    reported_s: float
    status: dict[str, Any]
    denied: subprocess.CompletedProcess[str]
    figures: dict[str, Any]


def apply_webhooks(
    plane: ControlPlane, configurations: list[dict[str, Any]], world: World
) -> dict[str, Any]:
    """``kubectl apply`` the webhook ``configurations``
    (:func:`tests.devenv.manifests.webhook_configurations`) and return the walk-through's
    malformed Service in ``world``'s namespace, to probe them with :func:`webhook_denies`
    (kube-apiserver picks new configurations up after a moment)."""
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": configurations})
    plane.kubectl("apply", "-f", "-", input=listing)
    bad = manifests.bad_service()
    bad["metadata"]["namespace"] = world.namespace
    return bad


def webhook_denies(plane: ControlPlane, service: dict[str, Any]) -> bool:
    """A server-side dry run of ``service`` is denied by the validating webhook."""
    got = plane.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps(service), check=False
    )
    return got.returncode != 0 and "denied the request" in got.stderr


def webhook_stopped(plane: ControlPlane, workdir: Path) -> StoppedWebhook:
    """deploy/'s webhooks (failurePolicy Ignore, timeoutSeconds 3) pointed at replica a of
    a fresh world (two replicas, 4 Services); a is SIGSTOPped during ``kubectl apply`` of
    a malformed selector and resumed; then a second malformed Service is applied (a new
    one: an update keeping the admitted selector is let through, the webhook ratchets as
    the API server's own validation does). Every wait is bounded (fails the caller)."""
    world = new_world(plane, workdir, services=4)
    try:
        a, b = world.start_replicas(2)
        world.wait_ready([a, b])
        configurations = manifests.webhook_configurations(a.url, a.ca.read_bytes())
        bad = apply_webhooks(plane, configurations, world)
        wait_for("the validating webhook answers", lambda: webhook_denies(plane, bad))
        world.converge(60)
        a.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            admitted = plane.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
            took = time.monotonic() - started
        finally:
            a.process.send_signal(signal.SIGCONT)
        resumed = time.monotonic()

        def reported() -> str:
            code, body = plane.request(
                "GET", f"/apis/events.k8s.io/v1/namespaces/{world.namespace}/events"
            )
            reasons = [e.get("reason") for e in body.get("items", [])] if code == 200 else []
            return "InvalidNodeSelector" if "InvalidNodeSelector" in reasons else ""

        wait_for("an InvalidNodeSelector Event", reported, timeout=60)
        reported_s = time.monotonic() - resumed
        code, svc = plane.request(
            "GET", f"/api/v1/namespaces/{world.namespace}/services/bad-selector"
        )
        assert code == 200, svc
        bad["metadata"]["name"] = "bad-selector-2"
        again = plane.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
        return StoppedWebhook(admitted, took, reported_s, svc["status"], again, world.figures())
    finally:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            plane.kubectl("delete", kind, "node-ipam-lb", "--ignore-not-found", check=False)
        world.stop_replicas()
        delete_nodes(world)


@dataclass
class PagedList:
    """What :func:`list_compacted_between_pages` saw: the Nodes it created (``names``, and
    ``late``, created while the List was held), the informer's cache afterwards
    (``held``), the List errors (``errors``), how many Lists replaced the cache
    (``lists``), and its timings (``time.monotonic`` seconds): ``expired_after_s`` from
    compaction until the held continue token answered 410, ``resumed`` when the held List
    went on, ``synced`` when the cache was synced."""

    names: list[str]
    late: str
    held: set[str]
    errors: list[ApiError]
    lists: int
    expired_after_s: float
    resumed: float
    synced: float


def list_compacted_between_pages(plane: ControlPlane, prefix: str) -> PagedList:
    """An informer's initial List of Nodes (pages of 2) held after page 1 while a Node is
    created and etcd compacted until the held continue token is expired (410, at most
    30 s); then the List goes on and the informer must list again (sync within 60 s).
    Creates five Nodes ``<prefix>-<run>-<i>`` and one ``…-late``, deletes all six after.
    Raises AssertionError when a wait runs out. Used by test_faults and bench_faults."""
    run = uuid.uuid4().hex[:6]
    names = [f"{prefix}-{run}-{i}" for i in range(5)]
    for name in names:
        plane.request("POST", "/api/v1/nodes", {"metadata": {"name": name}})
    late = f"{prefix}-{run}-late"
    held_at: dict[str, float] = {}

    def between(token: str) -> None:
        plane.request("POST", "/api/v1/nodes", {"metadata": {"name": late}})
        plane.compact_etcd()
        started = time.monotonic()

        def expired() -> bool:
            code, _ = plane.request("GET", f"/api/v1/nodes?limit=2&continue={token}")
            return code == 410

        wait_for("the continue token expires", expired, timeout=30)
        held_at["expired_after_s"] = time.monotonic() - started
        held_at["resumed"] = time.monotonic()

    with plane.api_client() as client:
        api = PausingAPI(KubernetesAPI(client), between)
        cache = ClusterCache()
        informer = Informer(
            kind="nodes",
            api=api,  # type: ignore[arg-type]
            cache=cache,
            to_view=node_view,
            handler=lambda kind, changes: None,
            page_size=2,
        )
        informer.start()
        try:
            wait_for("the informer lists", lambda: "nodes" not in cache.unsynced(), timeout=60)
            synced = time.monotonic()
            held = {view.name for view in cache.nodes()}
        finally:
            informer.stop()
            informer.join(5)
    for name in [*names, late]:
        plane.request("DELETE", f"/api/v1/nodes/{name}")
    return PagedList(
        names, late, held, api.errors, informer.lists,
        held_at["expired_after_s"], held_at["resumed"], synced,
    )  # fmt: skip


def first_status_write(world: World, timeout: float = 150) -> float:
    """Wait until the audit log shows the controller's first status write in this world
    (the cold start is under way); returns the seconds waited."""
    started = time.monotonic()
    needle = f'"namespace":"{world.namespace}"'
    path = world.plane.audit_log_path
    assert path is not None
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        if any(needle in line and '"subresource":"status"' in line for line in text.splitlines()):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no status write within {timeout} s")
        time.sleep(0.05)


Fault = Callable[[World, "Changes"], dict[str, Any]]


def run_scenario(
    name: str,
    plane: ControlPlane,
    workdir: Path,
    fault: Fault,
    *,
    replicas: int = 2,
    services: int = 40,
    lease: tuple[float, float, float] = (15, 10, 2),
    warm: bool = False,
    extra: tuple[str, ...] = (),
    converge_timeout: float = 90,
) -> dict[str, Any]:
    """A fresh world, ``replicas`` serve processes (``warm``: converged before the fault),
    :class:`Changes` going on while ``fault(world, changes)`` runs (it returns when the
    fault is over, with figures of its own), then the time to converge and the audit
    figures. Replicas are stopped and the world's Nodes deleted afterwards."""
    world = new_world(plane, workdir, services=services, lease=lease)
    try:
        started = world.start_replicas(replicas, *extra)
        if warm:
            world.wait_ready(started)
            world.converge(converge_timeout)
        with Changes(world) as changes:
            if warm:
                time.sleep(1.0)  # changes before the fault too
            own = fault(world, changes)
            changes.stop()
        converge_s = world.converge(converge_timeout)
        for r in world.replicas:
            if r.process.poll() is not None:
                raise AssertionError(f"{r.name} exited:\n{r.log.read_text()[-3000:]}")
        figures = world.figures()
        lost = len(world.mismatches())
        return {
            "scenario": name,
            "changes": changes.made,
            "refused_changes": changes.failed,
            "lost": lost,
            "unmanaged": len(figures["unmanaged"]),
            "not_leader": len(figures["not_leader"]),
            "double": len(figures["double"]),
            "unanswered_retries": len(figures["unanswered"]),
            "term_rewrites": len(figures["term_rewrites"]),
            "refused": len(figures["refused"]),
            "converge_s": round(converge_s, 2),
            "requests": figures["requests"],
            "codes": figures["codes"],
            "status_writes": figures["status_writes"],
            "min_retry_gap_s": round(min(figures["retry_gaps"]), 3)
            if figures["retry_gaps"]
            else None,
            "peak_requests_per_s": figures["peak_requests_per_s"],
            "relists": sum(
                r.log_count("resourceVersion expired, re-listing") for r in world.replicas
            ),
            "details": {
                "unmanaged": figures["unmanaged"][:5],
                "not_leader": figures["not_leader"][:5],
                "double": figures["double"][:5],
                "refused": [line for _, line in figures["refused"]][:5],
                "refused_at": [at for at, _ in figures["refused"]],
                "unanswered": figures["unanswered"][:5],
                "term_rewrites": figures["term_rewrites"][:5],
            },
            **own,
        }
    finally:
        world.stop_replicas()
        delete_nodes(world)


def apiserver_kill(downtime: float) -> Fault:
    """SIGKILL kube-apiserver at the cold start's first status write, start it again
    after ``downtime`` seconds; figures: ``down_s`` (kill to ``/readyz``)."""

    def fault(world: World, changes: Changes) -> dict[str, Any]:
        first_status_write(world)
        killed = time.monotonic()
        killed_at = time.time() - world.created
        world.plane.restart_apiserver(kill=True, downtime=downtime)
        return {
            "down_s": round(time.monotonic() - killed, 2),
            "killed_at_s": round(killed_at, 2),
            "ready_at_s": round(time.time() - world.created, 2),
        }

    return fault


def etcd_restart(world: World, changes: Changes) -> dict[str, Any]:
    """SIGTERM etcd and start it again at once; ``down_s``: until kube-apiserver's
    ``/readyz`` is 200 again."""
    stopped = time.monotonic()
    world.plane.restart_etcd()
    return {"down_s": round(time.monotonic() - stopped, 2)}


def compaction_idle(world: World, changes: Changes) -> dict[str, Any]:
    """Stop the changes (the watches go idle), compact etcd, wait 2 s, change again."""
    changes.stop()
    before = changes.made
    time.sleep(2.0)
    revision = world.plane.compact_etcd()
    time.sleep(2.0)
    again = Changes(world, limit=8)
    with again:
        time.sleep(3.0)
    changes.made = before + again.made
    return {"compacted_at": revision}


def throttled(world: World, changes: Changes) -> dict[str, Any]:
    """The plane throttles the controller (:meth:`ControlPlane.throttle`, set before the
    replicas started): wait until converged under it, then lift it."""
    time.sleep(3.0)  # the cold start under way, and changes on top of it
    changes.stop()
    converge_s = world.converge(90)
    world.plane.unthrottle()
    return {"converged_throttled_s": round(converge_s, 2)}
