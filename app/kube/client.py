"""The one client layer: every HTTP call to the Kubernetes API lives here.

:class:`KubeAPI` is the small protocol the reconciler, informers, event recorder and leader
election use (httpx "transport" style): :class:`KubernetesAPI` implements it on the official
``kubernetes`` client, and tests use an in-memory implementation.

Bodies are plain JSON dicts. The real implementation calls the API with the client's
low-level ``param_serialize``/``call_api`` and decodes the raw body with ``orjson`` (about
twice as fast as ``json`` on List pages, the bulk of a start), so the client never builds
its (slow, memory-hungry) model objects; watch streams are read as raw
line-delimited JSON. Every request has a timeout; a watch can be closed from another thread
(``urllib3`` ``HTTPResponse.shutdown``) so ``stop()`` is prompt.

The hot writes (status PATCH, Event create and series PATCH: ~20,000 requests at a cold
start of 10,000 Services) skip even ``urllib3``'s request machinery: :class:`_KeptAlive`
sends them as one pre-assembled HTTP/1.1 request on a kept-alive socket opened by the
client's own ``urllib3`` connection class (so TLS, CA, client certificate, server name and
socket options are exactly the ``kubernetes`` client's) and reads the answer with
``http.client``; about half the client CPU per request (bench/bench_requests.py).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlencode

import orjson
import urllib3
import urllib3.connection
from urllib3.util import wait_for_read

Kind = Literal["nodes", "services", "endpointslices", "pods", "namespaces", "nodeaddresspools"]

COLLECTIONS: dict[str, str] = {
    "nodes": "/api/v1/nodes",
    "services": "/api/v1/services",
    "endpointslices": "/apis/discovery.k8s.io/v1/endpointslices",
    "pods": "/api/v1/pods",
    "namespaces": "/api/v1/namespaces",
    "nodeaddresspools": "/apis/node-ipam-lb.io/v1alpha1/nodeaddresspools",
}
"""Cluster-wide collection path of each watched kind."""

HOST_NETWORK_PODS = "spec.hostNetwork=true"
"""The Pod ``fieldSelector`` when ``host-port-pods`` is off (docs/design.md §5, §10): only
``hostNetwork: true`` Pods cross the wire (kube-apiserver ``pkg/registry/core/pod/strategy.go``
``ToSelectableFields`` has ``spec.hostNetwork``). There is no field label for
``hostPort``, so the Pods that hold a node port through the CNI ``portmap`` plugin can only
be found by listing every Pod (:func:`pod_field_selector`)."""


def pod_field_selector(host_port_pods: bool) -> str | None:
    """The ``fieldSelector`` of every Pod List and watch: ``None`` (every Pod; the caller
    keeps those that hold a node port) when ``host_port_pods`` is true, else
    :data:`HOST_NETWORK_PODS` (docs/design.md §10, ``host-port-pods``)."""
    return None if host_port_pods else HOST_NETWORK_PODS


LIST_PAGE_SIZE = 500
"""Page size of :meth:`KubernetesAPI.list_items` (kubectl's ``--chunk-size`` default)."""
MAX_LIST_ITEMS = 1_000_000
"""Most objects one :meth:`KubernetesAPI.list_items` call reads, kept or not (Kubernetes'
tested limits are 5,000 Nodes and 150,000 Pods per cluster)."""

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
"""JSON merge patch (RFC 7386): what a custom resource takes (no strategic merge there)."""
AUTH_REFRESH_SECONDS = 10.0
"""How long a derived ``authorization`` header is reused (tokens rotate in minutes)."""
JSON_PATCH = "application/json-patch+json"

WebhookKind = Literal["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1"


_UNSET = object()


class ApiError(Exception):
    """A failed API call.

    ``status`` is the HTTP status code, or 0 when no response arrived (connection refused,
    timeout, TLS error, broken stream). ``reason`` is the Status message or transport error.
    ``retry_after`` is the answer's ``Retry-After`` in seconds on a 429 or 5xx (API Priority
    and Fairness sends 1-60 s with its 429s, a shutting-down server 5 s with its 429s), else
    ``None``: the caller waits at least that long before the next try, as client-go's
    ``rest.Request`` does (``checkWait``: 429 and 5xx, whole seconds only).
    """

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {reason}" if status else reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class WatchStream(Protocol):
    """An open watch: iterate decoded watch events; :meth:`close` ends it from any thread."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class KubeAPI(Protocol):
    """The calls this controller makes. Errors: :class:`ApiError`, never anything else."""

    def list_page(
        self,
        kind: Kind,
        *,
        limit: int,
        continue_token: str | None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        """GET a page of the cluster-wide List of ``kind`` (``items``, ``metadata``), with
        ``fieldSelector=field_selector`` when given (client-go's ``ListOptions``; the Pod
        informer's is :func:`pod_field_selector`)."""
        ...

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str | None = None,
    ) -> WatchStream:
        """Open a watch from ``resource_version`` with ``allowWatchBookmarks=true`` and the
        ``field_selector`` of the List it follows (:meth:`list_page`)."""
        ...

    def patch_service_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> str | None:
        """Strategic merge patch ``services/{name}/status``; returns the written Service's
        ``metadata.resourceVersion`` (``None`` when the answer carries none). The Service
        itself comes by the watch. Strategic, not JSON merge (RFC 7386): ``ingress`` is an
        atomic list and replaced either way, but ``status.conditions`` is merged by
        ``type`` (core/v1 ``patchMergeKey``), so other controllers' conditions stay and
        ``{"$patch": "delete", "type": ...}`` removes ours alone (docs/design.md §5)."""
        ...

    def patch_pool_status(self, *, name: str, patch: dict[str, Any]) -> str | None:
        """JSON merge patch ``nodeaddresspools/{name}/status`` (``node-ipam-lb.io/v1alpha1``,
        cluster-scoped); returns the written pool's ``metadata.resourceVersion`` (``None``
        when the answer carries none); 404 when the pool (or its CRD) is gone. A custom
        resource takes no strategic merge patch (415), so ``status.conditions`` is replaced
        as a whole (RFC 7386): the caller sends the whole list (app.controller.poolstatus)."""
        ...

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        """POST an Event (``events.k8s.io/v1`` or core ``v1``, from ``body['apiVersion']``)."""
        ...

    def patch_event(
        self, *, namespace: str, name: str, api_version: str, patch: dict[str, Any]
    ) -> None:
        """Strategic merge patch an Event (``api_version`` ``events.k8s.io/v1`` or ``v1``):
        the series update of client-go's recorders; 404 when the Event is gone."""
        ...

    def list_events(
        self, *, api_version: str, field_selector: str, limit: int, continue_token: str | None
    ) -> dict[str, Any]:
        """GET a page of the cluster-wide List of Events (``events.k8s.io/v1`` or ``v1``)
        matching ``field_selector``; 404 when that API is not served."""
        ...

    def read_lease(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a ``coordination.k8s.io/v1`` Lease; ``None`` when it does not exist."""
        ...

    def create_lease(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Lease; 409 when it already exists."""
        ...

    def replace_lease(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a Lease; 409 when ``body.metadata.resourceVersion`` is stale."""
        ...

    def read_config_map(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a ConfigMap; ``None`` when it does not exist (kube-proxy's mode,
        docs/design.md §4.10: ``kube-system/kube-proxy`` only)."""
        ...


class CertificateAPI(Protocol):
    """The calls of self-managed webhook certificates (:mod:`app.web.certsync`).

    Errors: :class:`ApiError`, never anything else.
    """

    def read_secret(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Secret; ``None`` when it does not exist."""
        ...

    def create_secret(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Secret; 409 when it already exists."""
        ...

    def replace_secret(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT a Secret; 409 when ``body.metadata.resourceVersion`` is stale."""
        ...

    def read_webhook_configuration(self, kind: WebhookKind, *, name: str) -> dict[str, Any] | None:
        """GET a Mutating/ValidatingWebhookConfiguration; ``None`` when it does not exist."""
        ...

    def patch_webhook_configuration(
        self, kind: WebhookKind, *, name: str, patch: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """JSON Patch (RFC 6902) a webhook configuration; 422 when a ``test`` op fails."""
        ...


class ReviewAPI(Protocol):
    """The calls of bearer-token access control (:mod:`app.web.auth`): create-only reviews,
    answered in the response body (nothing is stored). Errors: :class:`ApiError`."""

    def create_token_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        """POST an ``authentication.k8s.io/v1`` TokenReview; the answer holds ``status``."""
        ...

    def create_subject_access_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        """POST an ``authorization.k8s.io/v1`` SubjectAccessReview; the answer holds
        ``status.allowed``."""
        ...


class KubernetesAPI:
    """:class:`KubeAPI`, :class:`CertificateAPI` and :class:`ReviewAPI` on a
    ``kubernetes.client.ApiClient`` (kubeconfig or in-cluster).

    ``request_timeout`` (seconds) bounds every non-watch call, connect and read.
    ``lean_writes`` (default on) sends the hot writes (:meth:`patch_service_status`,
    :meth:`create_event`, :meth:`patch_event`) on :class:`_KeptAlive` connections; off,
    or behind a proxy, they go through ``urllib3`` like every other call. :meth:`close`
    closes those connections (also done when the object is garbage-collected); the
    ``ApiClient`` itself stays open (it is shared).
    """

    def __init__(
        self, api_client: Any, *, request_timeout: float = 10.0, lean_writes: bool = True
    ) -> None:
        self._client = api_client
        self._timeout = request_timeout
        self._auth_lock = threading.Lock()
        self._auth: tuple[float, dict[str, str]] | None = None
        self._connection_pool: Any = _UNSET
        self._prefix = ""
        self._lean_writes = lean_writes
        self._lean_lock = threading.Lock()
        self._kept_alive: object = _UNSET
        self._head: tuple[dict[str, str], bytes] | None = None

    def close(self) -> None:
        """Close the idle kept-alive connections of the hot writes. Calls after this still
        work (on a connection opened and closed per call)."""
        kept_alive = self._kept_alive
        if isinstance(kept_alive, _KeptAlive):
            kept_alive.close()

    def list_page(
        self,
        kind: Kind,
        *,
        limit: int,
        continue_token: str | None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        """See :meth:`KubeAPI.list_page`."""
        query: list[tuple[str, Any]] = [("limit", limit)]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if continue_token:
            query.append(("continue", continue_token))
        return self._json("GET", COLLECTIONS[kind], query=query)

    def list_items(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        page_size: int = LIST_PAGE_SIZE,
        max_items: int = MAX_LIST_ITEMS,
    ) -> list[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``; ``None`` = all namespaces, the only
        form for ``nodes``), optionally matching ``label_selector`` and ``field_selector``,
        read in pages of ``page_size`` with ``limit``/``continue`` like ``kubectl get`` (API
        concepts, "Retrieving large results sets in chunks"). Objects are plain dicts
        without ``kind``/``apiVersion`` (the List carries them). ``keep``, when given,
        decides per object as each page arrives, and only the kept ones are returned: what
        no selector can ask the server for (a Pod's ``hostPort``) costs one page of memory,
        not the whole List.

        Raises:
            ApiError: a failed page (410 Expired when the continue token outlived
                compaction), or more than ``max_items`` objects read, kept or not (status
                0, naming the limit), so one call's memory and time stay bounded.
        """
        path = COLLECTIONS[kind]
        if namespace is not None:
            if kind == "nodes":
                raise ValueError("namespace: Forbidden: nodes are cluster-scoped")
            prefix, _, plural = path.rpartition("/")
            path = f"{prefix}/namespaces/{namespace}/{plural}"
        items: list[dict[str, Any]] = []
        read = 0
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", page_size)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            page = self._json("GET", path, query=query)
            listed = page.get("items") or []
            if not isinstance(listed, list):
                raise ApiError(0, f"GET {path}: items is not a list")
            read += len(listed)
            items.extend(
                item for item in listed if isinstance(item, dict) and (keep is None or keep(item))
            )
            if read > max_items:
                raise ApiError(0, f"GET {path}: more than {max_items} {kind}: refusing to read on")
            metadata = page.get("metadata")
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            del page, listed  # not held while the next page is read
            if not token:
                return items

    def read_service(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Service; ``None`` when it does not exist (404)."""
        return self._json_or_none("GET", f"/api/v1/namespaces/{namespace}/services/{name}")

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str | None = None,
    ) -> WatchStream:
        """See :meth:`KubeAPI.watch`; the socket read timeout is ``timeout_seconds + 15``."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = self._call(
            "GET", COLLECTIONS[kind], query=query, timeout=(self._timeout, timeout_seconds + 15)
        )
        if not 200 <= response.status <= 299:
            retry_after = response.headers.get("Retry-After")
            _raise_for(response.status, _read_all(response), retry_after)
        return _RawWatch(response)

    def patch_service_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> str | None:
        """See :meth:`KubeAPI.patch_service_status`."""
        path = f"/api/v1/namespaces/{namespace}/services/{name}/status"
        return resource_version_in(
            self._send("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)
        )

    def patch_pool_status(self, *, name: str, patch: dict[str, Any]) -> str | None:
        """See :meth:`KubeAPI.patch_pool_status`."""
        path = f"{COLLECTIONS['nodeaddresspools']}/{name}/status"
        return resource_version_in(self._send("PATCH", path, body=patch, content_type=MERGE_PATCH))

    def create_event(self, *, namespace: str, body: dict[str, Any]) -> None:
        """See :meth:`KubeAPI.create_event`."""
        self._send("POST", _events_path(body.get("apiVersion"), namespace), body=body)

    def patch_event(
        self, *, namespace: str, name: str, api_version: str, patch: dict[str, Any]
    ) -> None:
        """See :meth:`KubeAPI.patch_event`."""
        path = f"{_events_path(api_version, namespace)}/{name}"
        self._send("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def list_events(
        self, *, api_version: str, field_selector: str, limit: int, continue_token: str | None
    ) -> dict[str, Any]:
        """See :meth:`KubeAPI.list_events`."""
        query: list[tuple[str, Any]] = [("fieldSelector", field_selector), ("limit", limit)]
        if continue_token:
            query.append(("continue", continue_token))
        return self._json("GET", _events_path(api_version, None), query=query)

    def read_lease(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`KubeAPI.read_lease`."""
        return self._json_or_none("GET", _lease_path(namespace, name))

    def create_lease(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`KubeAPI.create_lease`."""
        return self._json("POST", _lease_path(namespace, None), body=body)

    def replace_lease(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`KubeAPI.replace_lease`."""
        return self._json("PUT", _lease_path(namespace, name), body=body)

    def read_config_map(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`KubeAPI.read_config_map`."""
        return self._json_or_none("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def read_secret(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`CertificateAPI.read_secret`."""
        return self._json_or_none("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def create_secret(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`CertificateAPI.create_secret`."""
        return self._json("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)

    def replace_secret(self, *, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`CertificateAPI.replace_secret`."""
        return self._json("PUT", f"/api/v1/namespaces/{namespace}/secrets/{name}", body=body)

    def read_webhook_configuration(self, kind: WebhookKind, *, name: str) -> dict[str, Any] | None:
        """See :meth:`CertificateAPI.read_webhook_configuration`."""
        return self._json_or_none("GET", f"{WEBHOOK_CONFIGURATIONS}/{kind}/{name}")

    def patch_webhook_configuration(
        self, kind: WebhookKind, *, name: str, patch: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """See :meth:`CertificateAPI.patch_webhook_configuration`."""
        path = f"{WEBHOOK_CONFIGURATIONS}/{kind}/{name}"
        return self._json("PATCH", path, body=patch, content_type=JSON_PATCH)

    def dry_run_create_service(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a Service with ``dryRun=All``: admission runs in full, webhooks included, and
        nothing is stored (``metav1.CreateOptions.DryRun``). Returns the Service as it
        would have been created.

        Raises:
            ApiError: a refusal, e.g. an admission webhook's denial (its status code,
                usually 400 or 403, and ``admission webhook "NAME" denied the request:
                ...``), or RBAC's 403 (``cannot create resource "services"``).
        """
        path = f"/api/v1/namespaces/{namespace}/services"
        return self._json("POST", path, query=[("dryRun", "All")], body=body)

    def create_token_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`ReviewAPI.create_token_review`."""
        return self._json("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)

    def create_subject_access_review(self, *, body: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`ReviewAPI.create_subject_access_review`."""
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        return self._json("POST", path, body=body)

    def _json_or_none(self, method: str, path: str) -> dict[str, Any] | None:
        try:
            return self._json(method, path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any],
        content_type: str = "application/json",
    ) -> bytes:
        """A hot write: check the status, return the answer's body undecoded (callers that
        need one field pick it out, see :func:`resource_version_in`).

        On a :class:`_KeptAlive` connection when there is one (no proxy, ``lean_writes``)
        and ``path`` needs no escaping; errors as :meth:`_checked`.
        """
        kept_alive = self._lean()
        if kept_alive is None or not _PLAIN_PATH.fullmatch(path):
            return self._checked(method, path, query=None, body=body, content_type=content_type)[1]
        try:
            data = _encode(body)
            request = b"%s %s%s HTTP/1.1\r\n%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
                method.encode(),
                self._prefix.encode(),
                path.encode(),
                self._head_lines(kept_alive),
                content_type.encode(),
                len(data),
                data,
            )
            status, answer, retry_after = kept_alive.exchange(request, method)
        except Exception as err:  # socket/ssl/http.client errors, a failing token refresh
            raise ApiError(0, f"{method} {path}: {_describe(err, self._timeout)}") from err
        if not 200 <= status <= 299:
            _raise_for(status, answer, retry_after)
        return answer

    def _lean(self) -> _KeptAlive | None:
        """The :class:`_KeptAlive` connections, made once; ``None`` when ``lean_writes`` is
        off or the pool's connections are not plain ``urllib3`` HTTP(S) connections to the
        API server (a proxy: HTTP ``ProxyManager`` or SOCKS)."""
        kept_alive = self._kept_alive
        if kept_alive is _UNSET:
            with self._lean_lock:
                if self._kept_alive is _UNSET:
                    pool = self._pool() if self._lean_writes else None
                    made = None
                    if pool is not None and pool.ConnectionCls in _DIRECT_CONNECTIONS:
                        configuration = self._client.configuration
                        made = _KeptAlive(
                            pool,
                            timeout=self._timeout,
                            max_idle=getattr(configuration, "connection_pool_maxsize", None) or 4,
                        )
                        weakref.finalize(self, made.close)
                    self._kept_alive = made
                kept_alive = self._kept_alive
        return kept_alive if isinstance(kept_alive, _KeptAlive) else None

    def _head_lines(self, kept_alive: _KeptAlive) -> bytes:
        """The request header lines common to every hot write (``Host``, the client's
        default headers with ``authorization``, ``Accept``, ``Accept-Encoding``), encoded
        once per :meth:`_auth_headers` refresh.

        Raises:
            ValueError: a header name or value that would break the request (CR, LF, NUL;
                like ``http.client``'s checks) or is not Latin-1.
        """
        headers = self._auth_headers()
        cached = self._head
        if cached is not None and cached[0] is headers:
            return cached[1]
        merged = {
            "Host": kept_alive.host_header,
            **headers,
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        lines = []
        for name, value in merged.items():
            text = str(value)
            if not _HEADER_NAME.fullmatch(name) or _BAD_HEADER_VALUE.search(text):
                raise ValueError(f"invalid header {name!r}: CR, LF or NUL, or a bad name")
            if name.lower() not in ("content-type", "content-length", "connection"):
                lines.append(f"{name}: {text}\r\n".encode("latin-1"))
        head = b"".join(lines)
        self._head = (headers, head)
        return head

    def _json(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: dict[str, Any] | list[Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        status, data = self._checked(
            method, path, query=query, body=body, content_type=content_type
        )
        try:
            decoded = orjson.loads(data)
        except ValueError as err:
            raise ApiError(status, f"{method} {path}: response is not JSON") from err
        if not isinstance(decoded, dict):
            raise ApiError(status, f"{method} {path}: response is not a JSON object")
        return decoded

    def _checked(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None,
        body: dict[str, Any] | list[Any] | None,
        content_type: str,
    ) -> tuple[int, bytes]:
        """Send one request; return ``(status, body)`` of a 2xx answer.

        Raises:
            ApiError: a non-2xx answer (its Status message), or status 0 when the body
                could not be read.
        """
        response = self._call(
            method, path, query=query, body=body, content_type=content_type, timeout=None
        )
        try:
            data: bytes = response.data
        except Exception as err:  # urllib3 raises several unrelated types mid-body
            raise ApiError(0, f"{method} {path}: reading the response: {err}") from err
        if not 200 <= response.status <= 299:
            _raise_for(response.status, data, response.headers.get("Retry-After"))
        return response.status, data

    def _auth_headers(self) -> dict[str, str]:
        """Default headers plus ``authorization``, re-derived every ``AUTH_REFRESH_SECONDS``:
        the kubeconfig refresh hook re-applies the whole config (and re-reads the proxy
        environment) on every call, which is measurable at thousands of requests."""
        now = time.monotonic()
        with self._auth_lock:
            if self._auth is None or now - self._auth[0] > AUTH_REFRESH_SECONDS:
                headers = dict(self._client.default_headers)
                self._client.update_params_for_auth(headers, [], ["BearerToken"], "", "GET", None)
                self._auth = (now, headers)
            return self._auth[1]

    def _pool(self) -> Any:
        """The client's keep-alive connection pool for the API server (TLS settings,
        retries and pool size as the ``kubernetes`` client configured its
        ``PoolManager``), looked up once; ``None`` behind a proxy (the proxy manager
        then routes each request)."""
        if self._connection_pool is _UNSET:
            manager = self._client.rest_client.pool_manager
            pool = None
            if not isinstance(manager, urllib3.ProxyManager):
                host = self._client.configuration.host
                pool = manager.connection_from_url(host)
                self._prefix = urllib3.util.parse_url(host).path or ""
                self._prefix = self._prefix.rstrip("/")
            self._connection_pool = pool
        return self._connection_pool

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None,
        body: dict[str, Any] | list[Any] | None = None,
        content_type: str = "application/json",
        timeout: tuple[float, float] | None,
    ) -> Any:
        """Send one request on the client's own connection pool (its TLS and proxy
        configuration; never retried: ``retries=False``) with its default headers and
        bearer-token auth (``refresh_api_key_hook`` runs, so exec/OIDC tokens refresh).
        Returns the unread ``urllib3`` response.

        The generated ``param_serialize``/``call_api`` layer is skipped on purpose: it walks
        every header and body value to "sanitize" it, which cost ~10 % of the controller's
        CPU at cold start with 10,000 status writes.
        """
        client = self._client
        connect, read = timeout or (self._timeout, self._timeout)
        try:
            headers = {**self._auth_headers(), "Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = content_type
            if query:
                path += "?" + urlencode(query)
            data = None if body is None else _encode(body)
            pool = self._pool()
            if pool is None:
                return client.rest_client.pool_manager.request(
                    method,
                    client.configuration.host + path,
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(connect=connect, read=read),
                    preload_content=False,
                )
            # What PoolManager.urlopen does for one host, without re-parsing the URL and
            # re-deriving the pool key on every call.
            return pool.urlopen(
                method,
                self._prefix + path,
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(connect=connect, read=read),
                # One attempt per call: our callers retry with their own backoff and log
                # one line per failure (urllib3's default Retry(3) would log a "Retrying"
                # warning per attempt and multiply every timeout by four).
                retries=False,
                preload_content=False,
                assert_same_host=False,
                redirect=False,
            )
        except Exception as err:  # urllib3/ssl/socket errors, a failing token refresh
            raise ApiError(0, f"{method} {path}: {err}") from err


class _RawWatch:
    """Line-delimited JSON watch events read straight off a urllib3 response."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for chunk in self._chunks():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _decode_event(line)
        except ApiError:
            raise
        except Exception as err:  # ProtocolError, ReadTimeoutError, OSError after close()
            if not self._closed.is_set():
                raise ApiError(0, f"watch stream broken: {err}") from err
        finally:
            self.close()
        if buffer.strip() and not self._closed.is_set():
            yield _decode_event(buffer)

    def _chunks(self) -> Iterator[bytes]:
        response = self._response
        if response.chunked and response.supports_chunked_reads():
            yield from response.read_chunked(decode_content=True)
            return
        while not self._closed.is_set():
            data = response.read1(65536)
            if not data:
                return
            yield data

    def close(self) -> None:
        """End the stream now, also when another thread is blocked reading it."""
        if self._closed.is_set():
            return
        self._closed.set()
        # Already closed or no socket left: nothing to interrupt, nothing to release.
        with contextlib.suppress(Exception):
            self._response.shutdown()
        with contextlib.suppress(Exception):
            self._response.release_conn()


_DIRECT_CONNECTIONS = (urllib3.connection.HTTPConnection, urllib3.connection.HTTPSConnection)
"""Connection classes of a pool that talks to the API server directly (no proxy)."""
_PLAIN_PATH = re.compile(r"[A-Za-z0-9\-._~/%:@!$&'()*+,;=]+")
"""A path made only of RFC 3986 ``pchar`` and ``/``: sent as is (others go through urllib3,
which percent-encodes)."""
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_HEADER_VALUE = re.compile(r"[\r\n\x00]")
_CLOSED_BY_PEER = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class _KeptAlive:
    """Kept-alive HTTP/1.1 connections to the API server for the hot writes.

    Opening: the pool's own ``urllib3`` connection (``pool._new_conn()``: the
    ``kubernetes`` client's CA, client certificate and key, ``cert_reqs``, server name,
    ``assert_hostname`` and socket options; TLS verification is never weaker than
    ``urllib3``'s) connects with ``timeout`` as its connect timeout; its socket is then
    used directly, with ``timeout`` as the read timeout. An unverified HTTPS connection
    (``verify_ssl: false``) warns like ``urllib3`` (``InsecureRequestWarning``).

    Sending: the request is one pre-assembled byte string (head and body) written with
    ``send``; the answer is read by :class:`_Response` (``http.client.HTTPResponse``
    with a lean head parser: ``Content-Length`` or chunked body). A connection whose
    answer says it closes (``Connection: close``, HTTP/1.0) is closed; others go back to
    the idle list (LIFO, at most ``max_idle``; more are closed, like ``urllib3``'s pool of
    ``maxsize``).
    Connections are not bound to threads, so a thread that ends leaves none behind.

    When a request is sent again (at most once):

    - Before an idle connection is reused it is polled (``wait_for_read`` with timeout
      0, as ``urllib3``'s ``is_connection_dropped``): readable means the server closed it
      (its keep-alive idle timeout) or sent something unasked, so it is closed and
      another taken. Nothing was sent on it: this is not a retry. Go's ``net/http``
      Transport does the same with the read loop it runs on every idle connection
      (``persistConn.readLoop`` closing it on EOF, ``errServerClosedIdle``).
    - On a reused connection, when the very first ``send`` fails because the peer closed
      or reset it (``BrokenPipeError``, ``ConnectionResetError``,
      ``ConnectionAbortedError``), not one byte of the request was written, so the
      server cannot have seen it: it is sent once more on a new connection. This is Go's
      ``nothingWrittenError`` rule (``persistConn.shouldRetryRequest``: retried for any
      method, since the request provably was not processed).
    - Never otherwise. A failure after some bytes were written, or the server closing
      the connection before the first byte of the answer (``RemoteDisconnected``), is
      the caller's error (``ApiError`` status 0): the server may have processed the
      PATCH or POST and died before answering. Go retries that case
      (``errServerClosedIdle``, ``transportReadFromServerError``) only for replayable
      requests (``Request.isReplayable``: GET, HEAD, OPTIONS, TRACE or an
      ``Idempotency-Key`` header), not for PATCH or POST; ``urllib3``'s ``Retry`` does not
      retry them either. A fresh connection is never retried (Go: "there's no reason the
      server should've hung up on us"). Timeouts are never retried.
    """

    def __init__(self, pool: Any, *, timeout: float, max_idle: int) -> None:
        self._pool = pool
        self._timeout = timeout
        self._max_idle = max(1, max_idle)
        self._idle: deque[Any] = deque()
        self._closed = False
        host = str(pool.host)
        if ":" in host:  # IPv6 literal (urllib3 keeps it without brackets)
            host = f"[{host}]"
        default_port = 443 if pool.scheme == "https" else 80
        self.host_header = host if pool.port in (None, default_port) else f"{host}:{pool.port}"
        """``Host`` header value, as ``http.client`` writes it."""

    def exchange(self, request: bytes, method: str) -> tuple[int, bytes, str | None]:
        """Send ``request`` (a complete HTTP/1.1 request with ``Content-Length``); return
        ``(status, body, its Retry-After header or None)`` of the answer. Raises ``OSError``
        (including ``ssl`` and timeout errors), ``http.client.HTTPException`` or
        ``urllib3`` connect errors."""
        sock = self._reusable()
        if sock is not None:
            try:
                sent = sock.send(request)
            except _CLOSED_BY_PEER:
                _close(sock)  # nothing written: open a new connection and send it there
            except BaseException:
                _close(sock)
                raise
            else:
                return self._finish(sock, request, sent, method)
        sock = self._open()
        try:
            sent = sock.send(request)
        except BaseException:
            _close(sock)
            raise
        return self._finish(sock, request, sent, method)

    def close(self) -> None:
        """Close every idle connection; connections in use are closed when returned."""
        self._closed = True
        self._drain()

    def _reusable(self) -> Any:
        while True:
            try:
                sock = self._idle.pop()
            except IndexError:
                return None
            if not wait_for_read(sock, timeout=0.0):
                return sock
            _close(sock)  # closed by the server while idle (or unasked data)

    def _open(self) -> Any:
        conn = self._pool._new_conn()
        conn.timeout = self._timeout
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        sock = conn.sock
        conn.sock = None  # the socket is ours from here on
        if self._pool.scheme == "https" and not conn.is_verified:
            warnings.warn(
                f"Unverified HTTPS request is being made to host '{conn.host}'. Adding"
                " certificate verification is strongly advised.",
                urllib3.exceptions.InsecureRequestWarning,
                stacklevel=2,
            )
        alpn = getattr(sock, "selected_alpn_protocol", None)
        if alpn is not None and alpn() not in (None, "http/1.1"):
            _close(sock)
            raise http.client.HTTPException(f"server chose {alpn()!r}, not HTTP/1.1")
        sock.settimeout(self._timeout)
        return sock

    def _finish(
        self, sock: Any, request: bytes, sent: int, method: str
    ) -> tuple[int, bytes, str | None]:
        response = None
        try:
            if sent < len(request):
                sock.sendall(memoryview(request)[sent:])
            response = _Response(sock, method=method)
            response.begin()
            data = response.read()
            keep = not response.will_close
        except BaseException:
            if response is not None:
                response.close()
            _close(sock)
            raise
        if keep:
            self._release(sock)
        else:
            _close(sock)
        return response.status, data, response.fields.get("retry-after")

    def _release(self, sock: Any) -> None:
        if self._closed or len(self._idle) >= self._max_idle:
            _close(sock)
            return
        self._idle.append(sock)
        if self._closed:  # close() ran meanwhile: it may not have seen this one
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                sock = self._idle.pop()
            except IndexError:
                return
            _close(sock)


_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Response(http.client.HTTPResponse):
    """``http.client.HTTPResponse`` whose head is parsed without the ``email`` package
    (``http.client.parse_headers`` was about a third of the client CPU of a hot write).

    Same limits as ``http.client`` (65,536 bytes a line, 100 header lines) and the same
    errors (``RemoteDisconnected`` when the connection closes before a status line,
    ``BadStatusLine``, ``LineTooLong``). The status line is split on runs of whitespace
    like ``http.client``'s, so the reason phrase may be missing (RFC 9112 §4). Interim
    ``1xx`` answers (``100 Continue``, ``102``, ``103 Early Hints``) are read and skipped
    until the final one (RFC 9110 §15.2); ``101 Switching Protocols`` is an error. Header
    names are matched case-insensitively; a repeated field's values are joined with
    ``", "`` (RFC 9110 §5.3); whitespace between a name and its colon, or obsolete line
    folding, is an error (RFC 9112 §5.1, §5.2). Message framing follows RFC 9112 §6.3:
    ``Transfer-Encoding`` whose last coding is ``chunked`` (other codings than
    ``identity`` are an error: we ask for ``identity``) wins over ``Content-Length`` and
    then the connection is closed after the answer; a ``Content-Length`` that is not one
    number (``2, 2`` is one; ``2, 5`` or ``x`` is not) is an error; neither means the body
    runs until the connection closes. Every error closes the connection, so a misread
    answer never leaves bytes for the next request. ``fields`` holds the headers
    (lower-case names); ``headers`` is left empty.
    """

    fields: dict[str, str]

    def begin(self) -> None:
        """Read the status line and headers; set what ``read()`` needs.

        Raises:
            http.client.HTTPException: a malformed or unsupported head (see the class).
        """
        if self.headers is not None:
            return
        while True:
            version, status, reason = self._read_status_line()
            fields = self._read_fields()
            if not 100 <= status < 200:
                break
            if status == http.client.SWITCHING_PROTOCOLS:
                raise http.client.HTTPException("101 Switching Protocols was not asked for")
        self.code = self.status = status
        self.reason = reason
        self.version = 10 if version == "HTTP/1.0" else 11
        self.headers = self.msg = http.client.HTTPMessage()
        self.fields = fields
        self.will_close = self.version == 10 or "close" in fields.get("connection", "").lower()
        self.chunk_left = None
        self.length = None
        self.chunked = False
        encoding = fields.get("transfer-encoding")
        if encoding is not None:
            codings = [c.strip().lower() for c in encoding.split(",")]
            codings = [c for c in codings if c != "identity"]
            if codings != ["chunked"]:
                raise http.client.HTTPException(f"unsupported Transfer-Encoding {encoding!r}")
            self.chunked = True
            if "content-length" in fields:
                self.will_close = True  # both framings: do not trust the connection after
        elif "content-length" in fields:
            values = {v.strip() for v in fields["content-length"].split(",")}
            if len(values) != 1 or not all(v.isascii() and v.isdigit() for v in values):
                raise http.client.HTTPException(
                    f"invalid Content-Length {fields['content-length']!r}"
                )
            self.length = int(values.pop())
        if status in (204, 304) or self._method == "HEAD":
            self.length = 0
            self.chunked = False
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # the body runs until the connection closes

    def _read_status_line(self) -> tuple[str, int, str]:
        line = self.fp.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("status line")
        text = line.decode("latin-1")
        parts = text.split(None, 2)
        if len(parts) == 2:
            parts.append("")
        if len(parts) != 3:
            raise http.client.BadStatusLine(text.rstrip())
        version, code, reason = parts
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise http.client.BadStatusLine(text.rstrip())
        if not code.isascii() or int(code) < 100:
            raise http.client.BadStatusLine(text.rstrip())
        return version, int(code), reason.strip()

    def _read_fields(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            line = self.fp.readline(_MAX_LINE + 1)
            if len(line) > _MAX_LINE:
                raise http.client.LineTooLong("header line")
            if line in (b"\r\n", b"\n", b""):
                return fields
            text = line.decode("latin-1")
            name, colon, value = text.partition(":")
            if not colon or not name or name != name.strip() or text[0] in " \t":
                raise http.client.HTTPException(f"malformed header line {text.rstrip()!r}")
            key, value = name.lower(), value.strip()
            fields[key] = f"{fields[key]}, {value}" if key in fields else value
        raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")


def _close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _describe(err: BaseException, timeout: float) -> str:
    """A transport error as one line (a timeout names the bound)."""
    if isinstance(err, TimeoutError | socket.timeout):
        return f"timed out (request timeout {timeout:g}s)"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"([^"\\]*)"')


def resource_version_in(answer: bytes) -> str | None:
    """``metadata.resourceVersion`` of one object in the API server's JSON ``answer``, or
    ``None``. The first ``"resourceVersion"`` key is the object's own: apimachinery writes
    ``kind``/``apiVersion`` and then ``metadata``, whose fields go in ``ObjectMeta``'s
    order (``name``, ``generateName``, ``namespace``, ``selfLink``, ``uid``,
    ``resourceVersion``: nothing before it can hold that key); ``managedFields``, the spec
    and the status come after. A regular expression over the bytes, not a parse: this is
    on the cold start's hot path (one per status write)."""
    found = _RESOURCE_VERSION.search(answer, 0, 4096)
    return found.group(1).decode() if found else None


def _encode(body: dict[str, Any] | list[Any]) -> bytes:
    """Compact JSON of a request body (``orjson``); a string that is not valid UTF-8 (a
    lone surrogate) goes through ``json``, which writes it as an escape instead of failing."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()


def _decode_event(line: bytes) -> dict[str, Any]:
    try:
        event = orjson.loads(line)
    except ValueError as err:
        raise ApiError(0, f"watch event is not JSON: {line[:200]!r}") from err
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ApiError(0, f"watch event has no object: {line[:200]!r}")
    return event


def _read_all(raw: Any) -> bytes:
    try:
        return bytes(raw.data)
    except Exception:  # the error body is best effort
        return b""


def retry_after_seconds(status: int, value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header ``value`` on a ``status`` answer, as
    client-go reads it (``rest.checkWait``/``retryAfterSeconds``): only on 429 and 5xx,
    only a whole number of seconds >= 0 (an HTTP-date or garbage counts as absent)."""
    if value is None or not (status == 429 or 500 <= status <= 599):
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit():
        return None
    return float(int(value))


def _raise_for(status: int, data: bytes, retry_after: str | None = None) -> None:
    wait = retry_after_seconds(status, retry_after)
    reason = data.decode("utf-8", "replace")[:500]
    try:
        decoded = orjson.loads(data)
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            reason = decoded["message"]
    except ValueError:
        pass
    raise ApiError(status, reason, wait)


def _events_path(api_version: Any, namespace: str | None) -> str:
    base = "/api/v1" if api_version == "v1" else "/apis/events.k8s.io/v1"
    return f"{base}/events" if namespace is None else f"{base}/namespaces/{namespace}/events"


def _lease_path(namespace: str, name: str | None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return base if name is None else f"{base}/{name}"


class ConnectError(Exception):
    """No usable cluster configuration; ``str(err)`` names the setting and the reason."""


def _from_kubeconfig(
    path: str, *, origin: str, context: str | None = None
) -> tuple[Any, dict[str, Any] | None]:
    """``(ApiClient, chosen context entry)`` from the kubeconfig file(s) ``path``.

    Raises:
        ConnectError: ``<origin> <path>: cannot load: <reason>``.
    """
    from kubernetes import config

    try:
        api_client = config.new_client_from_config(config_file=path, context=context)  # type: ignore[no-untyped-call]
        contexts, current = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, TypeError) as err:
        raise ConnectError(f"{origin} {path}: cannot load: {err}") from err
    chosen = next((c for c in contexts or () if c.get("name") == context), current)
    return api_client, chosen


def _in_cluster(hint: str) -> Any:
    """An ApiClient from the Pod's service account.

    Raises:
        ConnectError: not in a Pod; the message starts with ``no cluster to talk to:``
            and ``hint`` (how to give a kubeconfig).
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as err:
        raise ConnectError(
            f"no cluster to talk to: {hint} or run in a Pod with a service account ({err})"
        ) from err
    return client.ApiClient(configuration)


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class Connection:
    """Where :func:`connect` found the cluster: the ``kubernetes.client.ApiClient``, the
    default namespace, and whether it is the Pod's in-cluster configuration."""

    api_client: Any
    namespace: str
    in_cluster: bool


ConfigOrder = Literal["kubectl", "controller-runtime"]


def connect(
    kubeconfig: Path | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    order: ConfigOrder = "kubectl",
) -> Connection:
    """The cluster configuration, found as ``kubectl`` or controller-runtime finds it.

    ``order="kubectl"`` (client-go ``clientcmd`` loading rules; ``preview``): ``kubeconfig``
    (``--kubeconfig``); else ``$KUBECONFIG`` (a list of files joined by ``os.pathsep``,
    merged); else ``~/.kube/config`` when it exists; else the in-cluster configuration
    (service account of a Pod). ``order="controller-runtime"`` (its ``config.GetConfig``;
    ``serve``): ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster, else
    ``~/.kube/config``, so a Pod uses its service account even when the image has a
    ``~/.kube/config``. The namespace is the chosen context's ``namespace`` (``context``
    or the current one), else ``default``; in a Pod it is ``$POD_NAMESPACE``, else the
    service account's namespace file, else ``default``.

    Raises:
        ConnectError: the kubeconfig cannot be loaded or has no such context (naming the
            file and the reason), or there is none and the process does not run in a Pod.
    """
    environ = os.environ if environ is None else environ
    path: str | None = str(kubeconfig) if kubeconfig is not None else None
    origin = "--kubeconfig"
    if path is None and environ.get("KUBECONFIG"):
        path, origin = environ["KUBECONFIG"], "KUBECONFIG"
    home = Path(environ.get("HOME") or Path.home()) / ".kube" / "config"
    if path is None and order == "kubectl" and home.is_file():
        path, origin = str(home), "kubeconfig"
    flag = "--kubeconfig PATH" if order == "kubectl" else "--kubeconfig PATH (NODE_IPAM_KUBECONFIG)"
    if path is None:
        try:
            api_client = _in_cluster(f"give {flag} or set KUBECONFIG, create ~/.kube/config,")
        except ConnectError:
            if not home.is_file():  # controller-runtime: ~/.kube/config is the last resort
                raise
            path, origin = str(home), "kubeconfig"
        else:
            namespace = environ.get("POD_NAMESPACE", "")
            if not namespace:
                try:
                    namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
                except OSError:
                    namespace = ""
            return Connection(api_client, namespace or "default", in_cluster=True)
    api_client, chosen = _from_kubeconfig(path, origin=origin, context=context)
    context_namespace = ((chosen or {}).get("context") or {}).get("namespace")
    if not isinstance(context_namespace, str) or not context_namespace:
        context_namespace = "default"
    return Connection(api_client, context_namespace, in_cluster=False)
