"""Run Cilium's Node IPAM LB controller (the ``cilium-nodeipam`` binary of ``go/``) against a
:class:`tests.controlplane.plane.ControlPlane`, wait until it is quiet, stop it.

It is started as cilium-operator runs it: ``--enable-node-ipam``, the operator's client
limits (``--k8s-client-qps 100 --k8s-client-burst 200``; the bare hive's are 10 and 20),
``--default-lb-service-ipam`` (``lbipam``, Cilium's default, or ``nodeipam``) and the
plane's admin kubeconfig (``--k8s-kubeconfig-path``). "Quiet" is measured on the API
server, as the issue asks: its ``apiserver_request_total`` for ``services/status`` stops
moving (every reconcile of Cilium's ends in an Update of the whole status, changed or
not), once Cilium's log shows that it has reconciled every Service the caller expects.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Self

from tests.controlplane.metrics import request_counts
from tests.controlplane.plane import ControlPlane
from tests.peers.cilium.build import NAME, build_peer, cilium_version, find_peer
from tests.support.processes import Server, tail

MODES = ("lbipam", "nodeipam")  # --default-lb-service-ipam values the tests run
OPERATOR_QPS, OPERATOR_BURST = 100, 200  # cilium-operator's --k8s-client-qps/-burst defaults
STARTED = "Starting workers"  # controller-runtime's line once the controller's caches synced
_FAILED = re.compile(rb"level=error msg=Failed [^\n]*")
"""The hive's line when a cell's start fails (e.g. ``failed to wait for service-nodeipam
caches to sync``: controller-runtime's CacheSyncTimeout, 2 min); the process then stays up
with nothing running, so waiting for :data:`STARTED` would only run into the timeout."""
_TAIL_BYTES = 4096  # kept across polls: a marker line may straddle two reads
_RECONCILING = re.compile(r'msg="Reconciling Service".*? resource=(\S+)')


class PeerError(RuntimeError):
    """The peer exited, or did not start or become quiet in time; the message has its log
    tail."""


def status_requests(plane: ControlPlane) -> int:
    """The API server's ``apiserver_request_total`` for ``services/status``, every verb
    and code summed (:func:`tests.controlplane.metrics.request_counts`): one count per
    status read or write anyone made. A scrape costs the server ~50 ms of CPU, so callers
    scrape only once what they wait for is otherwise done. Raises ``RuntimeError`` if ``/metrics``
    fails."""
    status, body = plane.request("GET", "/metrics")
    if status != 200 or not isinstance(body, str):
        raise RuntimeError(f"GET /metrics: {status}")
    counts = request_counts(body)
    return sum(n for key, n in counts.items() if key.endswith(" services/status"))


def wait_quiet(
    plane: ControlPlane,
    *,
    quiet: float = 1.0,
    timeout: float = 60.0,
    ready: Callable[[], bool] = lambda: True,
    scrape_every: float = 0.5,
) -> float:
    """Block until ``ready()`` holds (polled every 0.1 s, no scrape meanwhile), then until
    :func:`status_requests` has not moved for ``quiet`` seconds (a scrape every
    ``scrape_every`` s); returns the seconds waited. Raises ``TimeoutError`` after
    ``timeout`` seconds."""
    start = time.monotonic()
    deadline = start + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {timeout:g} s")
        time.sleep(0.1)
    last, since = status_requests(plane), time.monotonic()
    while True:
        time.sleep(scrape_every)
        now = time.monotonic()
        count = status_requests(plane)
        if count != last:
            last, since = count, now
        elif now - since >= quiet - 1e-3:
            return now - start
        if now > deadline:
            raise TimeoutError(f"services/status requests still moving after {timeout:g} s")


class CiliumNodeIpam:
    """Cilium's controller as a child process against ``plane``; a context manager.

    ``version`` is the Cilium version compiled in (``v1.20.2``). ``binary`` defaults to the
    cached build (built when missing, as the control plane is). The log (``log_path``,
    Cilium's slog text lines) goes to ``workdir`` (default: the plane's temp dir).
    """

    def __init__(
        self,
        plane: ControlPlane,
        *,
        default_lb_service_ipam: str = "lbipam",
        binary: Path | None = None,
        workdir: Path | None = None,
        qps: int = OPERATOR_QPS,
        burst: int = OPERATOR_BURST,
    ) -> None:
        self.plane = plane
        self.mode = default_lb_service_ipam
        self.binary = binary
        self.version = cilium_version()
        self.args = [
            f"--k8s-kubeconfig-path={plane.kubeconfig_path}",
            "--enable-node-ipam=true",
            f"--default-lb-service-ipam={default_lb_service_ipam}",
            f"--k8s-client-qps={qps}",
            f"--k8s-client-burst={burst}",
        ]
        self.log_path = (workdir or plane.workdir) / f"{NAME}-{default_lb_service_ipam}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._server: Server | None = None
        self._offset = 0
        self._reconciled: set[str] = set()

    def start(self, timeout: float = 60.0) -> Self:
        """Start it and return once its controller's workers run (caches synced). Raises
        :class:`PeerError` if it exits or does not get there within ``timeout`` s."""
        binary = self.binary or find_peer() or build_peer()
        # tests/controlplane's child process: own session, log file, SIGKILLed with the
        # starting thread (start it from the main thread), SIGTERM then SIGKILL to stop.
        self._server = Server(NAME, [str(binary), *self.args], self.log_path)
        self._server.start()
        self.proc = self._server.proc
        deadline = time.monotonic() + timeout
        # Read only what was appended since the last poll: at 5,000 Nodes Cilium logs one
        # "Enqueued Service" line per Node and Service while its caches fill (1 GB in two
        # minutes), and re-reading the whole log every 0.1 s took a core from it.
        offset, tail = 0, b""
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                chunk = tail + log.read()
            offset += len(chunk) - len(tail)
            if STARTED.encode() in chunk:
                return self
            failed = _FAILED.search(chunk)
            if failed is not None:
                self.stop()
                raise PeerError(
                    self._explain(f"failed: {failed.group(0).decode(errors='replace')}")
                )
            tail = chunk[-_TAIL_BYTES:]
            self.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise PeerError(self._explain(f"not started after {timeout:g} s"))
            time.sleep(0.1)

    def check_alive(self) -> None:
        """Raise :class:`PeerError` (with the log tail) if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise PeerError(self._explain(f"exited with status {self.proc.returncode}"))

    def reconciled(self) -> set[str]:
        """``namespace/name`` of every Service Cilium has logged "Reconciling Service" for."""
        with open(self.log_path, "rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += end
        self._reconciled.update(_RECONCILING.findall(chunk[:end].decode(errors="replace")))
        return self._reconciled

    def wait_quiet(
        self, expected: Iterable[str] = (), *, quiet: float = 1.0, timeout: float = 60.0
    ) -> float:
        """Until Cilium has reconciled each ``namespace/name`` in ``expected`` (the
        Services it manages) and the server's services/status requests stopped moving for
        ``quiet`` s (:func:`wait_quiet`); returns the seconds waited. Raises
        :class:`PeerError` if it exits or ``TimeoutError`` after ``timeout`` s."""
        wanted = set(expected)

        def ready() -> bool:
            self.check_alive()
            return wanted <= self.reconciled()

        try:
            return wait_quiet(self.plane, quiet=quiet, timeout=timeout, ready=ready)
        except TimeoutError as err:
            missing = sorted(wanted - self.reconciled())[:5]
            raise TimeoutError(f"{err}; not reconciled yet: {missing}") from None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the hive stops its cells in reverse order), SIGKILL after ``timeout``."""
        if self._server is not None:
            self._server.stop(timeout)
        self._server, self.proc = None, None

    def _explain(self, what: str) -> str:
        return f"{NAME} ({self.version}) {what}; log {self.log_path}:\n{tail(self.log_path)}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
