"""What both walk-throughs share: the session (its directory, log file, kubeconfig and
child processes), printing each step with the command it stands for, and the steps that
show the result (``kubectl get svc -A``, a malformed selector denied, ``node-ipam-lb
preview -A -o wide``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.devenv.manifests import BAD_SELECTOR, CLASS, bad_service

ROOT = Path(__file__).resolve().parents[2]
LOG_NAME = "devenv.log"


class DevEnvError(Exception):
    """The walk-through cannot go on; ``str(err)`` says which step and why."""


class Flag:
    """Set once by a signal handler, read by the main thread. Not a ``threading.Event``:
    a handler runs in the main thread between two bytecodes, possibly while that thread
    holds the Event's lock inside ``Event.wait()``, and ``Event.set()`` then waits for
    that lock forever (seen: a Ctrl-C that never stopped the walk-through)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Raise the flag (safe in a signal handler: no lock)."""
        self._set = True

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._set


@dataclass
class Session:
    """A running walk-through: its directory, log file and child processes (stopped in
    reverse order of start by :meth:`stop`). ``out`` receives what a person reads;
    ``kubeconfig`` is the file every ``kubectl`` of the session uses."""

    workdir: Path
    out: IO[str]
    timeout: float = 90.0
    interrupted: Flag = field(default_factory=Flag)
    log_path: Path = field(init=False)
    _log: IO[bytes] = field(init=False)
    _children: list[tuple[str, subprocess.Popen[bytes], float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / LOG_NAME
        self._log = self.log_path.open("ab")
        self.kubeconfig = self.workdir / "kubeconfig"
        # The fake API server answers no OpenAPI v2 schema, which kubectl's client-side
        # validation asks for; a real API server validates.
        self.apply_flags: list[str] = []

    @property
    def log(self) -> IO[bytes]:
        """The log file, open for appending (children's output and ``==>`` lines)."""
        return self._log

    def say(self, text: str = "") -> None:
        """Print one line for the person running the walk-through."""
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """Write one ``==>`` line to the log."""
        self._log.write(f"==> {text}\n".encode())
        self._log.flush()

    def spawn(
        self, name: str, args: Sequence[str], *, stdout_pipe: bool = False, grace: float = 15.0
    ) -> Any:
        """Start a child in its own session (a terminal's Ctrl-C reaches only us), output
        appended to the log (stdout piped when ``stdout_pipe``, to read a ready line);
        :meth:`stop` gives it ``grace`` seconds after SIGTERM."""
        self.note(f"{name}: {' '.join(args)}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
        process = subprocess.Popen(
            list(args),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE if stdout_pipe else self._log,
            stderr=self._log,
            start_new_session=True,
        )
        self._children.append((name, process, grace))
        return process

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <session's> ARGS`` (bounded by ``timeout`` s)."""
        return subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        """SIGTERM every child, newest first (``serve`` before the API server); SIGKILL
        one that is still running after its grace period; close the log."""
        for name, process, grace in reversed(self._children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(grace)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            self.note(f"{name} exited {process.returncode}")
        self._children.clear()
        self._log.close()

    def check_alive(self) -> None:
        """Raise :class:`DevEnvError` naming a child that has exited."""
        for name, process, _ in self._children:
            if process.poll() is not None:
                said = self.last_error_line()
                raise DevEnvError(
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


def read_line(process: Any, *, timeout: float, what: str) -> str:
    """The first stdout line of ``process`` within ``timeout`` seconds.

    Raises:
        DevEnvError: no line (or an empty one) in time.
    """
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.append(process.stdout.readline().decode().strip()), daemon=True
    )
    reader.start()
    reader.join(timeout)
    if not lines or not lines[0]:
        raise DevEnvError(f"{what}: no ready line within {timeout:g} s")
    return lines[0]


def drain(process: Any, log: IO[bytes]) -> None:
    """Copy the rest of a piped stdout into the log (a full pipe would block the child)."""

    def copy_out() -> None:
        for line in process.stdout:
            with contextlib.suppress(ValueError):  # the log was closed at the end
                log.write(line)
                log.flush()

    threading.Thread(target=copy_out, daemon=True).start()


def wait_until(session: Session, check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` every 0.2 s until true, a child exits or ``session.timeout`` passes.

    Raises:
        DevEnvError: timed out, interrupted or a child exited, naming ``what`` and the log.
    """
    deadline = time.monotonic() + session.timeout
    while not check():
        session.check_alive()
        if session.interrupted.is_set():
            raise DevEnvError(f"interrupted while waiting for {what}")
        if time.monotonic() > deadline:
            raise DevEnvError(f"{what}: not within {session.timeout:g} s; see {session.log_path}")
        time.sleep(0.2)


def as_list(objects: list[dict[str, Any]]) -> str:
    """``objects`` as one ``v1`` List (what ``kubectl apply -f -`` reads)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def show(session: Session, result: subprocess.CompletedProcess[str]) -> None:
    """Print what a command wrote (stdout, then stderr)."""
    for line in (result.stdout + result.stderr).rstrip("\n").splitlines():
        session.say(line)


def apply(session: Session, objects: list[dict[str, Any]], shown_as: str) -> None:
    """``kubectl apply`` ``objects``, printed as ``kubectl apply -f <shown_as>``.

    Raises:
        DevEnvError: kubectl failed.
    """
    session.say(f"$ kubectl apply {' '.join([*session.apply_flags, ''])}-f {shown_as}")
    result = session.kubectl("apply", *session.apply_flags, "-f", "-", stdin=as_list(objects))
    show(session, result)
    if result.returncode != 0:
        raise DevEnvError(f"kubectl apply -f {shown_as} failed (exit {result.returncode})")


def preview_wide(session: Session) -> subprocess.CompletedProcess[str]:
    """``node-ipam-lb preview -A -o wide`` on the session's cluster (read-only)."""
    return subprocess.run(
        [sys.executable, "-m", "app", "preview", "--kubeconfig", str(session.kubeconfig), "-A",
         "-o", "wide"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip


def all_settled(session: Session) -> bool:
    """Every ``io.cilium/node`` Service holds what the controller would write
    (``preview -A -o wide`` shows CHANGE ``no`` on every row) and at least one has an
    address. Not "every Service has an address": port ownership (docs/design.md §4.9)
    leaves Services of the example that share TCP/80 ``<pending>``."""
    result = preview_wide(session)
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    ours = [row for row in rows if len(row) > 5 and row[2] == CLASS]
    return (
        result.returncode == 0
        and bool(ours)
        and all(row[5] == "no" for row in ours)
        and any(row[3] != "<pending>" for row in ours)
    )


def show_result(session: Session) -> None:
    """Once every Service of ours settled: ``kubectl get svc -A``, a Service with a
    malformed selector denied by the webhook, and ``node-ipam-lb preview -A -o wide``.

    Raises:
        DevEnvError: nothing settled in time, or the malformed selector was admitted.
    """
    wait_until(session, lambda: all_settled(session), "every io.cilium/node Service settled")
    session.say("$ kubectl get svc -A")
    show(session, session.kubectl("get", "svc", "-A"))
    flags = " ".join([*session.apply_flags, ""])
    session.say(f"$ kubectl apply {flags}-f bad-selector.yaml   # selector: {BAD_SELECTOR}")
    denied = session.kubectl(
        "apply", *session.apply_flags, "-f", "-", stdin=as_list([bad_service()])
    )
    show(session, denied)
    if denied.returncode == 0:
        raise DevEnvError("the malformed selector was not denied: is the webhook registered?")
    session.say("$ node-ipam-lb preview -A -o wide   # live diagnosis, read-only")
    show(session, preview_wide(session))
