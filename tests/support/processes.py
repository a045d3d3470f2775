"""Child processes with a log file: the servers of the control plane, the cluster's node
processes, the Cilium peer, the benchmarks' processes."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1


class StartError(RuntimeError):
    """A server exited or never became ready; the message has its log tail."""


class PortTaken(Exception):
    """A server exited during start-up because its port was taken (retry with another)."""


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: on Linux the child gets ``sig`` when the thread that started it
    dies (even by SIGKILL), so a killed test or benchmark leaves no server behind.

    SIGKILL (the default) for servers whose data is throwaway: a kube-apiserver whose etcd
    gets SIGTERM at the same time spends ~30 s in shutdown timeouts (lease and endpoint
    clean-up)."""

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))

    return preexec


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of the log at ``path`` (``(no log)`` when unreadable)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Server:
    """One child process with its log file (stdout and stderr)."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name, self.args, self.log_path = name, args, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, append: bool = False) -> None:
        """Start the process; ``append`` keeps the log of an earlier run (a restart)."""
        with open(self.log_path, "ab" if append else "wb") as log:  # a retry starts afresh
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches only us; we stop them
                preexec_fn=die_with_parent(),
            )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def check_alive(self) -> None:
        """Raises :class:`PortTaken` or :class:`StartError` (with the log tail) if the
        process has exited."""
        code = self.exited()
        if code is None:
            return
        last = tail(self.log_path)
        if "address already in use" in last:
            raise PortTaken(self.name)
        raise StartError(
            f"{self.name} exited with status {code} during start-up; log {self.log_path}:\n{last}"
        )

    def stop(self, timeout: float = 15.0, *, kill: bool = False) -> None:
        """SIGTERM (``kill``: SIGKILL) and wait up to ``timeout`` s, then SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
