"""``POST /validate`` and ``POST /mutate``: AdmissionReview v1 in, AdmissionReview v1 out.

Thin shell over :mod:`app.core.admission`: read the body on the event loop; decode it (400
with a reason for anything that is not an AdmissionReview, like controller-runtime's
webhook server, including strings that are not valid Unicode), take a snapshot of the
live cache when it is synced, call the pure decision and render the response review; on
the event loop when the body is small and the answer needs no ``select`` (a hit in the
app's :class:`~app.core.selection_memo.SelectionMemo`, ``/mutate``), else in the thread pool.
Answer HTTP 200 and only then count the request by path and verdict. Anything else the
body makes fail is a logged 400, never a 500.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.core import admission
from app.core.dump import lone_surrogate
from app.core.selection_memo import NotMemoised
from app.telemetry import metrics
from app.telemetry.logs import log_event
from app.web.routes.deps import AppState, BodyError, State, media_type, read_body

log = logging.getLogger("node_ipam_lb.admission")

router = APIRouter(tags=["admission"])

INLINE_BODY_BYTES = 64 * 1024
"""Bodies up to this size are decoded on the event loop (a 2.5 KB review: ~50 µs); larger
ones (up to 7 MiB) only in the thread pool, so one cannot stall the other requests."""


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
        raw = await _read(request)
        try:
            if len(raw) > INLINE_BODY_BYTES:
                raise NotMemoised("body too large to decode on the event loop")
            # A small body whose answer needs no select() (a memo hit, /mutate, no cache):
            # about 0.2 ms, cheaper on the loop than a hop to the thread pool (which cost
            # a third of the requests/s at 50 connections).
            review, decision, response = _answer(raw, state, path=path, memo_only=True)
        except NotMemoised:
            # Off the event loop: select() over 5,000 cached nodes takes milliseconds, and
            # /healthz and the other requests must not wait for it (measured: /healthz
            # median under 8 concurrent validate-5000 clients 120-140 ms inline, ~55 ms in
            # the pool).
            review, decision, response = await run_in_threadpool(
                _answer, raw, state, path=path, memo_only=False
            )
    except (BodyError, admission.ReviewError) as err:
        return _rejected(path, started, reason=str(err))
    except Exception as err:  # a body our decision code cannot handle: the sender's 400, logged
        log.exception("admission request could not be processed (path %s)", path)
        return _rejected(path, started, reason=f"body: cannot be processed: {err!r:.200}")
    # Counted only now that the response is rendered: a failed render is not an "allowed".
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
    return response


def _rejected(path: str, started: float, *, reason: str) -> JSONResponse:
    metrics.observe_webhook(path=path, verdict="invalid", seconds=time.perf_counter() - started)
    log_event(log, "admission request rejected", path=path, status=400, reason=reason)
    return JSONResponse({"detail": reason}, status_code=400)


def _answer(
    raw: bytes, state: AppState, *, path: str, memo_only: bool
) -> tuple[admission.AdmissionRequest, admission.Decision, JSONResponse]:
    """Decode, decide and render (the response is rendered here, so it cannot fail later).

    Raises:
        NotMemoised: ``memo_only`` and the decision would have to call ``select``.
    """
    review = admission.parse_review(_decode(raw))
    decision = _decide(review, state, path=path, memo_only=memo_only)
    return review, decision, JSONResponse(admission.review_response(review, decision))


async def _read(request: Request) -> bytes:
    if media_type(request) != "application/json":
        raise BodyError(
            f"Content-Type: Unsupported value: {request.headers.get('content-type', '')!r}:"
            " supported value: application/json"
        )
    return await read_body(request)


def _decode(raw: bytes) -> Any:
    """The JSON body; every string must be valid Unicode (kube-apiserver sends UTF-8, which
    cannot hold the lone surrogates a JSON ``\\ud800`` escape makes)."""
    try:
        text = raw.decode("utf-8")
        body = json.loads(text)
    except UnicodeDecodeError as err:
        raise BodyError(f"body: Invalid value: not UTF-8 (byte {err.start})") from err
    except RecursionError as err:
        raise BodyError("body: Invalid value: JSON nested too deeply") from err
    except ValueError as err:
        raise BodyError(f"body: Invalid value: not JSON: {err}") from err
    if "\\u" in text and (field := lone_surrogate(body)) is not None:
        raise BodyError(
            f"{field or 'body'}: Invalid value: not valid Unicode (lone UTF-16 surrogate)"
        )
    return body


def _decide(
    review: admission.AdmissionRequest, state: AppState, *, path: str, memo_only: bool
) -> admission.Decision:
    if path == "/mutate":
        return admission.mutate(review, settings=state.selection)
    snapshot = _snapshot(review, state, memo_only=memo_only)
    return admission.validate(review, settings=state.selection, snapshot=snapshot)


def _snapshot(
    review: admission.AdmissionRequest, state: AppState, *, memo_only: bool
) -> admission.ClusterSnapshot | None:
    cache = state.cache
    if not review.checked or cache is None or not cache.synced:
        return None
    # The cache's NodeIndex (one per Node snapshot, selector matches memoised) and the
    # app's memo: a Service seen before with the same Nodes and EndpointSlices costs no
    # select() at all, a new one a single select() (app/core/selection_memo.py says why exact).
    return admission.ClusterSnapshot(
        nodes=cache.node_index(),
        endpoint_slices=cache.endpoint_slices(review.namespace, review.name),
        now=state.clock(),
        memo=state.admission_memo,
        memo_only=memo_only,
    )
