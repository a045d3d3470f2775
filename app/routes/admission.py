"""``POST /validate`` and ``POST /mutate``: AdmissionReview v1 in, AdmissionReview v1 out.

Thin shell over :mod:`app.admission`: read and decode the body (400 with a reason for
anything that is not an AdmissionReview, like controller-runtime's webhook server),
take a snapshot of the live cache when it is synced, call the pure decision, answer
HTTP 200 with the response review, and count the request by path and verdict.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app import admission, metrics
from app.logs import log_event
from app.routes.deps import AppState, BodyError, State, media_type, read_body

log = logging.getLogger("node_ipam_lb.admission")

router = APIRouter(tags=["admission"])


_REVIEW_EXAMPLE = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Service"},
        "resource": {"group": "", "version": "v1", "resource": "services"},
        "operation": "CREATE",
        "namespace": "default",
        "name": "web",
        "object": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "annotations": {"io.cilium.nodeipam/match-node-labels": "role in (edge"},
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        },
    },
}
_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"example": _REVIEW_EXAMPLE}},
    },
    "responses": {
        "200": {"description": "AdmissionReview v1 with `response` (uid echoed)"},
        "400": {"description": "The body is not an AdmissionReview; `detail` says why"},
    },
}


@router.post("/validate", summary="Validating admission webhook", openapi_extra=_OPENAPI)
async def validate(request: Request, state: State) -> JSONResponse:
    """Deny a malformed node selector annotation; warn about risky but valid Services."""
    return await _review(request, state, path="/validate")


@router.post("/mutate", summary="Mutating admission webhook", openapi_extra=_OPENAPI)
async def mutate(request: Request, state: State) -> JSONResponse:
    """Default ``spec.loadBalancerClass`` when ``default-lb-service-ipam`` is ``nodeipam``."""
    return await _review(request, state, path="/mutate")


async def _review(request: Request, state: AppState, *, path: str) -> JSONResponse:
    started = time.perf_counter()
    try:
        review = admission.parse_review(await _decode(request))
        decision = _decide(review, state, path=path)
        body = admission.review_response(review, decision)
    except (BodyError, admission.ReviewError) as err:
        metrics.observe_webhook(path=path, verdict="invalid", seconds=time.perf_counter() - started)
        log_event(log, "admission request rejected", path=path, status=400, reason=str(err))
        return JSONResponse({"detail": str(err)}, status_code=400)
    metrics.observe_webhook(
        path=path, verdict=decision.verdict, seconds=time.perf_counter() - started
    )
    if not decision.allowed or decision.patch:
        log_event(
            log,
            f"admission {decision.verdict}",
            path=path,
            uid=review.uid,
            operation=review.operation,
            service=f"{review.namespace}/{review.name}",
            dry_run=review.dry_run,
            message=decision.message,
        )
    return JSONResponse(body, status_code=200)


async def _decode(request: Request) -> Any:
    if media_type(request) != "application/json":
        raise BodyError(
            f"Content-Type: Unsupported value: {request.headers.get('content-type', '')!r}:"
            " supported value: application/json"
        )
    raw = await read_body(request)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise BodyError(f"body: Invalid value: not UTF-8 (byte {err.start})") from err
    except RecursionError as err:
        raise BodyError("body: Invalid value: JSON nested too deeply") from err
    except ValueError as err:
        raise BodyError(f"body: Invalid value: not JSON: {err}") from err


def _decide(
    review: admission.AdmissionRequest, state: AppState, *, path: str
) -> admission.Decision:
    if path == "/mutate":
        return admission.mutate(review, settings=state.selection)
    return admission.validate(review, settings=state.selection, snapshot=_snapshot(review, state))


def _snapshot(
    review: admission.AdmissionRequest, state: AppState
) -> admission.ClusterSnapshot | None:
    cache = state.cache
    if not review.checked or cache is None or not cache.synced:
        return None
    return admission.ClusterSnapshot(
        nodes=cache.nodes(),
        endpoint_slices=cache.endpoint_slices(review.namespace, review.name),
        now=state.clock(),
    )
