"""Run the fake API with uvicorn in a background thread, and the Python handle tests use."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import kubernetes.client
import uvicorn

from tests.fakeapi.app import FakeApiApp
from tests.fakeapi.cluster import Cluster
from tests.fakeapi.faults import Faults, Latency
from tests.fakeapi.seed import load_files

T = TypeVar("T")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: fakeapi
  cluster:
    server: {url}{cluster_extra}
users:
- name: fakeapi-admin
  user:
{user}
contexts:
- name: fakeapi
  context:
    cluster: fakeapi
    user: fakeapi-admin
    namespace: default
current-context: fakeapi
"""
TOKEN_USER = "    token: fakeapi-admin-token"


class FakeApiServer:
    """A fake Kubernetes API server on ``http://127.0.0.1:<port>``.

    Use as a context manager or call :meth:`start` / :meth:`stop`. State-changing handles
    (seed, compact, drop_watches) run on the server's event loop so watch events stay in
    resourceVersion order.

    ``tls=True`` serves HTTPS instead (``https://127.0.0.1:<port>``) with a certificate for
    ``127.0.0.1`` and ``localhost`` from a throw-away ``trustme`` CA (``ca_path``, PEM; the
    kubeconfig names it as ``certificate-authority``); ``client_certs=True`` also requires
    a client certificate issued by that CA (the kubeconfig then carries
    ``client-certificate``/``client-key`` instead of the token), like kube-apiserver's
    ``--client-ca-file``.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        history_limit: int = 200_000,
        tls: bool = False,
        client_certs: bool = False,
    ):
        self.cluster = Cluster(history_limit=history_limit)
        self.faults = Faults()
        self.app = FakeApiApp(self.cluster, self.faults)
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="fakeapi-")
        self.url = ""
        self.kubeconfig_path = Path(self._tmp.name) / "kubeconfig"
        self._tls = tls or client_certs
        self._client_certs = client_certs
        self.ca_path = Path(self._tmp.name) / "ca.crt"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Self:
        """Bind, serve in a daemon thread, and return once requests are accepted (< 1 s)."""
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto is
        # IPPROTO_TCP; with proto 0, Nagle + delayed ACK add ~40 ms to every keep-alive request.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self._port = sock.getsockname()[1]
        self.url = f"{'https' if self._tls else 'http'}://{self._host}:{self._port}"
        self.app.server_address = f"{self._host}:{self._port}"
        self.kubeconfig_path.write_text(
            KUBECONFIG.format(url=self.url, cluster_extra="", user=TOKEN_USER)
        )
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
            **(self._tls_files() if self._tls else {}),
        )
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        server = self._server

        async def serve() -> None:
            # uvicorn's own main loop polls for shutdown every 0.1 s; an event stops at once.
            config.load()
            server.lifespan = config.lifespan_class(config)
            self._stop_event = asyncio.Event()
            await server.startup(sockets=[sock])
            await self._stop_event.wait()
            await server.shutdown(sockets=[sock])

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self.cluster.store.loop = loop
            self.cluster.store.loop_thread = threading.get_ident()
            ready.set()
            loop.run_until_complete(serve())
            loop.close()

        self._thread = threading.Thread(target=run, name="fakeapi", daemon=True)
        self._thread.start()
        ready.wait(5)
        deadline = time.monotonic() + 5
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake API server did not start")
            time.sleep(0.005)
        return self

    def _tls_files(self) -> dict[str, Any]:
        """Write the CA, serving and (with ``client_certs``) client key pairs, the TLS
        kubeconfig; return uvicorn's ``ssl_*`` settings."""
        import ssl

        import trustme

        tmp = Path(self._tmp.name)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(self.ca_path))
        serving = ca.issue_cert("127.0.0.1", "localhost")
        serving.private_key_and_cert_chain_pem.write_to_path(str(tmp / "serving.pem"))
        user = TOKEN_USER
        settings: dict[str, Any] = {"ssl_certfile": str(tmp / "serving.pem")}
        if self._client_certs:
            client = ca.issue_cert("fakeapi-admin")
            client.cert_chain_pems[0].write_to_path(str(tmp / "client.crt"))
            client.private_key_pem.write_to_path(str(tmp / "client.key"))
            user = (
                f"    client-certificate: {tmp / 'client.crt'}\n"
                f"    client-key: {tmp / 'client.key'}"
            )
            settings |= {"ssl_ca_certs": str(self.ca_path), "ssl_cert_reqs": ssl.CERT_REQUIRED}
        self.kubeconfig_path.write_text(
            KUBECONFIG.format(
                url=self.url,
                cluster_extra=f"\n    certificate-authority: {self.ca_path}",
                user=user,
            )
        )
        return settings

    def stop(self) -> None:
        """Close watches and stop serving (returns in well under a second)."""
        if self._server is None or self._thread is None:
            return
        if self._thread.is_alive():
            self.call(self.cluster.store.drop_watches)
            stop_event = self._stop_event
            if stop_event is not None:
                self.call(stop_event.set)
        self._thread.join(5)
        self._server = None
        self._tmp.cleanup()

    def serve_until_signal(self) -> None:
        """Start, print the URL on one line, serve until SIGTERM/SIGINT, then stop.

        The standalone entry point (``python -m tests.fakeapi``) and benchmark launchers
        share this; call it from the main thread (signal handlers are installed). A server
        already started is not started again.
        """
        if self._server is None:
            self.start()
        print(self.url, flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stop.wait()
        self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's event loop thread and return its result."""
        loop = self._loop
        if loop is None or threading.get_ident() == self.cluster.store.loop_thread:
            return fn()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as err:  # re-raised in the calling thread
                future.set_exception(err)

        loop.call_soon_threadsafe(run)
        return future.result(timeout=30)

    # -- clients -----------------------------------------------------------------------
    def client(self) -> kubernetes.client.ApiClient:
        """A ``kubernetes.client.ApiClient`` configured for this server (with ``tls``: from
        its kubeconfig, so the CA and client certificate are the kubeconfig's)."""
        if self._tls:
            from kubernetes import config as kube_config

            client: kubernetes.client.ApiClient = kube_config.new_client_from_config(
                config_file=str(self.kubeconfig_path)
            )
            return client
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        return kubernetes.client.ApiClient(cfg)

    # -- state -------------------------------------------------------------------------
    def seed(
        self, objects: list[dict[str, Any]] | None = None, *, files: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """Store objects (and objects of kubectl dump ``files``) as they are, status kept."""
        everything = list(objects or []) + load_files(list(files))
        return self.call(lambda: self.cluster.seed(everything))

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object (a fresh copy) of ``resource`` (store key, e.g. ``services``,
        ``endpointslices.discovery.k8s.io``), or ``None``."""
        entry = self.cluster.store.get(resource, namespace, name)
        return None if entry is None else json.loads(entry.raw)

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self.cluster.store.rv

    # -- faults ------------------------------------------------------------------------
    def fail(
        self,
        *,
        method: str = "*",
        path: str = "*",
        status: int = 500,
        times: int = 1,
        message: str = "",
    ) -> None:
        """Answer the next ``times`` requests matching ``method``/``path`` globs with ``status``."""
        self.faults.fail(method=method, path=path, status=status, times=times, message=message)

    def add_latency(self, seconds: float, *, method: str = "*", path: str = "*") -> None:
        """Delay matching requests by ``seconds``; :meth:`clear_latency` removes all delays."""
        self.faults.latencies.append(Latency(seconds, method, path))

    def clear_latency(self) -> None:
        self.faults.latencies.clear()

    def hold(self, *, method: str = "*", path: str = "*") -> None:
        """Stall matching requests (after counting them) until :meth:`release` (max 30 s)."""
        self.faults.holds.append((method.upper() if method != "*" else "*", path))

    def release(self) -> None:
        """Let every held request proceed."""
        self.faults.holds.clear()

    def drop_watches(self) -> int:
        """End every open watch stream; returns how many were open."""
        return self.call(self.cluster.store.drop_watches)

    def compact(self) -> int:
        """Compact history: every older resourceVersion answers 410 Gone. Returns the current rv."""
        return self.call(self.cluster.store.compact)

    def set_bookmark_interval(self, seconds: float) -> None:
        """How often watches with ``allowWatchBookmarks`` get a BOOKMARK (default 1 s)."""
        self.app.bookmark_interval = seconds

    # -- counters and log --------------------------------------------------------------
    def requests(self) -> dict[str, int]:
        """Counters ``{"patch services/status": 3, "list nodes": 1, ...}``."""
        return self.call(lambda: dict(self.faults.counters))

    def reset_requests(self) -> None:
        self.faults.reset_counters()

    def request_log(self) -> list[dict[str, Any]]:
        """Every request: verb, group, resource, subresource, namespace, name, user_agent, ..."""
        return self.call(self.faults.log_dicts)

    # -- auth and webhooks -------------------------------------------------------------
    def add_token(
        self, token: str, *, username: str, groups: Sequence[str] = (), uid: str = ""
    ) -> None:
        """Make TokenReview accept ``token`` as ``username`` (requests with it act as that user)."""
        user: dict[str, Any] = {"username": username, "groups": list(groups)}
        if uid:
            user["uid"] = uid
        self.cluster.tokens[token] = user

    def allow_non_resource(self, *, user: str, path: str, verb: str = "get") -> None:
        """Make SubjectAccessReview allow ``user`` to ``verb`` the nonResourceURL ``path``."""
        self.cluster.allowed_non_resource.add((user, verb, path))

    def map_service_port(
        self, *, namespace: str, name: str, port: int = 443, local_port: int
    ) -> None:
        """Route webhook calls for service ``namespace/name:port`` to ``127.0.0.1:local_port``."""
        self.cluster.admission.service_ports[(namespace, name, port)] = local_port
