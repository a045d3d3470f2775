"""``POST /validate`` and ``POST /mutate``: AdmissionReview v1 in, AdmissionReview v1 out.

Thin shell over :mod:`app.core.admission`: read the body on the event loop (415 unless
``application/json``; 413 past the cap, by ``Content-Length`` first, then by count; 408
when not received within 10 s), taking its share of the byte budget as it arrives;
decode it (400 with a reason for anything that is not an AdmissionReview, like
controller-runtime's webhook server, including strings that are not valid Unicode and the
non-numbers ``NaN``/``Infinity``/``1e999`` Go rejects), take a snapshot of the live cache
when it is synced, call the one core entry (:func:`app.core.admission.validate`, whose
stages the route never sequences itself; :func:`~app.core.admission.mutate` for
``/mutate``) and render the response review; on the event loop when the body is small, the
node selector short and the answer needs no ``select`` (a hit in the app's
:class:`~app.core.decision.Decider`, ``/mutate``), else in a review pool
(:mod:`app.web.limits`; the bookkeeping in :mod:`app.web.reviewqueue`). The verdict is
due within ``review_deadline_seconds`` (else 503, which the API server treats as a webhook
failure: ``failurePolicy``); the cluster-state warnings get ``cluster_check_seconds``
after it and are skipped with one warning saying so when that runs out (docs/design.md
§7.1). Answer HTTP 200 and only then count the request by path and verdict. Anything else
the body makes fail is a logged 400, never a 500.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.core import admission
from app.core.decision import NotMemoised
from app.core.dump import lone_surrogate, long_integer
from app.core.options import SelectionSettings
from app.telemetry import metrics
from app.telemetry.logs import log_event
from app.web.limits import Overloaded
from app.web.reviewqueue import INLINE_BODY_BYTES, Abandoned, BudgetShare, HeavySlot, Job, TooLong
from app.web.routes.deps import (
    MAX_BODY_BYTES,
    AppState,
    BodyError,
    BodyTimeout,
    BodyTooLarge,
    State,
    UnsupportedMediaType,
    declared_length,
    media_type,
    read_body,
)

log = logging.getLogger("node_ipam_lb.admission")

router = APIRouter(tags=["admission"])

INLINE_SELECTOR_CHARS = 1024
"""Node selectors up to this length are parsed on the event loop (well under 1 ms, usually
a cache hit); longer ones in the heavy review pool."""


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
        "408": {"description": "The body was not received within 10 s"},
        "413": {"description": "The body exceeds the cap (`detail` says it)"},
        "415": {"description": "Content-Type is not application/json"},
        "503": {"description": "Overloaded: not decided within the deadline; retry"},
    },
}


@router.post("/validate", summary="Validating admission webhook", openapi_extra=_OPENAPI)
async def validate(request: Request, state: State) -> JSONResponse:
    """Deny a malformed node selector annotation or a port a managed Service may not publish
    (reserved for the node, another Service's nodePort); warn about risky but valid Services."""
    return await _review(request, state, path="/validate")


@router.post("/mutate", summary="Mutating admission webhook", openapi_extra=_OPENAPI)
async def mutate(request: Request, state: State) -> JSONResponse:
    """Default ``spec.loadBalancerClass`` when ``default-lb-service-ipam`` is ``nodeipam``."""
    return await _review(request, state, path="/mutate")


async def _review(request: Request, state: AppState, *, path: str) -> JSONResponse:
    started = time.perf_counter()
    deadline = started + state.settings.review_deadline_seconds
    try:
        if media_type(request) != "application/json":
            raise UnsupportedMediaType(
                f"Content-Type: Unsupported value: {request.headers.get('content-type', '')!r}:"
                " supported value: application/json"
            )
        declared = declared_length(request, limit=MAX_BODY_BYTES)
        share = BudgetShare(state.limits.budget, deadline)
        slot = HeavySlot(state.limits.heavy)
        try:
            if (declared or 0) > INLINE_BODY_BYTES:  # large: wait for a slot before reading
                await slot.take(deadline)
            raw = await read_body(request, received=share.grow)
            review, decision, response = await _decide_off_loop_if_needed(
                raw, state, path=path, deadline=deadline, slot=slot
            )
        finally:
            share.release()
            slot.give_back()
    except BodyTooLarge as err:
        return _rejected(path, started, reason=str(err), status=413)
    except BodyTimeout as err:
        return _rejected(path, started, reason=str(err), status=408)
    except UnsupportedMediaType as err:
        return _rejected(path, started, reason=str(err), status=415)
    except Overloaded as err:
        return _rejected(path, started, reason=f"overloaded: {err}", status=503)
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


def _rejected(path: str, started: float, *, reason: str, status: int = 400) -> JSONResponse:
    verdict = "overloaded" if status == 503 else "invalid"
    metrics.observe_webhook(path=path, verdict=verdict, seconds=time.perf_counter() - started)
    log_event(log, "admission request rejected", path=path, status=status, reason=reason)
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"detail": reason}, status_code=status, headers=headers)


Answer = tuple[admission.AdmissionRequest, admission.Decision, JSONResponse]


async def _decide_off_loop_if_needed(
    raw: bytes, state: AppState, *, path: str, deadline: float, slot: HeavySlot
) -> Answer:
    """On the event loop when the body is small, the selector short and the answer needs
    no ``select`` (a memo hit, ``/mutate``): about 0.2 ms, cheaper than a hop to a thread
    (which cost a third of the requests/s at 50 connections). Otherwise in the review
    pools (:class:`app.web.limits.ReviewPools`), under the review's deadline."""
    heavy = len(raw) > INLINE_BODY_BYTES
    if not heavy:
        try:
            return _answer(raw, state, path=path, memo_only=True)
        except TooLong:
            heavy = True
        except NotMemoised:
            pass
    pools = state.limits.pools
    if heavy:
        await slot.take(deadline)
    job = Job(raw, state, path=path, loop=asyncio.get_running_loop(), heavy=heavy)
    task = asyncio.ensure_future(
        run_in_threadpool(
            _run_job, job, executor=pools.heavy() if heavy else pools.light(), path=path
        )
    )
    slot.handed_over = True
    task.add_done_callback(lambda done: _finished(done, slot=slot))
    remaining = deadline - time.perf_counter()
    waited: set[asyncio.Future[Any]] = {task, job.verdict}
    await asyncio.wait(waited, timeout=max(0.0, remaining), return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return task.result()
    if not job.verdict.done():
        job.abandoned = True  # never started, or still decoding: give up on it
        raise Overloaded(f"review not decided within {state.settings.review_deadline_seconds:g} s")
    budget = min(deadline - time.perf_counter(), state.settings.cluster_check_seconds)
    await asyncio.wait({task}, timeout=max(0.0, budget))
    if task.done():
        return task.result()
    # The cluster-state warnings ran out of time: answer the verdict now (the check goes
    # on in its thread and memoises its result for the next identical review).
    review, decision = job.verdict.result()
    skipped = admission.checks_skipped(
        decision, budget_seconds=state.settings.cluster_check_seconds
    )
    return review, skipped, JSONResponse(admission.review_response(review, skipped))


def _finished(task: asyncio.Future[Answer], *, slot: HeavySlot) -> None:
    slot.give_back(owner=True)
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned review's error is not "never retrieved"


async def run_in_threadpool(
    func: Callable[..., Answer], *args: Any, executor: Executor, **kwargs: Any
) -> Answer:
    """``func(*args, **kwargs)`` in ``executor`` (a review pool), awaited on the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(func, *args, **kwargs))


def _run_job(job: Job, *, path: str) -> Answer:
    if job.abandoned or job.raw is None:
        raise Abandoned("the review's deadline passed before it started")
    raw, job.raw = job.raw, None
    if not job.heavy:
        return _answer(raw, job.state, path=path, memo_only=False, job=job)
    # Decoding and the verdict in the worker process; the rest of the pipeline here, where
    # the cache is.
    state = job.state
    review, decision, subject = state.limits.pools.apart(
        decide_apart,
        raw,
        state.selection,
        path,
        timeout=max(0.0, job.deadline - time.perf_counter()),
    )
    if path != "/mutate":
        decision = _decide(
            review, state, path=path, memo_only=False, job=job, prejudged=(decision, subject)
        )
    return review, decision, JSONResponse(admission.review_response(review, decision))


def decide_apart(
    raw: bytes, settings: SelectionSettings, path: str
) -> tuple[admission.AdmissionRequest, admission.Decision, admission.Subject | None]:
    """Decode ``raw`` and decide without cluster state (runs in the worker process).

    Returns the request without its ``object``/``oldObject`` (only the small parts travel
    back), the decision (:func:`app.core.admission.verdict`, the first stage of
    :func:`~app.core.admission.validate`, which the server process then runs on with it;
    or :func:`~app.core.admission.mutate`) and, when the cluster checks apply, the
    :class:`~app.core.admission.Subject` they read (the Service's view and ports).

    Raises:
        BodyError, ReviewError: as for a body decided in the server process.
    """
    review = admission.parse_review(_decode(raw))
    slim = dataclasses.replace(review, object=None, old_object=None)
    if path == "/mutate":
        return slim, admission.mutate(review, settings=settings), None
    decision, subject = admission.verdict(review, settings=settings)
    return slim, decision, subject


def _answer(
    raw: bytes,
    state: AppState,
    *,
    path: str,
    memo_only: bool,
    job: Job | None = None,
) -> Answer:
    """Decode, decide and render (the response is rendered here, so it cannot fail later).

    Raises:
        NotMemoised: ``memo_only`` and the decision would have to call ``select``
            (:class:`TooLong`: or to parse a long node selector).
    """
    review = admission.parse_review(_decode(raw))
    decision = _decide(review, state, path=path, memo_only=memo_only, job=job)
    return review, decision, JSONResponse(admission.review_response(review, decision))


def _decode(raw: bytes) -> Any:
    """The JSON body; every string must be valid Unicode (kube-apiserver sends UTF-8, which
    cannot hold the lone surrogates a JSON ``\\ud800`` escape makes)."""
    try:
        text = raw.decode("utf-8")
        body = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except UnicodeDecodeError as err:
        raise BodyError(f"body: Invalid value: not UTF-8 (byte {err.start})") from err
    except RecursionError as err:
        raise BodyError("body: Invalid value: JSON nested too deeply") from err
    except json.JSONDecodeError as err:
        raise BodyError(f"body: Invalid value: not JSON: {err}") from err
    except _NotANumber as err:
        raise BodyError(f"body: Invalid value: not JSON: {err}") from err
    except ValueError as err:  # int(): an integer of more than 4300 digits
        raise BodyError(f"body: Invalid value: not JSON: {long_integer(text) or err}") from err
    if "\\u" in text and (field := lone_surrogate(body)) is not None:
        raise BodyError(
            f"{field or 'body'}: Invalid value: not valid Unicode (lone UTF-16 surrogate)"
        )
    return body


class _NotANumber(ValueError):
    """``NaN``, ``Infinity`` or a float64 overflow in the body."""


def _no_constant(name: str) -> Any:
    raise _NotANumber(f"{name} is not a JSON number (RFC 8259; Go's encoding/json rejects it)")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise _NotANumber(f"number {text[:40]} overflows a float64 (Go's encoding/json rejects it)")
    return number


def _decide(
    review: admission.AdmissionRequest,
    state: AppState,
    *,
    path: str,
    memo_only: bool,
    job: Job | None = None,
    prejudged: tuple[admission.Decision, admission.Subject | None] | None = None,
) -> admission.Decision:
    """The decision the route answers with: :func:`app.core.admission.mutate` or
    :func:`app.core.admission.validate` on the live cache (when synced), the verdict
    published to ``job`` before the cluster-state warnings (docs/design.md §7.1);
    ``prejudged``: validate's first stage, computed by :func:`decide_apart`.

    Raises:
        NotMemoised: ``memo_only`` and the decision would have to call ``select``
            (:class:`TooLong`: or to parse a long node selector).
    """
    if path == "/mutate":
        return admission.mutate(review, settings=state.selection)
    settings = state.selection
    if memo_only and len(admission.node_selector(review, settings=settings) or "") > (
        INLINE_SELECTOR_CHARS
    ):
        raise TooLong("node selector too long to parse on the event loop")
    return admission.validate(
        review,
        settings=settings,
        snapshot=_snapshot(review, state, memo_only=memo_only),
        publish=None if job is None else functools.partial(job.publish, review),
        prejudged=prejudged,
    )


def _snapshot(
    review: admission.AdmissionRequest, state: AppState, *, memo_only: bool
) -> admission.ClusterSnapshot | None:
    cache = state.cache
    if not review.checked or cache is None or not cache.synced:
        return None
    # The cache's NodeIndex (one per Node snapshot, selector matches memoised) and the
    # app's memo: a Service seen before with the same Nodes and EndpointSlices costs no
    # select() at all, a new one a single select() (app/core/decision.py says why exact).
    return admission.ClusterSnapshot(
        nodes=cache.node_index(),
        endpoint_slices=cache.endpoint_slices(review.namespace, review.name),
        now=state.clock(),
        memo=state.decider,
        memo_only=memo_only,
        ports=cache,
        endpoint_slices_of=cache.endpoint_slices,
        unhealthy=state.unhealthy(),
        pools=cache.pools(),
        namespace_labels=cache.namespace_labels,
    )
