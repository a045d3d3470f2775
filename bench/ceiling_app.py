"""The admission ceiling: a trivial FastAPI endpoint on serve's uvicorn setup.

``python -m bench.ceiling_app --port PORT --tls-cert-file CERT --tls-private-key-file KEY``
serves ``POST /validate``: parse the JSON body, answer ``allowed`` with the request's uid.
uvicorn runs as ``node-ipam-lb serve`` runs it (:func:`app.server.build`): one process, TLS
through :class:`app.web.tls.ReloadingContext`, lifespan on, no access log, no server header, the
same JSON log configuration. Prints ``ready`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.server import GRACEFUL_SHUTDOWN_SECONDS
from app.telemetry.logs import configure
from app.web import tls


def create_ceiling_app() -> FastAPI:
    """A FastAPI app whose ``POST /validate`` allows every AdmissionReview."""
    app = FastAPI(title="admission ceiling")

    @app.post("/validate")
    async def validate(request: Request) -> JSONResponse:
        review: Any = json.loads(await request.body())
        return JSONResponse(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True},
            }
        )

    return app


class _Server(uvicorn.Server):
    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        print("ready", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling_app")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", type=Path, required=True)
    parser.add_argument("--tls-private-key-file", type=Path, required=True)
    args = parser.parse_args(argv)
    configure("info")
    reloading = tls.ReloadingContext(
        cert_file=args.tls_cert_file, key_file=args.tls_private_key_file
    )
    config = uvicorn.Config(
        create_ceiling_app(),
        host="127.0.0.1",
        port=args.port,
        ssl_context_factory=lambda _config, _default: reloading.context,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        server_header=False,
    )
    _Server(config).run()


if __name__ == "__main__":
    main()
