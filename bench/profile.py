"""Sampling profiles of benchmark child processes with py-spy (``pip install py-spy``).

:class:`PySpy` attaches ``py-spy record --format raw --gil --threads`` to a PID: only the
thread holding the GIL is sampled, so the shares are of Python CPU time, not of waiting.
:func:`summary` turns the collapsed stacks into three short tables: the samples by thread
name (``reconcile-0``, ``informer-services``...), the functions where samples land (self)
and the functions on the stack (inclusive); ``threads`` keeps the samples of threads whose
name starts with one of its prefixes.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def py_spy_path() -> str | None:
    """The py-spy executable next to this interpreter or on PATH, or ``None``."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class PySpy:
    """``py-spy record`` on ``pid`` until :meth:`stop`; the raw stacks go to ``out``."""

    def __init__(self, *, pid: int, out: Path, rate: int = 100) -> None:
        exe = py_spy_path()
        if exe is None:
            raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
        self.out = out
        self._log = out.with_suffix(".log").open("wb")
        self._popen = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(pid), "--rate", str(rate)),
                *("--format", "raw", "--output", str(out), "--nonblocking", "--gil", "--threads"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        """Stop sampling (SIGINT makes py-spy write its output) and wait for it."""
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGINT)
            try:
                self._popen.wait(30)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait(5)
        self._log.close()


def _frame_name(frame: str) -> str:
    # py-spy raw frames look like "select (app/core/nodeipam.py:224)"; keep "file:function".
    name, _, where = frame.partition(" (")
    path = where.split(":")[0]
    short = "/".join(path.split("/")[-2:])
    return f"{short}:{name}"


def _thread_name(frame: str) -> str:
    # py-spy --threads puts "thread (12345): reconcile-0" (or "thread (12345)") first.
    _, _, name = frame.partition("): ")
    return name or frame


def summary(out: Path, *, top: int = 15, threads: tuple[str, ...] = ()) -> str:
    """Samples by thread name, then the top ``top`` functions by self samples and by
    inclusive samples, as text; with ``threads``, only the samples of threads whose name
    starts with one of those prefixes (e.g. ``("reconcile-",)``)."""
    if not out.exists():
        return f"(no profile written to {out})"
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_thread: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw = [f for f in stack.split(";") if not f.startswith("process ")]
        thread = _thread_name(raw[0]) if raw and raw[0].startswith("thread (") else ""
        if threads and not thread.startswith(threads):
            continue
        by_thread[thread] += count
        frames = [_frame_name(f) for f in raw if not f.startswith("thread (")]
        total += count
        if frames:
            own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    if not total:
        return "(empty profile)"
    lines = [f"py-spy: {total} samples (the GIL's holder); by thread, self, inclusive share:"]
    lines.append("  by thread:")
    lines += [f"    {n:6d}  {name or '(unnamed)'}" for name, n in by_thread.most_common(top)]
    lines.append("  self:")
    lines += [f"    {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    # Frames on (nearly) every stack (thread bootstrap, event loop, CLI) say nothing.
    telling = [(name, n) for name, n in inclusive.most_common() if n < 0.8 * total]
    lines.append("  inclusive (frames on fewer than 80% of the samples):")
    lines += [f"    {n / total:6.1%}  {name}" for name, n in telling[:top]]
    return "\n".join(lines)
