"""``node-ipam-lb demo``: the whole thing on loopback in one command, from a source checkout.

Steps, each printed as it runs (with the command it stands for):

1. an API server: the fake one (``python -m tests.fakeapi``, tests/fakeapi/README.md), or a
   real control plane (``python -m tests.controlplane up --kubeconfig PATH``, which prints
   ``ready <url>`` once it serves and stops on SIGTERM) with ``--api real``; ``--api auto``
   (the default) takes the real one when that module exists and falls back to the fake
   one when it is missing or does not come up;
2. ``node-ipam-lb serve`` on ``127.0.0.1`` with a self-generated certificate
   (``--ca-bundle-out``), without leader election;
3. both webhooks registered: ``deploy/base/webhooks.yaml`` with each ``clientConfig``
   rewritten to ``url: https://127.0.0.1:<port>/validate|mutate`` and the CA as
   ``caBundle`` (the API server calls them like kube-apiserver does);
4. waits until ``/readyz`` answers 200 (cache synced);
5. ``kubectl apply`` of ``examples/kind-4node/cluster.yaml`` (server-set metadata,
   cluster IPs and node ports removed; Node status then written through ``nodes/status``),
   then ``kubectl get svc -A`` once every ``io.cilium/node`` Service has an EXTERNAL-IP,
   a Service with a malformed selector DENIED by the webhook, and ``node-ipam-lb preview
   -A -o wide`` on the live cluster;
6. waits for Ctrl-C (SIGINT) or SIGTERM, or exits at once with ``--once``, then stops
   ``serve`` and the API server, in that order.

Every child's output goes to one log file, named at the start; the children run in their
own session, so Ctrl-C reaches only the demo, which stops them in order. Only loopback
addresses are used. Needs ``kubectl`` on ``PATH``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
WEBHOOKS = ROOT / "deploy" / "base" / "webhooks.yaml"
EXAMPLE = ROOT / "examples" / "kind-4node" / "cluster.yaml"
LOOPBACK = "127.0.0.1"
CLASS = "io.cilium/node"
BAD_SELECTOR = "node-role.kubernetes.io/control-plane in (,"
"""A selector apimachinery refuses (``found ',', expected: identifier``)."""

ApiKind = Literal["auto", "fake", "real"]

_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: demo
  cluster:
    server: {url}
users:
- name: demo
  user:
    token: demo-token
contexts:
- name: demo
  context:
    cluster: demo
    user: demo
    namespace: default
current-context: demo
"""
_SERVER_SET = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation")


class DemoError(Exception):
    """The demo cannot go on; ``str(err)`` says which step and why."""


@dataclass
class Demo:
    """The running demo: its directory, log file and child processes (stopped in reverse
    order of start by :meth:`stop`). ``out`` receives what a person reads."""

    workdir: Path
    out: IO[str]
    timeout: float = 90.0
    interrupted: threading.Event = field(default_factory=threading.Event)
    log_path: Path = field(init=False)
    _log: IO[bytes] = field(init=False)
    _children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "demo.log"
        self._log = self.log_path.open("ab")
        self.kubeconfig = self.workdir / "kubeconfig"
        # The fake API server answers no OpenAPI v2 schema, which kubectl's client-side
        # validation asks for; a real control plane validates.
        self.apply_flags: list[str] = []

    def say(self, text: str = "") -> None:
        """Print one line for the person running the demo."""
        print(text, file=self.out, flush=True)

    def spawn(self, name: str, args: Sequence[str], *, stdout_pipe: bool = False) -> Any:
        """Start a child in its own session, output appended to the log (stdout piped
        when ``stdout_pipe``, to read a ready line)."""
        self._log.write(f"==> {name}: {' '.join(args)}\n".encode())
        self._log.flush()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
        process = subprocess.Popen(
            list(args),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE if stdout_pipe else self._log,
            stderr=self._log,
            start_new_session=True,
        )
        self._children.append((name, process))
        return process

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <demo> ...`` (bounded by 60 s)."""
        return subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def stop(self) -> None:
        """SIGTERM every child, newest first (``serve`` before the API server); SIGKILL
        one that is still running after 15 s."""
        for name, process in reversed(self._children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            self._log.write(f"==> {name} exited {process.returncode}\n".encode())
        self._children.clear()
        self._log.close()

    def check_alive(self) -> None:
        """Raise :class:`DemoError` naming a child that has exited."""
        for name, process in self._children:
            if process.poll() is not None:
                said = self.last_error_line()
                raise DemoError(
                    f"{name} exited with status {process.returncode}"
                    + (f": {said}" if said else "")
                    + f"; see {self.log_path}"
                )

    def last_error_line(self) -> str:
        """The last one-line start-up error a child wrote to the log (``node-ipam-lb
        serve: ...``, how the CLI reports one), or ``""``; read from the log's last 64 KiB."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 65536))
                tail = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        errors = [line for line in tail.splitlines() if line.startswith("node-ipam-lb ")]
        return errors[-1].strip() if errors else ""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _read_line(process: Any, *, timeout: float, what: str) -> str:
    """The first stdout line of ``process`` within ``timeout`` seconds."""
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.append(process.stdout.readline().decode().strip()), daemon=True
    )
    reader.start()
    reader.join(timeout)
    if not lines or not lines[0]:
        raise DemoError(f"{what}: no ready line within {timeout:g} s")
    return lines[0]


def _drain(process: Any, log: IO[bytes]) -> None:
    """Copy the rest of a piped stdout into the log (a full pipe would block the child)."""

    def copy_out() -> None:
        for line in process.stdout:
            with contextlib.suppress(ValueError):  # the log was closed at the end
                log.write(line)
                log.flush()

    threading.Thread(target=copy_out, daemon=True).start()


def start_api(demo: Demo, api: ApiKind) -> str:
    """Start the API server; write ``demo.kubeconfig``; return its URL.

    Raises:
        DemoError: ``--api real`` without ``tests.controlplane``, or a server that does not
            come up.
    """
    if not (ROOT / "tests" / "fakeapi").is_dir():
        raise DemoError(f"{ROOT} is not a source checkout: the demo needs its tests/ directory")
    tests = ROOT / "tests"
    has_real = (tests / "controlplane").is_dir() or (tests / "controlplane.py").is_file()
    if api == "real" and not has_real:
        raise DemoError("--api real: tests.controlplane is not in this checkout")
    if api != "fake" and has_real:
        demo.say(f"$ python -m tests.controlplane up --kubeconfig {demo.kubeconfig}")
        process = demo.spawn(
            "control plane",
            [
                sys.executable,
                "-m",
                "tests.controlplane",
                "up",
                "--kubeconfig",
                str(demo.kubeconfig),
            ],
            stdout_pipe=True,
        )
        try:
            line = _read_line(process, timeout=demo.timeout, what="the control plane")
            if not line.startswith("ready "):
                raise DemoError(f"the control plane printed {line!r}, not 'ready <url>'")
        except DemoError:
            if api == "real":
                raise
            demo.say(f"  the control plane did not come up (see {demo.log_path}); using the fake")
        else:
            _drain(process, demo._log)
            return line.removeprefix("ready ").strip()
    demo.say("$ python -m tests.fakeapi --port 0      # fake Kubernetes API, plain HTTP")
    process = demo.spawn(
        "fake API server",
        [sys.executable, "-m", "tests.fakeapi", "--port", "0"],
        stdout_pipe=True,
    )
    url = _read_line(process, timeout=demo.timeout, what="the fake API server")
    _drain(process, demo._log)
    demo.apply_flags = ["--validate=false"]
    demo.kubeconfig.write_text(_KUBECONFIG.format(url=url))
    return url


def start_serve(demo: Demo, port: int) -> Path:
    """Start ``node-ipam-lb serve`` on 127.0.0.1:``port``; return the CA file it writes."""
    ca = demo.workdir / "ca.crt"
    args = [
        "serve",
        "--kubeconfig",
        str(demo.kubeconfig),
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
    demo.say(f"$ node-ipam-lb {' '.join(args)}")
    demo.spawn("node-ipam-lb serve", [sys.executable, "-m", "app", *args])
    return ca


def wait_until(demo: Demo, check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` every 0.2 s until true, a child exits or ``demo.timeout`` passes.

    Raises:
        DemoError: timed out or a child exited, naming ``what`` and the log.
    """
    deadline = time.monotonic() + demo.timeout
    while not check():
        demo.check_alive()
        if demo.interrupted.is_set():
            raise DemoError(f"interrupted while waiting for {what}")
        if time.monotonic() > deadline:
            raise DemoError(f"{what}: not within {demo.timeout:g} s; see {demo.log_path}")
        time.sleep(0.2)


def ready(url: str, ca: Path) -> bool:
    """``GET /readyz`` answers 200 over TLS verified against ``ca``."""
    if not ca.exists():
        return False
    try:
        return httpx.get(f"{url}/readyz", verify=str(ca), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def webhook_configurations(url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """``deploy/base/webhooks.yaml`` with every ``clientConfig`` pointing at ``url`` (its
    ``service.path`` appended) and ``caBundle`` set: the manifests of a cluster install,
    wired to a local process."""
    bundle = base64.b64encode(ca_pem).decode()
    configs = [doc for doc in yaml.safe_load_all(WEBHOOKS.read_text()) if doc]
    for config in configs:
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
    return configs


def example_objects() -> list[dict[str, Any]]:
    """The kind example as a client would create it: no server-set metadata, no cluster
    IPs or node ports (the server allocates them), Services without status; Nodes, then
    EndpointSlices, then Services."""
    dump = yaml.safe_load(EXAMPLE.read_text())
    objects = []
    for obj in dump["items"]:
        obj = copy.deepcopy(obj)
        metadata = obj.get("metadata", {})
        for key in _SERVER_SET:
            metadata.pop(key, None)
        if obj["kind"] == "Service":
            obj.pop("status", None)
            spec = obj.get("spec", {})
            for key in ("clusterIP", "clusterIPs", "healthCheckNodePort"):
                spec.pop(key, None)
            for port in spec.get("ports", []):
                port.pop("nodePort", None)
        objects.append(obj)
    # Nodes and EndpointSlices first: a Service applied before its endpoints would get
    # the webhook's (true, but passing) "no ready endpoint now" warning.
    order = {"Node": 0, "EndpointSlice": 1}
    return sorted(objects, key=lambda o: order.get(o["kind"], 2))


def bad_service() -> dict[str, Any]:
    """A LoadBalancer Service whose node selector annotation is malformed."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "bad-selector",
            "namespace": "default",
            "annotations": {"io.cilium.nodeipam/match-node-labels": BAD_SELECTOR},
        },
        "spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS, "ports": [{"port": 80}]},
    }


def _as_list(objects: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def _show(demo: Demo, result: subprocess.CompletedProcess[str]) -> None:
    for line in (result.stdout + result.stderr).rstrip("\n").splitlines():
        demo.say(line)


def _apply(demo: Demo, objects: list[dict[str, Any]], shown_as: str) -> None:
    demo.say(f"$ kubectl apply {' '.join([*demo.apply_flags, ''])}-f {shown_as}")
    result = demo.kubectl("apply", *demo.apply_flags, "-f", "-", stdin=_as_list(objects))
    _show(demo, result)
    if result.returncode != 0:
        raise DemoError(f"kubectl apply -f {shown_as} failed (exit {result.returncode})")


def all_settled(demo: Demo) -> bool:
    """Every ``io.cilium/node`` Service holds what the controller would write
    (``preview -A -o wide`` shows CHANGE ``no`` on every row) and at least one has an
    address. Not "every Service has an address": port ownership (docs/design.md §4.9)
    leaves three of the example's four Services on TCP/80 ``<pending>``."""
    result = subprocess.run(
        [sys.executable, "-m", "app", "preview", "--kubeconfig", str(demo.kubeconfig), "-A",
         "-o", "wide"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    ours = [row for row in rows if len(row) > 5 and row[2] == CLASS]
    return (
        result.returncode == 0
        and bool(ours)
        and all(row[5] == "no" for row in ours)
        and any(row[3] != "<pending>" for row in ours)
    )


def show(demo: Demo, url: str, ca: Path) -> None:
    """Steps 3 to 5: webhooks, readiness, the example, the table, the denial, preview."""
    wait_until(demo, lambda: ready(url, ca), "node-ipam-lb serve ready (GET /readyz)")
    demo.say(f"  serving on {url}: /readyz answers 200")
    _apply(
        demo,
        webhook_configurations(url, ca.read_bytes()),
        "deploy/base/webhooks.yaml   # clientConfig: url + caBundle",
    )
    objects = example_objects()
    _apply(demo, objects, "examples/kind-4node/cluster.yaml   # server-set fields removed")
    for node in (o for o in objects if o["kind"] == "Node"):
        patch = json.dumps({"status": node.get("status", {})})
        result = demo.kubectl(
            "patch", "node", node["metadata"]["name"], "--subresource=status",
            "--type=merge", "-p", patch,
        )  # fmt: skip
        if result.returncode != 0:
            _show(demo, result)
            raise DemoError(f"writing the status of node {node['metadata']['name']} failed")
    wait_until(demo, lambda: all_settled(demo), "every io.cilium/node Service settled")
    demo.say("$ kubectl get svc -A")
    _show(demo, demo.kubectl("get", "svc", "-A"))
    flags = " ".join([*demo.apply_flags, ""])
    demo.say(f"$ kubectl apply {flags}-f bad-selector.yaml   # match-node-labels: {BAD_SELECTOR}")
    denied = demo.kubectl("apply", *demo.apply_flags, "-f", "-", stdin=_as_list([bad_service()]))
    _show(demo, denied)
    if denied.returncode == 0:
        raise DemoError("the malformed selector was not denied: is the webhook registered?")
    demo.say("$ node-ipam-lb preview -A -o wide   # live diagnosis, read-only")
    preview = subprocess.run(
        [sys.executable, "-m", "app", "preview", "--kubeconfig", str(demo.kubeconfig), "-A",
         "-o", "wide"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    _show(demo, preview)


@contextlib.contextmanager
def _signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while inside (handlers restored on exit)."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_demo(
    *,
    api: ApiKind = "auto",
    port: int = 0,
    workdir: Path | None = None,
    once: bool = False,
    timeout: float = 90.0,
    out: IO[str] = sys.stdout,
) -> int:
    """Run the demo (module docstring); return the exit status: 0 done, 1 a step failed
    (its reason printed, the log named).

    ``port`` 0 picks a free port; ``workdir`` defaults to a new temporary directory, kept
    afterwards so the log can be read.
    """
    if shutil.which("kubectl") is None:
        print("node-ipam-lb demo: kubectl is required on PATH", file=out)
        return 1
    directory = workdir or Path(tempfile.mkdtemp(prefix="node-ipam-lb-demo-"))
    with _signals() as stop:
        demo = Demo(workdir=directory, out=out, timeout=timeout, interrupted=stop)
        demo.say(f"node-ipam-lb demo: logs go to {demo.log_path}")
        try:
            start_api(demo, api)
            demo.say(f"  API server ready; kubeconfig: {demo.kubeconfig}")
            serve_port = port or free_port()
            ca = start_serve(demo, serve_port)
            show(demo, f"https://{LOOPBACK}:{serve_port}", ca)
            demo.say()
            demo.say(f"Try it:  export KUBECONFIG={demo.kubeconfig}; kubectl get svc -A -w")
            if once:
                demo.say("--once: stopping now.")
            else:
                demo.say(
                    f"Stop it: press Ctrl-C (or kill -TERM {os.getpid()}). Logs: {demo.log_path}"
                )
                while not stop.wait(0.5):
                    demo.check_alive()
            return 0
        except (DemoError, OSError, subprocess.SubprocessError) as err:
            demo.say(f"node-ipam-lb demo: {err}")
            return 1
        finally:
            demo.say("stopping node-ipam-lb serve and the API server ...")
            demo.stop()
            demo.say(f"stopped. Logs: {demo.log_path}")
