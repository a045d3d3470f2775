"""The hot writes' kept-alive path (app/kube/client.py ``_KeptAlive``): same answers and
errors as the urllib3 path, reconnects without duplicate writes, timeouts, TLS that is never
weaker than the kubernetes client's, no leaked sockets."""

from __future__ import annotations

import gc
import json
import re
import socket
import struct
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import trustme

import app.kube.client as client_module
from app.kube.client import ApiError, KubernetesAPI
from tests.controlplane.plane import ControlPlane
from tests.fakeapi.server import FakeApiServer
from tests.support.objects import event_body

STATUS = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}}


def event(namespace: str, name: str) -> dict[str, Any]:
    """An ``IPsAssigned`` Event like the recorder's, with a unique name."""
    return event_body(namespace, name, uuid.uuid4().int % 1_000_000)


def service(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
    }


def connections(api: KubernetesAPI) -> int:
    """How many connections the client's urllib3 pool has opened (the kept-alive path
    opens its connections through that pool too)."""
    return int(api._pool().num_connections)


def outcome(call: Callable[[], None]) -> tuple[int, str] | None:
    try:
        call()
    except ApiError as err:
        return err.status, err.reason
    return None


# -- against the fake API -----------------------------------------------------------------


def test_writes_reuse_one_connection_and_reach_the_server(fake_api: FakeApiServer) -> None:
    fake_api.seed([service("default", "web")])
    api = KubernetesAPI(fake_api.client())
    for _ in range(3):
        version = api.patch_service_status(namespace="default", name="web", patch=STATUS)
        api.create_event(namespace="default", body=event("default", "web"))
    stored = fake_api.get("services", "web", "default")
    assert stored is not None and stored["status"] == STATUS["status"]
    assert version == stored["metadata"]["resourceVersion"]
    counts = fake_api.requests()
    assert (counts["patch services/status"], counts["create events"]) == (3, 3)
    assert connections(api) == 1
    api.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "urllib3"])
def test_error_statuses_and_messages_match_the_urllib3_path(
    fake_api: FakeApiServer, lean: bool
) -> None:
    """The same calls give the same ``ApiError`` on both paths (status and the Status
    message), and the kept-alive path is really the one taken when ``lean``."""
    fake_api.seed([service("default", "web")])
    api = KubernetesAPI(fake_api.client(), lean_writes=lean)
    missing = outcome(
        lambda: api.patch_service_status(namespace="default", name="absent", patch=STATUS)
    )
    assert missing == (404, 'services "absent" not found')
    fake_api.fail(method="PATCH", path="*", status=409, message="the object has been modified")
    conflict = outcome(
        lambda: api.patch_service_status(namespace="default", name="web", patch=STATUS)
    )
    assert conflict == (409, "the object has been modified")
    bad = event("default", "web")
    del bad["reason"]
    invalid = outcome(lambda: api.create_event(namespace="default", body=bad))
    assert invalid is not None and invalid[0] == 422 and "reason: Required value" in invalid[1]
    assert (
        outcome(lambda: api.create_event(namespace="default", body=event("default", "web"))) is None
    )
    assert (api._lean() is not None) == lean
    api.close()


def test_a_slow_answer_is_a_timeout_and_the_connection_is_not_reused(
    fake_api: FakeApiServer,
) -> None:
    fake_api.seed([service("default", "web")])
    api = KubernetesAPI(fake_api.client(), request_timeout=0.5)
    api.patch_service_status(namespace="default", name="web", patch=STATUS)
    fake_api.add_latency(3, method="PATCH")
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        api.patch_service_status(namespace="default", name="web", patch=STATUS)
    assert time.monotonic() - started < 2.5
    assert err.value.status == 0
    assert "timed out (request timeout 0.5s)" in err.value.reason
    fake_api.clear_latency()
    api.patch_service_status(namespace="default", name="web", patch=STATUS)
    assert connections(api) == 2, "the timed-out connection is closed, a new one opened"
    assert fake_api.requests()["patch services/status"] == 3, "the timed-out PATCH not resent"
    api.close()


def test_tls_writes_and_a_wrong_ca_never_falls_back_to_no_verification() -> None:
    with FakeApiServer(tls=True) as server:
        server.seed([service("default", "web")])
        api = KubernetesAPI(server.client())
        api.patch_service_status(namespace="default", name="web", patch=STATUS)
        api.create_event(namespace="default", body=event("default", "web"))
        assert api._lean() is not None and connections(api) == 1
        api.close()

        wrong = trustme.CA()
        with wrong.cert_pem.tempfile() as ca_file:
            cfg = kubernetes.client.Configuration()
            cfg.host = server.url
            cfg.ssl_ca_cert = ca_file
            untrusting = KubernetesAPI(kubernetes.client.ApiClient(cfg), request_timeout=5)
            server.reset_requests()
            with pytest.raises(ApiError) as err:
                untrusting.patch_service_status(namespace="default", name="web", patch=STATUS)
        assert err.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in err.value.reason
        assert server.requests().get("patch services/status", 0) == 0
        untrusting.close()


def test_client_certificates_are_presented() -> None:
    with FakeApiServer(tls=True, client_certs=True) as server:
        server.seed([service("default", "web")])
        api = KubernetesAPI(server.client())
        api.patch_service_status(namespace="default", name="web", patch=STATUS)
        assert server.requests()["patch services/status"] == 1
        api.close()
        cfg = kubernetes.client.Configuration()  # the CA, but no client certificate
        cfg.host = server.url
        cfg.ssl_ca_cert = str(server.ca_path)
        anonymous = KubernetesAPI(kubernetes.client.ApiClient(cfg), request_timeout=5)
        with pytest.raises(ApiError) as err:
            anonymous.patch_service_status(namespace="default", name="web", patch=STATUS)
        assert err.value.status == 0
        assert server.requests()["patch services/status"] == 1
        anonymous.close()


# -- against a scripted server: what happens on the wire ----------------------------------


class Scripted:
    """A one-thread HTTP/1.1 server on 127.0.0.1 that records every request (head and
    body) and, after each, does what ``after`` says for that request's index: ``"keep"``
    (answer, keep the connection), ``"close"`` (answer, then close: an idle timeout),
    ``"chunked"`` (a ``100 Continue`` head, then a chunked 422 answer, keep the connection),
    ``"reset"`` (answer, then close with RST) or ``"drop"`` (read it, close without an
    answer). Bounded: at most 50 connections, 60 s, 5 s per read."""

    def __init__(self, after: Callable[[int], str]) -> None:
        self.after = after
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.connections = 0
        self.closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stop = False
        self._thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + 60
        while not self._stop and self.connections < 50 and time.monotonic() < deadline:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(5)
                self._converse(conn)
            self.closed.set()

    def _converse(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)
            }
            length = int(headers.get("content-length", "0"))
            while len(buffer) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            body, buffer = buffer[:length], buffer[length:]
            index = len(self.requests)
            self.requests.append((line, headers, body))
            action = self.after(index)
            if action == "drop":
                return
            answer = b'{"kind":"Status","status":"Success"}'
            if action == "chunked":  # what Go's server does past its 2 KiB buffer
                conn.sendall(
                    b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 422 Unprocessable Entity\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                    % (10, answer[:10], len(answer) - 10, answer[10:])
                )
                continue
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            if action == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if action == "close":
                return

    def stop(self) -> None:
        self._stop = True
        self._thread.join(10)
        self._listener.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[Callable[[int], str]], Scripted]]:
    servers: list[Scripted] = []

    def start(after: Callable[[int], str]) -> Scripted:
        servers.append(Scripted(after))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def api_for(url: str, token: str = "t", timeout: float = 5) -> KubernetesAPI:
    cfg = kubernetes.client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return KubernetesAPI(kubernetes.client.ApiClient(cfg), request_timeout=timeout)


def patch(api: KubernetesAPI) -> None:
    api.patch_service_status(namespace="default", name="web", patch=STATUS)


def test_the_request_on_the_wire(scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda _: "keep")
    api = api_for(server.url)
    patch(api)
    api.create_event(namespace="ns", body=event("ns", "web"))
    (line, headers, body), (event_line, event_headers, _) = server.requests
    assert line == "PATCH /api/v1/namespaces/default/services/web/status HTTP/1.1"
    assert event_line == "POST /apis/events.k8s.io/v1/namespaces/ns/events HTTP/1.1"
    assert headers["host"] == server.url.removeprefix("http://")
    assert headers["authorization"] == "Bearer t"
    assert headers["content-type"] == "application/strategic-merge-patch+json"
    assert event_headers["content-type"] == "application/json"
    assert headers["accept"] == "application/json"
    assert headers["user-agent"].startswith("OpenAPI-Generator/")
    assert body == b'{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1","ipMode":"VIP"}]}}}'
    assert server.connections == 1
    api.close()


def test_a_chunked_answer_is_read_whole_and_the_connection_kept(
    scripted: Callable[..., Scripted],
) -> None:
    server = scripted(lambda index: "chunked" if index == 0 else "keep")
    api = api_for(server.url)
    with pytest.raises(ApiError) as err:
        patch(api)
    assert (err.value.status, err.value.reason) == (422, '{"kind":"Status","status":"Success"}')
    patch(api)  # the same connection: the chunked body was consumed to its end
    assert len(server.requests) == 2 and server.connections == 1
    api.close()


def test_a_refreshed_token_is_sent(
    scripted: Callable[..., Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "AUTH_REFRESH_SECONDS", -1.0)
    server = scripted(lambda _: "keep")
    api = api_for(server.url, token="first")
    patch(api)
    api._client.configuration.api_key["authorization"] = "second"
    patch(api)
    assert [h["authorization"] for _, h, _ in server.requests] == ["Bearer first", "Bearer second"]
    api.close()


def test_an_idle_connection_the_server_closed_is_replaced_without_a_duplicate(
    scripted: Callable[..., Scripted],
) -> None:
    """The server closes each connection after its answer (a keep-alive idle timeout):
    the next write notices it before sending and opens a new connection."""
    server = scripted(lambda _: "close")
    api = api_for(server.url)
    patch(api)
    assert server.closed.wait(5)
    patch(api)
    assert len(server.requests) == 2 and server.connections == 2
    api.close()


def test_a_reset_connection_is_resent_once_when_nothing_was_written(
    scripted: Callable[..., Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the idle check (as when the reset lands between the check and the send),
    the first send fails before one byte is written: Go's nothingWrittenError rule sends
    it again on a new connection; the server sees the write once."""
    monkeypatch.setattr(client_module, "wait_for_read", lambda *_a, **_k: False)
    server = scripted(lambda index: "reset" if index == 0 else "keep")
    api = api_for(server.url)
    patch(api)
    assert server.closed.wait(5)
    time.sleep(0.05)  # the RST has arrived on loopback
    patch(api)
    assert len(server.requests) == 2 and server.connections == 2
    api.close()


def test_a_request_the_server_read_and_dropped_is_not_resent(
    scripted: Callable[..., Scripted],
) -> None:
    """The server read the second PATCH and closed without answering: it may have
    processed it, so it is an error, not a retry (Go: a PATCH/POST is not replayable)."""
    server = scripted(lambda index: "keep" if index == 0 else "drop")
    api = api_for(server.url)
    patch(api)
    with pytest.raises(ApiError) as err:
        patch(api)
    assert err.value.status == 0 and "RemoteDisconnected" in err.value.reason
    assert len(server.requests) == 2 and server.connections == 1
    api.close()


def test_no_socket_is_left_open(scripted: Callable[..., Scripted]) -> None:
    """Connections used by threads that ended go back to the idle list; close() and
    garbage collection close them (a ResourceWarning would name an unclosed socket)."""
    server = scripted(lambda _: "keep")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api = api_for(server.url)
        for _ in range(3):  # one after the other: the scripted server serves one at a time
            writer = threading.Thread(target=patch, args=(api,))
            writer.start()
            writer.join(10)
        assert len(server.requests) == 3 and server.connections == 1
        idle = list(api._lean()._idle)  # type: ignore[union-attr]
        assert idle and all(sock.fileno() >= 0 for sock in idle)
        api.close()
        assert all(sock.fileno() == -1 for sock in idle)
        patch(api)  # still works after close(), on a connection closed right after
        assert not api._lean()._idle  # type: ignore[union-attr]
        forgotten = api_for(server.url)
        patch(forgotten)
        del forgotten, api, idle
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# -- against the real kube-apiserver --------------------------------------------------------


@pytest.fixture
def real_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"lean-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.controlplane
def test_real_server_writes_with_the_admin_client_certificate(
    control_plane: ControlPlane, real_namespace: str
) -> None:
    ns = real_namespace
    control_plane.kubectl("create", "-f", "-", input=json.dumps(service(ns, "web")))
    client = control_plane.api_client()
    assert client.configuration.cert_file, "the admin kubeconfig authenticates by certificate"
    apis = {lean: KubernetesAPI(client, lean_writes=lean) for lean in (True, False)}
    assert apis[True]._lean() is not None and apis[False]._lean() is None
    apis[True].patch_service_status(namespace=ns, name="web", patch=STATUS)
    ingress = control_plane.kubectl(
        "get", "service", "web", "-n", ns, "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"
    ).stdout
    assert ingress == "192.0.2.1"
    created = event(ns, "web")
    apis[True].create_event(namespace=ns, body=created)
    apis[True].patch_event(
        namespace=ns,
        name=created["metadata"]["name"],
        api_version="events.k8s.io/v1",
        patch={"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}},
    )
    series = control_plane.kubectl(
        "get", "events.events.k8s.io", created["metadata"]["name"], "-n", ns,
        "-o", "jsonpath={.series.count}",
    ).stdout  # fmt: skip
    assert series == "2"
    bad = event(ns, "web")
    del bad["reason"]
    errors = {
        lean: (
            outcome(lambda api=api: api.patch_service_status(namespace=ns, name="x", patch={})),
            outcome(lambda api=api: api.create_event(namespace=ns, body=bad)),
        )
        for lean, api in apis.items()
    }
    assert errors[True] == errors[False]
    assert errors[True][0] == (404, 'services "x" not found')
    assert errors[True][1] is not None and errors[True][1][0] == 422
    for api in apis.values():
        api.close()
    client.close()


@pytest.mark.controlplane
def test_real_server_with_a_wrong_ca_is_an_error(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    client = control_plane.api_client()
    ca_file = tmp_path / "other-ca.crt"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    client.configuration.ssl_ca_cert = str(ca_file)
    untrusting = KubernetesAPI(kubernetes.client.ApiClient(client.configuration), request_timeout=5)
    with pytest.raises(ApiError) as err:
        untrusting.patch_service_status(namespace="default", name="x", patch={})
    assert err.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in err.value.reason
    untrusting.close()
    client.close()


HEAD_CASES: list[tuple[str, bytes, tuple[int, bytes] | str]] = [
    ("no reason phrase", b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nA1", (200, b"A1")),
    ("two spaces", b"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nA1", (200, b"A1")),
    (
        "103 then the answer",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\n"
        b"Content-Length: 2\r\n\r\nA1",
        (201, b"A1"),
    ),
    (
        "102 then the answer",
        b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        (200, b"x"),
    ),
    ("repeated equal lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nA1", (200, b"A1")),
    (
        "identity, chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n2\r\nA1\r\n0\r\n\r\n",
        (200, b"A1"),
    ),
    (
        "chunked with extensions and trailers",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=1\r\nA1\r\n0\r\nT: 1\r\n\r\n",
        (200, b"A1"),
    ),
    (
        "differing lengths",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nA1xyz",
        "invalid Content-Length '2, 5'",
    ),
    (
        "a non-number length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nA1",
        "invalid Content-Length",
    ),
    (
        "space before the colon",
        b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nA1",
        "malformed header",
    ),
    (
        "folded line",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nA1",
        "malformed header",
    ),
    (
        "gzip",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "unsupported Transfer-Encoding",
    ),
    ("101", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "101 Switching Protocols"),
    ("not HTTP", b"SSH-2.0-OpenSSH\r\n\r\n", "SSH-2.0-OpenSSH"),
]


@pytest.mark.parametrize(
    ("answer", "expected"), [c[1:] for c in HEAD_CASES], ids=[c[0] for c in HEAD_CASES]
)
def test_answer_heads_are_framed_as_rfc_9112_says(
    answer: bytes, expected: tuple[int, bytes] | str
) -> None:
    """The parse gives the status and body, or an HTTPException naming the problem; after
    a good parse the next answer on the connection is read as it was sent (nothing of the
    first was left behind). As on a kept-alive connection, the server answers the second
    request only after the first answer was read."""
    import http.client

    from app.kube.client import _Response

    server, client = socket.socketpair()
    with server, client:
        client.settimeout(5)  # a misframed answer fails the test instead of hanging it
        server.sendall(answer)
        response = _Response(client, method="PATCH")
        try:
            if isinstance(expected, str):
                with pytest.raises(http.client.HTTPException, match=re.escape(expected)):
                    response.begin()
                return
            response.begin()
            assert (response.status, response.read()) == expected
        finally:
            response.close()
        server.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        following = _Response(client, method="PATCH")
        try:
            following.begin()
            assert following.status == 204  # nothing of the first answer was left behind
        finally:
            following.close()
