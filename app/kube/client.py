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
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlencode

import orjson
import urllib3

Kind = Literal["nodes", "services", "endpointslices"]

COLLECTIONS: dict[str, str] = {
    "nodes": "/api/v1/nodes",
    "services": "/api/v1/services",
    "endpointslices": "/apis/discovery.k8s.io/v1/endpointslices",
}
"""Cluster-wide collection path of each watched kind."""

LIST_PAGE_SIZE = 500
"""Page size of :meth:`KubernetesAPI.list_items` (kubectl's ``--chunk-size`` default)."""
MAX_LIST_ITEMS = 1_000_000
"""Most objects one :meth:`KubernetesAPI.list_items` call reads (a 5,000-node cluster has
~50,000 Nodes, Services and EndpointSlices together)."""

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
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
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}" if status else reason)
        self.status = status
        self.reason = reason


class WatchStream(Protocol):
    """An open watch: iterate decoded watch events; :meth:`close` ends it from any thread."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class KubeAPI(Protocol):
    """The calls this controller makes. Errors: :class:`ApiError`, never anything else."""

    def list_page(self, kind: Kind, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        """GET a page of the cluster-wide List of ``kind`` (``items``, ``metadata``)."""
        ...

    def watch(self, kind: Kind, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        """Open a watch from ``resource_version`` with ``allowWatchBookmarks=true``."""
        ...

    def patch_service_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """JSON merge patch ``services/{name}/status`` (the new Service comes by the watch)."""
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
    """

    def __init__(self, api_client: Any, *, request_timeout: float = 10.0) -> None:
        self._client = api_client
        self._timeout = request_timeout
        self._auth_lock = threading.Lock()
        self._auth: tuple[float, dict[str, str]] | None = None
        self._connection_pool: Any = _UNSET
        self._prefix = ""

    def list_page(self, kind: Kind, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        """See :meth:`KubeAPI.list_page`."""
        query: list[tuple[str, Any]] = [("limit", limit)]
        if continue_token:
            query.append(("continue", continue_token))
        return self._json("GET", COLLECTIONS[kind], query=query)

    def list_items(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
        max_items: int = MAX_LIST_ITEMS,
    ) -> list[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``; ``None`` = all namespaces, the only
        form for ``nodes``), optionally matching ``label_selector``, read in pages of
        ``page_size`` with ``limit``/``continue`` like ``kubectl get`` (API concepts,
        "Retrieving large results sets in chunks"). Objects are plain dicts without
        ``kind``/``apiVersion`` (the List carries them).

        Raises:
            ApiError: a failed page (410 Expired when the continue token outlived
                compaction), or more than ``max_items`` objects (status 0, naming the
                limit), so one call's memory stays bounded.
        """
        path = COLLECTIONS[kind]
        if namespace is not None:
            if kind == "nodes":
                raise ValueError("namespace: Forbidden: nodes are cluster-scoped")
            prefix, _, plural = path.rpartition("/")
            path = f"{prefix}/namespaces/{namespace}/{plural}"
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", page_size)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = self._json("GET", path, query=query)
            listed = page.get("items") or []
            if not isinstance(listed, list):
                raise ApiError(0, f"GET {path}: items is not a list")
            items.extend(item for item in listed if isinstance(item, dict))
            if len(items) > max_items:
                raise ApiError(0, f"GET {path}: more than {max_items} {kind}: refusing to read on")
            metadata = page.get("metadata")
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if not token:
                return items

    def read_service(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """GET a Service; ``None`` when it does not exist (404)."""
        return self._json_or_none("GET", f"/api/v1/namespaces/{namespace}/services/{name}")

    def watch(self, kind: Kind, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        """See :meth:`KubeAPI.watch`; the socket read timeout is ``timeout_seconds + 15``."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        response = self._call(
            "GET", COLLECTIONS[kind], query=query, timeout=(self._timeout, timeout_seconds + 15)
        )
        if not 200 <= response.status <= 299:
            _raise_for(response.status, _read_all(response))
        return _RawWatch(response)

    def patch_service_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """See :meth:`KubeAPI.patch_service_status`."""
        path = f"/api/v1/namespaces/{namespace}/services/{name}/status"
        self._send("PATCH", path, body=patch, content_type=MERGE_PATCH)

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
    ) -> None:
        """A write whose answer is not needed: check the status, skip decoding the body."""
        self._checked(method, path, query=None, body=body, content_type=content_type)

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
            _raise_for(response.status, data)
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


def _raise_for(status: int, data: bytes) -> None:
    reason = data.decode("utf-8", "replace")[:500]
    try:
        decoded = orjson.loads(data)
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            reason = decoded["message"]
    except ValueError:
        pass
    raise ApiError(status, reason)


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
