"""The walk-through on a bare API server, everything on loopback (``python -m tests.devenv
--api fake|controlplane``; what ``auto`` falls back to when the real cluster cannot run).

Steps, each printed as it runs (with the command it stands for):

1. an API server: the fake one (``python -m tests.fakeapi``, tests/fakeapi/README.md), or a
   real control plane (``python -m tests.controlplane up --kubeconfig PATH``, which prints
   ``ready <url>`` once it serves and stops on SIGTERM); ``auto`` takes the real one when
   its binaries are built and falls back to the fake one when it does not come up;
2. ``node-ipam-lb serve`` on ``127.0.0.1`` with a self-generated certificate
   (``--ca-bundle-out``), without leader election;
3. both webhooks registered: ``deploy/base/webhooks.yaml`` with each ``clientConfig``
   rewritten to ``url: https://127.0.0.1:<port>/validate|mutate`` and the CA as
   ``caBundle`` (the API server calls them like kube-apiserver does);
4. waits until ``/readyz`` answers 200 (cache synced);
5. ``kubectl apply`` of ``examples/kind-4node/cluster.yaml`` (server-set metadata,
   cluster IPs and node ports removed; Node status then written through ``nodes/status``),
   then ``kubectl get svc -A`` once every ``io.cilium/node`` Service has settled, a
   Service with a malformed selector DENIED by the webhook, and ``node-ipam-lb preview
   -A -o wide`` on the live cluster;
6. waits for Ctrl-C (SIGINT) or SIGTERM, or exits at once with ``--once``, then stops
   ``serve`` and the API server, in that order.

Every child's output goes to one log file, named first; the children run in their own
session, so Ctrl-C reaches only the walk-through, which stops them in order. Only
loopback addresses are used. Needs ``kubectl`` on ``PATH``. No traffic: nothing
forwards ``nodeIP:port`` here (tests/cluster does, see ``--api cluster``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

import httpx

from tests.devenv.manifests import example_objects, webhook_configurations
from tests.devenv.session import (
    DevEnvError,
    Flag,
    Session,
    apply,
    drain,
    read_line,
    show,
    show_result,
    wait_until,
)
from tests.support.ports import free_port

LOOPBACK = "127.0.0.1"
ApiKind = Literal["auto", "fake", "controlplane"]

_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: devenv
  cluster:
    server: {url}
users:
- name: devenv
  user:
    token: devenv-token
contexts:
- name: devenv
  context:
    cluster: devenv
    user: devenv
    namespace: default
current-context: devenv
"""


def start_api(session: Session, api: ApiKind) -> str:
    """Start the API server; write ``session.kubeconfig``; return its URL.

    Raises:
        DevEnvError: ``controlplane`` that does not come up.
    """
    if api != "fake":
        session.say(f"$ python -m tests.controlplane up --kubeconfig {session.kubeconfig}")
        process = session.spawn(
            "control plane",
            [sys.executable, "-m", "tests.controlplane", "up", "--kubeconfig",
             str(session.kubeconfig)],
            stdout_pipe=True,
        )  # fmt: skip
        try:
            line = read_line(process, timeout=session.timeout, what="the control plane")
            if not line.startswith("ready "):
                raise DevEnvError(f"the control plane printed {line!r}, not 'ready <url>'")
        except DevEnvError:
            if api == "controlplane":
                raise
            session.say(
                f"  the control plane did not come up (see {session.log_path}); using the fake"
            )
        else:
            drain(process, session.log)
            return line.removeprefix("ready ").strip()
    session.say("$ python -m tests.fakeapi --port 0      # fake Kubernetes API, plain HTTP")
    process = session.spawn(
        "fake API server",
        [sys.executable, "-m", "tests.fakeapi", "--port", "0"],
        stdout_pipe=True,
    )
    url = read_line(process, timeout=session.timeout, what="the fake API server")
    drain(process, session.log)
    session.apply_flags = ["--validate=false"]
    session.kubeconfig.write_text(_KUBECONFIG.format(url=url))
    return url


def start_serve(session: Session, port: int) -> Path:
    """Start ``node-ipam-lb serve`` on 127.0.0.1:``port``; return the CA file it writes."""
    ca = session.workdir / "ca.crt"
    args = [
        "serve",
        "--kubeconfig",
        str(session.kubeconfig),
        "--no-leader-elect",
        "--bind-address",
        LOOPBACK,
        "--port",
        str(port),
        "--health-probe-bind-address",
        f"{LOOPBACK}:0",
        "--ca-bundle-out",
        str(ca),
    ]
    session.say(f"$ node-ipam-lb {' '.join(args)}")
    session.spawn("node-ipam-lb serve", [sys.executable, "-m", "app", *args])
    return ca


def ready(url: str, ca: Path) -> bool:
    """``GET /readyz`` answers 200 over TLS verified against ``ca``."""
    if not ca.exists():
        return False
    try:
        return httpx.get(f"{url}/readyz", verify=str(ca), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def register_and_apply(session: Session, url: str, ca: Path) -> None:
    """Steps 3 to 5: readiness, the webhooks, the example, then :func:`show_result`."""
    wait_until(session, lambda: ready(url, ca), "node-ipam-lb serve ready (GET /readyz)")
    session.say(f"  serving on {url}: /readyz answers 200")
    apply(
        session,
        webhook_configurations(url, ca.read_bytes()),
        "deploy/base/webhooks.yaml   # clientConfig: url + caBundle",
    )
    objects = example_objects()
    apply(session, objects, "examples/kind-4node/cluster.yaml   # server-set fields removed")
    for node in (o for o in objects if o["kind"] == "Node"):
        patch = json.dumps({"status": node.get("status", {})})
        result = session.kubectl(
            "patch", "node", node["metadata"]["name"], "--subresource=status",
            "--type=merge", "-p", patch,
        )  # fmt: skip
        if result.returncode != 0:
            show(session, result)
            raise DevEnvError(f"writing the status of node {node['metadata']['name']} failed")
    show_result(session)


@contextlib.contextmanager
def _signals() -> Iterator[Flag]:
    """A flag set by SIGINT or SIGTERM while inside (handlers restored on exit)."""
    stop = Flag()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_loopback(
    *,
    api: ApiKind = "auto",
    port: int = 0,
    workdir: Path | None = None,
    once: bool = False,
    timeout: float = 90.0,
    out: IO[str] = sys.stdout,
) -> int:
    """Run the walk-through (module docstring); return the exit status: 0 done, 1 a step
    failed (its reason printed, the log named).

    ``port`` 0 picks a free port; ``workdir`` defaults to a new temporary directory, kept
    afterwards so the log can be read.
    """
    if shutil.which("kubectl") is None:
        print("devenv: kubectl is required on PATH", file=out)
        return 1
    directory = workdir or Path(tempfile.mkdtemp(prefix="node-ipam-lb-devenv-"))
    with _signals() as stop:
        session = Session(workdir=directory, out=out, timeout=timeout, interrupted=stop)
        session.say(f"devenv: logs go to {session.log_path}")
        try:
            start_api(session, api)
            session.say(f"  API server ready; kubeconfig: {session.kubeconfig}")
            serve_port = port or free_port()
            ca = start_serve(session, serve_port)
            register_and_apply(session, f"https://{LOOPBACK}:{serve_port}", ca)
            session.say()
            session.say(f"Try it:  export KUBECONFIG={session.kubeconfig}; kubectl get svc -A -w")
            if once:
                session.say("--once: stopping now.")
            else:
                session.say(
                    f"Stop it: press Ctrl-C (or kill -TERM {os.getpid()}). Logs: {session.log_path}"
                )
                while not stop.is_set():
                    session.check_alive()
                    time.sleep(0.5)
            return 0
        except (DevEnvError, OSError, subprocess.SubprocessError) as err:
            session.say(f"devenv: {err}")
            return 1
        finally:
            session.say("stopping node-ipam-lb serve and the API server ...")
            session.stop()
            session.say(f"stopped. Logs: {session.log_path}")
