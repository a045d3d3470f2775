"""Process runners and measurements for the benchmarks (loopback only).

- :class:`Process`: a child process with its CPU time (``utime + stime`` from
  ``/proc/PID/stat``) and peak RSS (``VmHWM`` from ``/proc/PID/status``).
- :func:`start_fakeapi`: the fake Kubernetes API (``tests/fakeapi``) in its own process,
  seeded from a JSON file, with a client for its ``/_fake/requests`` counters.
- :func:`start_serve`: ``node-ipam-lb serve`` against it over TLS (a throw-away CA), with
  a client for ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.web.tls import write_dev_certs
from bench.profile import py_spy_path
from tests.support.ports import free_port
from tests.support.processes import die_with_parent, tail

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: {url}
users:
- name: bench
  user:
    token: bench-token
contexts:
- name: bench
  context: {{cluster: bench, user: bench, namespace: default}}
current-context: bench
"""


def machine() -> str:
    """CPU count, CPU model and the 1-minute load average (other work on the machine skews
    every figure: compare runs made at a low load)."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    return f"{os.cpu_count()} x {model}, load average {os.getloadavg()[0]:.2f}"


def trusting(ca: Path) -> ssl.SSLContext:
    """A client TLS context that trusts only ``ca``."""
    return ssl.create_default_context(cafile=str(ca))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, in seconds (``utime + stime`` of
    ``/proc/PID/stat``, every thread)."""
    return _stat_cpu(Path(f"/proc/{pid}/stat").read_text())


def _stat_cpu(stat: str) -> float:
    """``utime + stime`` (seconds) of a ``/proc/PID/stat`` or ``/proc/PID/task/TID/stat``
    text (the fields after the ``comm`` in parentheses, which may hold spaces)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU time (``utime + stime``, seconds) of each live thread of process ``pid``, by
    thread name: the Python ``threading`` name when ``py-spy dump`` is installed and can
    read the process (threads of one name, e.g. two ``reconcile-N``, are kept apart by
    their names; unnamed ones are ``Thread-N``), else the kernel's ``comm`` with the
    thread id. Threads that have ended are not counted (their time is only in
    :func:`cpu_seconds`). Empty when the process is gone."""
    names: dict[str, str] = {}
    spy = py_spy_path()
    if spy is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            dump = subprocess.run(
                [spy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            for match in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', dump, re.M):
                names[match.group(1)] = match.group(2)
    seconds: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                stat = (task / "stat").read_text()
                comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
                name = names.get(task.name, f"{comm}[{task.name}]")
                seconds[name] = seconds.get(name, 0.0) + _stat_cpu(stat)
    return seconds


def memory_mb(pid: int, field: str = "VmHWM") -> float:
    """``VmHWM`` (peak RSS) or ``VmRSS`` of process ``pid`` from ``/proc/PID/status``, in MiB.

    Raises:
        ValueError: the field is not in the file.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"{field} not in /proc/{pid}/status")


def stream_socket(response: httpx.Response) -> socket.socket | None:
    """The socket under a streamed ``httpx`` response (httpcore's ``network_stream``
    extension: a ``socket.socket``, or an ``ssl.SSLSocket`` over TLS), or None."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def stop_stream(
    sock: socket.socket | None,
    reader: threading.Thread,
    client: httpx.Client,
    *,
    timeout: float = 10.0,
) -> None:
    """End a stream (a watch) that thread ``reader`` is reading from ``sock`` of ``client``:
    shut the socket down, so that the reader's blocked ``recv`` returns at once, wait up to
    ``timeout`` s for the reader to end, then close the client (if the reader is still
    alive, the client is left open: its thread is a daemon).

    Closing the client first would free the file descriptor under the blocked reader: the
    next connection the process opens gets the same number, and OpenSSL, which keeps the
    number in its BIO, then reads that connection's bytes from the old thread, so both
    streams break (``[SSL: WRONG_VERSION_NUMBER]`` on a watch that had just started)."""
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the kernel's, not the TLS close
    if reader.is_alive():  # (never started: nothing to wait for)
        reader.join(timeout)
    if not reader.is_alive():
        client.close()


class Process:
    """A child process started by a benchmark; ``log`` holds its stdout+stderr."""

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str],
        capture_stdout: bool = False,
    ) -> None:
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        self.started = time.monotonic()
        self.popen = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            # TMPDIR: the process's temporary files beside its log (a killed serve leaves
            # its TLS directory there, not in /tmp).
            env={**os.environ, "TMPDIR": str(log.parent), **env},
            stdout=subprocess.PIPE if capture_stdout else self._log_file,
            stderr=self._log_file,
            start_new_session=True,
            # SIGTERM when the benchmark (or test) process dies, even by SIGKILL: no fake
            # API or serve outlives a killed run.
            preexec_fn=die_with_parent(signal.SIGTERM),
        )

    @property
    def pid(self) -> int:
        """Process id."""
        return self.popen.pid

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far, in seconds."""
        return cpu_seconds(self.pid)

    def memory_mb(self, field: str = "VmHWM") -> float:
        """``VmHWM`` (peak RSS) or ``VmRSS`` of the process, in MiB."""
        return memory_mb(self.pid, field)

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the process log (for failure messages)."""
        self._log_file.flush()
        return tail(self.log, lines)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL (this process only)."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log_file.close()


class HttpApi:
    """What the benchmarks need of a Kubernetes API server process, fake or real: an HTTP
    client (``http``), its ``kubeconfig`` for ``serve``, request counters keyed like the fake
    API's (``"patch services/status"``, ``"create events"``), and its CPU time."""

    label = "API server"
    """How the printed figures name it."""

    def __init__(self, url: str, kubeconfig: Path, http: httpx.Client) -> None:
        self.url = url
        self.kubeconfig = kubeconfig
        self.http = http

    def requests(self) -> dict[str, int]:
        """The request counters since the last :meth:`reset_requests`
        (``{"patch services/status": 3, ...}``)."""
        raise NotImplementedError

    def reset_requests(self) -> None:
        """Start counting requests from zero."""
        raise NotImplementedError

    def cpu_seconds(self) -> float:
        """CPU time (``utime + stime``) of the server process(es) so far, in seconds."""
        raise NotImplementedError

    def cpu_by_process(self) -> dict[str, float]:
        """CPU time so far of each server process, by name, in seconds."""
        raise NotImplementedError

    def count(self, key: str) -> int:
        """One request counter (0 when absent), e.g. ``"patch services/status"``."""
        return self.requests().get(key, 0)

    def list_all(self, path: str, *, limit: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every item of the collection at ``path`` in pages of ``limit`` (like the informer);
        returns ``(items, resourceVersion)``."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": limit}
        while True:
            response = self.http.get(path, params=params)
            response.raise_for_status()
            body = response.json()
            items.extend(body["items"])
            token = body["metadata"].get("continue")
            if not token:
                return items, str(body["metadata"]["resourceVersion"])
            params = {"limit": limit, "continue": token}

    def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the object at ``path``; raises on an HTTP error."""
        response = self.http.patch(
            path,
            content=json.dumps(body),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def stop(self) -> None:
        """Stop the server process(es) and close the client."""
        raise NotImplementedError


class FakeApi(HttpApi):
    """The fake API process and an HTTP client for it."""

    label = "fake API"

    def __init__(self, process: Process, url: str, kubeconfig: Path) -> None:
        super().__init__(url, kubeconfig, httpx.Client(base_url=url, timeout=60.0))
        self.process = process

    def requests(self) -> dict[str, int]:
        """The fake API's own request counters (``/_fake/requests``)."""
        counters: dict[str, int] = self.http.get("/_fake/requests").json()
        return counters

    def reset_requests(self) -> None:
        """``DELETE /_fake/requests``."""
        self.http.delete("/_fake/requests")

    def cpu_seconds(self) -> float:
        """CPU time of the fake API process."""
        return self.process.cpu_seconds()

    def cpu_by_process(self) -> dict[str, float]:
        """``{"fake API": seconds}``."""
        return {self.label: self.cpu_seconds()}

    def stop(self) -> None:
        self.http.close()
        self.process.stop()


def python(*args: str) -> list[str]:
    """argv running this interpreter with ``args``."""
    return [sys.executable, *args]


def start_fakeapi(*, objects: list[dict[str, Any]], workdir: Path) -> FakeApi:
    """Seed a fake API process with ``objects`` and wait until it serves (≤ 120 s).

    Raises:
        RuntimeError: it exited or printed no URL; the message holds its log tail.
    """
    seed = workdir / "seed.json"
    seed.write_text(json.dumps({"items": objects}))
    process = Process(
        name="fakeapi",
        argv=python("-m", "bench.fakeapi_proc", "--seed-json", str(seed)),
        log=workdir / "fakeapi.log",
        env={},
        capture_stdout=True,
    )
    assert process.popen.stdout is not None
    url = process.popen.stdout.readline().decode().strip()
    if not url.startswith("http://"):
        process.stop()
        raise RuntimeError(f"fake API did not start:\n{process.tail()}")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=url))
    return FakeApi(process, url, kubeconfig)


class Serve:
    """A ``node-ipam-lb serve`` process and an HTTPS client for it; ``health_url`` is its
    plain-HTTP health-probe listener (``--health-probe-bind-address``) on loopback."""

    def __init__(self, process: Process, port: int, ca: Path, *, health_port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"https://127.0.0.1:{port}"
        self.health_port = health_port
        self.health_url = f"http://127.0.0.1:{health_port}"
        self.http = httpx.Client(base_url=self.url, verify=trusting(ca), timeout=30.0)

    def ready(self) -> bool:
        """``/readyz`` answers 200 (caches synced)."""
        if not self.process.alive():
            raise RuntimeError(f"serve exited:\n{self.process.tail()}")
        try:
            return self.http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def metrics(self) -> dict[str, float]:
        """Samples of ``/metrics`` summed over labels, by sample name."""
        totals: dict[str, float] = {}
        text = self.http.get("/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        return totals

    def reconciles(self) -> int:
        """``controller_runtime_reconcile_total`` summed over results."""
        return int(self.metrics().get("controller_runtime_reconcile_total", 0))

    def stop(self) -> None:
        self.http.close()
        self.process.stop()


def tls_files(workdir: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and serving certificate for 127.0.0.1: ``(ca, cert, key)``."""
    certs = workdir / "certs"
    write_dev_certs(out_dir=certs, dns_names=["127.0.0.1", "localhost"])
    return certs / "ca.crt", certs / "tls.crt", certs / "tls.key"


def start_serve(
    *,
    kubeconfig: Path,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    flags: Sequence[str] = (),
    name: str = "serve",
    entry: str = "from app.cli import main; main()",
) -> Serve:
    """Start ``node-ipam-lb serve`` (no leader election, ``--auth none``) on a free port,
    its health probes on another (loopback); ``entry`` is the ``python -c`` program
    (:data:`bench.cilium_policy.ENTRY`: under Cilium's reconcile policy).

    Returns at once; use :meth:`Serve.ready` to wait for the synced cache.
    """
    ca, cert, key = tls_files(workdir)
    port, health_port = free_port(), free_port()
    argv = python(
        "-c",
        entry,
        "serve",
        "--kubeconfig",
        str(kubeconfig),
        "--bind-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert-file",
        str(cert),
        "--tls-private-key-file",
        str(key),
        "--no-leader-elect",
        "--auth",
        "none",
        "--health-probe-bind-address",
        f"127.0.0.1:{health_port}",
        *flags,
    )
    process = Process(name=name, argv=argv, log=workdir / f"{name}.log", env=dict(env or {}))
    try:
        return Serve(process, port, ca, health_port=health_port)
    except BaseException:
        process.stop()
        raise
