"""Admission decisions for Services (docs/design.md §7): pure, no HTTP, no Kubernetes client.

Input is the decoded AdmissionReview body (a plain dict), the
:class:`~app.core.options.SelectionSettings` and, when the live cache is synced, a
:class:`ClusterSnapshot`; output is a :class:`Decision` (allowed, denial message,
warnings, JSON Patch operations) and the AdmissionReview response dict built from it.

Wire rules follow ``admission.k8s.io/v1`` (kubernetes/api ``admission/v1/types.go``) and
controller-runtime's webhook server (``pkg/webhook/admission``): the response echoes
``request.uid`` in an AdmissionReview of the same apiVersion/kind; a denial carries a
``metav1.Status`` with code 403 / reason ``Forbidden``; a patch is a base64 RFC 6902
JSON Patch. A body that is not an AdmissionReview raises :class:`ReviewError` (the route
answers HTTP 400).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.nodeipam import NodeIndex, Selection, is_managed, select
from app.core.options import SelectionSettings
from app.core.selection_memo import SelectionMemo
from app.core.selector import SelectorError, go_quote, parse_cached
from app.core.text import elide
from app.core.views import EndpointSliceView, NodeView, ServiceView, ViewError, service_view

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
MAX_WARNING_CHARS = 120
"""kube-apiserver may truncate longer warnings (admission/v1 ``AdmissionResponse.warnings``)."""

_SERVICE_KIND = ("", "v1", "Service")
_CHECKED_OPERATIONS = ("CREATE", "UPDATE")


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview; ``str(err)`` names the field and the reason."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the decisions read.

    ``object``/``old_object`` are the raw Service dicts (``None`` when the review does not
    concern a Service CREATE/UPDATE, which is allowed untouched).
    """

    uid: str
    operation: str
    namespace: str
    name: str
    is_service: bool
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool

    @property
    def checked(self) -> bool:
        """True for a Service CREATE or UPDATE: the only requests we decide on (§7)."""
        return self.is_service and self.operation in _CHECKED_OPERATIONS


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the live cache holds now, for the cluster-state warnings.

    ``endpoint_slices`` are the Service's own (namespace + ``kubernetes.io/service-name``);
    ``now`` is epoch seconds (the NotReady grace period of §4 is measured against it).
    ``nodes`` is the cache's Node snapshot, preferably its :class:`NodeIndex` (memoised
    selector matches); with ``memo`` it must be the snapshot object itself, never a copy.
    """

    nodes: Sequence[NodeView] | NodeIndex
    endpoint_slices: Sequence[EndpointSliceView]
    now: float
    memo: SelectionMemo[tuple[str, ...]] | None = None
    """Memo of the cluster-state warnings by the inputs of ``select`` (the webhook's, kept
    across requests); ``None`` calls ``select`` every time. Same inputs, same warnings."""
    memo_only: bool = False
    """With ``memo``: raise :class:`~app.core.selection_memo.NotMemoised` instead of calling
    ``select`` (the route answers memo hits on the event loop, the rest in the thread pool)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission verdict: ``patch`` holds RFC 6902 operations, empty for no patch."""

    allowed: bool = True
    message: str | None = None
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()

    @property
    def verdict(self) -> str:
        """``denied``, ``patched`` or ``allowed``: the metrics label."""
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"


def parse_review(body: object) -> AdmissionRequest:
    """Check the structure of a decoded AdmissionReview and extract its request.

    Args:
        body: the JSON-decoded request body.

    Raises:
        ReviewError: wrong ``apiVersion``/``kind``, ``request`` or ``request.uid`` missing,
            or a Service CREATE/UPDATE whose ``object`` (or, on UPDATE, ``oldObject``) is
            not a Service. Reviews of other kinds and operations are valid and are
            allowed untouched (§7).
    """
    if not isinstance(body, Mapping):
        raise ReviewError(f"body: Invalid value: a JSON {_json_type(body)}: must be an object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != ADMISSION_KIND:
        raise ReviewError(
            f"apiVersion/kind: Unsupported value: {body.get('apiVersion')!r}/{body.get('kind')!r}:"
            f" supported value: {ADMISSION_API_VERSION}/{ADMISSION_KIND}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("request: Required value: must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: Required value: must be a non-empty string")
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ReviewError("request.operation: Required value: must be a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        raise ReviewError("request.kind: Required value: must be an object")
    is_service = (kind.get("group"), kind.get("version"), kind.get("kind")) == _SERVICE_KIND
    namespace = _optional_str(request, "namespace")
    name = _optional_str(request, "name")
    request_object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    if is_service and operation in _CHECKED_OPERATIONS:
        request_object = _service_object(request.get("object"), field="request.object")
        if operation == "UPDATE":
            old_object = _service_object(request.get("oldObject"), field="request.oldObject")
        metadata = request_object.get("metadata") or {}
        namespace = namespace or _optional_str(metadata, "namespace") or "default"
        name = name or _optional_str(metadata, "name") or _optional_str(metadata, "generateName")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        namespace=namespace,
        name=name,
        is_service=is_service,
        object=request_object,
        old_object=old_object,
        dry_run=request.get("dryRun") is True,
    )


def validate(
    request: AdmissionRequest,
    *,
    settings: SelectionSettings,
    snapshot: ClusterSnapshot | None,
) -> Decision:
    """The validating webhook's decision for one request (docs/design.md §7).

    Denies a malformed node selector annotation with a Kubernetes field error
    (``metadata.annotations[<key>]: Invalid value: "<value>": <why>``, as
    ``field.Invalid`` renders it). On UPDATE an invalid value that is unchanged from
    ``oldObject`` is allowed with a warning (validation ratcheting, KEP-4008), so a
    Service stored before the webhook existed can still be edited or finalized.

    Warns (each ≤ 120 characters) about: an empty selector (all nodes); the annotation on
    a Service we do not manage (§3); and, only when ``snapshot`` is given (cache synced),
    a selector matching no node now or ``externalTrafficPolicy: Local`` with no ready
    endpoint now. Those last two read the verdicts of the one selection function
    (:func:`app.core.nodeipam.select`).
    """
    decision, view = verdict(request, settings=settings)
    if view is None or snapshot is None:
        return decision
    return with_warnings(decision, cluster_warnings(view, settings=settings, snapshot=snapshot))


def verdict(
    request: AdmissionRequest, *, settings: SelectionSettings
) -> tuple[Decision, ServiceView | None]:
    """:func:`validate` without the cluster-state warnings: the verdict and the warnings
    that need no cluster state, plus the Service's view when the cluster-state warnings
    apply to it (a managed Service not being deleted), else ``None``.

    Cheap: parses the annotation and reads the Service; never looks at Nodes. The route
    answers with it alone when the cluster-state warnings run out of time (§7.1).
    """
    if not request.checked or request.object is None:
        return Decision(), None
    key = settings.match_node_labels_annotation
    value = _annotation(request.object, key, field="request.object")
    empty_selector = False
    if value is not None:
        try:
            empty_selector = parse_cached(value).empty()
        except SelectorError as err:
            message = f"metadata.annotations[{key}]: Invalid value: {go_quote(elide(value))}: {err}"
            old_value = (
                _annotation(request.old_object, key, field="request.oldObject")
                if request.old_object is not None
                else None
            )
            if request.operation == "UPDATE" and old_value == value:
                return Decision(warnings=(_short(f"{key} is invalid (unchanged): {err}"),)), None
            return Decision(allowed=False, message=message), None
    view = _view(request, key=key)
    if view.deleting:  # finalizer removal: nothing to warn about any more
        return Decision(), None
    managed, why = is_managed(view, settings)
    warnings: list[str] = []
    if value is not None and not managed:
        # The parenthesised detail of is_managed's reason would overflow 120 characters.
        warnings.append(_short(f"{key} is ignored: {why.split(' (')[0]}"))
    if managed and empty_selector:
        warnings.append(_short(f"{key} is empty: it selects every eligible node"))
    return Decision(warnings=tuple(warnings)), view if managed else None


def cluster_warnings(
    view: ServiceView, *, settings: SelectionSettings, snapshot: ClusterSnapshot
) -> tuple[str, ...]:
    """The cluster-state warnings of :func:`validate` for a managed Service's ``view``
    (from :func:`verdict`): selector matching no node now, Local with no ready endpoint.

    Raises:
        NotMemoised: ``snapshot.memo_only`` and the answer is not memoised.
    """
    return _cluster_warnings(view, settings=settings, snapshot=snapshot)


def with_warnings(decision: Decision, warnings: Sequence[str]) -> Decision:
    """``decision`` with ``warnings`` appended (in order)."""
    if not warnings:
        return decision
    return dataclasses.replace(decision, warnings=decision.warnings + tuple(warnings))


def node_selector(request: AdmissionRequest, *, settings: SelectionSettings) -> str | None:
    """The node selector annotation of the request's Service (``None`` without one).

    Raises:
        ReviewError: the annotation is not a string.
    """
    if request.object is None:
        return None
    key = settings.match_node_labels_annotation
    return _annotation(request.object, key, field="request.object")


def mutate(request: AdmissionRequest, *, settings: SelectionSettings) -> Decision:
    """The mutating webhook's decision: default ``spec.loadBalancerClass`` (docs/design.md §7).

    Adds ``spec.loadBalancerClass = settings.load_balancer_class`` only when
    ``default_lb_service_ipam`` is ``nodeipam`` and the Service is a class-less
    ``LoadBalancer`` on CREATE, or on the UPDATE that switches ``type`` to LoadBalancer:
    the API server forbids setting the class at any other time (KEP-1959,
    ``validateLoadBalancerClassField``). Idempotent, so ``reinvocationPolicy: IfNeeded``
    is safe. Everything else is allowed without a patch.
    """
    if settings.default_lb_service_ipam != "nodeipam" or not request.checked:
        return Decision()
    spec = _spec(request.object)
    if spec.get("type") != "LoadBalancer" or spec.get("loadBalancerClass") is not None:
        return Decision()
    if request.operation == "UPDATE" and _spec(request.old_object).get("type") == "LoadBalancer":
        return Decision()
    op = {
        "op": "add",
        "path": json_pointer("spec", "loadBalancerClass"),
        "value": settings.load_balancer_class,
    }
    return Decision(patch=(op,))


def review_response(request: AdmissionRequest, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview v1 response body for ``decision`` (echoes ``request.uid``)."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": 403,
            "reason": "Forbidden",
            "message": decision.message or "denied",
        }
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.patch:
        patch = json.dumps(list(decision.patch), separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode("ascii")
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


def json_pointer(*tokens: str) -> str:
    """RFC 6901 JSON Pointer for ``tokens``: ``~`` becomes ``~0``, ``/`` becomes ``~1``."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _cluster_warnings(
    view: ServiceView, *, settings: SelectionSettings, snapshot: ClusterSnapshot
) -> tuple[str, ...]:
    if snapshot.memo is not None:
        return snapshot.memo.derived(
            service=view,
            nodes=snapshot.nodes,
            endpoint_slices=snapshot.endpoint_slices,
            settings=settings,
            now=snapshot.now,
            derive=_selection_warnings,
            compute=not snapshot.memo_only,
        )
    selection = select(
        service=view,
        nodes=snapshot.nodes,
        endpoint_slices=snapshot.endpoint_slices,
        settings=settings,
        now=snapshot.now,
    )
    return _selection_warnings(view, settings, selection)


def _selection_warnings(
    view: ServiceView, settings: SelectionSettings, selection: Selection
) -> tuple[str, ...]:
    """The cluster-state warnings read from the Selection's verdicts (a memo's ``derive``)."""
    if selection.error is not None or any(v.selected for v in selection.nodes):
        return ()
    key = settings.match_node_labels_annotation
    codes = {v.code for v in selection.nodes}
    if view.match_node_labels and codes <= {"SelectorMismatch"}:
        return (_short(f"{key} matches no node now: the Service gets no ingress"),)
    if view.external_traffic_policy == "Local" and "NoReadyEndpoint" in codes:
        return (_short("externalTrafficPolicy is Local and no node has a ready endpoint now"),)
    return ()


def _view(request: AdmissionRequest, *, key: str) -> ServiceView:
    assert request.object is not None
    obj = dict(request.object)
    metadata = dict(obj.get("metadata") or {})
    # generateName Services have no name yet and the namespace may come only from the request.
    metadata.setdefault("namespace", request.namespace)
    metadata["name"] = metadata.get("name") or request.name or "(generated)"
    obj["metadata"] = metadata
    try:
        return service_view(obj, match_node_labels_annotation=key)
    except ViewError as err:
        raise ReviewError(f"request.object: {err}") from err


def _service_object(value: object, *, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ReviewError(f"{field}: Required value: must be a Service object")
    if value.get("kind", "Service") != "Service" or value.get("apiVersion", "v1") != "v1":
        raise ReviewError(
            f"{field}: Invalid value: {value.get('apiVersion')!r}/{value.get('kind')!r}:"
            " must be a v1 Service"
        )
    for part in ("metadata", "spec"):
        if value.get(part) is not None and not isinstance(value.get(part), Mapping):
            raise ReviewError(f"{field}.{part}: Invalid value: must be an object")
    annotations = (value.get("metadata") or {}).get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise ReviewError(f"{field}.metadata.annotations: Invalid value: must be an object")
    return value


def _annotation(obj: Mapping[str, Any], key: str, *, field: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if value is not None and not isinstance(value, str):
        raise ReviewError(f"{field}.metadata.annotations[{key}]: Invalid value: must be a string")
    return value


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec") or {}
    return spec if isinstance(spec, Mapping) else {}


def _optional_str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _json_type(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _short(text: str) -> str:
    """Cut a warning to the 120 characters the API server keeps intact, in the middle
    (:func:`app.core.text.elide`), so its end, the reason, stays."""
    return elide(text, MAX_WARNING_CHARS)
