"""The FastAPI application factory (docs/design.md §1: admission, preview, health, metrics)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app import __version__
from app.config import Settings
from app.core.decision import Decider
from app.core.hazards import Hazard
from app.core.nodehealth import NO_UNHEALTHY
from app.telemetry.logs import log_event
from app.web.auth import AllowAll, Authorizer
from app.web.draining import CloseWhenDraining, Draining
from app.web.limits import BodyBudget
from app.web.routes import admission, health, preview
from app.web.routes.deps import (
    AppState,
    BackgroundLike,
    CacheLike,
    ControllerLike,
    Protected,
    ReadinessLike,
    RequestLimits,
    no_hazard,
)

log = logging.getLogger("node_ipam_lb.main")


def create_app(
    settings: Settings,
    *,
    controller: ControllerLike | None = None,
    cache: CacheLike | None = None,
    authorizer: Authorizer | None = None,
    clock: Callable[[], float] = time.time,
    background: Sequence[BackgroundLike] = (),
    readiness: Sequence[ReadinessLike] = (),
    start_worker: bool = False,
    kube_proxy_hazard: Callable[[str | None], Hazard | None] = no_hazard,
    unhealthy: Callable[[], Mapping[str, str]] = lambda: NO_UNHEALTHY,
    decider: Decider | None = None,
    draining: Draining | None = None,
) -> FastAPI:
    """Build the app.

    Args:
        settings: validated process settings; ``settings.webhook`` False leaves out
            ``/validate`` and ``/mutate``.
        controller: started in the lifespan and stopped (Lease released) on shutdown;
            its ``cache`` feeds admission warnings and preview.
        cache: the cluster cache when there is no controller (tests); defaults to
            ``controller.cache``.
        authorizer: access check for preview and ``/metrics``; default open
            (:class:`app.web.auth.AllowAll`, ``--auth none``), which ``settings.auth ==
            "kubernetes"`` does not allow.
        clock: wall clock, epoch seconds (``now`` of the selection).
        background: tasks already running (the certificate sync, the caBundle check),
            checked by ``/healthz`` and stopped on shutdown.
        readiness: conditions ``/readyz`` waits for besides the synced cache (the webhook
            in force, :class:`app.web.webhookready.CaBundleReadiness`).
        start_worker: start the review worker process with the app (``serve``), not on
            the first large review (:class:`app.web.limits.ReviewPools`).
        kube_proxy_hazard: the controller's datapath hazard concerning a Service of that
            ``spec.loadBalancerClass`` while it holds, else ``None`` (docs/design.md
            §4.10, §4.12); preview adds its message to the Services that get addresses.
        unhealthy: the controller's nodes failing their health checks (§4.11), node name
            -> why; preview and the webhook's warnings decide with them.
        decider: the decision path (:class:`app.core.decision.Decider`) of the webhook and
            the REST preview; default a new one, apart from the reconciler's, so that
            reviews (a tenant's dry runs included) cannot evict what the reconciler keeps.
        draining: the shutdown delay's flag (:mod:`app.web.draining`), set by ``serve``'s
            signal handling; default a new one, never set.

    Raises:
        ValueError: the settings do not make valid :class:`SelectionSettings`, or
            ``settings.auth`` is ``kubernetes`` and no ``authorizer`` is given (the
            endpoints would silently be open).
    """
    if authorizer is None and settings.auth == "kubernetes":
        raise ValueError("auth: Required value: --auth kubernetes needs an authorizer")
    selection = settings.selection()
    state = AppState(
        settings=settings,
        selection=selection,
        controller=controller,
        cache=cache if cache is not None else (controller.cache if controller else None),
        authorizer=authorizer if authorizer is not None else AllowAll(),
        clock=clock,
        decider=decider if decider is not None else Decider(selection),
        background=tuple(background),
        readiness=tuple(readiness),
        limits=RequestLimits(budget=BodyBudget(settings.inflight_body_bytes)),
        kube_proxy_hazard=kube_proxy_hazard,
        unhealthy=unhealthy,
        draining=draining if draining is not None else Draining(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if controller is not None:
            controller.start()
        if start_worker and settings.webhook:
            state.limits.pools.start_worker()
        try:
            yield
        finally:
            state.limits.pools.shutdown()
            if controller is not None:
                log.info(
                    "stopping the controller (releasing the leader Lease)"
                    if settings.leader_elect
                    else "stopping the controller"
                )
                await run_in_threadpool(controller.stop)
            for task in background:
                await run_in_threadpool(task.stop)

    app = FastAPI(
        title="node-ipam-lb",
        summary="Node addresses as LoadBalancer ingress (io.cilium/node)",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,  # served below, behind the same access check as preview
        docs_url=None,
        redoc_url=None,
    )
    app.state.node_ipam = state
    app.add_middleware(CloseWhenDraining, draining=state.draining)
    app.add_exception_handler(Exception, _internal_error)
    app.include_router(health.router)
    if settings.webhook:
        app.include_router(admission.router)
    app.include_router(preview.router)
    _add_docs(app)
    return app


def _add_docs(app: FastAPI) -> None:
    """``/openapi.json``, ``/docs`` (Swagger UI) and ``/redoc``, protected like preview:
    with ``--auth kubernetes`` they need a token allowed to ``get`` the path
    (docs/design.md §7.1)."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Protected])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Protected])
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False, dependencies=[Protected])
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """Last resort for an exception no route turned into a 4xx: a ``metav1.Status``-like
    JSON 500 with a reason, logged (uvicorn logs the traceback), never a bare text 500."""
    reason = f"internal error: {exc!r:.200}"
    log_event(
        log, "request failed", level=logging.ERROR, path=request.url.path, status=500, reason=reason
    )
    # Starlette answers this outside the middleware stack: close here as CloseWhenDraining does.
    state = getattr(request.app.state, "node_ipam", None)
    draining = state is not None and state.draining.is_set()
    return JSONResponse(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "InternalError",
            "code": 500,
            "message": reason,
            "detail": reason,
        },
        status_code=500,
        headers={"Connection": "close"} if draining else None,
    )
