"""A tiny HTTPS AdmissionReview server for the admission-chain contract tests (trustme CA)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import trustme

Decide = Callable[[dict[str, Any]], dict[str, Any]]


class WebhookApp:
    """Serves ``POST /<any path>``; ``decide(request)`` builds the AdmissionResponse body.

    ``reviews`` records every AdmissionReview request received (with its path).
    """

    def __init__(self, ca: trustme.CA, *, hostnames: tuple[str, ...] = ("127.0.0.1",)) -> None:
        self.ca = ca
        self.reviews: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.decide: Decide = lambda request: {"allowed": True}
        self.delay = 0.0
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                review = json.loads(self.rfile.read(length))
                app.reviews.append(review)
                app.paths.append(self.path)
                if app.delay:
                    time.sleep(app.delay)
                response = {"uid": review["request"]["uid"], **app.decide(review["request"])}
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": response,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # TLS failures from deliberately wrong caBundles are expected

        self.server = Server(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert(*hostnames).configure_cert(ctx)
        self.server.socket = ctx.wrap_socket(
            self.server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    def start(self) -> WebhookApp:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def patch_response(ops: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """An allowed AdmissionResponse carrying a base64 JSONPatch."""
    patch = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"allowed": True, "patchType": "JSONPatch", "patch": patch, **extra}


def webhook_configuration(
    kind: str,
    *,
    name: str = "hook.example.com",
    client_config: dict[str, Any],
    operations: tuple[str, ...] = ("CREATE", "UPDATE"),
    resources: tuple[str, ...] = ("services",),
    **fields: Any,
) -> dict[str, Any]:
    """A ``Mutating``/``ValidatingWebhookConfiguration`` with one webhook."""
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": list(operations),
                "resources": list(resources),
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **fields,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": f"{kind}WebhookConfiguration",
        "metadata": {"name": f"{kind.lower()}-{name}"},
        "webhooks": [hook],
    }
