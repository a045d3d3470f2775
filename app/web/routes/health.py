"""``/healthz``, ``/readyz`` (no token) and ``/metrics`` (protected like controller-runtime's).

``/healthz`` and ``/readyz`` are ``async``: they only read flags (thread liveness, the
cache's synced flag, timestamps), so they run on the event loop and are never queued
behind work in a thread pool (docs/design.md §7.1: a sync route waited 30 s behind heavy reviews).
The checks themselves, :func:`liveness` and :func:`readiness`, are plain functions that
the health-probe listener (:mod:`app.web.healthprobe`, its own thread) answers with too.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.telemetry import metrics
from app.web.routes.deps import AppState, Protected, State

router = APIRouter(tags=["health"])


def liveness(state: AppState) -> tuple[int, str]:
    """``(HTTP status, text)`` of ``/healthz``: 200 ``ok``; 503 with the reason when the
    controller is unhealthy (a stuck watch, or a Lease that cannot be taken because its
    namespace does not exist) or a background task is (the certificate sync stopped or
    keeps failing). Reads flags only: safe from any thread, never blocks."""
    checks = [state.controller.healthy] if state.controller is not None else []
    checks += [task.healthy for task in state.background]
    for check in checks:
        healthy, reason = check()
        if not healthy:
            return 503, f"unhealthy: {reason}\n"
    return 200, "ok\n"


def readiness(state: AppState) -> tuple[int, str]:
    """``(HTTP status, text)`` of ``/readyz``: 200 ``ok`` once the cluster cache is synced
    (or when running without a controller) and every condition of ``state.readiness`` holds
    (the webhook is in force: caBundle verifies the served certificate, docs/design.md §5
    Health); else 503 ``not ready: <what it waits for>`` (the kinds not listed yet). The
    shutdown delay (:mod:`app.web.draining`) does not change it: the endpoint of a
    terminating Pod is not ready anyway, and staying ``serving`` lets kube-proxy fall back
    to it while no other endpoint is ready (KEP-1669). Reads flags and cached verdicts
    only: safe from any thread, never blocks."""
    if state.controller is not None and not state.controller.ready():
        waiting = ", ".join(state.controller.cache.unsynced())
        why = f" (waiting for the first list of: {waiting})" if waiting else ""
        return 503, f"not ready: cluster cache not synced{why}\n"
    for condition in state.readiness:
        ready, reason = condition.ready()
        if not ready:
            return 503, f"not ready: {reason}\n"
    return 200, "ok\n"


@router.get("/healthz", response_class=PlainTextResponse, summary="Liveness")
async def healthz(state: State) -> PlainTextResponse:
    """Liveness (:func:`liveness`)."""
    status, text = liveness(state)
    return PlainTextResponse(text, status_code=status)


@router.get("/readyz", response_class=PlainTextResponse, summary="Readiness")
async def readyz(state: State) -> PlainTextResponse:
    """Readiness (:func:`readiness`)."""
    status, text = readiness(state)
    return PlainTextResponse(text, status_code=status)


@router.get("/metrics", dependencies=[Protected], summary="Prometheus metrics")
def metrics_endpoint() -> Response:
    """Prometheus text exposition of the process registry."""
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
