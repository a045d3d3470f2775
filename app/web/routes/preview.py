"""Preview API (docs/design.md §8): what ingress a Service gets, and why, from the live cache.

Every route returns the item of ``node-ipam-lb preview -o json``
(:meth:`app.core.nodeipam.Selection.to_dict`), computed by the one selection function;
the list routes (``GET /preview``, ``GET /preview/{namespace}``) return pages of items,
``limit`` at a time (at most :data:`MAX_LIST_LIMIT`), with a ``continue`` token like a
Kubernetes List.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from app.core.codes import EXCLUDED_BY_LABEL, SELECTED
from app.core.decision import Snapshot
from app.core.dump import DumpError, parse_documents
from app.core.views import ServiceView, ViewError, service_view
from app.web.routes.deps import (
    AppState,
    BodyError,
    BodyTimeout,
    BodyTooLarge,
    CacheLike,
    Protected,
    State,
    read_body,
)

router = APIRouter(prefix="/preview", tags=["preview"], dependencies=[Protected])

MAX_MANIFEST_BYTES = 1024 * 1024
"""Cap of a ``POST /preview`` body (HTTP 413 above it): a Service manifest is a few KiB and
etcd stores at most 1.5 MiB per object."""


class IngressEntry(BaseModel):
    """One ``status.loadBalancer.ingress`` entry."""

    model_config = ConfigDict(extra="allow")
    ip: str
    ipMode: str = Field(description="VIP (default) or Proxy")


DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
"""Most items of one list page: each item holds a verdict per Node, so a page is bounded
by ``limit`` x Nodes (500 x 5,000 Nodes = 2.5 million verdicts)."""


class NodeVerdictItem(BaseModel):
    """Why one node is or is not in the ingress."""

    name: str
    selected: bool
    code: str = Field(
        description="Selected, SelectorMismatch, Deleting, ExcludedByLabel, AutoscalerTaint,"
        " NoReadyEndpoint, NotReady, NoAddressOfFamily or ExternalIPPreferred"
    )
    reason: str


class PreviewItem(BaseModel):
    """The item of ``node-ipam-lb preview -o json`` (``Selection.to_dict()``)."""

    model_config = ConfigDict(extra="allow")
    namespace: str
    name: str
    managed: bool
    code: str = Field(
        description="The outcome in one word: Assigned; when ingress is empty the step that"
        " emptied it: NoNodes, SelectorMismatch, Excluded, NoReadyEndpoint, NoAddressOfFamily;"
        " InvalidNodeSelector; NotManaged (the reason label of node_ipam_lb_services)"
    )
    reason: str = Field(description="Why the Service is managed or not, or why ingress is empty")
    ingress: list[IngressEntry] | None = Field(
        description="The ingress written to status; null = not written (unmanaged or error)"
    )
    error: str | None = Field(description="Node selector annotation parse error, if any")
    nodes: list[NodeVerdictItem]
    warnings: list[str]
    recheckAt: float | None = Field(
        default=None, description="Epoch seconds when a NotReady grace period runs out"
    )


class ListMeta(BaseModel):
    """Paging of a list answer (Kubernetes ``ListMeta`` names)."""

    model_config = ConfigDict(populate_by_name=True)
    continue_: str | None = Field(
        default=None,
        alias="continue",
        description="Pass as ?continue= to get the next page; absent on the last page",
    )
    remainingItemCount: int = Field(description="Services after this page")


class PreviewList(BaseModel):
    """One page of preview items, in namespace/name order."""

    items: list[PreviewItem]
    metadata: ListMeta


PREVIEW_EXAMPLE: dict[str, Any] = {
    "namespace": "default",
    "name": "web",
    "managed": True,
    "code": "Assigned",
    "reason": "spec.loadBalancerClass is io.cilium/node",
    "ingress": [{"ip": "172.18.0.3", "ipMode": "VIP"}, {"ip": "172.18.0.4", "ipMode": "VIP"}],
    "error": None,
    "nodes": [
        {"name": "worker", "selected": True, "code": SELECTED, "reason": "selected"},
        {
            "name": "control-plane",
            "selected": False,
            "code": EXCLUDED_BY_LABEL,
            "reason": "node.kubernetes.io/exclude-from-external-load-balancers is set",
        },
    ],
    "warnings": [],
    "recheckAt": None,
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No bearer token, or the token was rejected (`--auth kubernetes`)"},
    403: {"description": "SubjectAccessReview denied this path"},
    503: {"description": "The cluster cache is not synced yet; retry shortly"},
}
_OK = {
    "description": "The selection item",
    "content": {"application/json": {"example": PREVIEW_EXAMPLE}},
}
_MANIFEST_EXAMPLE = """apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations:
    io.cilium.nodeipam/match-node-labels: "node-role.kubernetes.io/control-plane notin ()"
spec:
  type: LoadBalancer
  loadBalancerClass: io.cilium/node
  ports: [{port: 80}]
"""


Limit = Annotated[
    int,
    Query(ge=1, le=MAX_LIST_LIMIT, description=f"Items per page, at most {MAX_LIST_LIMIT}"),
]
Continue = Annotated[
    str | None,
    Query(alias="continue", description="Token from the previous page's metadata.continue"),
]


_LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "A malformed continue token"},
    **_ERRORS,
}


@router.get(
    "",
    summary="Preview every live Service",
    responses=_LIST_RESPONSES,
)
def preview_all(
    state: State, limit: Limit = DEFAULT_LIST_LIMIT, continue_: Continue = None
) -> PreviewList:
    """The ingress every stored Service gets now, a page at a time (namespace/name order)."""
    return _page(state, None, limit=limit, token=continue_)


@router.get(
    "/{namespace}",
    summary="Preview the live Services of a namespace",
    responses=_LIST_RESPONSES,
)
def preview_namespace(
    namespace: str, state: State, limit: Limit = DEFAULT_LIST_LIMIT, continue_: Continue = None
) -> PreviewList:
    """The ingress every stored Service of ``namespace`` gets now, a page at a time. An
    empty or unknown namespace gives an empty list, as ``kubectl get svc -n`` does."""
    return _page(state, namespace, limit=limit, token=continue_)


def _page(state: AppState, namespace: str | None, *, limit: int, token: str | None) -> PreviewList:
    cache = _synced_cache(state)
    after = _decode_continue(token)
    listed = sorted(
        (s for s in cache.services() if namespace is None or s.namespace == namespace),
        key=lambda s: (s.namespace, s.name),
    )
    remaining = [s for s in listed if after is None or (s.namespace, s.name) > after]
    page = remaining[:limit]
    rest = len(remaining) - len(page)
    last = page[-1] if page else None
    return PreviewList(
        items=[_select(svc, cache, state) for svc in page],
        metadata=ListMeta.model_validate(
            {
                "continue": _encode_continue(last.namespace, last.name) if rest and last else None,
                "remainingItemCount": rest,
            }
        ),
    )


def _encode_continue(namespace: str, name: str) -> str:
    return base64.urlsafe_b64encode(f"{namespace}/{name}".encode()).decode()


def _decode_continue(token: str | None) -> tuple[str, str] | None:
    """The last key of the previous page; a token is ``base64url("namespace/name")``."""
    if not token:
        return None
    try:
        namespace, slash, name = base64.urlsafe_b64decode(token.encode()).decode().partition("/")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        slash = ""
    if not slash:
        raise HTTPException(400, detail="continue: Invalid value: not a token of this API")
    return namespace, name


@router.get(
    "/{namespace}/{name}",
    summary="Preview a live Service",
    responses={200: _OK, 404: {"description": "No such Service in the cache"}, **_ERRORS},
)
def preview_live(namespace: str, name: str, state: State) -> PreviewItem:
    """The ingress the stored Service gets now, per-node verdicts and warnings."""
    cache = _synced_cache(state)
    service = cache.service(namespace, name)
    if service is None:
        raise HTTPException(404, detail=f'services "{name}" not found in namespace "{namespace}"')
    return _select(service, cache, state)


@router.post(
    "",
    summary="Preview a Service manifest not yet applied",
    responses={
        200: _OK,
        413: {"description": "The body is larger than 1 MiB"},
        422: {"description": "The body is not a v1 Service (JSON or YAML); `detail` says why"},
        **_ERRORS,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/yaml": {"example": _MANIFEST_EXAMPLE},
                "application/json": {"example": yaml.safe_load(_MANIFEST_EXAMPLE)},
            },
        }
    },
)
async def preview_manifest(request: Request, state: State) -> PreviewItem:
    """The ingress this Service would get against the live cluster (nothing is applied).

    The body (at most 1 MiB) is parsed and the selection run in the thread pool, so a
    large manifest never stalls other requests (``/healthz``, admission).
    """
    text = await _manifest_text(request)
    return await run_in_threadpool(_preview_text, text, state)


def _preview_text(text: str, state: AppState) -> PreviewItem:
    service = _service_from(_manifest(text), state)
    cache = _synced_cache(state)
    return _select(service, cache, state)


def _synced_cache(state: AppState) -> CacheLike:
    cache = state.cache
    if cache is None or not cache.synced:
        raise HTTPException(
            503, detail="cluster cache not synced yet", headers={"Retry-After": "1"}
        )
    return cache


def _select(service: ServiceView, cache: CacheLike, state: AppState) -> PreviewItem:
    """``select`` for ``service`` on the cache, then port ownership against the cache's
    port index (docs/design.md §4.9), as the reconciler decides it, with the controller's
    health view (§4.11); a Service that gets addresses also carries the controller's
    datapath hazard concerning it (§4.10, §4.12)."""
    snap = Snapshot(
        nodes=cache.node_index(),
        now=state.clock(),
        ports=cache,
        endpoint_slices_of=cache.endpoint_slices,
        unhealthy=state.unhealthy(),
        pools=cache.pools(),
        namespace_labels=cache.namespace_labels,
    )
    selection = state.decider.preview(service, snap)
    item = selection.to_dict()
    # kube-proxy in ipvs mode with ipMode VIP, Cilium's wildcard entries (docs/design.md
    # §4.10, §4.12): said on the Services they concern that get addresses, as their
    # Warning Event says it.
    hazard = state.kube_proxy_hazard(service.load_balancer_class) if selection.ingress else None
    if hazard is not None:
        item["warnings"] = [*item["warnings"], hazard.message]
    return PreviewItem.model_validate(item)


async def _manifest_text(request: Request) -> str:
    try:
        raw = await read_body(request, limit=MAX_MANIFEST_BYTES)
    except BodyTooLarge as err:
        raise HTTPException(413, detail=str(err)) from err
    except BodyTimeout as err:
        raise HTTPException(408, detail=str(err)) from err
    except BodyError as err:
        raise HTTPException(422, detail=str(err)) from err
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HTTPException(
            422, detail=f"body: Invalid value: not UTF-8 (byte {err.start})"
        ) from err


def _manifest(text: str) -> object:
    """The one document of the body, read like ``preview -f`` reads a dump (no YAML
    aliases, every string valid Unicode: :func:`app.core.dump.parse_documents`)."""
    try:
        docs = parse_documents(text, name="body")
    except DumpError as err:
        raise HTTPException(422, detail=str(err)) from err
    if len(docs) > 1:
        raise HTTPException(
            422, detail=f"body: Invalid value: {len(docs)} documents: must be one Service object"
        )
    return docs[0] if docs else None


def _service_from(manifest: object, state: AppState) -> ServiceView:
    if not isinstance(manifest, Mapping):
        raise HTTPException(422, detail="body: Invalid value: must be a Service object")
    if manifest.get("apiVersion") != "v1" or manifest.get("kind") != "Service":
        raise HTTPException(
            422,
            detail=f"apiVersion/kind: Unsupported value: {manifest.get('apiVersion')!r}/"
            f"{manifest.get('kind')!r}: supported value: v1/Service",
        )
    metadata = manifest.get("metadata")
    if not isinstance(metadata, Mapping):
        raise HTTPException(422, detail="metadata: Required value: must be an object")
    # A manifest without a namespace lands in "default", as kubectl apply would put it.
    obj = {**manifest, "metadata": {"namespace": "default", **metadata}}
    try:
        return service_view(
            obj, match_node_labels_annotation=state.selection.match_node_labels_annotation
        )
    except ViewError as err:
        raise HTTPException(422, detail=str(err)) from err
